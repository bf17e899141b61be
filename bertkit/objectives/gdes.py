"""DeBERTaV3 (He et al., 2021, arXiv:2111.09543): DeBERTa pre-trained ELECTRA-style, with
gradient-disentangled embedding sharing (GDES).

Replaced-token detection is ELECTRA's (sec. 3; objectives/rtd.py): an MLM generator fills the
masked positions, a DeBERTa discriminator labels every token original or replaced, and
L = L_MLM + 50 L_RTD. What changes is how the two share embeddings (sec. 4). ELECTRA shares one
table E, whose gradient is dL_MLM/dE + lambda dL_RTD/dE: MLM pulls semantically close tokens
together, RTD pushes them apart so it can tell them apart, a "tug-of-war" that slows training.
Not sharing at all loses what the generator learns. GDES keeps the sharing, cuts one path:

    E_D = sg(E_G) + E_Delta        (sec. 4; sg = stop-gradient, E_Delta initialized to zero)

E_G is trained by L_MLM only, E_Delta by L_RTD only. `GradientDisentangledEmbedding` below is
this equation, standing in for the discriminator's embedding table. The paper updates E_G before
the discriminator's forward; here one backward of L_MLM + lambda L_RTD gives every parameter the
same gradient (the stop-gradient separates them), and the discriminator reads E_G as it was at
the start of the step, the table the generator just sampled with.

The pair (sec. 5.1): the generator is as wide as the discriminator and half as deep, with an
MLM head tied to E_G; the discriminator carries ELECTRA's replaced-token head.

What a run saves (the Trainer saves `models()`: the discriminator at the root, the generator in
generator/):

- generator/: a plain DeBERTa-v2 masked LM holding E_G, as transformers loads it.
- root: the discriminator as a DeBERTa-v2 checkpoint whose token table is the merged
  E_G + E_Delta, the table it computes with (after pre-training E_D = E_G + E_Delta is the
  model, sec. 4). Beside the encoder's tensors the file holds two more: the replaced-token
  head, under the names ELECTRA's checkpoints give it, and E_Delta itself, under a name of its
  own next to the table (both in interop/hf_names.py). E_Delta is kept because
  (E_G + E_Delta) - E_G does not give back E_Delta bit for bit in floating point, and a resumed
  run must continue exactly. config.json names the architecture DeBERTa-v2 "for pre-training",
  a class transformers does not have: its DeBERTa-v2 encoder (AutoModel) loads the root with
  the same outputs and reports the head and E_Delta as unused tensors; bertkit.from_pretrained
  builds a plain discriminator with its head and skips E_Delta. Resuming (train/checkpoint.py)
  loads E_Delta and the head from the root, E_G from generator/, the optimizer from
  trainer_state.pt. interop/hf.py writes the merged table from the module's
  `derived_tensors()` and skips it when loading into a GDES discriminator.

Shapes: B batch, T length, V rows of a table (vocabulary, positions or token types), E width.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import BertkitError
from ..model import Model, build
from ..models.deberta import DebertaConfig

# Input tables shared between generator and discriminator. The token table is the paper's; the
# absolute-position and token-type tables exist only when a config asks for them (v3 presets
# have neither: position_biased_input=False, type_vocab_size=0). They sit beside the token table
# at the input and ELECTRA shares them with it (Clark et al., 2020, sec. 3.2), so they get the
# same treatment: the generator's table through a stop-gradient plus a discriminator-only delta.
# Relative-position tables and the embedding LayerNorm belong to each encoder: not shared.
SHARED_TABLES = ("word", "position", "token_type")


class GradientDisentangledEmbedding(nn.Module):
    """E_D = sg(E_G) + E_Delta (sec. 4) in place of the discriminator's nn.Embedding, answering
    the same calls: `forward(ids)` and `weight`."""

    def __init__(self, shared: nn.Embedding):
        super().__init__()
        # A reference, not a submodule: E_G belongs to the generator, which trains, moves and
        # saves it.
        self._shared = (shared,)
        # E_Delta = 0 at the start: the discriminator begins with exactly the generator's table.
        self.delta = nn.Parameter(torch.zeros_like(shared.weight))  # (V, E)
        self.padding_idx = shared.padding_idx
        self.num_embeddings, self.embedding_dim = shared.weight.shape

    @property
    def shared(self) -> nn.Embedding:
        return self._shared[0]

    @property
    def weight(self) -> torch.Tensor:
        return self.shared.weight.detach() + self.delta  # (V, E): E_D

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        # Rows of each table, then their sum: the same numbers as rows of `weight`, without
        # building the (V, E) sum. detach() is the stop-gradient: L_RTD never reaches E_G.
        e_g = F.embedding(ids, self.shared.weight.detach(), self.padding_idx)  # (B, T, E)
        return e_g + F.embedding(ids, self.delta, self.padding_idx)             # (B, T, E)

    def derived_tensors(self) -> dict[str, torch.Tensor]:
        """What a checkpoint holds as this table's weight (interop/hf.py): E_G + E_Delta."""
        return {"weight": self.weight}


def share_embeddings(generator: Model, discriminator: Model) -> None:
    """Put GDES views of the generator's input tables into the discriminator (sec. 4)."""
    g, d = generator.backbone.embeddings, discriminator.backbone.embeddings
    for name in SHARED_TABLES:
        theirs, ours = getattr(g, name), getattr(d, name)
        if ours is None:
            continue
        if theirs is None or theirs.weight.shape != ours.weight.shape:
            shape = None if theirs is None else tuple(theirs.weight.shape)
            raise BertkitError(f"GDES: the generator's {name} table {shape} does not match the "
                               f"discriminator's {tuple(ours.weight.shape)}")
        setattr(d, name, GradientDisentangledEmbedding(theirs))
    g.shared = d.shared = True  # (one model's resize_token_embeddings would split the pair: it refuses)


def generator_config(config: DebertaConfig) -> DebertaConfig:
    """The discriminator's width and half its depth (sec. 5.1)."""
    return config.replace(num_layers=max(1, config.num_layers // 2))


def build_pair(config: DebertaConfig) -> tuple[Model, Model]:
    """(generator, discriminator) for DeBERTaV3 pre-training, from the discriminator's config."""
    if not isinstance(config, DebertaConfig) or config.family != "deberta-v2":
        raise BertkitError(f"GDES pre-trains DeBERTa-v3, a deberta-v2 config; got {config.family}")
    generator = build(generator_config(config), head="mlm")
    discriminator = build(config, head="pretraining")
    share_embeddings(generator, discriminator)
    return generator, discriminator
