"""Padding removed once, at the embeddings (ModernBERT's unpadding).

Everything in a block except attention works token by token, so a padded batch (B, T, H) can
run as its real tokens only, (total, H): the projections and feed-forward layers, most of the
work, no longer compute on padding. Attention pads the tokens back around itself, so each
sequence still sees only its own keys.

Shapes: B batch, T padded length, total = number of real tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Packing:
    index: torch.Tensor  # (total,) positions of the real tokens in the flattened (B * T) batch
    batch: int
    length: int
    lengths: tuple[int, ...]  # real tokens per sequence, in batch order

    @classmethod
    def from_mask(cls, keys: torch.Tensor) -> "Packing":
        """keys: (B, T) bool, True = real token (anywhere: left or right padding both work)."""
        B, T = keys.shape
        return cls(keys.reshape(-1).nonzero().squeeze(1), B, T, tuple(keys.sum(1).tolist()))

    def unpad(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, ...) -> (total, ...)"""
        return x.reshape(self.batch * self.length, *x.shape[2:]).index_select(0, self.index)

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        """(total, ...) -> (B, T, ...), zeros at the padding."""
        out = x.new_zeros(self.batch * self.length, *x.shape[1:])
        out.index_copy_(0, self.index, x)
        return out.view(self.batch, self.length, *x.shape[1:])
