"""The training loop: any objective, any family.

    trainer = Trainer(objective, batch_at, TrainSettings(steps=1000), out="runs/x", eval_batches=dev)
    trainer.fit()

`batch_at(i)` returns the i-th micro-batch (a dict of tensors, see objectives/): a pure
function of i (the data pipeline seeds masking per batch), so resuming at step s continues with
exactly the batches an uninterrupted run would have seen, and the data position is one number.

Per optimizer step: `accumulation` micro-batches (losses scaled by 1 / accumulation), gradient
clipping, AdamW, then the learning rate for the next step from the schedule. The schedule's
progress is steps / total steps, or, with a time budget (Cramming, Geiping & Goldstein 2023),
training seconds used / budget, which a resumed run continues from the checkpoint's count.

Distributed: started under `torchrun --nproc_per_node=N` (or with a process group already set
up), the objective is wrapped in DistributedDataParallel (gloo on CPU, nccl on CUDA); every
process builds the same global micro-batch and keeps its own rows (rank, rank + N, ...), DDP
averages the gradients, and only rank 0 writes logs, checkpoints and the final model.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist

from ..errors import BertkitError, outside_stacklevel
from ..files import json_safe, launch_processes, output_dir, writing
from . import checkpoint
from ..schedules import check_training, scheduled_factor
from .optim import param_groups

SKIPS_IN_A_ROW = 20  # --skip-nonfinite: this many skipped steps in a row means the weights are lost; stop


@dataclass(frozen=True)
class TrainSettings:
    """How Trainer trains: `steps` optimizer steps or `time_budget` seconds of training (with
    both, whichever ends first), AdamW (lr, weight_decay on matrices only, betas, eps), warm-up
    over a `warmup` fraction then the `schedule` ("linear", "cosine", "constant"), gradient
    clipping at `clip_norm` (None: none), `accumulation` micro-batches per step, bf16 autocast,
    activation checkpointing, torch.compile, evaluation / checkpoints every `eval_every` /
    `save_every` steps keeping `keep`, the `seed` of the run's random streams, `skip_nonfinite`
    to skip a NaN/Inf step instead of stopping, and a progress bar. Every field is type-checked."""
    steps: int | None = 1000            # optimizer steps; None with a time budget
    time_budget: float | None = None    # seconds of training (evaluation and saving excluded);
                                        # with both, whichever ends first (scheduled_factor)
    lr: float = 1e-3
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-6
    warmup: float = 0.06                # fraction of training
    schedule: str = "linear"
    clip_norm: float | None = 1.0
    accumulation: int = 1
    bf16: bool = False                  # autocast; weights and optimizer stay fp32
    activation_checkpointing: bool = False
    compile: bool = False
    eval_every: int = 100
    save_every: int = 200
    keep: int = 2
    seed: int = 0
    skip_nonfinite: bool = False        # skip a step whose loss is NaN/Inf instead of stopping
    progress: bool = True

    def __post_init__(self) -> None:
        check_training(self)
        for name in ("eval_every", "save_every", "keep"):
            if getattr(self, name) < 1:
                raise BertkitError(f"{name} must be at least 1, got {getattr(self, name)}")


def _warn_if_half_weights(objective) -> None:
    """Trained weights held in bf16 or fp16 (a model loaded with dtype=torch.bfloat16) take AdamW's
    updates in that precision: a step below about 1/256 of a weight rounds away, so most weights
    barely move (3 fine-tuning steps changed 9% of a bf16 encoder's). transformers' Trainer
    does the same, silently; fp32 weights under bf16 autocast (bf16=True) train properly."""
    steps = {torch.bfloat16: 256, torch.float16: 2048}  # 2 ** the mantissa's bits
    half = {p.dtype for p in objective.parameters() if p.requires_grad and p.dtype in steps}
    if half:
        kind = min(half, key=steps.get)
        warnings.warn(f"the model's trained weights are {str(kind).removeprefix('torch.')}: AdamW's updates smaller "
                      f"than about 1/{steps[kind]} of a weight are rounded away, so most weights barely train; load "
                      "the model in fp32 (the default dtype, or model.float()) and train with bf16=True (bf16 "
                      "autocast) instead", stacklevel=outside_stacklevel())


class Trainer:
    """Pre-training loop for an Objective (MaskedLM, ReplacedTokenDetection, Distillation):
    `batch_at(i)` gives the i-th micro-batch (a pure function of i, so a resumed run is exact),
    `settings` a TrainSettings, `out` the run directory (metrics.jsonl, checkpoints/, the final
    model, metrics.json, loss_curve.png), `eval_batches` the held-out batches evaluate() scores.
    `resume()` continues from out/checkpoints; `fit()` trains to the end; under torchrun every
    process trains on its rows of each batch."""

    def __init__(self, objective, batch_at: Callable[[int], dict], settings: TrainSettings,
                 out: str | Path, eval_batches: list[dict] | None = None, device: str | torch.device = "cpu",
                 on_eval: Callable[[int, dict[str, float]], bool] | None = None, final_model: bool = True):
        """`final_model=False`: the run's end writes no model, checkpoint or metrics.json (fine-tuning
        saves the best evaluation's model itself, and an interrupt during that save must not leave
        the last step's model looking like a finished run)."""
        from ..objectives.base import Objective

        if not isinstance(objective, Objective):  # a model: it trains through an objective's loss
            raise BertkitError(f"Trainer takes an objective (MaskedLM(model), ..., or a subclass of "
                               f"bertkit.objectives.Objective whose forward(batch) returns the loss), "
                               f"not {type(objective).__name__}")
        self.final_model = final_model
        self.objective = objective.to(device)
        self.rank, self.world = _distributed(torch.device(device))
        self.batch_at = batch_at
        self.settings = settings
        self.out = Path(out).expanduser()
        self.eval_batches = eval_batches or []
        self.device = torch.device(device)
        # Dropout and sampling differ per process (DDP copies rank 0's weights when it wraps).
        torch.manual_seed(process_seed(settings.seed, self.rank))
        for model in objective.models().values():
            # (on as asked, or as the model already had it: gradient_checkpointing_enable() stays)
            model.backbone.encoder.checkpointing = settings.activation_checkpointing or model.is_gradient_checkpointing
            if settings.compile:
                model.compile()
        _warn_if_half_weights(objective)
        if settings.bf16:
            from ..pretraining import warn_if_emulated_bf16

            warn_if_emulated_bf16(self.device)
        # The fused kernel updates every tensor in one pass: on CPU ~5x faster than the default
        # per-tensor loop (bert-base MLM: 64 vs 333 ms of a ~8 s step), same update;
        # transformers' Trainer uses it too.
        self.optimizer = torch.optim.AdamW(param_groups(objective, settings.weight_decay), lr=settings.lr,
                                           betas=settings.betas, eps=settings.eps,
                                           fused=self.device.type in ("cpu", "cuda"))
        # What runs the forward: the objective, or DDP around it (same parameters, synced gradients).
        self.runner = objective
        if self.world > 1:
            from torch.nn.parallel import DistributedDataParallel
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.runner = DistributedDataParallel(objective, device_ids=ids)
        self.step = 0
        self.elapsed = 0.0   # training seconds so far (the time budget's clock)
        self.tokens = 0
        self.log_path = self.out / "metrics.jsonl"
        # Called after every evaluation with the step and the metrics, before they are logged (so
        # it may add scores of its own, e.g. a fine-tuning task's dev accuracy from full
        # predictions); returning True stops training there (early stopping). It runs in every
        # process and must decide the same everywhere.
        self.on_eval = on_eval
        self.stopped = False
        self.skipped = 0  # steps skipped for a non-finite loss (skip_nonfinite), over the whole run

    # ---- bookkeeping ----------------------------------------------------------------------
    def done(self) -> bool:
        s = self.settings
        return self.stopped or (s.steps is not None and self.step >= s.steps) or (
            s.time_budget is not None and self.elapsed >= s.time_budget)

    def _set_lr(self) -> float:
        lr = self.settings.lr * scheduled_factor(self.settings, self.step, self.elapsed)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def _log(self, record: dict) -> None:
        if not self.is_main:
            return
        with open(self.log_path, "a") as f:
            f.write(json.dumps(json_safe(record)) + "\n")

    def _state(self) -> dict:
        return {"step": self.step, "elapsed": self.elapsed, "tokens": self.tokens, "skipped": self.skipped,
                "optimizer": self.optimizer.state_dict(), "settings": asdict(self.settings)}

    def save_checkpoint(self) -> Path | None:
        path = None
        state = self._state()
        if self.world > 1:  # every process's random state (its dropout and sampling streams), for resume
            state["rng_by_rank"] = [None] * self.world
            dist.all_gather_object(state["rng_by_rank"], checkpoint.rng_state(self.device))
        if self.is_main:
            with self._saving(f"a checkpoint at step {self.step}"):
                path = checkpoint.save(self.out, self.step, self.objective.models(), state, self.settings.keep,
                                       self.device)
        if self.world > 1:
            dist.barrier()  # nobody runs ahead of a checkpoint still being written
        return path

    def _saving(self, what: str):
        """A failed write (a full disk, a lost mount) becomes one clear line saying what survived:
        checkpoints are written beside the old ones and renamed into place (checkpoint.py)."""
        def kept() -> str:
            previous = checkpoint.latest(self.out)
            return f"{previous} is intact" if previous else "there is no earlier checkpoint"

        return writing(what, self.out, kept)

    def _kept(self) -> str:
        """What a run stopped for a non-finite loss leaves: its last checkpoint, or none."""
        previous = checkpoint.latest(self.out)
        return f"the last checkpoint, {previous}, is intact" if previous else "no checkpoint was written"

    def _check_out_is_free(self) -> None:
        """A fresh run (not resumed) into OUT: refused where it would overwrite another run's
        checkpoints, a finished run or a model (other files are left alone), as `bertkit pretrain`
        refuses it; fit() without resume() wrote over them, mixing two runs' files."""
        previous = checkpoint.latest(self.out)
        if previous is not None:
            raise BertkitError(f"{self.out} already holds a run (its newest checkpoint: {previous.name}); "
                               "call resume() before fit() to continue it, or choose another out")
        output_dir(self.out, flag="", run_logs=True)

    def resume(self, path: Path | None = None) -> bool:
        """Continue from `path` or the newest checkpoint under OUT/checkpoints; False if none."""
        path = path or checkpoint.latest(self.out)
        if path is None:
            return False
        state = checkpoint.load(path, self.objective.models())
        self._warn_if_changed(state.get("settings") or {}, path)
        self.optimizer.load_state_dict(state["optimizer"])
        self.step, self.elapsed, self.tokens = state["step"], state["elapsed"], state["tokens"]
        self.skipped = state.get("skipped", 0)
        # each process's own stream back (one process's run has only "rng"); a process the run
        # did not have gets a stream of its own, as a fresh run's processes do
        streams = state.get("rng_by_rank") or [state["rng"]]
        checkpoint.set_rng_state(streams[min(self.rank, len(streams) - 1)], self.device)
        if self.rank >= len(streams):
            torch.manual_seed(process_seed(self.settings.seed, self.rank, self.step))
        if self.is_main and self.log_path.exists():  # drop log lines written after this checkpoint
            self._keep_logged(lambda step, split: step <= self.step)
        return True

    # what the optimization is: changed on resume, the run goes on as another would have trained
    SAME_ON_RESUME = ("lr", "weight_decay", "betas", "eps", "warmup", "schedule", "clip_norm", "accumulation", "seed")

    def _warn_if_changed(self, before: dict, path: Path) -> None:
        """Resuming with other optimization settings than the checkpoint's run trained with: said,
        naming them (`bertkit pretrain --resume` refuses it; a script may mean it)."""
        now = asdict(self.settings)
        changed = [f"{k} {before[k]!r} -> {now[k]!r}" for k in self.SAME_ON_RESUME
                   if k in before and _plain(before[k]) != _plain(now[k])]
        if changed:
            warnings.warn(f"resuming {path} with settings other than its run's: {', '.join(changed)} (the run "
                          "goes on with the new ones)", stacklevel=outside_stacklevel())

    def _keep_logged(self, keep: Callable[[float, str | None], bool]) -> None:
        """Rewrite the log with the lines whose (step, split) `keep` accepts."""
        kept = [line for line in self.log_path.read_text().splitlines() if keep(*_logged(line))]
        self.log_path.write_text("".join(line + "\n" for line in kept))

    # ---- the loop -------------------------------------------------------------------------
    def _to_device(self, batch: dict) -> dict:
        """(checked by _shard or evaluate, before counts() reads it, on the host)"""
        return {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}

    def _shard(self, batch: dict) -> dict:
        """This process's rows of a global batch (every tensor's first dimension is the batch)."""
        self.objective.check_batch(batch)
        if self.world == 1:
            return batch
        rows = next(iter(batch.values())).shape[0]
        if rows < self.world:
            raise BertkitError(f"a batch of {rows} rows cannot be split over {self.world} processes")
        return {k: v[self.rank::self.world] for k, v in batch.items()}

    def _counted(self, micro_batches: list[dict]) -> tuple[dict[str, torch.Tensor] | None, list[dict] | None]:
        """The step's total of each item the objective's loss terms average over (Objective.counts),
        summed over micro-batches and processes, and each micro-batch's own counts; (None, None)
        where one batch in one process needs none, or the objective counts nothing."""
        if len(micro_batches) == 1 and self.world == 1:
            return None, None
        counts = [self.objective.counts(b) for b in micro_batches]
        if counts[0] is None:
            return None, None
        names = sorted(counts[0])
        totals = torch.stack([sum(c[n] for c in counts).to(torch.float64).reshape(()) for n in names])
        if self.world > 1:
            dist.all_reduce(totals)
        return {n: t.to(torch.float32) for n, t in zip(names, totals)}, counts

    def _finite_everywhere(self, loss: torch.Tensor) -> bool:
        """Whether the loss is finite in every process (all must skip or stop together)."""
        finite = torch.isfinite(loss.detach()).to(torch.int32).reshape(1)
        if self.world > 1:
            dist.all_reduce(finite, op=dist.ReduceOp.MIN)
        return bool(finite)

    def _mean_over_processes(self, metrics: dict[str, float]) -> dict[str, float]:
        if self.world == 1 or not metrics:
            return metrics
        names = sorted(metrics)
        values = torch.tensor([metrics[n] for n in names], dtype=torch.float64, device=self.device)
        dist.all_reduce(values)
        return {n: v / self.world for n, v in zip(names, values.tolist())}

    def evaluate(self) -> dict[str, float]:
        """Objective metrics over the held-out batches as if they were one batch (dropout off, no
        gradients): each metric the mean over all its items (masked tokens, pairs, ...), as a
        training step's are, and the loss the one such a batch would give; a mean of batch means
        weighed a batch of few masked tokens as much as one of many, so the NumPy Mini-BERT and
        this trainer reported different held-out losses for one model. Plus perplexity
        exp(mlm_loss) where there is an MLM loss. Under torchrun every process
        scores the whole of each batch, as one process does: split, each process's mean over its
        share (its own count of masked tokens) averaged with the others' was another number
        (6.909 against 6.837 on one run). The mean over processes then only makes them agree."""
        if not self.eval_batches:
            return {}
        self.objective.eval()
        totals: dict[str, float] = {}
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.no_grad(), self._autocast(), torch.random.fork_rng(devices=devices):
            # the same random draws at every evaluation (ELECTRA's generator samples its
            # replacements), so scores compare across evaluations; training's stream is untouched
            torch.manual_seed(self.settings.seed)
            for b in self.eval_batches:
                self.objective.check_batch(b)
            batches = [self._to_device(b) for b in self.eval_batches]
            counts = [self.objective.counts(b) for b in batches]
            whole = None if counts[0] is None else {n: sum(c[n] for c in counts).float() for n in counts[0]}
            weights: dict[str, float] = {}
            loss = 0.0
            for batch, count in zip(batches, counts):
                with self.objective.batches_checked():
                    result = self.objective(batch, whole)  # given the whole's counts, its loss is its share
                loss += float(result.loss)
                for k, v in result.metrics.items():
                    name = self.objective.metric_count(k) if count is not None else None
                    weight = float(count[name]) if name in (count or {}) else 1.0
                    if weight:  # a batch without a metric's items (no masked token) has no mean of them
                        totals[k] = totals.get(k, 0.0) + float(v) * weight
                        weights[k] = weights.get(k, 0.0) + weight
        self.objective.train()
        means = {k: v / weights[k] for k, v in totals.items()}
        if whole is not None and "loss" in means:
            means["loss"] = loss  # the batches' shares add up to the whole's loss
        metrics = self._mean_over_processes(means)
        if "mlm_loss" in metrics:
            metrics["perplexity"] = math.exp(min(metrics["mlm_loss"], 50.0))
        return metrics

    def _evaluate_and_log(self) -> dict[str, float]:
        metrics = self.evaluate()
        if self.on_eval is not None and self.on_eval(self.step, metrics):
            self.stopped = True
        if metrics:  # (no held-out batches and no on_eval scores: no line of nothing)
            self._log({"step": self.step, "split": "eval", "elapsed": round(self.elapsed, 3), **metrics})
        return metrics

    def _autocast(self):
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.settings.bf16)

    def train_step(self) -> dict[str, float] | None:
        """One optimizer step over `accumulation` micro-batches; None when it was skipped."""
        s = self.settings
        self.optimizer.zero_grad(set_to_none=True)
        totals: dict[str, float] = {}
        tokens, loss = 0, 0.0
        micro_batches = [self._to_device(self._shard(self.batch_at(self.step * s.accumulation + micro)))
                         for micro in range(s.accumulation)]
        counted, counts = self._counted(micro_batches)
        for micro, batch in enumerate(micro_batches):
            last = micro == s.accumulation - 1
            # DDP syncs gradients on the last micro-batch only; the others accumulate locally.
            sync = self.runner.no_sync() if self.world > 1 and not last else contextlib.nullcontext()
            with sync:
                with self._autocast(), self.objective.batches_checked():
                    result = self.runner(batch) if counted is None else self.runner(batch, counted)
                if not self._finite_everywhere(result.loss):
                    if s.skip_nonfinite:
                        self.optimizer.zero_grad(set_to_none=True)
                        return None
                    # a regression's labels are data that can overflow float32's square on their own
                    say = (" (a regression label too large for float32's square, say)"
                           if getattr(self.objective, "problem_type", None) == "regression" else "")
                    if self.step == 0:  # no update yet: the learning rate cannot be why
                        why = f"before any update, so the data or the model gives it{say}"
                    else:
                        skip = (", or skip such steps (pretrain --skip-nonfinite, TrainSettings(skip_nonfinite=True))"
                                if self.final_model else "")
                        why = f"lower the learning rate{skip}"
                        if all(bool(torch.isfinite(p).all()) for p in self.objective.parameters()):
                            # finite weights giving a non-finite loss: this batch may be why, not the updates
                            why = (f"the weights are still finite, so this step's data may give it{say} or training "
                                   f"is diverging: check the data, or {why}")
                        else:
                            why = f"the weights are no longer finite: {why}"
                    # (step numbers count from 1, as metrics.jsonl and the skip warning count them)
                    raise NonFiniteLoss(result.loss.item(), self.step + 1, self._kept(), why)
                if not result.loss.requires_grad:  # (torch's own error names a tensor's element 0)
                    raise BertkitError("the loss does not require grad: no trainable parameter reaches it (every one "
                                       "frozen, or the loss computed under torch.no_grad or from detached values)")
                # with counts, each micro-batch's loss is already its share of the step's mean; DDP
                # averages gradients over processes, so the world size undoes that average
                (result.loss / s.accumulation if counted is None else result.loss * self.world).backward()
            loss += float(result.loss.detach()) / (s.accumulation if counted is None else 1)
            for k, v in result.metrics.items():
                name = self.objective.metric_count(k) if counted is not None else None
                if name in (counted or {}):  # its share of the step's mean (world: see the loss)
                    share = float(counts[micro][name]) / max(float(counted[name]), 1.0) * self.world
                    totals[k] = totals.get(k, 0.0) + (float(v) * share if share else 0.0)  # (0 items: NaN)
                else:
                    totals[k] = totals.get(k, 0.0) + float(v) / s.accumulation
            mask = batch.get("attention_mask")
            tokens += int(mask.sum()) if mask is not None else batch["input_ids"].numel()
        if "loss" in totals:
            # the step's own loss: with counts, each micro-batch's loss is its share of the step's
            # over every process (the world size undoes the mean over processes below); a mean of
            # micro-batch means weighed a micro-batch of few masked tokens as much as one of many
            totals["loss"] = loss if counted is None else loss * self.world
        if s.clip_norm is not None:
            totals["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(self.objective.parameters(), s.clip_norm))
        self.optimizer.step()
        if self.world > 1:
            tokens = int(self._mean_over_processes({"t": float(tokens)})["t"] * self.world)
        self.tokens += tokens
        return self._mean_over_processes(totals)

    def fit(self) -> dict[str, float]:
        """Train until the step count or time budget is reached; write the final models and
        metrics.json at the root of OUT, and the loss-curve plot. Returns the final eval metrics.
        Under torchrun, another process that stops (killed, out of memory) fails this one's next
        collective with the backend's long message: that becomes LostProcess, one line."""
        try:
            return self._fit()
        except RuntimeError as e:
            if self.world == 1 or not lost_process(e):
                raise
            raise LostProcess(self.step, e, self._kept() if self.final_model else None) from None

    def _fit(self) -> dict[str, float]:
        from tqdm.auto import tqdm

        s = self.settings
        held = {id(p) for group in self.optimizer.param_groups for p in group["params"]}
        unheld = [n for n, p in self.objective.named_parameters() if p.requires_grad and id(p) not in held]
        if unheld:  # they would never train, without a word
            more = ", ..." if len(unheld) > 1 else ""
            raise BertkitError(f"{len(unheld)} trainable parameter(s) ({unheld[0]}{more}) are not in the optimizer: "
                               "the model changed after the Trainer was built (a resize_token_embeddings?); "
                               "build the Trainer after changing the model")
        if self.step == 0:
            self._check_out_is_free()
        self.out.mkdir(parents=True, exist_ok=True)
        if self.step == 0 and self.is_main:
            self.log_path.unlink(missing_ok=True)  # a fresh run does not append to an old run's log
        elif self.done() and self.is_main and self.log_path.exists():
            # Resumed at its end (cut off while saving the final model): the final evaluation, logged
            # before that checkpoint, runs and is logged again below; its first line goes.
            self._keep_logged(lambda step, split: (step, split) != (self.step, "eval"))
        self.objective.train()
        timed = s.time_budget is not None  # then the bar counts training seconds against the budget
        bar = tqdm(total=s.time_budget if timed else s.steps,
                   initial=min(self.elapsed, s.time_budget) if timed else self.step, unit="step",
                   disable=not (s.progress and self.is_main), dynamic_ncols=True,
                   bar_format="{l_bar}{bar}| {n:.0f}/{total:.0f} s of training [{elapsed}<{remaining}{postfix}]"
                   if timed else None)
        last_eval: dict[str, float] = {}
        in_a_row = 0  # skipped steps since the last one that trained
        trained = True  # since the last checkpoint: one of skipped steps alone would hold the same weights
        while not self.done():
            lr = self._set_lr()
            start = time.perf_counter()
            metrics = self.train_step()
            seconds = time.perf_counter() - start
            if self.world > 1:  # one clock for all, so every process stops at the same step
                clock = torch.tensor([seconds], dtype=torch.float64, device=self.device)
                dist.broadcast(clock, 0)
                seconds = float(clock)
            self.elapsed += seconds
            self.step += 1
            in_a_row = in_a_row + 1 if metrics is None else 0
            trained = trained or metrics is not None
            if metrics is None:  # skip_nonfinite: said, logged and counted, never silent
                self.skipped += 1
                self._log({"step": self.step, "split": "train", "lr": lr, "tokens": self.tokens,
                           "elapsed": round(self.elapsed, 3), "skipped": True})
                if in_a_row == 1 and self.is_main:
                    bar.write(f"bertkit: warning: step {self.step} skipped: its loss is not finite", file=sys.stderr)
                if in_a_row == SKIPS_IN_A_ROW:
                    raise BertkitError(f"{SKIPS_IN_A_ROW} steps in a row had a non-finite loss (up to step "
                                       f"{self.step}); the weights no longer train, so the run stops ({self._kept()}; lower the "
                                       "learning rate)")
            else:
                record = {"step": self.step, "split": "train", "lr": lr, "tokens": self.tokens,
                          "elapsed": round(self.elapsed, 3), **metrics}
                self._log(record)
                bar.set_postfix(**({"step": self.step} if timed else {}), loss=f"{metrics['loss']:.3f}",
                                tok_s=f"{self.tokens / max(self.elapsed, 1e-9):,.0f}", refresh=False)
            bar.update(min(seconds, s.time_budget - bar.n) if timed else 1)  # the last step overshoots the budget
            if self.step % s.eval_every == 0 and not self.done():
                last_eval = self._evaluate_and_log()
            if self.step % s.save_every == 0 and not self.done() and trained:  # (else it would push out a
                self.save_checkpoint()                                          # checkpoint of other weights)
                trained = False
        bar.close()
        final = last_eval if self.stopped else self._evaluate_and_log()  # stopped: just evaluated
        if self.final_model:
            self.save_checkpoint()
        if self.is_main and self.final_model:
            summary = {"step": self.step, "tokens": self.tokens, "train_seconds": round(self.elapsed, 1),
                       "processes": self.world, **({"skipped_steps": self.skipped} if s.skip_nonfinite else {}),
                       **final}
            with self._saving("the final model"):
                checkpoint.save_final(self.objective.models(), self.out)
                (self.out / "metrics.json").write_text(json.dumps(json_safe(summary), indent=2) + "\n")
        if self.is_main:
            try:
                plot_curves(self.log_path, self.out / "loss_curve.png")
            except OSError as e:  # the model and metrics are saved; a picture is not worth failing the run
                warnings.warn(f"could not write {self.out / 'loss_curve.png'}: {e.strerror or e}")
        if self.world > 1:
            dist.barrier()
        return final


class NonFiniteLoss(BertkitError):
    """Training stopped at `step` for a loss of `loss` (nan or inf): `kept` says what the run
    leaves, `why` what may cause it."""

    def __init__(self, loss: float, step: int, kept: str, why: str):
        self.loss, self.step, self.why = loss, step, why
        super().__init__(f"loss is {loss} at step {step}; stopping ({kept}; {why})")


class LostProcess(BertkitError):
    """Another process of a torchrun run stopped; `step` is where this one was."""

    def __init__(self, step: int, error: Exception, kept: str | None = None):
        self.step = step
        reason = next((s for s in PEER_GONE if s in str(error)), type(error).__name__)
        super().__init__(f"another process of this torchrun run stopped at step {step} ({reason})"
                         + (f"; {kept}" if kept else ""))


# what gloo and NCCL say when the process at the other end of a collective is gone
PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "NCCL communicator was aborted")


def lost_process(error: Exception) -> bool:
    return isinstance(error, dist.DistError) or any(s in str(error) for s in PEER_GONE)


def _logged(line: str) -> tuple[float, str | None]:
    """The step and split of a metrics.jsonl line; a line the stop cut off (a kill or a full disk
    while it was written) counts as after every checkpoint, so resuming drops it."""
    try:
        record = json.loads(line)
        return record["step"], record.get("split")
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
        return math.inf, None


def process_seed(seed: int, rank: int, *more: int) -> int:
    """The seed of one process of a run: the run's own for the first (a one-process run is
    unchanged), and for another one mixed from (seed, rank, ...), so no process of one seed's run
    draws the stream of another seed's (seed + rank would give --seed 1's first process the
    second one of --seed 0)."""
    if rank == 0 and not more:
        return seed
    import numpy as np

    return int(np.random.SeedSequence([seed % 2**64, rank, *more]).generate_state(1, np.uint64)[0] >> 1)


def _distributed(device: torch.device) -> tuple[int, int]:
    """(rank, world size); joins the process group torchrun describes in the environment."""
    if not dist.is_available():
        return 0, 1
    if not dist.is_initialized() and launch_processes() > 1:
        if device.type == "cuda":  # NCCL's communicator on this process's own GPU
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _plain(value):
    return list(value) if isinstance(value, (tuple, list)) else value


def plot_curves(log: Path, png: Path) -> None:
    """Training and held-out loss against step, from a metrics.jsonl log. A step with no finite
    loss (skipped, NaN, infinity, null) is a red line, as `visualize curves` draws it: the curve
    would otherwise be drawn across it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..viz.curves import broken_steps, finite

    records = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    for split, style in (("train", "-"), ("eval", "o-")):
        points = [(r["step"], r["loss"]) for r in records if r["split"] == split and finite(r.get("loss"))]
        if points:
            ax.plot(*zip(*points), "o-" if len(points) == 1 else style,  # one point: a line would not show
                    label=f"{split} loss", alpha=0.8 if split == "train" else 1.0)
    for n, step in enumerate(broken_steps(records, ["loss"])):
        ax.axvline(step, color="red", alpha=0.6, lw=0.9, label=None if n else "no finite loss")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss")
    ax.set_title(f"training curve: {log.parent.name}".replace("$", r"\$"))  # a '$' in the name is no math
    ax.grid(alpha=0.3)
    if ax.has_data():
        ax.legend()
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)
