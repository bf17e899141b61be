"""AdamW parameter groups and learning-rate schedules.

Weight decay (Loshchilov & Hutter, 2019) applies to weight matrices only: biases, LayerNorm
gains and (as in BERT's and RoBERTa's recipes) nothing else of rank < 2 is decayed.
"""

from __future__ import annotations

import math

from torch import nn

from ..errors import BertkitError

SCHEDULES = ("linear", "cosine", "constant")


def param_groups(module: nn.Module, weight_decay: float) -> list[dict]:
    """Two AdamW groups: decayed matrices, undecayed biases and norm gains. A parameter shared by
    two modules (tied embeddings, ELECTRA's shared table) appears once."""
    decay, no_decay, seen = [], [], set()
    for param in module.parameters():
        if not param.requires_grad or id(param) in seen:
            continue
        seen.add(id(param))
        (decay if param.dim() >= 2 else no_decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def lr_factor(progress: float, warmup: float, schedule: str) -> float:
    """Multiplier of the peak learning rate at `progress` in [0, 1] of training (steps done /
    total steps, or seconds used / time budget): linear warm-up over the first `warmup` fraction,
    then linear or cosine decay to zero, or constant."""
    if schedule not in SCHEDULES:
        raise BertkitError(f"unknown schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")
    progress = min(max(progress, 0.0), 1.0)
    if warmup > 0 and progress < warmup:
        return progress / warmup
    if schedule == "constant":
        return 1.0
    rest = (progress - warmup) / max(1.0 - warmup, 1e-12)  # 0 -> 1 after warm-up
    return 1.0 - rest if schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * rest))
