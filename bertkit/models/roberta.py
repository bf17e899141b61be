"""RoBERTa (Liu et al., 2019): BERT's architecture, trained better. Two things differ in the model
itself: positions are counted from the padding index and skip padding, and the classifier has its
own tanh hidden layer on the first token instead of BERT's NSP-trained pooler. (Its other ideas,
dynamic masking, no NSP, full-sentence packing and a byte-level BPE, live in data/ and
objectives/.)

Shapes: B batch, T sequence length.
"""

from __future__ import annotations

import torch
from torch import nn

from ..config import EncoderConfig, register_preset
from ..errors import BertkitError
from ..layers import (Embeddings, EncoderModel, FirstTokenHead, MLMHead, Pooler, build_encoder,
                      classifier_dropout, standard_head)
from . import Family, register_family


class RobertaEmbeddings(Embeddings):
    def __init__(self, config: EncoderConfig):
        super().__init__(config)
        # fairseq reserves the positions up to the padding index; the padding row stays zero.
        self.position = nn.Embedding(config.max_positions, config.hidden_size, padding_idx=config.pad_token_id)
        self.pad_token_id = config.pad_token_id

    @property
    def max_length(self) -> int:
        return self.position.num_embeddings - self.pad_token_id - 1

    def position_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Real tokens are numbered pad+1, pad+2, ...; padding keeps position pad (fairseq's
        `make_positions`), so right or left padding gives every real token the same position."""
        real = (input_ids != self.pad_token_id).long()          # (B, T)
        return torch.cumsum(real, dim=1) * real + self.pad_token_id  # (B, T)

    def check_length(self, input_ids: torch.Tensor) -> None:
        """Padding takes no position of its own: a batch padded past the table (to a fixed width)
        runs as long as no row holds more real tokens than it has positions, as in transformers."""
        if input_ids.shape[1] > self.max_length:
            longest = int((input_ids != self.pad_token_id).sum(1).max())
            if longest > self.max_length:
                raise BertkitError(f"a sequence of {longest} tokens (not counting padding) exceeds the model's "
                                   f"maximum of {self.max_length} tokens")


def build_backbone(config: EncoderConfig, with_pooler: bool) -> EncoderModel:
    pooler = Pooler(config.hidden_size) if with_pooler else None
    return EncoderModel(RobertaEmbeddings(config), build_encoder(config), pooler)


def build_head(kind, config, backbone):
    word = backbone.embeddings.word
    if kind == "mlm":
        return MLMHead(config, word, act="gelu")  # fairseq's LM head is GELU whatever hidden_act says
    if kind == "classification":
        p = classifier_dropout(config)
        return FirstTokenHead(config, act="tanh", input_dropout=p, hidden_dropout=p)
    if kind == "pretraining":
        raise BertkitError("RoBERTa has no sentence-pair (NSP or SOP) head; use its MLM head "
                           "(head='mlm'; pretrain --objective mlm)")
    return standard_head(kind, config, word)


register_family(Family("roberta", EncoderConfig, build_backbone, build_head))
# XLM-R (Conneau et al., 2020): RoBERTa's model and recipe on 100 languages, with a 250k-piece
# SentencePiece vocabulary; its checkpoints load and save under their own model_type.
register_family(Family("xlm-roberta", EncoderConfig, build_backbone, build_head))
# CamemBERT (Martin et al., 2020): the same for French, under its own model_type too.
register_family(Family("camembert", EncoderConfig, build_backbone, build_head))

IDEA = "BERT trained better: dynamic masking, no NSP, byte-level BPE; positions skip padding"
# fairseq's roberta.base / roberta.large: 50,265 BPE tokens, 514 positions (512 + the two
# reserved up to the padding index 1), a single token type, LayerNorm eps 1e-5.
_BASE = EncoderConfig(family="roberta", vocab_size=50265, max_positions=514, type_vocab_size=1,
                      layer_norm_eps=1e-5, pad_token_id=1)
register_preset("roberta-base", _BASE, IDEA)
register_preset("roberta-large", _BASE.replace(hidden_size=1024, num_layers=24, num_heads=16,
                                               intermediate_size=4096), IDEA)
