"""ELECTRA (Clark et al., 2020): pre-train a discriminator to spot replaced tokens instead of
predicting masked ones, so every position, not only the 15% masked, gives a training signal
(sec. 2, replaced token detection).

A small MLM generator fills the masked positions; the discriminator labels each token original or
replaced. The two share token and position embeddings (sec. 3.2, "weight sharing"), which may be
narrower than the discriminator (embedding size E, projected to hidden size H, as in ALBERT). After
pre-training the generator is thrown away and the discriminator is the model.

Shapes: B batch, T sequence length, H hidden size, E embedding size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..config import EncoderConfig, get_preset, register_preset
from ..errors import BertkitError
from ..layers import (Embeddings, EncoderModel, EncoderOutput, FirstTokenHead, Head, MLMHead, build_encoder,
                      classifier_dropout, standard_head)
from ..layers.activations import activation
from . import Family, register_family


@dataclass(frozen=True)
class ElectraConfig(EncoderConfig):
    family: str = "electra"
    embedding_size: int = 128
    # The multiple-choice head's "sequence summary": of the first token (transformers also
    # offers the last position and the mean of all, padding included, which bertkit refuses),
    # through a dense layer or none, and an activation ("linear": none), with dropout before and
    # after (transformers' summary_first_dropout / summary_last_dropout).
    summary_type: str = "first"
    summary_dense: bool = True
    summary_act: str = "gelu"
    summary_first_dropout: float = 0.0
    summary_last_dropout: float = 0.1

    ACTIVATION_FIELDS = ("hidden_act", "summary_act")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.embedding_size <= 0:
            raise BertkitError(f"config: embedding_size must be positive, got {self.embedding_size}")
        for name in ("summary_first_dropout", "summary_last_dropout"):
            if not 0 <= getattr(self, name) < 1:
                raise BertkitError(f"config: {name} must be in [0, 1), got {getattr(self, name)}")


class ReplacedTokenHead(Head):
    """The discriminator (sec. 2): dense + activation + one logit per token, > 0 meaning
    "replaced". logits: (B, T). It reads only the encoder's last states, so any family can put
    it on top (DeBERTa-v3's discriminator does, models/deberta.py)."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = activation(config.hidden_act)
        self.score = nn.Linear(config.hidden_size, 1)

    def forward(self, out: EncoderOutput) -> dict[str, torch.Tensor]:
        x = self.act(self.dense(out.last_hidden_state))  # (B, T, H)
        return {"logits": self.score(x).squeeze(-1)}     # (B, T)


def build_backbone(config: ElectraConfig, with_pooler: bool) -> EncoderModel:
    E, H = config.embedding_size, config.hidden_size
    projection = nn.Linear(E, H) if E != H else None
    return EncoderModel(Embeddings(config, dim=E), build_encoder(config), pooler=None, projection=projection)


def build_head(kind, config, backbone):
    word = backbone.embeddings.word
    # transformers' ELECTRA generator and classification heads apply GELU whatever hidden_act
    # says (so did the released TensorFlow code); we match it for identical outputs.
    if kind == "mlm":
        return MLMHead(config, word, act="gelu")
    if kind == "pretraining":
        return ReplacedTokenHead(config)
    p = classifier_dropout(config)
    if kind == "classification":
        return FirstTokenHead(config, act="gelu", input_dropout=p, hidden_dropout=p)
    if kind == "multiple-choice":  # transformers' "sequence summary", then one score
        if config.summary_type != "first":
            raise BertkitError(f"config: summary_type {config.summary_type!r} is not supported; the multiple-choice "
                               "head reads the first token ('first'), not positions that may be padding")
        return FirstTokenHead(config, act=config.summary_act, input_dropout=config.summary_first_dropout,
                              hidden_dropout=config.summary_last_dropout, outputs=1, dense=config.summary_dense)
    return standard_head(kind, config, word)


register_family(Family("electra", ElectraConfig, build_backbone, build_head, bare_has_pooler=False))


# The config fields that describe the embedding module (its tables, their normalization, padding row)
SHARED_EMBEDDING_FIELDS = ("vocab_size", "embedding_size", "max_positions", "type_vocab_size", "layer_norm_eps",
                           "pad_token_id")


def share_embeddings(generator: nn.Module, discriminator: nn.Module) -> None:
    """Make a generator use the discriminator's embedding module (token, position and segment
    tables and their LayerNorm), and tie its MLM decoder to those word embeddings (sec. 3.2)."""
    g, d = generator.backbone.embeddings, discriminator.backbone.embeddings
    if g.word.weight.shape != d.word.weight.shape:
        raise BertkitError(f"generator embeddings {tuple(g.word.weight.shape)} and discriminator "
                           f"embeddings {tuple(d.word.weight.shape)} differ; they cannot be shared")
    # the generator's config describes the shared module when it is saved: it must say what it is
    for name in SHARED_EMBEDDING_FIELDS:
        mine, theirs = getattr(generator.config, name), getattr(discriminator.config, name)
        if mine != theirs:
            raise BertkitError(f"generator {name} {mine} and discriminator {name} {theirs} differ; the shared "
                               "embeddings are the discriminator's, so the generator's saved config would not "
                               "describe them")
    generator.backbone.embeddings = d
    d.shared = True  # (one model's resize_token_embeddings would split the pair: it refuses)
    if generator.head is not None and hasattr(generator.head, "decoder") and generator.config.tie_word_embeddings:
        generator.head.decoder.weight = d.word.weight


IDEA = "replaced-token detection: a discriminator learns from every token, fed by a small generator"
# Sizes of Google's released checkpoints (google/electra-{small,base,large}-{discriminator,
# generator} configs; Clark et al. 2020, Table 6). Every released generator has hidden size 256,
# 4 heads and FFN 1024 with the discriminator's depth and embedding size: 1/3 of base's width,
# 1/4 of large's; for small it is as wide as the discriminator, although Table 6 lists 1/4.
_SMALL = ElectraConfig(embedding_size=128, hidden_size=256, num_heads=4, intermediate_size=1024)
register_preset("electra-small", _SMALL, IDEA)
register_preset("electra-base", _SMALL.replace(embedding_size=768, hidden_size=768, num_heads=12,
                                               intermediate_size=3072), IDEA)
register_preset("electra-large", _SMALL.replace(embedding_size=1024, hidden_size=1024, num_layers=24,
                                                num_heads=16, intermediate_size=4096), IDEA)
GEN = "the MLM generator that feeds electra-{}, sharing its embeddings"
register_preset("electra-small-generator", _SMALL, GEN.format("small"))
register_preset("electra-base-generator", _SMALL.replace(embedding_size=768), GEN.format("base"))
register_preset("electra-large-generator", _SMALL.replace(embedding_size=1024, num_layers=24), GEN.format("large"))
GENERATOR_FOR = {"electra-small": "electra-small-generator", "electra-base": "electra-base-generator",
                 "electra-large": "electra-large-generator"}


def generator_config(preset: str, disc: ElectraConfig, overrides: dict) -> ElectraConfig:
    """ELECTRA's generator for discriminator config `disc` (the preset's, with `overrides`): the
    preset generator's width as a fraction of its discriminator's (1/3 for base, 1/4 for large,
    1 for small, as Google released them; Clark et al., 2020, sec. 3.2 find 1/4 to 1/2 best),
    applied to `disc`'s: heads = that fraction of disc's heads (at least one), hidden = that
    fraction of disc's hidden size rounded to a multiple of the heads, the FFN scaled alike.
    Overriding the discriminator's width so keeps the generator smaller; the other overrides
    (depth, vocabulary, embedding size, dropout ...) apply to both. Without overrides it is the
    preset generator."""
    full, small = get_preset(preset).config, get_preset(GENERATOR_FOR[preset]).config
    fraction = small.hidden_size / full.hidden_size
    heads = max(1, round(disc.num_heads * fraction))
    hidden = heads * max(1, round(disc.hidden_size * fraction / heads))
    return small.replace(**overrides).replace(num_heads=heads, hidden_size=hidden,
                                              intermediate_size=round(disc.intermediate_size * hidden / disc.hidden_size))
