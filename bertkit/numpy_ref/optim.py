"""AdamW, gradient-norm clipping and the learning-rate schedule, on dicts of NumPy arrays.

Each follows the torch side's definition step for step (torch.optim.AdamW, clip_grad_norm_,
bertkit.schedules.lr_factor), so a NumPy run and a torch run from the same weights and batches
trace the same loss curve (tests/test_numpy_ref_train.py).
"""

from __future__ import annotations

import math

import numpy as np

from ..schedules import SCHEDULES, lr_factor  # noqa: F401  (the schedule both trainers share)


class AdamW:
    """Adam (Kingma & Ba, 2015, Algorithm 1) with decoupled weight decay (Loshchilov & Hutter,
    2019, Algorithm 2). Per parameter p with gradient g at step t:
        p <- p * (1 - lr * wd)                           (matrices only; see below)
        m <- b1 m + (1 - b1) g;   v <- b2 v + (1 - b2) g^2
        p <- p - lr / (1 - b1^t) * m / (sqrt(v / (1 - b2^t)) + eps)
    Decay applies to parameters of rank >= 2 (weight matrices and embedding tables); biases and
    LayerNorm gains are not decayed, as in BERT's and RoBERTa's recipes and the torch trainer."""

    def __init__(self, params: dict[str, np.ndarray], lr: float = 1e-3, betas=(0.9, 0.98), eps: float = 1e-6,
                 weight_decay: float = 0.01):
        self.params, self.lr, self.betas, self.eps, self.weight_decay = params, lr, betas, eps, weight_decay
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}
        self.t = 0

    def step(self, grads: dict[str, np.ndarray]) -> None:
        self.t += 1
        b1, b2 = self.betas
        step_size = self.lr / (1 - b1 ** self.t)
        root_correction = math.sqrt(1 - b2 ** self.t)
        for name, p in self.params.items():
            g, m, v = grads[name], self.m[name], self.v[name]
            if p.ndim >= 2 and self.weight_decay:
                p *= 1 - self.lr * self.weight_decay
            m *= b1
            m += (1 - b1) * g
            v *= b2
            v += (1 - b2) * g * g
            denom = np.sqrt(v)
            denom /= root_correction
            denom += self.eps
            p -= step_size * m / denom


def clip_grad_norm(grads: dict[str, np.ndarray], max_norm: float) -> float:
    """Scale all gradients together so their global L2 norm is at most `max_norm` (Pascanu et
    al., 2013); returns the norm before clipping. The 1e-6 matches torch's clip_grad_norm_."""
    total = math.sqrt(sum(float(np.vdot(g, g)) for g in grads.values()))
    coef = max_norm / (total + 1e-6)
    if coef < 1.0:
        for g in grads.values():
            g *= coef
    return total
