"""Data: tokenizers, corpora, example builders. Knows no model."""

from .tokenizer import Tokenizer, load_tokenizer

__all__ = ["Tokenizer", "load_tokenizer"]
