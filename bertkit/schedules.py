"""Learning-rate schedules, shared by the torch trainer (train/) and the NumPy one (numpy_ref/);
plain Python, no torch."""

from __future__ import annotations

import math

from .config import check_field_types
from .errors import BertkitError

SCHEDULES = ("linear", "cosine", "constant")


def lr_factor(progress: float, warmup: float, schedule: str) -> float:
    """Multiplier of the peak learning rate at `progress` in [0, 1] of training (steps done /
    total steps, or seconds used / time budget): linear warm-up over the first `warmup` fraction
    (BERT sec. A.2), then linear or cosine decay to zero, or constant."""
    if schedule not in SCHEDULES:
        raise BertkitError(f"unknown schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")
    progress = min(max(progress, 0.0), 1.0)
    if warmup > 0 and progress < warmup:
        return progress / warmup
    if schedule == "constant":
        return 1.0
    rest = (progress - warmup) / max(1.0 - warmup, 1e-12)  # 0 -> 1 after warm-up
    return 1.0 - rest if schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * rest))


def scheduled_factor(settings, step: int, elapsed: float) -> float:
    """lr_factor for a trainer `step` optimizer steps and `elapsed` seconds into a run of
    `settings` (steps, time_budget, warmup, schedule). Progress is the fraction of steps or of
    the budget done, with both the larger, so a run that will end by its step count first still
    decays to zero. A run counted in steps warms up over ceil(warmup * steps) whole steps, as
    transformers' Trainer does (so a short run reaches the peak, and the two schedules agree
    step for step)."""
    done = [step / settings.steps] if settings.steps is not None else []
    if settings.time_budget is not None:
        done.append(elapsed / settings.time_budget)
    warmup = settings.warmup
    if settings.time_budget is None:
        warmup = math.ceil(warmup * settings.steps) / settings.steps
    return lr_factor(max(done), warmup, settings.schedule)


def check_seed(seed) -> None:
    """A seed torch, NumPy and Python's random all take: a whole number in [0, 2**63)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2 ** 63:
        raise BertkitError(f"seed must be a whole number in [0, 2**63), got {seed!r}")


def check_training(settings) -> None:
    """The checks both trainers' TrainSettings run on construction (the fields they share:
    steps, time_budget, schedule, warmup, accumulation and the optimizer's). A negative clip
    norm or weight decay would not fail: it would scale the update the wrong way. Each field's
    type first (steps="3" was a TypeError from a comparison)."""
    check_field_types(settings)
    betas = settings.betas  # (its annotation, a tuple of two, is more than the type check reads)
    if not (isinstance(betas, (tuple, list)) and len(betas) == 2
            and all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in betas)):
        raise BertkitError(f"betas must be two numbers (Adam's beta1, beta2), got {betas!r}")
    if isinstance(betas, list):  # (JSON's; a tuple keeps the frozen settings hashable)
        object.__setattr__(settings, "betas", tuple(betas))
    if settings.steps is None and settings.time_budget is None:
        raise BertkitError("give a number of steps or a time budget")
    if settings.steps is not None and settings.steps < 1:
        raise BertkitError(f"steps must be at least 1, got {settings.steps}")
    if settings.time_budget is not None and settings.time_budget <= 0:
        raise BertkitError(f"time budget must be positive, got {settings.time_budget}")
    if settings.schedule not in SCHEDULES:
        raise BertkitError(f"unknown schedule {settings.schedule!r}; choose one of {', '.join(SCHEDULES)}")
    if settings.accumulation < 1:
        raise BertkitError(f"accumulation must be at least 1, got {settings.accumulation}")
    if not 0 <= settings.warmup < 1:
        raise BertkitError(f"warmup is a fraction of training in [0, 1), got {settings.warmup}")
    if not 0 <= settings.lr < math.inf:  # 0 keeps the initial weights, which a test or a baseline may want
        raise BertkitError(f"lr must be a finite number >= 0, got {settings.lr}")
    if not 0 <= settings.weight_decay < math.inf:
        raise BertkitError(f"weight decay must be a finite number >= 0, got {settings.weight_decay}")
    check_seed(settings.seed)
    if settings.clip_norm is not None and not settings.clip_norm > 0:
        raise BertkitError(f"clip norm must be positive (or none), got {settings.clip_norm}")
    if not (all(0 <= b < 1 for b in settings.betas) and settings.eps > 0):
        raise BertkitError(f"Adam's betas must lie in [0, 1) and eps be positive, got {settings.betas}, {settings.eps}")
