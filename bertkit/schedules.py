"""Learning-rate schedules, shared by the torch trainer (train/) and the NumPy one (numpy_ref/);
plain Python, no torch."""

from __future__ import annotations

import math

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
