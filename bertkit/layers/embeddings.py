"""Input embeddings: word + position + token type, then LayerNorm and dropout (BERT sec. 3, Fig. 2).

Shapes: B batch, T sequence length, H hidden size.
"""

from __future__ import annotations

import torch
from torch import nn

from ..config import EncoderConfig
from ..errors import BertkitError
from .dropout import Dropout


class Embeddings(nn.Module):
    """Learned absolute positions. Families change where positions come from by overriding
    `position_ids` (RoBERTa counts from the padding index)."""

    def __init__(self, config: EncoderConfig, dim: int | None = None):
        super().__init__()
        dim = dim or config.hidden_size
        self.word = nn.Embedding(config.vocab_size, dim, padding_idx=config.pad_token_id)
        self.position = nn.Embedding(config.max_positions, dim)
        self.token_type = nn.Embedding(config.type_vocab_size, dim) if config.type_vocab_size else None
        self.norm = nn.LayerNorm(dim, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout)

    @property
    def max_length(self) -> int:
        """The longest sequence the position table covers."""
        return self.position.num_embeddings

    def position_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return torch.arange(input_ids.shape[1], device=input_ids.device)[None, :]  # (1, T)

    def check_length(self, input_ids: torch.Tensor) -> None:
        """Refuse input whose positions the table lacks (the families numbering padding apart check
        the real tokens)."""
        if input_ids.shape[1] > self.max_length:
            raise BertkitError(f"sequence length {input_ids.shape[1]} exceeds the model's maximum of "
                               f"{self.max_length} tokens")

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                words: torch.Tensor | None = None, positions: torch.Tensor | None = None) -> torch.Tensor:
        """`words` (B, T, E): word vectors to use instead of looking input_ids up (inputs_embeds).
        `positions` (B, T) or (1, T): the rows of the position table to add, in place of the
        family's own numbering (position_ids; the caller checked they fit the table)."""
        if positions is None:
            self.check_length(input_ids)
        words = self.word(input_ids) if words is None else words  # (B, T, H)
        x = words + self.position(self.position_ids(input_ids) if positions is None else positions)  # (B, T, H)
        if self.token_type is not None:
            if token_type_ids is None:
                x = x + self.token_type.weight[0]  # every token is segment A
            else:
                x = x + self.token_type(token_type_ids)
        return self.dropout(self.norm(x))
