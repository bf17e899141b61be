"""BERT (Devlin et al., 2019): a post-LN transformer encoder over word + position + segment
embeddings, pre-trained with masked LM and next-sentence prediction.

BERT *is* the shared blocks, so this file only wires them together and names the presets.
"""

from __future__ import annotations

from ..config import EncoderConfig, register_preset
from ..layers import Embeddings, EncoderModel, Pooler, build_encoder, standard_head
from . import Family, register_family


def build_backbone(config: EncoderConfig, with_pooler: bool) -> EncoderModel:
    pooler = Pooler(config.hidden_size) if with_pooler else None
    return EncoderModel(Embeddings(config), build_encoder(config), pooler)


def build_head(kind, config, backbone):
    return standard_head(kind, config, backbone.embeddings.word)


register_family(Family("bert", EncoderConfig, build_backbone, build_head))

IDEA = "bidirectional encoder; masked LM + next-sentence prediction"
register_preset("bert-base", EncoderConfig(), IDEA)
register_preset("bert-large", EncoderConfig(hidden_size=1024, num_layers=24, num_heads=16,
                                            intermediate_size=4096), IDEA)
register_preset(
    "mini-bert",
    EncoderConfig(vocab_size=8192, hidden_size=192, num_layers=3, num_heads=4, intermediate_size=768,
                  max_positions=64),
    "BERT shrunk to learn from: 3 layers, 192 wide, 4 heads of 48, 8k vocab, 64 tokens",
    note="the Mini-BERT design quotes ~3.2M parameters; the exact encoder count is 2,957,568 "
         "(2,966,144 as a masked LM, 3,003,586 with MLM and NSP): the quoted figure is a rounded estimate",
)
