"""AdamW parameter groups (the learning-rate schedules live in bertkit/schedules.py, torch-free
for the NumPy Mini-BERT, and are re-exported here).

Weight decay (Loshchilov & Hutter, 2019) applies to weight matrices only: biases, LayerNorm
gains and (as in BERT's and RoBERTa's recipes) nothing else of rank < 2 is decayed.
"""

from __future__ import annotations

from torch import nn

from ..schedules import SCHEDULES, lr_factor  # noqa: F401  (re-exported: train.lr_factor)


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
