"""Which tokens made a sentence classifier's decision: integrated gradients (Sundararajan et al.,
2017, "Axiomatic Attribution for Deep Networks").

The output F(x) for one class is explained against a baseline x' that carries no words: the
same sequence with every word vector replaced by the padding token's, the special tokens kept
(positions and token types still come from the model). Where the padding row is all zeros (an
embedding built with padding_idx, as DeBERTa-v3's and ModernBERT's are), the mask token's stands
in (another word that says nothing, which MLM pre-training trained): those families add nothing
to the word vector before their embedding LayerNorm, which gives every point a * x of a path
from zero the same output, so the whole change would fall between a = 0 and the first step and
no token would get its share. A token's attribution is the sum over
its embedding dimensions of (x - x') times the gradient of F averaged along the straight path
from x' to x (eq. 3), here a midpoint Riemann sum over `steps` points. The attributions add up
to F(x) - F(x') (completeness, sec. 3) up to that sum's error, which is reported: a gap that is
large against F(x) - F(x') asks for more steps. The word vectors go in as `inputs_embeds`.

Shapes: T tokens, E embedding width, S path points in one batch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..errors import BertkitError
from ..model import evaluating
from .figure import figure, label_layout, plain, save, short
from .inputs import Encoded


@dataclass(frozen=True)
class Attribution:
    tokens: list[str]
    scores: np.ndarray      # (T,) each token's share of F(x) - F(x')
    target: str             # the explained class
    probability: float      # its softmax probability (regression: nan)
    output: float           # F(x): the class's logit
    baseline_output: float  # F(x')
    steps: int
    description: str
    baseline: str = "the padding token's word vector"  # what stands for "no word"

    @property
    def gap(self) -> float:
        """|sum of the attributions - (F(x) - F(x'))|: the path integral's error."""
        return abs(float(self.scores.sum()) - (self.output - self.baseline_output))

    def to_json(self) -> dict:
        return {"tokens": self.tokens, "scores": [round(float(s), 6) for s in self.scores], "target": self.target,
                "probability": None if np.isnan(self.probability) else self.probability,  # JSON has no NaN
                "output": self.output, "baseline_output": self.baseline_output, "baseline": self.baseline,
                "steps": self.steps, "gap": self.gap}


def _target_index(model, target: str | None, logits: torch.Tensor) -> int:
    labels = model.config.labels
    if target is None:
        return int(logits.argmax())
    if target in labels:
        return labels.index(target)
    if target.isdigit() and int(target) < len(labels):
        return int(target)
    raise BertkitError(f"--target {target!r} is not one of the model's labels ({', '.join(labels)})")


def integrated_gradients(model, encoded: Encoded, target: str | None = None, steps: int = 50,
                         batch: int = 16, description: str = "") -> Attribution:
    """Attributions of the predicted class (or `target`, a label name or index) to each token of
    one encoded text (pair). `batch` path points run per forward."""
    if model.head_kind != "classification":
        held = f"a {model.head_kind!r} head" if model.head_kind else "no task head"
        raise BertkitError(f"attribution explains a sequence classifier (classification or regression head); "
                           f"this model has {held}")
    if steps < 1:
        raise BertkitError(f"steps must be at least 1, got {steps}")
    word = model.backbone.embeddings.word
    if word.weight.dtype != torch.float32:  # the path sum needs more digits than bf16 keeps
        raise BertkitError(f"integrated gradients runs in fp32; this model is {word.weight.dtype} (model.float())")
    with evaluating(model):  # dropout off for the path, the caller's mode back after
        return _path_integral(model, encoded, target, steps, batch, description)


def _path_integral(model, encoded: Encoded, target: str | None, steps: int, batch: int,
                   description: str) -> Attribution:
    """integrated_gradients' sum over `steps` midpoints of the straight path from the baseline."""
    word = model.backbone.embeddings.word
    device = word.weight.device
    ids, types = encoded.ids.to(device), encoded.types.to(device)  # (1, T) each
    with torch.no_grad():
        x = word(ids)                                                    # (1, T, E)
        specials = set(model.tokenizer.special_ids)
        special = torch.tensor([i in specials for i in ids[0].tolist()], device=device)  # (T,)
        empty = word.weight[model.tokenizer.pad_token_id]                 # (E,)
        what = Attribution.baseline
        if not empty.any():  # a zero padding row: see the module's docstring
            stand_in = model.tokenizer.mask_token_id
            if stand_in is None:
                raise BertkitError("the padding token's word vector is zero, a baseline from which integrated "
                                   "gradients cannot share out this model's output, and there is no mask token "
                                   "to stand in for it")
            empty, what = word.weight[stand_in], "the mask token's word vector (the padding row is zero)"
        baseline = torch.where(special[None, :, None], x, empty)
        logits = model(None, None, types, inputs_embeds=x).logits[0].float()        # (C,)
        base_logits = model(None, None, types, inputs_embeds=baseline).logits[0].float()
    k = _target_index(model, target, logits)
    total = torch.zeros_like(x)                                           # (1, T, E)
    alphas = (torch.arange(steps, device=device, dtype=x.dtype) + 0.5) / steps  # midpoints of [0, 1]
    with torch.enable_grad():
        for chunk in alphas.split(batch):
            points = (baseline + chunk[:, None, None] * (x - baseline)).requires_grad_()  # (S, T, E)
            out = model(None, None, types.expand(len(chunk), -1), inputs_embeds=points).logits[:, k].sum()
            (grad,) = torch.autograd.grad(out, points)
            total += grad.sum(0, keepdim=True)
    scores = ((x - baseline) * total / steps).sum(-1)[0]                 # (T,)
    regression = model.config.num_labels == 1
    return Attribution(
        tokens=encoded.tokens, scores=scores.cpu().numpy(), target=model.config.labels[k],
        probability=float("nan") if regression else float(logits.softmax(-1)[k]),
        output=float(logits[k]), baseline_output=float(base_logits[k]), steps=steps, description=description,
        baseline=what)


def plot_attribution(a: Attribution, path: Path) -> Path:
    """One bar per token: its attribution, toward the class above the line, against it below."""
    T = len(a.tokens)
    width = min(max(6.0, 0.28 * T + 1.5), 40.0)
    fig = figure(width, 3.6)
    ax = fig.add_axes((0.8 / width, 0.3, 1 - 1.1 / width, 0.55))
    colors = ["#c0392b" if s > 0 else "#2e6da4" for s in a.scores]
    ax.bar(np.arange(T), a.scores, color=colors, width=0.8)
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_xlim(-0.6, T - 0.4)
    font, stride = label_layout(T, width - 1.1)  # token labels that never overlap
    ticks = list(range(0, T, stride))
    ax.set_xticks(ticks, [short(a.tokens[i]) for i in ticks], rotation=90, fontsize=font)
    ax.set_ylabel("attribution")
    chance = "" if np.isnan(a.probability) else f" (p = {a.probability:.2f})"
    ax.set_title(f"{plain(a.description)}: why {plain(repr(a.target))}{chance}\nintegrated gradients, {a.steps} steps; "
                 f"sum {a.scores.sum():+.3f} = F(x) - F(baseline) {a.output - a.baseline_output:+.3f}\n"
                 f"(gap {a.gap:.1e}; baseline: {a.baseline})", fontsize=9)
    return save(fig, path)


def write_attribution(a: Attribution, out: Path) -> list[Path]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    json_path = out / "attribution.json"
    json_path.write_text(json.dumps(a.to_json(), indent=2) + "\n")
    return [plot_attribution(a, out / "attribution.png"), json_path]
