"""The output object every model returns (names fixed by DESIGN.md's public contract)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class EncoderOutput:
    """Shapes: B batch, T length, H hidden, V vocabulary, C labels, N heads.

    Only non-pad positions are meaningful. Pad positions (attention_mask == 0) hold zeros on the
    default unpadded path (no work is spent on them); with `model.backbone.unpad = False` they
    hold what the padded computation gives there, as in `transformers`.
    """

    last_hidden_state: torch.Tensor                      # (B, T, H); (K, H) with masked_positions
    pooler_output: torch.Tensor | None = None            # (B, H), models with a pooler
    attentions: tuple[torch.Tensor, ...] | None = None   # per layer (B, N, T, T), on request
    hidden_states: tuple[torch.Tensor, ...] | None = None  # embeddings + each layer (B, T, H), on request
    attention_mask: torch.Tensor | None = None           # (B, T) bool, True = real token; None = no mask
    masked_positions: torch.Tensor | None = None         # (B, T) bool: MLM logits only here, (K, V)
    logits: torch.Tensor | None = None                   # MLM (B, T, V); classification (B, C); token (B, T, C)
    pair_logits: torch.Tensor | None = None              # NSP / SOP (B, 2)
    start_logits: torch.Tensor | None = None             # QA (B, T)
    end_logits: torch.Tensor | None = None               # QA (B, T)
