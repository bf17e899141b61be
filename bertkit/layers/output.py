"""The output object every model returns (names fixed by DESIGN.md's public contract)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class EncoderOutput:
    """Shapes: B batch, T length, H hidden, V vocabulary, C labels, N heads.

    Only non-pad positions are meaningful. Pad positions (attention_mask == 0) hold zeros on the
    default unpadded path (no work is spent on them; so do MLM logits and ModernBERT's per-token
    heads' outputs: `real_tokens`); with `model.backbone.unpad = False` they hold what the
    padded computation gives there, as in `transformers`.
    """

    last_hidden_state: torch.Tensor                      # (B, T, H); (K, H) with masked_positions
    pooler_output: torch.Tensor | None = None            # (B, H), models with a pooler
    attentions: tuple[torch.Tensor, ...] | None = None   # per layer (B, N, T, T), on request
    hidden_states: tuple[torch.Tensor, ...] | None = None  # embeddings + each layer (B, T, H), on request
    attention_mask: torch.Tensor | None = None           # (B, T) bool, True = real token; None = no mask
    masked_positions: torch.Tensor | None = None         # (B, T) bool: MLM logits only here, (K, V)
    real_tokens: torch.Tensor | None = None              # (total,) flat positions in B * T of the real tokens,
    #                                                      where the pads were skipped (their states zeros)
    logits: torch.Tensor | None = None                   # MLM (B, T, V); classification (B, C); token (B, T, C)
    pair_logits: torch.Tensor | None = None              # NSP / SOP (B, 2)
    start_logits: torch.Tensor | None = None             # QA (B, T)
    end_logits: torch.Tensor | None = None               # QA (B, T)

    # transformers' ModelOutput access, for code written against it: out[0], out["logits"],
    # out.keys(), out.values(), out.items(), out.get(), len(out), out.to_tuple(). Its tuple holds
    # a head's outputs (a bare model's states), then hidden_states and attentions, those that are
    # not None, in transformers' order; the keys are the same fields (attention_mask and
    # masked_positions, bertkit's own, are attributes).
    def _order(self) -> list[str]:
        head = [n for n in ("logits", "pair_logits", "start_logits", "end_logits") if getattr(self, n) is not None]
        return [n for n in (*(head or ("last_hidden_state", "pooler_output")), "hidden_states", "attentions")
                if getattr(self, n) is not None]

    def to_tuple(self) -> tuple:
        return tuple(getattr(self, n) for n in self._order())

    def keys(self) -> list[str]:
        """The tuple's fields, in its order, as transformers' outputs name them."""
        return self._order()

    def values(self) -> list:
        return list(self.to_tuple())

    def items(self) -> list[tuple[str, object]]:
        return list(zip(self.keys(), self.to_tuple()))

    def get(self, key: str, default=None):
        return getattr(self, key) if key in self.keys() else default

    def __getitem__(self, key):
        if isinstance(key, str):
            if key not in self.keys():
                raise KeyError(key)
            return getattr(self, key)
        return self.to_tuple()[key]

    def __len__(self) -> int:
        return len(self.keys())

    def __contains__(self, key) -> bool:
        return key in self.keys()

    def __iter__(self):
        return iter(self.keys())
