"""DeBERTa's disentangled attention taken apart for one head (He et al., 2021, sec. 3.1, eq. 2-4):
the content-to-content, content-to-position and position-to-content score maps, their sum (the
score the softmax sees) and the attention that results.

The terms come from `DisentangledAttention.score_terms`, fed with exactly what the chosen layer's
attention received in a normal forward pass (captured by a pre-hook), so they add up to that
layer's scores.

Shapes: N heads, T tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..errors import BertkitError
from ..model import evaluating
from . import figure as F
from .attention import MAX_CELL, MIN_PITCH
from .inputs import Encoded

TITLES = {"c2c": "content \u2192 content", "c2p": "content \u2192 position", "p2c": "position \u2192 content",
          "combined": "combined score (the sum)"}


@dataclass(frozen=True)
class Components:
    model: str
    layer: int
    head: int
    tokens: list[str]
    segments: list[int]
    scores: dict[str, np.ndarray]  # "c2c", "c2p", "p2c" (where the config has them), "combined": (T, T)
    attention: np.ndarray          # (T, T) softmax of the combined score


def score_components(model, encoded: Encoded, layer: int, head: int, description: str = "") -> Components:
    """The scaled score terms of one DeBERTa head on one input."""
    from ..models.deberta import DisentangledAttention

    encoder = model.backbone.encoder
    if not 0 <= layer < encoder.num_layers:
        raise BertkitError(f"layer {layer} out of range: the model has layers 0..{encoder.num_layers - 1}")
    attn = encoder.layer_for(layer).attn
    if not isinstance(attn, DisentangledAttention):
        raise BertkitError(f"--deberta-components needs a DeBERTa model, not {model.config.family}")
    if not attn.relative:
        raise BertkitError("this DeBERTa has relative attention switched off: there are no position terms")
    if not 0 <= head < attn.num_heads:
        raise BertkitError(f"head {head} out of range: the model has heads 0..{attn.num_heads - 1}")
    calls = []

    def capture(module, args, kwargs):
        calls.append((args[0], {k: v for k, v in kwargs.items() if k in ("rel_embeddings", "rel_pos")}))

    handle = attn.register_forward_pre_hook(capture, with_kwargs=True)
    try:
        with evaluating(model), torch.no_grad():
            ids = encoded.ids.to(next(model.parameters()).device)  # (a Model on CUDA, from Python)
            out = model.backbone(ids, torch.ones_like(ids), encoded.types.to(ids.device), output_attentions=True)
    finally:
        handle.remove()
    x, context = calls[0]  # the layer's one call in the encoder
    terms = attn.score_terms(x, **context)
    scores = {name: t[0, head].float().cpu().numpy() for name, t in terms.items()}  # (T, T) each
    scores["combined"] = sum(scores.values())
    return Components(description or model.config.family, layer, head, encoded.tokens, encoded.segments,
                      scores, out.attentions[layer][0, head].float().cpu().numpy())


def plot_components(c: Components, path: Path) -> Path:
    """The score maps on one diverging scale (so their sizes compare), then the attention."""
    from matplotlib.colors import PowerNorm, TwoSlopeNorm

    T = len(c.tokens)
    names = [n for n in ("c2c", "c2p", "p2c", "combined") if n in c.scores]
    cell = min(MAX_CELL, max(2.6, T * MIN_PITCH))
    font, _ = F.label_layout(T, cell)
    label_room = 0.12 + min(F.MAX_LABEL, max(len(t) for t in c.tokens)) * font * 0.62 / 72
    gap = label_room + 0.3
    panels = len(names) + 1
    left, bottom, top, right = label_room + 0.2, label_room + 0.2, 0.95, 0.3
    bar = 0.75  # colour bar beside the score maps and beside the attention
    width = left + panels * cell + (panels - 1) * gap + 2 * bar + right
    height = bottom + cell + top
    fig = F.figure(width, height)
    limit = max(float(np.abs(s).max()) for s in c.scores.values()) or 1.0
    norm = TwoSlopeNorm(0.0, -limit, limit)
    boundary = c.segments.index(1) if 1 in c.segments else None
    for k, name in enumerate(names + ["attention"]):
        x0 = left + k * (cell + gap) + (bar if name == "attention" else 0)
        ax = fig.add_axes((x0 / width, bottom / height, cell / width, cell / height))
        if name == "attention":
            image = ax.imshow(c.attention, cmap="viridis", norm=PowerNorm(0.5, 0.0, 1.0), interpolation="nearest")
            ax.set_title("attention: softmax of the sum", fontsize=10)
        else:
            image = ax.imshow(c.scores[name], cmap="RdBu_r", norm=norm, interpolation="nearest")
            ax.set_title(TITLES[name], fontsize=10)
        F.token_axes(ax, c.tokens, cell, y=k == 0 or name == "attention")
        F.segment_lines(ax, boundary, color="white" if name == "attention" else "black")
        if name in (names[-1], "attention"):  # one colour bar for the scores, one for the weights
            cb = fig.colorbar(image, cax=fig.add_axes(((x0 + cell + 0.12) / width, bottom / height,
                                                       0.12 / width, cell / height)))
            cb.set_label("weight (square-root scale)" if name == "attention" else "score (before softmax)",
                         fontsize=8)
    fig.suptitle(f"DeBERTa disentangled attention, {F.plain(c.model)}: layer {c.layer}, head {c.head} "
                 "(rows: queries, columns: keys; each term scaled by 1/sqrt(d (1 + position terms)), eq. 4)",
                 x=left / width, ha="left", y=1 - 0.28 / height, fontsize=11)
    return F.save(fig, path)
