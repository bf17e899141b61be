"""The one mask convention: boolean, True = attend. Built here and nowhere else.

Shapes: B batch, T sequence length.
"""

from __future__ import annotations

import torch

from ..errors import BertkitError


def key_padding_mask(attention_mask: torch.Tensor | None, input_ids: torch.Tensor) -> torch.Tensor | None:
    """Turn a user's (B, T) mask (int 1/0 or bool) into a bool (B, T) mask, True = real token.

    None stays None (every token attends everywhere, the fast path). A sequence whose mask is all
    False would give an undefined softmax; it is treated as all real tokens, so every position of
    such a row holds a finite (but meaningless) vector instead of NaN.
    """
    if attention_mask is None:
        return None
    if attention_mask.shape != input_ids.shape:
        raise BertkitError(
            f"attention_mask has shape {tuple(attention_mask.shape)} but input_ids has {tuple(input_ids.shape)}")
    mask = attention_mask.to(device=input_ids.device, dtype=torch.bool)
    empty = ~mask.any(dim=-1, keepdim=True)  # (B, 1)
    return mask | empty


def attention_mask_4d(mask: torch.Tensor | None) -> torch.Tensor | None:
    """(B, T) key mask -> (B, 1, 1, T), broadcast over heads and query positions."""
    if mask is None:
        return None
    return mask[:, None, None, :]  # (B, 1, 1, T)
