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


def window_mask(mask: torch.Tensor | None, queries: torch.Tensor, keys: torch.Tensor,
                window: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Restrict a (B, 1, 1 or Tq, Tk) mask (or None) to a bidirectional sliding window: query i
    sees key j only if |position_i - position_j| <= window (Longformer's local attention, as in
    ModernBERT's local layers). queries: (Tq,) or (B, Tq) positions; keys: (Tk,) or (B, Tk).
    Returns the (B or 1, 1, Tq, Tk) bool mask and the (B or 1, 1, Tq, 1) bool `stranded`
    queries, which see no key at all (a padding query farther than the window from every real
    token). A stranded query is given every key, so that its softmax is defined: a NaN there
    would reach real rows as 0 * NaN in the next layer's values or in gradients. The attention
    then sets its output to zero, which is what torch's SDPA gives a query with no key, and so
    what transformers gives it."""
    delta = queries[..., :, None] - keys[..., None, :]                   # (B or 1, Tq, Tk)
    near = delta.abs() <= window
    near = near[:, None] if near.dim() == 3 else near[None, None]        # (B or 1, 1, Tq, Tk)
    allowed = near if mask is None else near & mask
    stranded = ~allowed.any(-1, keepdim=True)                            # (B or 1, 1, Tq, 1)
    return allowed | stranded, stranded
