"""ALBERT (Lan et al., 2020): two ideas to cut BERT's parameters, plus a better pair task.

1. Factorized embedding (sec. 3.1): tokens are embedded in a small space E and projected to the
   hidden size H, so the vocabulary costs V*E + E*H instead of V*H.
2. Cross-layer parameter sharing (sec. 3.1): the stack reuses a few blocks. As Hugging Face
   configs describe it, `num_hidden_groups` groups of `inner_group_num` blocks each; depth i runs
   group int(i / (L / groups)). `albert-base` is one block applied 12 times.
3. Sentence-order prediction (sec. 3.1): the pair head predicts whether two segments are swapped
   (the same head as NSP; the difference is in the data).

Shapes: B batch, T sequence length, H hidden size, E embedding size.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from ..config import EncoderConfig, register_preset
from ..errors import BertkitError
from ..layers import (Embeddings, Encoder, EncoderModel, MLMHead, PairHead, Pooler, PreTrainingHead,
                      TransformerBlock, classifier_dropout, standard_head)
from . import Family, register_family


@dataclass(frozen=True)
class AlbertConfig(EncoderConfig):
    family: str = "albert"
    embedding_size: int = 128
    num_hidden_groups: int = 1
    inner_group_num: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.embedding_size <= 0 or self.inner_group_num <= 0:
            raise BertkitError("config: embedding_size and inner_group_num must be positive")
        # More groups than layers is legal, as in transformers: some group is then never run
        # (its weights are kept, so that a load and save keeps every tensor of the file).
        if self.num_hidden_groups < 1:
            raise BertkitError(f"config: num_hidden_groups must be >= 1, got {self.num_hidden_groups}")


class SharedEncoder(Encoder):
    """`layers` holds the groups; every depth reuses one of their blocks."""

    def __init__(self, config: AlbertConfig):
        groups = [nn.ModuleList(TransformerBlock(config) for _ in range(config.inner_group_num))
                  for _ in range(config.num_hidden_groups)]
        super().__init__(groups, num_layers=config.num_layers * config.inner_group_num)
        self.inner = config.inner_group_num
        self.layers_per_group = config.num_layers / config.num_hidden_groups

    def layer_for(self, i: int) -> nn.Module:
        step, inner = divmod(i, self.inner)
        return self.layers[int(step / self.layers_per_group)][inner]


def build_backbone(config: AlbertConfig, with_pooler: bool) -> EncoderModel:
    pooler = Pooler(config.hidden_size) if with_pooler else None
    projection = nn.Linear(config.embedding_size, config.hidden_size)
    return EncoderModel(Embeddings(config, dim=config.embedding_size), SharedEncoder(config), pooler, projection)


def build_head(kind, config, backbone):
    word = backbone.embeddings.word
    if kind == "pretraining":
        sop = PairHead(config, dropout=classifier_dropout(config), outputs=config.num_labels)
        return PreTrainingHead(MLMHead(config, word), sop)
    return standard_head(kind, config, word)


register_family(Family("albert", AlbertConfig, build_backbone, build_head))

IDEA = "factorized embedding (V x E, E -> H) + one block shared across all layers; SOP"
# The released ALBERT v2 configs: 30,000 SentencePiece tokens, E = 128, GELU (tanh form), no dropout.
_BASE = AlbertConfig(vocab_size=30000, hidden_act="gelu_new", hidden_dropout=0.0, attention_dropout=0.0,
                     classifier_dropout=0.1)
register_preset("albert-base", _BASE, IDEA)
register_preset("albert-large", _BASE.replace(hidden_size=1024, num_layers=24, num_heads=16,
                                              intermediate_size=4096), IDEA)
