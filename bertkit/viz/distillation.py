"""What the distillation temperature does (Hinton et al., 2015; DistilBERT, Sanh et al., 2019):
softmax(z / tau) of one set of teacher logits at several temperatures. tau = 1 is the teacher's
own distribution; larger tau flattens it, so the student also learns how the teacher ranks the
wrong answers ("dark knowledge"); smaller tau sharpens it towards the arg max. bertkit's
distillation objective uses tau = 2 by default (objectives/distill.py).

Shapes: C classes (candidate tokens), K temperatures.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import BertkitError
from . import figure as F

# Illustrative teacher logits for the masked word in "The movie was [MASK].": a few good answers,
# a long tail of unlikely ones.
EXAMPLE_LOGITS = (7.2, 6.1, 4.9, 4.1, 3.0, 2.2, 1.1, 0.3)
EXAMPLE_LABELS = ("great", "good", "fun", "fine", "boring", "bad", "long", "red")
EXAMPLE_CONTEXT = "The movie was [MASK]. (illustrative teacher logits)"
TEMPERATURES = (0.5, 1.0, 2.0, 4.0, 8.0)
DISTILBERT_TAU = 2.0
MOST_CLASSES = 40  # bars (and legend entries) a panel can show readably; 30,000 took 20 GB and minutes


def softmax(logits: np.ndarray, tau: float) -> np.ndarray:
    z = logits / tau
    e = np.exp(z - z.max())
    return e / e.sum()


def drawn(logits: np.ndarray, rest: np.ndarray, tau: float) -> np.ndarray:
    """What is drawn at temperature tau: each class of `logits` within the softmax of them all
    with `rest`, then (where there is a rest) the rest's probability together."""
    p = softmax(np.concatenate([logits, rest]), tau)
    return np.append(p[:len(logits)], p[len(logits):].sum()) if len(rest) else p


def check(logits, labels, temperatures) -> tuple[np.ndarray, list[str], list[float]]:
    logits = np.asarray(logits, dtype=np.float64)
    if logits.ndim != 1 or len(logits) < 2:
        raise BertkitError("give at least two logits")
    if len(logits) > MOST_CLASSES:
        raise BertkitError(f"give at most {MOST_CLASSES} logits to draw one by one, got {len(logits)} (more bars "
                           "cannot be read)")
    if not np.isfinite(logits).all():
        raise BertkitError("the logits must be finite numbers")
    labels = list(labels) if labels else [f"class {i}" for i in range(len(logits))]
    if len(labels) != len(logits):
        raise BertkitError(f"{len(logits)} logits but {len(labels)} labels")
    temperatures = [float(t) for t in temperatures]
    if not temperatures or any(not t > 0 or not np.isfinite(t) for t in temperatures):
        raise BertkitError(f"temperatures must be positive numbers, got {temperatures}")
    return logits, labels, sorted(set(temperatures))


def mlm_logits(model, text: str, top_k: int = 8) -> tuple[list[float], list[str], str, np.ndarray]:
    """The teacher's top-k logits at the first mask of `text` (a model with a masked-LM head), and
    the rest of the vocabulary's: distillation softens the whole distribution, and the tail that
    temperature lifts is most of what it shows."""
    import torch

    from .inputs import encode

    tok = model.tokenizer
    if model.head is None or not model.head.predicts_tokens:
        raise BertkitError(f"--model needs a masked-LM head to give logits (this one's head: {model.head_kind})")
    text = text.replace("[MASK]", tok.mask_token or "[MASK]")
    encoded = encode(model, text)
    positions = (encoded.ids[0] == tok.mask_token_id).nonzero().flatten().tolist()
    if not positions:
        raise BertkitError(f"no {tok.mask_token} in {text!r}: the logits are read at the first mask")
    device = next(model.parameters()).device
    with torch.no_grad():
        ids = encoded.ids.to(device)
        logits = model(ids, torch.ones_like(ids), encoded.types.to(device)).logits[0, positions[0]].float().cpu()
    top = logits.topk(min(top_k, logits.shape[-1]))
    ids = top.indices.tolist()
    rest = np.delete(logits.double().numpy(), ids)
    texts = [tok.decode([i]).strip() for i in ids]  # " good" -> good, not the vocabulary's "Ġgood"
    # ... unless that says nothing or the same as another's ("-" and "Ġ-"; a byte piece's "\ufffd")
    labels = [t if t and t.isprintable() and "\ufffd" not in t and texts.count(t) == 1 else tok.id_to_token(i)
              for t, i in zip(texts, ids)]
    return top.values.tolist(), labels, f"{text} (the model's top {len(labels)} of {logits.shape[-1]:,})", rest


def plot_temperatures(path: Path, logits=EXAMPLE_LOGITS, labels=EXAMPLE_LABELS, temperatures=TEMPERATURES,
                      context: str = EXAMPLE_CONTEXT, rest=None, marked: dict[float, str] | None = None) -> Path:
    """Top: the distribution at each temperature, with its entropy. Bottom: each class's
    probability as the temperature sweeps from 0.25 to 16 (log axis). `rest`: the logits of the
    classes not drawn one by one (a vocabulary's tail), softened with the others and drawn as one
    "other" bar and curve. `marked`: temperature -> a note on its panel (default: DistilBERT's 2)."""
    logits, labels, temperatures = check(logits, labels, temperatures)
    rest = np.zeros(0) if rest is None else np.asarray(rest, dtype=np.float64)
    marked = {DISTILBERT_TAU: "DistilBERT"} if marked is None else marked
    if len(rest):
        labels = [*labels, f"other {len(rest):,}"]
    C, K = len(labels), len(temperatures)
    V = len(logits) + len(rest)
    panel = max(2.3, 0.32 * C + 0.6)
    width = max(9.0, K * panel + 1.0)
    fig = F.figure(width, 7.4)
    grid = fig.add_gridspec(2, K, height_ratios=(1.0, 1.05), hspace=0.62, wspace=0.12,
                            left=0.8 / width, right=1 - 0.25 / width, top=0.87, bottom=0.09)
    colours = [f"C{i % 10}" for i in range(len(logits))] + ["lightgrey"] * (C - len(logits))
    share = None
    font = min(9.0, max(6.0, 80 / C))
    for k, tau in enumerate(temperatures):
        p = drawn(logits, rest, tau)
        whole = softmax(np.concatenate([logits, rest]), tau)
        ax = fig.add_subplot(grid[0, k], sharey=share)
        share = share or ax
        ax.bar(range(C), p, color=colours)
        ax.set_xticks(range(C), [F.short(s) for s in labels], rotation=60, ha="right", fontsize=font)
        ax.set_ylim(0, 1.0)
        entropy = float(-(whole * np.log(whole + 1e-30)).sum()) + 0.0  # + 0.0: a one-hot's -0.0 reads as 0.00
        note = marked.get(tau) or ("teacher" if tau == 1.0 else "")
        marker = f"  ({note})" if note else ""
        ax.set_title(f"\u03c4 = {tau:g}{marker}\nentropy {entropy:.2f} nats", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
        if k:
            ax.tick_params(labelleft=False)
        else:
            ax.set_ylabel("probability")
    ax = fig.add_subplot(grid[1, :])
    sweep = np.geomspace(0.25, 16, 200)
    curves = np.stack([drawn(logits, rest, t) for t in sweep])  # (200, C)
    for c in range(C):
        ax.plot(sweep, curves[:, c], color=colours[c], label=F.short(labels[c]))
    ax.axhline(1 / V, color="grey", ls=":", lw=1)
    ax.text(sweep[0], 1 / V, f"uniform 1/{V:,}", va="bottom", ha="left", fontsize=8, color="grey")
    for tau in temperatures:
        ax.axvline(tau, color="black" if tau in marked else "lightgrey", lw=0.8, ls="--", zorder=0)
    ax.set_xscale("log")
    ax.set_xticks([0.25, 0.5, 1, 2, 4, 8, 16], ["0.25", "0.5", "1", "2", "4", "8", "16"])
    ax.set_xlabel("temperature \u03c4 (log scale)")
    ax.set_ylabel("probability")
    ax.set_title("each candidate's probability as \u03c4 grows: high \u03c4 reveals the ranking of the wrong "
                 "answers, \u03c4 \u2192 0 keeps only the arg max", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=min(C, 8), loc="upper right", frameon=False)
    fig.suptitle(f"Distillation temperature: softmax(z / \u03c4) of {F.plain(context)}", fontsize=11,
                 x=0.8 / width, ha="left")
    return F.save(fig, path)
