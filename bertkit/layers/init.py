"""Weight initialization shared by the family: BERT's truncated-normal-like N(0, 0.02)."""

from __future__ import annotations

import torch
from torch import nn


@torch.no_grad()
def init_weights(module: nn.Module, std: float) -> None:
    """Linear/embedding weights ~ N(0, std), biases 0, LayerNorm 1/0, padding row 0 (BERT's
    released initializer, modeling.py `create_initializer`). Frozen embeddings (requires_grad
    False, e.g. DistilBERT's sinusoidal positions) keep the values they were built with.
    A module with an `initialize(std)` method then applies its family's own scheme on top
    (ModernBERT's scaled truncated normals, models/modern.py)."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            m.weight.normal_(0.0, std)
            if m.bias is not None:
                m.bias.zero_()
        elif isinstance(m, nn.Embedding) and m.weight.requires_grad:
            m.weight.normal_(0.0, std)
            if m.padding_idx is not None:
                m.weight[m.padding_idx].zero_()
        elif isinstance(m, nn.LayerNorm):
            m.weight.fill_(1.0)
            if m.bias is not None:  # LayerNorm(bias=False): ModernBERT's
                m.bias.zero_()
    for m in module.modules():
        if callable(getattr(m, "initialize", None)):
            m.initialize(std)
