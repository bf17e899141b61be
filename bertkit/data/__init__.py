"""Data: tokenizers, corpora, the token cache, example builders and masking collators.
Knows no model: the pipeline ends in plain tensors (see pipeline.py)."""

from .builders import Batch, BuildStats, ExampleSettings, build_examples
from .cache import CacheSettings, TokenizedCorpus, cache_root, tokenize_corpus
from .collators import ALBERT_MASKING, ELECTRA_MASKING, MaskingCollator, MaskingSettings
from .corpora import DataWarning, Record, Splits, builtin, open_corpus, split_of
from .pipeline import PipelineSettings, PretrainingData, default_layout, default_masking, pretraining_data
from .tokenizer import Frame, Tokenizer, check_vocab_fits, load_tokenizer
from .trainers import TokenizerSettings, train_tokenizer

__all__ = ["ALBERT_MASKING", "Batch", "BuildStats", "CacheSettings", "DataWarning", "ELECTRA_MASKING",
           "ExampleSettings", "Frame", "MaskingCollator", "MaskingSettings", "PipelineSettings",
           "PretrainingData", "Record", "Splits", "TokenizedCorpus", "Tokenizer", "TokenizerSettings",
           "build_examples", "builtin", "cache_root", "check_vocab_fits", "default_layout",
           "default_masking", "load_tokenizer", "open_corpus", "pretraining_data", "split_of",
           "tokenize_corpus", "train_tokenizer"]
