"""`bertkit bench` results as one picture (`bertkit visualize bench RESULTS.json`): a bar per
workload and dtype, its length the ratio bertkit / transformers (> 1: bertkit better, as in
the records), the line at 1 where the two are even, and where a record has one, its ceiling (the
ratio if bertkit spent only its real tokens' matmul FLOPs at the measured peak) as a mark past
the bar: how much of what this machine allows the bar reaches.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..errors import BertkitError
from ..files import read_text, shown
from . import figure as F

NEEDED = ("name", "dtype", "ratio")
DTYPE_COLOURS = {"fp32": "#3182bd", "bf16": "#e6550d"}
OTHER_COLOUR = "#756bb1"


def read_records(path: Path) -> list[dict]:
    """The records `bertkit bench --json PATH` wrote: a JSON list of objects with at least a
    name and a dtype (non-empty strings) and a ratio (a finite positive number); a ceiling, a
    device and a machine, where present, of their kinds. A hand-made or damaged file gets one
    clear error naming the file, the record and the key, not a traceback from the drawing."""
    path = Path(path)
    if not path.is_file():
        raise BertkitError(f"{path}: no such file (write one with bertkit bench --json {path})")
    try:
        records = json.loads(read_text(path))
    except json.JSONDecodeError as e:
        raise BertkitError(f"{path}: not JSON (line {e.lineno}: {e.msg})") from None
    if not isinstance(records, list) or not records:
        raise BertkitError(f"{path}: expected a non-empty JSON list of bench records")
    for n, r in enumerate(records, 1):
        if not isinstance(r, dict):
            raise BertkitError(f"{path}: record {n} is not an object")
        missing = [k for k in NEEDED if k not in r]
        if missing:
            raise BertkitError(f"{path}: record {n} has no {', '.join(missing)}")
        for key in ("name", "dtype"):
            if not isinstance(r[key], str) or not r[key].strip():
                raise BertkitError(f"{path}: record {n}: {key} must be a non-empty string, got {shown(json.dumps(r[key]))}")
        if not _positive(r["ratio"]):
            raise BertkitError(f"{path}: record {n} ({shown(r['name'])}): ratio must be a positive number "
                               f"(finite, at most {LARGEST:g}), got {shown(json.dumps(r['ratio']))}")
        if r.get("ceiling") is not None and not _positive(r["ceiling"]):
            raise BertkitError(f"{path}: record {n} ({shown(r['name'])}): ceiling must be a positive number "
                               f"(finite, at most {LARGEST:g}) or null, got {shown(json.dumps(r['ceiling']))}")
        for key in ("device", "machine"):
            if r.get(key) is not None and not isinstance(r[key], str):
                raise BertkitError(f"{path}: record {n} ({shown(r['name'])}): {key} must be a string, "
                                   f"got {shown(json.dumps(r[key]))}")
    return records


# Past this a ratio is no measurement (bench's are ~0.1 to ~100, data_pipeline's up to ~1e4), and
# near float's limit the axis itself overflows
LARGEST = 1e9


def _positive(value) -> bool:
    """A finite number in (0, LARGEST]; JSON's true and false are Python bools, which are ints,
    and Infinity and NaN parse as floats, so each is refused by name."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and 0 < value <= LARGEST)


def plot_bench(records: list[dict], path: Path, subtitle: str = "") -> Path:
    """Horizontal bars in the records' order, the ratio written on each, ceilings as marks."""
    from matplotlib.patches import Patch

    title = F.wrapped("bertkit against transformers" + (f"\n{F.plain(subtitle)}" if subtitle else ""), 9.6, 10)
    # two lines: centred under the axes, not the figure, one line ran off the picture's right edge
    xlabel = ("speed-up: bertkit / transformers; memory: transformers / bertkit\n"
              "(> 1: bertkit better; dashed: even; black mark: ceiling)")
    height = 1.4 + 0.3 * len(records) + 0.18 * (title.count("\n") + 1)
    fig = F.figure(10.0, height)
    ax = fig.subplots()
    y = list(range(len(records)))[::-1]  # the first record on top, as the table prints it
    top = max(max(r["ratio"], r.get("ceiling") or 0) for r in records)
    for i, r in zip(y, records):
        colour = DTYPE_COLOURS.get(r["dtype"], OTHER_COLOUR)
        ax.barh(i, r["ratio"], color=colour, height=0.7)
        inside = r["ratio"] > 0.12 * top  # the value inside the bar's end, clear of a ceiling mark
        ax.text(r["ratio"] - 0.01 * top if inside else r["ratio"], i, f" {r['ratio']:.2f} ", va="center",
                ha="right" if inside else "left", color="white" if inside else "black", fontsize=7.5)
        if r.get("ceiling"):
            ax.plot([r["ceiling"]] * 2, [i - 0.38, i + 0.38], color="black", lw=1.4)
    ax.axvline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xlim(0, top * 1.15)
    labels = [F.plain(f"{r['name']} [{r['dtype']}]" + (f" ({r['device']})" if (r.get("device") or "cpu") != "cpu"
                                                         else "")) for r in records]
    ax.set_yticks(y, labels, fontsize=7.5)
    ax.set_xlabel(xlabel, fontsize=8.5)
    handles = [Patch(color=c, label=d) for d, c in DTYPE_COLOURS.items() if any(r["dtype"] == d for r in records)]
    if handles:
        ax.legend(handles=handles, fontsize=7.5, loc="lower right", frameon=False)
    ax.grid(axis="x", alpha=0.3)
    ax.tick_params(axis="x", labelsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    return F.save(fig, path)
