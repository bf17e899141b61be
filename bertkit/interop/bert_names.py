"""BERT's Hugging Face names, without torch: the config keys and parameter-name tables the torch
side (hf_names.py) builds every family's on, and the NumPy Mini-BERT (numpy_ref/hf_io.py, which
must not import torch) reads and writes its checkpoints with. Templates as in hf_names.py.
"""

from __future__ import annotations

Rules = list[tuple[str, str]]  # (Hugging Face name template, ours)

BERT_KEYS = {
    "vocab_size": "vocab_size",
    "hidden_size": "hidden_size",
    "num_hidden_layers": "num_layers",
    "num_attention_heads": "num_heads",
    "intermediate_size": "intermediate_size",
    "hidden_act": "hidden_act",
    "max_position_embeddings": "max_positions",
    "type_vocab_size": "type_vocab_size",
    "layer_norm_eps": "layer_norm_eps",
    "pad_token_id": "pad_token_id",
    "hidden_dropout_prob": "hidden_dropout",
    "attention_probs_dropout_prob": "attention_dropout",
    "classifier_dropout": "classifier_dropout",
    "initializer_range": "initializer_range",
    "tie_word_embeddings": "tie_word_embeddings",
}

# BERT's block, shared by RoBERTa and ELECTRA; `{i}` is the depth.
BERT_BLOCK = [
    ("attention.self.query.{p}", "attn.query.{p}"),
    ("attention.self.key.{p}", "attn.key.{p}"),
    ("attention.self.value.{p}", "attn.value.{p}"),
    ("attention.output.dense.{p}", "attn.out_proj.{p}"),
    ("attention.output.LayerNorm.{p}", "attn_norm.{p}"),
    ("intermediate.dense.{p}", "ffn.up.{p}"),
    ("output.dense.{p}", "ffn.down.{p}"),
    ("output.LayerNorm.{p}", "ffn_norm.{p}"),
]
BERT_EMBEDDINGS = [
    ("embeddings.word_embeddings.weight", "embeddings.word.weight"),
    ("embeddings.position_embeddings.weight", "embeddings.position.weight"),
    ("embeddings.token_type_embeddings.weight", "embeddings.token_type.weight"),
    ("embeddings.LayerNorm.{p}", "embeddings.norm.{p}"),
]


def mlm_rules(prefix: str, dense: str, norm: str, decoder: str, bias: str) -> Rules:
    """A masked-LM head's names under `prefix`: its transform's dense and norm, output bias, decoder."""
    return [(f"{prefix}{dense}.{{p}}", "transform.{p}"), (f"{prefix}{norm}.{{p}}", "norm.{p}"),
            (f"{prefix}{bias}", "bias"), (f"{prefix}{decoder}.weight", "decoder.weight")]


BERT_MLM = mlm_rules("cls.predictions.", "transform.dense", "transform.LayerNorm", "decoder", "bias")
