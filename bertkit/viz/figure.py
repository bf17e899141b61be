"""What every bertkit picture shares: a matplotlib Figure with no global state, token labels
sized so they never overlap, and one way to save.

The Figure API (not pyplot) draws without choosing a backend or touching pyplot's figure list,
so plotting from a notebook or a server leaves the caller's matplotlib setup alone.
"""

from __future__ import annotations

import math
from pathlib import Path

# Token labels: the smallest font still readable in a saved PNG, the largest worth using, and
# the longest label drawn in full.
MIN_FONT, MAX_FONT = 5.0, 9.0
MAX_LABEL = 14


def figure(width: float, height: float, dpi: int = 100):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=dpi, layout=None)


def save(fig, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, facecolor="white")
    return path


def plain(text: str) -> str:
    """Text from data (a token, a path, a label) drawn as it is: matplotlib reads $...$ as math
    (a lone '$' in a folder's name was a traceback, two made the text between them italic)."""
    return text.replace("$", r"\$")


def wrapped(text: str, inches: float, fontsize: float) -> str:
    """`text` broken at spaces into lines that fit `inches` at `fontsize` points (an average
    character taken as 0.7 em, as wide as a capital X): a centred title longer than the figure,
    such as bench's machine line, was cut off at both edges."""
    import textwrap

    return "\n".join(textwrap.fill(line, max(20, int(inches * 72 / (0.7 * fontsize)))) for line in text.split("\n"))


def short(label: str) -> str:
    """A token label, cut to MAX_LABEL characters, drawn as it is (`plain`)."""
    return plain(label if len(label) <= MAX_LABEL else label[: MAX_LABEL - 1] + "\u2026")


def label_layout(count: int, inches: float) -> tuple[float, int]:
    """(font size in points, stride) for `count` labels along an axis `inches` long: the largest
    font up to MAX_FONT at which neighbours do not overlap, and when even MIN_FONT does not fit,
    MIN_FONT with every stride-th label shown."""
    pitch = inches * 72 / max(count, 1)  # points between neighbouring label centres
    font = min(MAX_FONT, pitch * 0.85)
    if font >= MIN_FONT:
        return font, 1
    return MIN_FONT, math.ceil(MIN_FONT / (pitch * 0.85))


def token_axes(ax, tokens: list[str], inches: float, x: bool = True, y: bool = True) -> None:
    """Token labels on a heatmap's axes: queries down the side, keys along the bottom rotated
    90 degrees, thinned to every stride-th label when the axis is too short for all."""
    font, stride = label_layout(len(tokens), inches)
    ticks = list(range(0, len(tokens), stride))
    labels = [short(tokens[i]) for i in ticks]
    if x:
        ax.set_xticks(ticks, labels, rotation=90, fontsize=font)
    else:
        ax.set_xticks([])
    if y:
        ax.set_yticks(ticks, labels, fontsize=font)
    else:
        ax.set_yticks([])
    ax.tick_params(length=1.5, pad=1)


def segment_lines(ax, boundary: int | None, color: str = "white") -> None:
    """Mark where sentence B starts in a (T, T) map of a pair."""
    if boundary:
        ax.axhline(boundary - 0.5, color=color, lw=0.6)
        ax.axvline(boundary - 0.5, color=color, lw=0.6)
