"""Sentence embeddings: mean of the token vectors over real tokens, then L2-normalized
(Reimers & Gurevych, 2019, sec. 3: MEAN pooling was their best strategy).

Shapes: B batch, T sequence length, H hidden size.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from ..errors import BertkitError


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T, H), (B, T) -> (B, H): the average over positions where the mask is set."""
    weights = attention_mask.to(hidden.dtype).unsqueeze(-1)  # (B, T, 1)
    return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)


@torch.no_grad()
def embed(model, texts: list[str], batch_size: int = 32, max_length: int | None = None,
          normalize: bool = True, progress: bool = False) -> torch.Tensor:
    """(len(texts), H) sentence embeddings from a model that carries its tokenizer."""
    if model.tokenizer is None:
        raise BertkitError("this model has no tokenizer; load one with bertkit.load_tokenizer and set model.tokenizer")
    max_length = min(max_length or model.config.max_positions, model.config.max_positions)
    model.eval()
    # Sort by length so each batch pads little; restore the caller's order at the end.
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    chunks = []
    for start in tqdm(range(0, len(texts), batch_size), disable=not progress, desc="embedding", unit="batch"):
        batch = model.tokenizer([texts[i] for i in order[start:start + batch_size]], max_length=max_length)
        out = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        chunks.append(mean_pool(out.last_hidden_state, batch["attention_mask"]))
    vectors = torch.cat(chunks) if chunks else torch.zeros(0, model.config.hidden_size)
    result = torch.empty_like(vectors)
    result[torch.tensor(order, dtype=torch.long)] = vectors
    return F.normalize(result, dim=-1) if normalize else result
