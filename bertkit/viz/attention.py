"""Attention maps as pictures: every layer x head of one input, from the explicit attention path
(softmax(Q K^T / sqrt(D) + bias) with its probabilities kept; the fused kernels never form them).

Two kinds of PNG:
- the overview grid, one small heatmap per layer (rows) and head (columns), token labels on the
  outer axes, thinned when the cells are too small for all of them;
- one PNG per layer, its heads large enough that every token label is readable (at least 8
  pt per token, so 64 tokens make a 7-inch map).

Colours use a square-root scale (PowerNorm, gamma 0.5): attention is mostly small weights with a
few large ones, and a linear scale would show only the large ones. The colour bar is in weights.

Shapes: L layers, N heads, T tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..model import evaluating
from . import figure as F
from .inputs import Encoded, encode

CMAP = "viridis"
GAMMA = 0.5
MIN_PITCH = 8 / 72  # inches per token in the per-layer PNGs: labels of about 7 pt
MAX_CELL = 14.0  # inches: beyond ~125 tokens the labels are thinned rather than the maps grown


@dataclass(frozen=True)
class AttentionMaps:
    """What the pictures and the explorer show: one input and its attention probabilities."""

    model: str                 # a description for titles
    text: str
    text_pair: str | None
    tokens: list[str]          # T
    segments: list[int]        # T: 0 = sentence A, 1 = sentence B
    attentions: np.ndarray     # (L, N, T, T) float32, rows = queries, each row sums to 1

    @property
    def num_layers(self) -> int:
        return self.attentions.shape[0]

    @property
    def num_heads(self) -> int:
        return self.attentions.shape[1]

    @property
    def boundary(self) -> int | None:
        return self.segments.index(1) if 1 in self.segments else None


def run_attention(model, encoded: Encoded) -> np.ndarray:
    """(L, N, T, T) attention probabilities of one framed input, explicit path."""
    device = next(model.parameters()).device  # (a Model on CUDA, from Python)
    ids, types = encoded.ids.to(device), encoded.types.to(device)
    with evaluating(model), torch.no_grad():
        # the encoder alone: the maps are its own, and a head may want other inputs (multiple choice)
        out = model.backbone(ids, torch.ones_like(ids), types, output_attentions=True)
    return torch.stack([a[0] for a in out.attentions]).float().cpu().numpy()  # (L, N, T, T)


def attention_maps(model, text: str, text_pair: str | None = None, max_length: int | None = None,
                   description: str | None = None) -> AttentionMaps:
    """Run `model` (with its tokenizer) on one text or pair and keep every attention map."""
    return maps_of(model, encode(model, text, text_pair, max_length), description)


def maps_of(model, encoded: Encoded, description: str | None = None) -> AttentionMaps:
    """The maps of an input already framed by `inputs.encode`; their text is what its tokens
    cover (a text cut to fit the model ends in "…")."""
    return AttentionMaps(description or model.config.family, encoded.text, encoded.text_pair, encoded.tokens,
                         encoded.segments, run_attention(model, encoded))


def _norm():
    from matplotlib.colors import PowerNorm

    return PowerNorm(GAMMA, vmin=0.0, vmax=1.0)


def _colorbar(fig, image, rect) -> None:
    bar = fig.colorbar(image, cax=fig.add_axes(rect))
    bar.set_ticks([0, 0.05, 0.2, 0.5, 1.0])
    bar.set_label("attention weight (square-root colour scale)", fontsize=9)
    bar.ax.tick_params(labelsize=8)


def plot_grid(maps: AttentionMaps, path: Path, cell: float | None = None) -> Path:
    """All layers x heads in one PNG. `cell`: inches per heatmap (default: fits ~18 inches wide)."""
    L, N, T = maps.num_layers, maps.num_heads, len(maps.tokens)
    cell = cell or max(0.9, min(2.2, 18 / N))
    font, _ = F.label_layout(T, cell)
    label_room = 0.12 + min(F.MAX_LABEL, max(len(t) for t in maps.tokens)) * font * 0.62 / 72
    left, bottom, top, right = label_room + 0.45, label_room + 0.35, 0.9, 1.1
    gap = 0.08
    width = left + N * cell + (N - 1) * gap + right
    height = bottom + L * cell + (L - 1) * gap + top
    fig = F.figure(width, height)
    norm, image = _norm(), None
    for layer in range(L):
        for head in range(N):
            x0 = left + head * (cell + gap)
            y0 = height - top - (layer + 1) * cell - layer * gap
            ax = fig.add_axes((x0 / width, y0 / height, cell / width, cell / height))
            image = ax.imshow(maps.attentions[layer, head], cmap=CMAP, norm=norm, interpolation="nearest")
            F.token_axes(ax, maps.tokens, cell, x=layer == L - 1, y=head == 0)
            F.segment_lines(ax, maps.boundary)
            if layer == 0:
                ax.set_title(f"head {head}", fontsize=9, pad=3)
            if head == 0:
                fig.text((left - label_room - 0.1) / width, (y0 + cell / 2) / height, f"layer {layer}",
                         rotation=90, ha="right", va="center", fontsize=9)
    fig.suptitle(f"Attention, {F.plain(maps.model)}: {L} layers x {N} heads (rows: queries, columns: keys)",
                 x=left / width, ha="left", y=1 - 0.25 / height, fontsize=11)
    _colorbar(fig, image, ((width - right + 0.25) / width, bottom / height, 0.14 / width,
                           (height - top - bottom) / height))
    return F.save(fig, path)


def plot_layer(maps: AttentionMaps, layer: int, path: Path, columns: int = 4) -> Path:
    """One layer's heads, every token label on both axes."""
    N, T = maps.num_heads, len(maps.tokens)
    columns = min(columns, N)
    rows = -(-N // columns)
    cell = min(MAX_CELL, max(2.5, T * MIN_PITCH))
    font, _ = F.label_layout(T, cell)
    label_room = 0.12 + min(F.MAX_LABEL, max(len(t) for t in maps.tokens)) * font * 0.62 / 72
    gap_x, gap_y = label_room + 0.25, label_room + 0.55
    left, bottom, top, right = label_room + 0.2, label_room + 0.2, 0.9, 1.1
    width = left + columns * cell + (columns - 1) * gap_x + right
    height = bottom + rows * cell + (rows - 1) * gap_y + top
    fig = F.figure(width, height)
    norm, image = _norm(), None
    for head in range(N):
        r, c = divmod(head, columns)
        x0 = left + c * (cell + gap_x)
        y0 = height - top - (r + 1) * cell - r * gap_y
        ax = fig.add_axes((x0 / width, y0 / height, cell / width, cell / height))
        image = ax.imshow(maps.attentions[layer, head], cmap=CMAP, norm=norm, interpolation="nearest")
        F.token_axes(ax, maps.tokens, cell)
        F.segment_lines(ax, maps.boundary)
        ax.set_title(f"head {head}", fontsize=10, pad=4)
    fig.suptitle(f"Attention, {F.plain(maps.model)}: layer {layer} of {maps.num_layers} "
                 f"(rows: queries, columns: keys)", x=left / width, ha="left", y=1 - 0.3 / height, fontsize=12)
    _colorbar(fig, image, ((width - right + 0.3) / width, bottom / height, 0.16 / width,
                           min(4.0, height - top - bottom) / height))
    return F.save(fig, path)


def write_pngs(maps: AttentionMaps, out: Path, layers: list[int] | None = None) -> list[Path]:
    """attention_grid.png and attention_layer_XX.png for each of `layers` (default all)."""
    out = Path(out)
    written = [plot_grid(maps, out / "attention_grid.png")]
    width = len(str(maps.num_layers - 1))
    for layer in range(maps.num_layers) if layers is None else layers:
        written.append(plot_layer(maps, layer, out / f"attention_layer_{layer:0{width}d}.png"))
    return written
