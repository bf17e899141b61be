"""Training curves from any run directory's metrics.jsonl (pre-training and fine-tuning runs
write one: records with step, split "train" or "eval", and whatever the objective or task
reports). Several runs overlay, one colour per run.

Panels, each drawn only when some record has its keys:
- losses: every key ending in "loss" (loss, mlm_loss, rtd_loss, ...);
- scores: accuracies and task scores (accuracy, f1, mcc, exact_match, pearson, spearman, ...);
- learning rate; gradient norm.
Train records are noisy, so their curves are drawn faint as logged and solid after an
exponential moving average; held-out ("eval") records are points joined by dashed lines. A step
with no finite number where one belongs (skipped for a non-finite loss, or NaN, infinity, null)
is a red line across every panel (several runs: a dotted line of its run's colour), with a warning: a
curve drawn across it would hide it.
`train.loop.plot_curves` keeps the one-panel loss picture each run writes for itself (marking such steps the same way).
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np

from ..errors import BertkitError, outside_stacklevel
from . import figure as F

SCORE_SUFFIXES = ("accuracy", "f1", "mcc", "exact_match", "pearson", "spearman", "precision", "recall")
NOT_PLOTTED = ("step", "split", "elapsed", "tokens", "perplexity", "epoch")


def read_log(run: Path) -> list[dict]:
    """The records of RUN/metrics.jsonl (RUN may also name the file). A partly written last line
    (a run stopped mid-write) is skipped with a warning; any other bad line is an error."""
    run = Path(run)
    if not run.exists():
        raise BertkitError(f"{run}: no such run directory")
    log = run if run.is_file() else run / "metrics.jsonl"
    if not log.is_file():
        raise BertkitError(f"{run}: no metrics.jsonl here (not a training run directory)")
    lines = log.read_text(encoding="utf-8").splitlines()
    records = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if not isinstance(record, dict) or "step" not in record:
                raise ValueError("not a record with a step")
        except ValueError as e:
            if n == len(lines):
                warnings.warn(f"{log}:{n}: unreadable last line skipped (a run stopped while writing?)",
                              stacklevel=outside_stacklevel())
                continue
            raise BertkitError(f"{log}:{n}: not a metrics record ({e})") from None
        records.append(record)
    if not records:
        raise BertkitError(f"{log}: no records yet")
    return records


def panels(records: list[dict]) -> dict[str, list[str]]:
    """Panel title -> the metric keys it shows, in the order they first appear. The total "loss"
    is left out where it always equals the one loss term (an objective with a single loss)."""
    keys = []
    for r in records:
        keys += [k for k, v in r.items() if k not in keys and k not in NOT_PLOTTED and isinstance(v, (int, float))
                 and not isinstance(v, bool)]
    losses = [k for k in keys if k.endswith("loss")]
    terms = [k for k in losses if k != "loss"]
    if "loss" in losses and len(terms) == 1 and all(_same(r.get("loss"), r.get(terms[0])) for r in records):
        losses.remove("loss")
    out = {"loss": losses,
           "scores": [k for k in keys if k.endswith(SCORE_SUFFIXES)],
           "learning rate": [k for k in keys if k == "lr"],
           "gradient norm": [k for k in keys if k == "grad_norm"]}
    return {title: ks for title, ks in out.items() if ks}


def _same(a, b) -> bool:
    """Two logged values equal up to float rounding (a held-out loss and its one term are averaged
    in different orders: 9.14756576 and 9.14756536), or neither a finite number (both missing, as
    in a skipped step's record, or both NaN)."""
    if not (finite(a) and finite(b)):
        return not finite(a) and not finite(b)
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)


def finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def broken_steps(records: list[dict], keys: list[str]) -> list[int]:
    """The steps of records with no finite number for one of the plotted `keys` they hold (NaN,
    infinity and null, as json_safe writes them, or a non-number), or skipped for a non-finite
    loss (`skipped: true`)."""
    steps = {r["step"] for r in records if r.get("skipped") is True or any(k in r and not finite(r[k]) for k in keys)}
    return sorted(s for s in steps if finite(s))


def smooth(values: np.ndarray) -> np.ndarray:
    """Exponential moving average over about 1/30 of the points, bias-corrected at the start."""
    if len(values) < 8:
        return values
    beta = 1 - 1 / max(2.0, len(values) / 30)
    out, avg = np.empty_like(values), 0.0
    for i, v in enumerate(values):
        avg = beta * avg + (1 - beta) * v
        out[i] = avg / (1 - beta ** (i + 1))
    return out


def series(records: list[dict], split: str, key: str) -> tuple[np.ndarray, np.ndarray]:
    points = [(r["step"], r[key]) for r in records if r.get("split") == split and finite(r.get(key))]
    if not points:
        return np.empty(0), np.empty(0)
    steps, values = zip(*points)
    return np.asarray(steps, dtype=float), np.asarray(values, dtype=float)


def plot_curves(runs: list[Path], path: Path) -> Path:
    """One PNG with a panel per kind of metric, every run overlaid."""
    runs = [Path(r) for r in runs]
    if not runs:
        raise BertkitError("name at least one run directory")
    logs = {r: read_log(r) for r in runs}
    shown: dict[str, list[str]] = {}
    for records in logs.values():
        for title, keys in panels(records).items():
            shown.setdefault(title, [])
            shown[title] += [k for k in keys if k not in shown[title]]
    names = {run: F.plain(name) for run, name in _run_names(runs).items()}
    broken = {run: broken_steps(records, [k for keys in shown.values() for k in keys]) for run, records in logs.items()}
    for run, steps in broken.items():
        if steps:
            listed = ", ".join(map(str, steps[:5])) + (", ..." if len(steps) > 5 else "")
            mark = "red lines" if len(runs) == 1 else "dotted lines of the run's colour"
            warnings.warn(f"{names[run]}: {len(steps)} step(s) logged no finite value (step {listed}): skipped for a "
                          f"non-finite loss, or NaN, infinity or null; marked by {mark}",
                          stacklevel=outside_stacklevel())
    columns = 2 if len(shown) > 1 else 1
    rows = -(-len(shown) // columns)
    fig = F.figure(6.2 * columns + 0.4, 3.6 * rows + 0.7)
    axes = fig.subplots(rows, columns, squeeze=False)
    styles = ("-", "-.", ":", (0, (5, 1)))
    markers = ("o", "s", "^", "D")
    for ax, (title, keys) in zip(axes.flat, shown.items()):
        for r, (run, records) in enumerate(logs.items()):
            for k, key in enumerate(keys):
                # one run: a colour per metric; several: a colour per run, a line style per metric
                c, style = (f"C{k % 10}", "-") if len(runs) == 1 else (f"C{r % 10}", styles[k % len(styles)])
                label = key if len(runs) == 1 else f"{names[run]}: {key}"
                steps, values = series(records, "train", key)
                if len(steps):
                    noisy = key != "lr" and len(steps) >= 8  # the schedule is exact: not smoothed
                    if noisy:
                        ax.plot(steps, values, color=c, ls=style, alpha=0.2, lw=0.8)
                    ax.plot(steps, smooth(values) if noisy else values, color=c, ls=style, lw=1.6,
                            marker="o" if len(steps) == 1 else None, ms=4,  # one step: a line would not show
                            label=f"{label} (train)")
                steps, values = series(records, "eval", key)
                if len(steps):
                    ax.plot(steps, values, ls="--", marker=markers[k % len(markers)], color=c, ms=4, lw=1.0,
                            label=f"{label} (held out)")
        for r, (run, steps) in enumerate(broken.items()):  # one run: red; several: each its own colour
            colour, style = ("red", "-") if len(runs) == 1 else (f"C{r % 10}", ":")
            for n, step in enumerate(steps):
                ax.axvline(step, color=colour, ls=style, alpha=0.6, lw=0.9, label=None if n else (
                    "no finite value" if len(runs) == 1 else f"{names[run]}: no finite value"))
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if title == "learning rate":
            ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 3))
        if ax.has_data():
            ax.legend(fontsize=7.5, frameon=False)
    for ax in list(axes.flat)[len(shown):]:
        ax.set_visible(False)
    fig.suptitle("Training curves: " + ", ".join(names[r] for r in runs)
                 + "  (train: moving average over the faint logged values)", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    return F.save(fig, path)


def _run_names(runs: list[Path]) -> dict[Path, str]:
    """Short names that tell the runs apart: the directory name, or more of the path if needed."""
    names = {r: (r.parent.name if r.is_file() else r.resolve().name) for r in runs}
    if len(set(names.values())) < len(runs):
        names = {r: str(r) for r in runs}
    return names
