"""One transformer block and the encoder stack.

Post-LN (BERT): x = LN(x + Drop(Attn(x))); x = LN(x + Drop(FFN(x))).
Pre-LN (Xiong et al., 2020): x = x + Drop(Attn(LN(x))); x = x + Drop(FFN(LN(x))), and the stack
ends with one more LayerNorm.

Shapes: B batch, T sequence length, H hidden size.
"""

from __future__ import annotations

import torch
from torch import nn

from ..config import EncoderConfig
from .attention import SelfAttention
from .feedforward import FeedForward


class TransformerBlock(nn.Module):
    """Attention and feed-forward are passed in, so a family swaps either without a new block."""

    def __init__(self, config: EncoderConfig, attn: nn.Module | None = None, ffn: nn.Module | None = None):
        super().__init__()
        self.norm_first = config.norm_first
        self.attn = attn if attn is not None else SelfAttention(config)
        self.attn_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.ffn = ffn if ffn is not None else FeedForward(config)
        self.ffn_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, need_weights: bool = False,
                **context) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x: (B, T, H); mask: (B, 1, 1, T) bool; `context` goes to the attention's score hook.
        Returns (B, T, H) and optional (B, N, T, T)."""
        if self.norm_first:
            a, probs = self.attn(self.attn_norm(x), mask, need_weights, **context)
            x = x + self.dropout(a)
            x = x + self.dropout(self.ffn(self.ffn_norm(x)))
        else:
            a, probs = self.attn(x, mask, need_weights, **context)
            x = self.attn_norm(x + self.dropout(a))
            x = self.ffn_norm(x + self.dropout(self.ffn(x)))
        return x, probs


class Encoder(nn.Module):
    """A stack of blocks, with three hooks for families:
    `layer_for(i)`: which block runs at depth i (ALBERT reuses shared blocks);
    `context(x, mask)`: extra inputs computed once per forward for every attention layer
    (DeBERTa's relative positions and their embeddings);
    `after_layer(i, x, inputs, mask)`: a change to the stream after block i (DeBERTa's convolution)."""

    def __init__(self, blocks: list[nn.Module], num_layers: int | None = None,
                 final_norm: nn.Module | None = None):
        super().__init__()
        self.layers = nn.ModuleList(blocks)
        self.num_layers = num_layers if num_layers is not None else len(blocks)
        self.final_norm = final_norm

    def layer_for(self, i: int) -> nn.Module:
        return self.layers[i]

    def context(self, x: torch.Tensor, mask: torch.Tensor | None) -> dict:
        return {}

    def after_layer(self, i: int, x: torch.Tensor, inputs: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        return x

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                output_attentions: bool = False) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """x: (B, T, H); mask: (B, 1, 1, T) bool or None."""
        attentions = []
        inputs, context = x, self.context(x, mask)
        for i in range(self.num_layers):
            x, probs = self.layer_for(i)(x, mask, output_attentions, **context)
            x = self.after_layer(i, x, inputs, mask)
            if output_attentions:
                attentions.append(probs)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x, tuple(attentions)


def build_encoder(config: EncoderConfig) -> Encoder:
    """The standard stack: num_layers independent blocks (plus a final LN for pre-LN)."""
    final_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps) if config.norm_first else None
    return Encoder([TransformerBlock(config) for _ in range(config.num_layers)], final_norm=final_norm)
