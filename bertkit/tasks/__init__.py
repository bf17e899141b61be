"""Tasks built on an encoder: sentence embeddings (more come with fine-tuning)."""

from .embedding import embed, mean_pool

__all__ = ["embed", "mean_pool"]
