"""Masked-LM training of the NumPy model: gradient accumulation, clipping, AdamW, a schedule.

    trainer = Trainer(model, batch_at, TrainSettings(steps=300, lr=1e-3), out="runs/numpy")
    history = trainer.fit()          # one metrics dict per optimizer step

    history = train(model, batches, steps=300, lr=1e-3)     # the same, from a list of batches

A batch is a dict of NumPy arrays: `input_ids` (B, T) int, `labels` (B, T) with the original id
at predicted positions and -100 elsewhere, optional `attention_mask` (B, T) and
`token_type_ids` (B, T). `batch_at(i)` returns the i-th micro-batch; step s uses micro-batches
s * accumulation ... s * accumulation + accumulation - 1, exactly as the torch trainer does, so
the two see the same data in the same order.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np

from ..errors import BertkitError
from ..files import MODEL_FILES, json_safe, output_dir
from .hf_io import check_savable
from .model import BertForMaskedLM
from ..schedules import check_training, scheduled_factor
from .optim import AdamW, clip_grad_norm

# A diverged run overflows in every matmul: NumPy's warnings about it are silenced where the
# trainer then says it once, as the torch trainer does (a non-finite loss stops training; a
# non-finite held-out loss is a warning and null in the metrics files).
QUIET = dict(over="ignore", invalid="ignore", divide="ignore")


@dataclass(frozen=True)
class TrainSettings:
    """The torch trainer's defaults (bertkit.train.TrainSettings), for the knobs both have."""
    steps: int | None = 1000            # optimizer steps; None with a time budget
    time_budget: float | None = None    # seconds of training; with both, whichever ends first
    lr: float = 1e-3
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-6
    warmup: float = 0.06                # fraction of training
    schedule: str = "linear"
    clip_norm: float | None = 1.0
    accumulation: int = 1
    recompute: bool = False             # activation recomputation (model.py)
    dropout: bool = True                # train with the config's dropout rates
    seed: int = 0                       # dropout masks

    def __post_init__(self) -> None:
        check_training(self)


class Trainer:
    """The NumPy Mini-BERT's training loop, the torch Trainer's counterpart: `batch_at(i)` the
    i-th micro-batch of NumPy arrays, `settings` a TrainSettings, `out` (optional) the run
    directory, `eval_batches` the held-out batches; `fit()` trains and returns the logged steps
    (`numpy_ref.train(...)` builds one and fits it)."""

    def __init__(self, model: BertForMaskedLM, batch_at: Callable[[int], dict], settings: TrainSettings,
                 out: str | Path | None = None, eval_batches: Sequence[dict] = ()):
        self.model, self.batch_at, self.settings = model, batch_at, settings
        self.eval_batches = list(eval_batches)
        self.out = None
        if out is not None:  # checked now: a run of minutes must not end in a path or format error
            # (nor write over a finished run or a model, as the torch Trainer refuses to)
            self.out = output_dir(out, keep=("metrics.json", *MODEL_FILES), flag="", run_logs=True)
            check_savable(model.config)
        self.optimizer = AdamW(model.params, settings.lr, settings.betas, settings.eps, settings.weight_decay)
        model.rng = np.random.default_rng(settings.seed)
        model.recompute = settings.recompute
        model.training = settings.dropout
        self.step = 0
        self.elapsed = 0.0
        self.tokens = 0

    def done(self) -> bool:
        s = self.settings
        return (s.steps is not None and self.step >= s.steps) or (
            s.time_budget is not None and self.elapsed >= s.time_budget)

    def train_step(self) -> dict[str, float]:
        """One optimizer step over `accumulation` micro-batches, each loss (a mean over its
        masked tokens) scaled by its share of the step's masked tokens, so the summed gradient is
        the gradient of the mean over all of them: that of one batch `accumulation` times bigger
        (micro-batches mask different numbers of tokens). The logged loss and accuracy are that
        same token-weighted mean (0 for a step without any masked token)."""
        s = self.settings
        lr = s.lr * scheduled_factor(s, self.step, self.elapsed)
        self.optimizer.lr = lr
        start = time.perf_counter()
        self.model.zero_grad()
        loss = accuracy = 0.0
        batches = [self.batch_at(self.step * s.accumulation + micro) for micro in range(s.accumulation)]
        for batch in batches:  # (a KeyError or a TypeError from deep inside the step otherwise)
            if not isinstance(batch, dict) or not {"input_ids", "labels"} <= set(batch):
                got = (f"keys {', '.join(map(repr, batch)) or 'none'}" if isinstance(batch, dict)
                       else type(batch).__name__)
                raise BertkitError(f"a batch is a dict holding 'input_ids' and 'labels' (-100 where not predicted), "
                                   f"got {got}")
        counts = [int(np.sum(np.asarray(b["labels"]) != -100)) for b in batches]
        for batch, count in zip(batches, counts):
            share = count / sum(counts) if sum(counts) else 1.0 / s.accumulation
            with np.errstate(**QUIET):
                result = self.model.forward_backward(batch["input_ids"], batch.get("attention_mask"),
                                                     batch["labels"], batch.get("token_type_ids"), scale=share)
            if not np.isfinite(result.loss):
                raise BertkitError(f"loss is {result.loss} at step {self.step + 1}; stopping (no model was saved; "
                                   "lower the learning rate)")
            loss += result.loss * share  # the mean over the step's masked tokens (an empty micro-batch: 0 * 0)
            accuracy += result.accuracy * share
            mask = batch.get("attention_mask")
            self.tokens += int(np.sum(mask)) if mask is not None else int(np.size(batch["input_ids"]))
        metrics = {"step": self.step + 1, "lr": lr, "loss": loss, "mlm_loss": loss, "mlm_accuracy": accuracy}
        with np.errstate(**QUIET):  # diverging weights: the next step's loss says so
            if s.clip_norm is not None:
                metrics["grad_norm"] = clip_grad_norm(self.model.grads, s.clip_norm)
            self.optimizer.step(self.model.grads)
        self.elapsed += time.perf_counter() - start
        self.step += 1
        metrics.update(tokens=self.tokens, elapsed=round(self.elapsed, 3))
        return metrics

    def evaluate(self) -> dict[str, float]:
        """MLM loss and accuracy over all the held-out batches' masked tokens, as if they were one
        batch: each batch's mean weighted by its count of masked tokens (a batch without any adds
        nothing, rather than a loss of 0), and perplexity exp(loss). No masked token in any
        batch: a warning and no metrics."""
        if not self.eval_batches:
            return {}
        with np.errstate(**QUIET):
            results = [self.model.mlm_loss(b["input_ids"], b.get("attention_mask"), b["labels"],
                                           b.get("token_type_ids")) for b in self.eval_batches]
        total = sum(r.predicted for r in results)
        if total == 0:
            warnings.warn(f"none of the {len(results)} held-out batches has a masked (labelled) token: "
                          "no held-out metrics")
            return {}
        loss = sum(r.loss * r.predicted for r in results) / total
        if not math.isfinite(loss):
            warnings.warn(f"the held-out loss is not finite at step {self.step}: the weights diverged "
                          "(lower the learning rate)")
        return {"mlm_loss": loss, "loss": loss, "mlm_accuracy": sum(r.accuracy * r.predicted for r in results) / total,
                "perplexity": math.exp(min(loss, 50.0))}

    def fit(self, progress: bool = False) -> list[dict[str, float]]:
        """Train to the step count or time budget. With `out`: metrics.jsonl (one line per step,
        then the held-out evaluation), the final model in Hugging Face format and metrics.json
        (the torch trainer's keys where both have them; a NaN or infinite number as null), all
        at the root of `out`. `progress` shows a tqdm bar with the loss and tokens/s."""
        from tqdm import tqdm

        history = []
        log = None
        if self.out is not None:
            self.out.mkdir(parents=True, exist_ok=True)
            log = open(self.out / "metrics.jsonl", "w")
        bar = tqdm(total=self.settings.steps if self.settings.time_budget is None else None, disable=not progress,
                   unit="step", dynamic_ncols=True)
        try:
            while not self.done():
                metrics = self.train_step()
                history.append(metrics)
                bar.update(1)
                bar.set_postfix(loss=f"{metrics['loss']:.3f}", tok_s=f"{self.tokens / max(self.elapsed, 1e-9):,.0f}")
                if log is not None:
                    log.write(json.dumps(json_safe({"split": "train", "backend": "numpy", **metrics})) + "\n")
            final = self.evaluate()
            if log is not None and final:
                record = {"split": "eval", "backend": "numpy", "step": self.step, **final}
                log.write(json.dumps(json_safe(record)) + "\n")
        except KeyboardInterrupt:  # the CLI prints the message after "interrupted"
            raise KeyboardInterrupt(f"at step {self.step}; no model was saved (the NumPy backend keeps no "
                                    "checkpoints)") from None
        finally:
            bar.close()
            if log is not None:
                log.close()
        if self.out is not None:
            self.model.save_pretrained(self.out)
            summary = {"step": self.step, "tokens": self.tokens, "train_seconds": round(self.elapsed, 1),
                       "processes": 1, "backend": "numpy", **final}  # keys of a torch run's metrics.json
            (self.out / "metrics.json").write_text(json.dumps(json_safe(summary), indent=2) + "\n")
        return history


def train(model: BertForMaskedLM, batches: Sequence[dict] | Callable[[int], dict], steps: int | None,
          lr: float = 1e-3, out: str | Path | None = None, eval_batches: Sequence[dict] = (),
          **settings) -> list[dict[str, float]]:
    """Train `model` in place for `steps` optimizer steps on `batches` (a list, cycled, or a
    function of the micro-batch index); `settings` are TrainSettings fields. Returns the
    per-step metrics; `eval_batches` are scored once at the end (metrics.json).

    `out` is checked before training (a file there, or a model that cannot be saved in Hugging
    Face format, is one error line). A folder that exists is written into, its other files left
    alone, unless it holds a finished run or a model (metrics.json, config.json, model weights),
    which is refused as `bertkit pretrain` and the torch Trainer refuse it: a second run wrote
    over the first. A run log (metrics.jsonl) of a run that did not finish is replaced."""
    listed = isinstance(batches, Sequence) and not isinstance(batches, (str, bytes))
    if not callable(batches) and not (listed and len(batches)):  # (len() of a generator, deep in a step)
        what = f"an empty {type(batches).__name__}" if listed else type(batches).__name__
        hint = (": list(batches) keeps them, to be cycled" if isinstance(batches, Iterator) else
                ": a dict is one batch, [batch] a list of it" if isinstance(batches, dict) else "")
        raise BertkitError(f"batches must be a list of batches (cycled) or a function of the micro-batch index, "
                           f"got {what}{hint}")
    batch_at = batches if callable(batches) else (lambda i: batches[i % len(batches)])
    return Trainer(model, batch_at, TrainSettings(steps=steps, lr=lr, **settings), out, eval_batches).fit()
