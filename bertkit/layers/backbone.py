"""The bare encoder: embeddings -> block stack -> optional pooler.

Shapes: B batch, T sequence length, H hidden size.
"""

from __future__ import annotations

import torch
from torch import nn

from .block import Encoder
from .masks import attention_mask_4d, key_padding_mask
from .packing import Packing
from .output import EncoderOutput


class Pooler(nn.Module):
    """BERT's pooler (sec. 3): dense + tanh on the first ([CLS]) token, feeding sentence-level heads."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(x[:, 0]))  # (B, H)


class EncoderModel(nn.Module):
    """`projection` maps embeddings of width E to the hidden width H when they differ (the
    factorized embeddings of ALBERT and ELECTRA)."""

    def __init__(self, embeddings: nn.Module, encoder: Encoder, pooler: nn.Module | None = None,
                 projection: nn.Module | None = None):
        super().__init__()
        self.embeddings = embeddings
        self.projection = projection
        self.encoder = encoder
        self.pooler = pooler
        # Run the blocks on real tokens only (packing.py); False keeps the padded computation.
        self.unpad = True

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, output_attentions: bool = False,
                output_hidden_states: bool = False) -> EncoderOutput:
        keys = key_padding_mask(attention_mask, input_ids)  # (B, T) bool or None
        x = self.embeddings(input_ids, token_type_ids)      # (B, T, E)
        if self.projection is not None:
            x = self.projection(x)                          # (B, T, H)
        packing = Packing.from_mask(keys) if self.unpad and keys is not None and not keys.all() else None
        if packing is not None:
            x = packing.unpad(x)                            # (total, H)
        x, attentions, states = self.encoder(x, attention_mask_4d(keys), output_attentions, packing,
                                             output_hidden_states)
        if packing is not None:
            x, states = packing.pad(x), tuple(packing.pad(s) for s in states)  # (B, T, H)
        return EncoderOutput(
            last_hidden_state=x,
            pooler_output=self.pooler(x) if self.pooler is not None else None,
            attentions=attentions if output_attentions else None,
            hidden_states=states if output_hidden_states else None,
            attention_mask=keys,
        )
