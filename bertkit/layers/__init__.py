"""Shared blocks: no family and no foreign (Hugging Face) names live here."""

from .activations import activation
from .attention import SelfAttention
from .backbone import EncoderModel, Pooler
from .block import Encoder, TransformerBlock, build_encoder
from .embeddings import Embeddings
from .feedforward import FeedForward
from .init import init_weights
from .heads import (FirstTokenHead, Head, at_masked, MLMHead, PairHead, PreTrainingHead, SequenceClassificationHead,
                    SpanHead, TokenClassificationHead, classifier_dropout, standard_head)
from .masks import attention_mask_4d, key_padding_mask
from .output import EncoderOutput

__all__ = [
    "activation", "SelfAttention", "EncoderModel", "Pooler", "Encoder", "TransformerBlock",
    "build_encoder", "Embeddings", "FeedForward", "MLMHead", "PairHead", "PreTrainingHead",
    "SequenceClassificationHead", "SpanHead", "FirstTokenHead", "Head", "at_masked",
    "classifier_dropout", "TokenClassificationHead", "standard_head", "attention_mask_4d",
    "key_padding_mask", "EncoderOutput", "init_weights",
]
