"""DistilBERT (Sanh et al., 2019): BERT distilled into half the depth.

What differs in the model: no token types and no pooler (sec. 3: "token-type embeddings and the
pooler are removed"), optionally fixed sinusoidal positions (Vaswani et al., 2017, sec. 3.5), and a
classifier with its own ReLU hidden layer. Its main idea is the initialization: the student takes
its embeddings and half of its layers from the teacher ("taking one layer out of two", sec. 3,
"Student initialization"; which ones, below).

Shapes: P positions, H hidden size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import nn

from ..config import EncoderConfig, register_preset
from ..errors import BertkitError
from ..layers import (Embeddings, EncoderModel, FirstTokenHead, SpanHead, TokenClassificationHead,
                      build_encoder, classifier_dropout, standard_head)
from . import Family, register_family

def default_teacher_layers(depth: int) -> tuple[int, ...]:
    """Half of a `depth`-block teacher's blocks (rounded down, at least one), spread evenly from its
    first to its last (each index rounded).
    For 12 blocks this is 0, 2, 4, 7, 9, 11, the layers the released distilbert-base-uncased took
    from bert-base (the extraction script of the DistilBERT authors). Taking "one of two" ([0, 2,
    4, 6, 8, 10]) would drop the last block, whose representations the distillation loss pulls
    the student towards."""
    n = max(depth // 2, 1)
    return (0,) if n == 1 else tuple(round(k * (depth - 1) / (n - 1)) for k in range(n))


DEFAULT_TEACHER_LAYERS = default_teacher_layers(12)


@dataclass(frozen=True)
class DistilBertConfig(EncoderConfig):
    family: str = "distilbert"
    num_layers: int = 6
    type_vocab_size: int = 0
    sinusoidal_positions: bool = False
    qa_dropout: float = 0.1
    classifier_dropout: float | None = 0.2  # DistilBERT's seq_classif_dropout


def student_config(teacher: EncoderConfig, depth: int) -> DistilBertConfig:
    """A student of `depth` blocks in its BERT teacher's shape (Sanh et al., 2019, sec. 3: the
    widths are kept, only the depth halves), with the teacher's dropout and initialization."""
    t = teacher
    return DistilBertConfig(
        vocab_size=t.vocab_size, hidden_size=t.hidden_size, num_layers=depth, num_heads=t.num_heads,
        intermediate_size=t.intermediate_size, hidden_act=t.hidden_act, max_positions=t.max_positions,
        layer_norm_eps=t.layer_norm_eps, pad_token_id=t.pad_token_id, hidden_dropout=t.hidden_dropout,
        attention_dropout=t.attention_dropout, initializer_range=t.initializer_range,
        tie_word_embeddings=t.tie_word_embeddings)  # tied, the teacher's decoder would overwrite its embeddings


def sinusoidal_table(positions: int, dim: int) -> torch.Tensor:
    """(P, H): sin on even, cos on odd dimensions, wavelength 10000^(2i/H) (Vaswani et al., 3.5)."""
    pos = torch.arange(positions, dtype=torch.float64)[:, None]                  # (P, 1)
    rate = torch.pow(10000.0, -2 * (torch.arange(dim) // 2) / dim).double()      # (H,)
    angles = pos * rate[None, :]                                                 # (P, H)
    table = torch.empty(positions, dim, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angles[:, 0::2])
    table[:, 1::2] = torch.cos(angles[:, 1::2])
    return table.float()


def build_backbone(config: DistilBertConfig, with_pooler: bool) -> EncoderModel:
    embeddings = Embeddings(config)
    if config.sinusoidal_positions:
        with torch.no_grad():
            embeddings.position.weight.copy_(sinusoidal_table(config.max_positions, config.hidden_size))
        embeddings.position.weight.requires_grad_(False)
    return EncoderModel(embeddings, build_encoder(config), pooler=None)


def build_head(kind, config, backbone):
    if kind in ("classification", "multiple-choice"):
        return FirstTokenHead(config, act="relu", input_dropout=0.0, hidden_dropout=classifier_dropout(config),
                              outputs=1 if kind == "multiple-choice" else None)
    if kind == "token-classification":
        return TokenClassificationHead(config, dropout=config.hidden_dropout)
    if kind == "qa":
        return SpanHead(config, dropout=config.qa_dropout)
    if kind == "pretraining":
        raise BertkitError("DistilBERT has no pair-prediction head; use head='mlm'")
    return standard_head(kind, config, backbone.embeddings.word)


register_family(Family("distilbert", DistilBertConfig, build_backbone, build_head, bare_has_pooler=False))

register_preset("distilbert-base", DistilBertConfig(),
                "half of BERT's layers, initialized from the teacher and trained to match it; no NSP")


@torch.no_grad()
def copy_from_teacher(student: nn.Module, teacher: nn.Module, layers: Sequence[int] = DEFAULT_TEACHER_LAYERS) -> None:
    """Initialize a DistilBERT student (a model with `.backbone` and `.head`) from a BERT teacher.

    Copies word and position embeddings and the embedding LayerNorm, teacher block `layers[k]` into
    student block k, and the MLM head when both have one. The teacher's segment-A token-type vector
    is added into the student's position table, so for single-segment input the student's
    embedding output equals the teacher's exactly (DistilBERT has no token types)."""
    s, t = student.backbone, teacher.backbone
    if student.config.tie_word_embeddings != teacher.config.tie_word_embeddings:  # one table or two, in both
        raise BertkitError(f"the teacher's tie_word_embeddings is {teacher.config.tie_word_embeddings}, the student's "
                           f"{student.config.tie_word_embeddings}: they must agree for the copy to be the teacher")
    if len(layers) != s.encoder.num_layers:
        raise BertkitError(f"{len(layers)} teacher layers given for a {s.encoder.num_layers}-layer student")
    if not all(0 <= i < t.encoder.num_layers for i in layers):
        raise BertkitError(f"teacher layers {list(layers)} outside 0..{t.encoder.num_layers - 1}")
    s.embeddings.word.weight.copy_(t.embeddings.word.weight)
    position = t.embeddings.position.weight
    if t.embeddings.token_type is not None:
        position = position + t.embeddings.token_type.weight[0]
    s.embeddings.position.weight.copy_(position[: s.embeddings.position.num_embeddings])
    s.embeddings.norm.load_state_dict(t.embeddings.norm.state_dict())
    _copy_blocks_and_head(student, teacher, layers)


def _copy_blocks_and_head(student: nn.Module, teacher: nn.Module, layers: Sequence[int]) -> None:
    """Teacher block `layers[k]` into student block k, and the MLM head when both have one."""
    for k, i in enumerate(layers):
        student.backbone.encoder.layer_for(k).load_state_dict(teacher.backbone.encoder.layer_for(i).state_dict())
    teacher_mlm = {"mlm": teacher.head, "pretraining": getattr(teacher.head, "mlm", None)}.get(teacher.head_kind)
    if student.head_kind == "mlm" and teacher_mlm is not None:
        student.head.load_state_dict(teacher_mlm.state_dict())


@torch.no_grad()
def copy_blocks_from_teacher(student: nn.Module, teacher: nn.Module, layers: Sequence[int]) -> None:
    """Initialize a student of the teacher's own family and widths (DistilRoBERTa: a RoBERTa of
    fewer blocks) from it: the embeddings whole, teacher block `layers[k]` into student block k,
    and the MLM head when both have one."""
    student.backbone.embeddings.load_state_dict(teacher.backbone.embeddings.state_dict())
    _copy_blocks_and_head(student, teacher, layers)
