"""Sentence embeddings: mean of the token vectors over real tokens (Reimers & Gurevych, 2019,
sec. 3: MEAN pooling was their best strategy) or the first token's vector (CLS, as BERT's
classifier reads it), then L2-normalized; and cosine search of a corpus for the nearest texts.

Shapes: B batch, T sequence length, H hidden size.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from ..errors import BertkitError
from .base import length_batches, serving


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T, H), (B, T) -> (B, H): the average over positions where the mask is set."""
    weights = attention_mask.to(hidden.dtype).unsqueeze(-1)  # (B, T, 1)
    return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)


POOLING = ("mean", "cls")


@torch.no_grad()
def embed(model, texts: list[str], batch_size: int = 32, max_length: int | None = None,
          normalize: bool = True, progress: bool = False, pooling: str = "mean", bf16: bool = False) -> torch.Tensor:
    """(len(texts), H) float32 sentence embeddings from a model that carries its tokenizer;
    `bf16` runs the model under autocast to bf16 (faster where the hardware has bf16, to about
    two or three significant digits)."""
    if pooling not in POOLING:
        raise BertkitError(f"unknown pooling {pooling!r}; choose one of {', '.join(POOLING)}")
    if batch_size < 1:
        raise BertkitError(f"batch size must be at least 1, got {batch_size}")
    if model.tokenizer is None:
        raise BertkitError("this model has no tokenizer; load one with bertkit.load_tokenizer and set model.tokenizer")
    max_length = min(max_length or model.config.max_positions, model.config.max_positions)
    model.eval()
    device = next(model.parameters()).device  # the tokenizer gives CPU tensors
    # Batches of similar length pad little; the caller's order is restored at the end.
    batches, chunks = length_batches([len(text) for text in texts], batch_size), []
    with serving(model, len(batches), bf16):
        for batch_of in tqdm(batches, disable=not progress, desc="embedding", unit="batch"):
            batch = model.tokenizer([texts[i] for i in batch_of], max_length=max_length)
            ids, mask, types = (batch[k].to(device) for k in ("input_ids", "attention_mask", "token_type_ids"))
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                # the encoder alone: a head's work (an MLM head's vocabulary projection of every
                # token) would be thrown away, and a multiple-choice head wants (B, C, T) inputs
                hidden = model.backbone(ids, mask, types).last_hidden_state.float()
            chunks.append((mean_pool(hidden, mask) if pooling == "mean" else hidden[:, 0]).cpu())
    vectors = torch.cat(chunks) if chunks else torch.zeros(0, model.config.hidden_size)
    result = torch.empty_like(vectors)
    result[torch.tensor([i for batch_of in batches for i in batch_of], dtype=torch.long)] = vectors
    return F.normalize(result, dim=-1) if normalize else result


def search(model, queries: list[str], corpus: list[str], top_k: int = 5, **embedding) -> list[list[dict]]:
    """For each query, the `top_k` corpus texts by cosine similarity of their embeddings, best
    first: [{"index", "text", "score"}]. `embedding` goes to embed() (pooling, max_length, ...)."""
    if top_k < 1:
        raise BertkitError(f"top_k must be at least 1, got {top_k}")
    if not corpus:
        raise BertkitError("the corpus to search is empty")
    embedding["normalize"] = True  # cosine = dot product of unit vectors
    q, c = embed(model, queries, **embedding), embed(model, corpus, **embedding)
    best = (q @ c.T).topk(min(top_k, len(corpus)), dim=1)
    return [[{"index": i, "text": corpus[i], "score": round(v, 6)} for v, i in zip(vs, ix)]
            for vs, ix in zip(best.values.tolist(), best.indices.tolist())]
