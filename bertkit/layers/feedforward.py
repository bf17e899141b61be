"""Position-wise feed-forward network: up-projection, activation, down-projection
(Vaswani et al., 2017, sec. 3.3). Shapes: (B, T, H) -> (B, T, I) -> (B, T, H)."""

from __future__ import annotations

import torch
from torch import nn

from ..config import EncoderConfig
from .activations import activation, activation_in_place


class FeedForward(nn.Module):
    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.up = nn.Linear(config.hidden_size, config.intermediate_size)
        self.act = activation(config.hidden_act)
        self.act_in_place = activation_in_place(config.hidden_act)
        self.down = nn.Linear(config.intermediate_size, config.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.up(x)  # (B, T, I)
        if self.act_in_place is not None and not h.requires_grad:
            h = self.act_in_place(h)  # nothing records h for a backward pass: reuse its memory
        else:
            h = self.act(h)
        return self.down(h)
