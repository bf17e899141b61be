"""DeBERTa (He et al., 2021): attention that keeps content and position apart.

Each token has a content vector and, for every other token, a *relative* position. The attention
score of query i for key j is the sum of three terms (sec. 3.1, eq. 2):

    content-to-content   q_i . k_j                        (plain attention)
    content-to-position  q_i . Kr[delta(i, j)]            "c2p": what i looks for at that distance
    position-to-content  k_j . Qr[delta(j, i)]            "p2c": what j offers to whoever sits there

divided by sqrt(D * (1 + number of position terms)) (eq. 4). Kr and Qr are projections of one
table of relative-position embeddings shared by all layers (2k rows for distances -k..k-1).
p2c's distance is indexed as the released code and transformers index it, which differs from
eq. 4 as printed (microsoft/DeBERTa#47); released checkpoints were trained that way.

Computing Kr[delta(i, j)] for every pair would materialize (T, T, D) per head. Instead each term
is a (T, 2k) score block, every query against every distance, gathered at delta(i, j) (sec. 3.1,
"efficient implementation").

v2/v3 add log-bucketed distances (position_buckets), a projection shared between content and
position (share_att_key), a LayerNorm on the position table, and an optional convolution
beside the first layer. No released version adds absolute positions at the input
(position_biased_input=False: the paper brings them in only in the enhanced mask decoder, sec.
3.2), though a config may switch them on. v3 is pre-trained as an ELECTRA-style discriminator
(head="pretraining": ELECTRA's replaced-token head) beside an MLM generator, with
gradient-disentangled embedding sharing (objectives/gdes.py).

Shapes: B batch, T length, H hidden, N heads, D head size, K = 2k relative-position rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..config import EncoderConfig, register_preset
from ..errors import BertkitError
from ..layers import (Encoder, EncoderModel, FirstTokenHead, MLMHead, SelfAttention, TransformerBlock,
                      at_masked, attention_mask_4d, classifier_dropout, standard_head)
from ..layers.activations import activation
from ..layers.dropout import Dropout
from . import Family, register_family
from .electra import ReplacedTokenHead

POSITION_TERMS = ("c2p", "p2c")


@dataclass(frozen=True)
class DebertaConfig(EncoderConfig):
    family: str = "deberta-v2"
    vocab_size: int = 128100
    type_vocab_size: int = 0
    layer_norm_eps: float = 1e-7
    embedding_size: int | None = None  # None: the hidden size
    position_biased_input: bool = False  # absolute positions added at the input
    relative_attention: bool = True
    max_relative_positions: int = -1  # < 1: max_positions
    position_buckets: int = 256  # <= 0: no log bucketing
    pos_att_type: tuple[str, ...] = ("p2c", "c2p")  # also accepted as "p2c|c2p", as configs write it
    share_att_key: bool = True  # position keys/queries reuse the content projections
    norm_rel_ebd: str = "layer_norm"  # a '|' list: the position table is normalized if it names "layer_norm"
    conv_kernel_size: int = 0  # 0: no convolution layer
    conv_act: str = "tanh"
    conv_groups: int = 1
    pooler_act: str = "gelu"
    pooler_dropout: float = 0.0
    legacy_mlm: bool = True  # weight layout of the MLM head (cls.predictions vs lm_predictions)
    enhanced_mask_decoder: bool = False  # the MLM head decodes through EMD (sec. 3.2); bertkit only

    ACTIVATION_FIELDS = ("hidden_act", "conv_act", "pooler_act")

    def __post_init__(self) -> None:
        terms = self.pos_att_type
        if isinstance(terms, str):
            terms = [t for t in terms.lower().split("|") if t.strip()]
        terms = tuple(t.strip().lower() for t in (terms or ()))
        unknown = [t for t in terms if t not in POSITION_TERMS]
        if unknown:
            raise BertkitError(f"config: pos_att_type {unknown} not understood; use a subset of {POSITION_TERMS}")
        object.__setattr__(self, "pos_att_type", terms)
        super().__post_init__()
        kinds = [k.strip() for k in self.norm_rel_ebd.lower().split("|")]
        # transformers reads it as a list and normalizes the position table if it names layer_norm,
        # whatever else it names (modeling_deberta_v2.DebertaV2Encoder).
        # Without relative attention there is no table: 'none', so that a saved folder does not make
        # transformers build a norm for it whose weights no file holds (reported MISSING).
        normed = "layer_norm" in kinds and self.relative_attention
        object.__setattr__(self, "norm_rel_ebd", "layer_norm" if normed else "none")
        if self.relative_attention and self.span < 1:
            raise BertkitError("config: relative attention needs position_buckets or max_relative_positions > 0")
        if self.conv_kernel_size < 0:
            raise BertkitError(f"config: conv_kernel_size must be >= 0 (0: no convolution), "
                               f"got {self.conv_kernel_size}")
        if self.conv_kernel_size and self.conv_kernel_size % 2 == 0:
            # it pads (K - 1) // 2 on each side: only an odd K keeps the length (transformers fails on an even one)
            raise BertkitError(f"config: conv_kernel_size must be odd, got {self.conv_kernel_size}")
        if self.conv_kernel_size and not (self.conv_groups >= 1 and self.hidden_size % self.conv_groups == 0):
            raise BertkitError(f"config: conv_groups must divide hidden_size {self.hidden_size}, "
                               f"got {self.conv_groups}")
        if not self.legacy_mlm and not self.tie_word_embeddings:
            raise BertkitError("config: the lm_predictions MLM layout (legacy_mlm=False) decodes with the word "
                               "embeddings; it needs tie_word_embeddings=True (or legacy_mlm=True)")

    @property
    def key_bias(self) -> bool:
        """v2 gave the key (and position-key) projection a bias; v1 had none."""
        return True

    @property
    def max_distance(self) -> int:
        return self.max_relative_positions if self.max_relative_positions > 0 else self.max_positions

    @property
    def span(self) -> int:
        """k: distances -k..k-1 have an embedding each."""
        return self.position_buckets if self.position_buckets > 0 else self.max_distance


def log_buckets(delta: torch.Tensor, buckets: int, max_distance: int) -> torch.Tensor:
    """Distances up to buckets/2 stay exact; farther ones share logarithmically wider buckets
    (DeBERTa v2, like T5's relative buckets), reaching the last bucket at max_distance."""
    mid = buckets // 2
    sign = torch.sign(delta)
    far = torch.where(delta.abs() < mid, torch.full_like(delta, mid - 1), delta.abs())
    log_far = torch.ceil(torch.log(far / mid) / torch.log(torch.tensor((max_distance - 1) / mid))
                         * (mid - 1)) + mid
    return torch.where(far <= mid, delta.to(log_far.dtype), log_far * sign).long()


def relative_positions(T: int, config: DebertaConfig, device) -> torch.Tensor:
    """delta(i, j) = i - j, bucketed when configured: (T, T)."""
    idx = torch.arange(T, device=device)
    delta = idx[:, None] - idx[None, :]  # (T, T)
    if config.position_buckets > 0:
        delta = log_buckets(delta, config.position_buckets, config.max_distance)
    return delta


class DisentangledAttention(SelfAttention):
    """Self-attention plus the c2p and p2c score terms (eq. 2-4)."""

    def __init__(self, config: DebertaConfig):
        super().__init__(config)
        self.terms = config.pos_att_type
        self.span = config.span
        self.scale = (self.head_dim * (1 + len(self.terms))) ** -0.5  # eq. 4
        self.relative = config.relative_attention
        self.pos_dropout = Dropout(config.hidden_dropout)
        H = config.hidden_size
        if not config.key_bias:
            self.key = nn.Linear(H, H, bias=False)
        # Without share_att_key the position table has its own projections.
        own = self.relative and not config.share_att_key
        self.pos_key = nn.Linear(H, H, bias=config.key_bias) if own and "c2p" in self.terms else None
        self.pos_query = nn.Linear(H, H) if own and "p2c" in self.terms else None

    def score_inputs(self, rel_embeddings=None, rel_pos=None):
        """Project the relative-position table once per forward: Kr (c2p) and Qr (p2c)."""
        if not self.relative:
            return {}
        table = self.pos_dropout(rel_embeddings[: 2 * self.span])[None]  # (1, K, H)
        inputs = {"rel_pos": rel_pos}
        if "c2p" in self.terms:
            project = self.key if self.pos_key is None else self.pos_key  # shared or own (share_att_key)
            inputs["pos_k"] = self.split_heads(project(table))  # (1, N, K, D)
        if "p2c" in self.terms:
            project = self.query if self.pos_query is None else self.pos_query
            inputs["pos_q"] = self.split_heads(project(table))  # (1, N, K, D)
        return inputs

    def score_bias(self, q, k, rel_pos=None, pos_k=None, pos_q=None):
        if not self.relative:
            return None
        rel_pos = rel_pos[: q.shape[-2], : k.shape[-2]]  # this sequence's (T, T) corner
        idx = rel_pos + self.span  # (T, T): row of the table for distance delta(i, j)
        bias = 0
        if pos_k is not None:
            c2p = torch.matmul(q, pos_k.transpose(-1, -2))  # (B, N, T, K): query x distance
            c2p = c2p.gather(-1, idx.clamp(0, 2 * self.span - 1).expand(*c2p.shape[:2], -1, -1))  # (B, N, T, T)
            bias = bias + c2p
        if pos_q is not None:
            p2c = torch.matmul(k, pos_q.transpose(-1, -2))  # (B, N, T, K): key x distance
            # key j meets query i at distance delta(j, i) = -delta(i, j)
            p2c = p2c.gather(-1, (2 * self.span - idx).clamp(0, 2 * self.span - 1).expand(*p2c.shape[:2], -1, -1))
            bias = bias + p2c.transpose(-1, -2)  # (B, N, T, T), rows = queries
        return bias * self.scale if torch.is_tensor(bias) else None

    def padding_queries(self, out, probs, v, keys):
        """transformers masks DeBERTa's scores on both sides, padding queries included, by
        filling them with the dtype's minimum: a padding query's scores are then all equal, and
        its softmax is uniform over every position, padding too. Its output is the mean value."""
        pad = ~keys.transpose(-1, -2)  # (B, 1, T, 1): the padding queries
        out = torch.where(pad, v.mean(-2, keepdim=True), out)  # (B, N, T, D)
        if probs is not None:
            probs = probs.masked_fill(pad, 1.0 / probs.shape[-1])  # (B, N, T, T)
        return out, probs

    @torch.no_grad()
    def score_terms(self, x: torch.Tensor, **context) -> dict[str, torch.Tensor]:
        """The three terms of eq. 2 apart, for reading (bertkit.viz): "c2c", and "c2p" / "p2c"
        where configured, each (B, N, T, T), already scaled as in eq. 4. x is this attention's
        input (B, T, H) and `context` what the encoder's `context` hook gives; their sum plus the
        padding mask is what forward's softmax sees. The forward path does not use this."""
        q, k, _ = self.project(x)
        q, k = self.split_heads(q), self.split_heads(k)  # (B, N, T, D)
        terms = {"c2c": torch.matmul(q, k.transpose(-1, -2)) * self.scale}  # (B, N, T, T)
        inputs = self.score_inputs(**context)
        # score_bias with one position projection left out is exactly the other term.
        if inputs.get("pos_k") is not None:
            terms["c2p"] = self.score_bias(q, k, rel_pos=inputs["rel_pos"], pos_k=inputs["pos_k"])
        if inputs.get("pos_q") is not None:
            terms["p2c"] = self.score_bias(q, k, rel_pos=inputs["rel_pos"], pos_q=inputs["pos_q"])
        return terms


class ConvLayer(nn.Module):
    """v2's convolution beside the first block (n-gram information): LN(block output +
    act(conv(embeddings))), padding kept at zero."""

    def __init__(self, config: DebertaConfig):
        super().__init__()
        K = config.conv_kernel_size
        self.conv = nn.Conv1d(config.hidden_size, config.hidden_size, K, padding=(K - 1) // 2,
                              groups=config.conv_groups)
        self.act = activation(config.conv_act)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout)

    def forward(self, inputs: torch.Tensor, residual: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        """inputs, residual: (B, T, H); keep: (B, T, 1) 1.0 on real tokens."""
        out = self.conv((inputs * keep).transpose(1, 2)).transpose(1, 2) * keep  # (B, T, H)
        return self.norm(residual + self.act(self.dropout(out))) * keep


class DebertaEncoder(Encoder):
    """Owns the shared relative-position table and hands it to every layer through `context`."""

    def __init__(self, config: DebertaConfig):
        blocks = [TransformerBlock(config, attn=DisentangledAttention(config)) for _ in range(config.num_layers)]
        super().__init__(blocks)
        self.config = config
        H = config.hidden_size
        self.rel_embeddings = nn.Embedding(2 * config.span, H) if config.relative_attention else None
        self.rel_norm = (nn.LayerNorm(H, eps=config.layer_norm_eps)
                         if config.relative_attention and config.norm_rel_ebd == "layer_norm" else None)
        self.conv = ConvLayer(config) if config.conv_kernel_size > 0 else None
        self.slot_distances = config.relative_attention  # relative_positions(T) counts slots
        self.bucket_work = config.relative_attention  # each bucket builds its c2p / p2c terms

    def context(self, length, device):
        if self.rel_embeddings is None:
            return {}
        table = self.rel_embeddings.weight  # (K, H)
        if self.rel_norm is not None:
            table = self.rel_norm(table)
        return {"rel_embeddings": table, "rel_pos": relative_positions(length, self.config, device)}

    def forward(self, x, mask=None, output_attentions=False, packing=None, output_hidden_states=False, rows=None):
        if mask is not None and packing is None:  # transformers zeroes the embeddings at padding
            x = x * mask[:, 0, 0, :, None].to(x.dtype)  # (B, T, H)
        return super().forward(x, mask, output_attentions, packing, output_hidden_states, rows)

    def after_layer(self, i, x, inputs, mask, packing):
        if i != 0 or self.conv is None:
            return x
        if packing is not None:  # the convolution needs each sequence's neighbours in place
            return packing.unpad(self.after_layer(i, packing.pad(x), packing.pad(inputs), mask, None))
        keep = torch.ones_like(x[..., :1]) if mask is None else mask[:, 0, 0, :, None].to(x.dtype)  # (B, T, 1)
        return self.conv(inputs, x, keep)


class DebertaEmbeddings(nn.Module):
    """Word (+ absolute position if position_biased_input) (+ token type) embeddings of width E,
    projected to H without bias, then LayerNorm: the projection comes before the norm here."""

    def __init__(self, config: DebertaConfig):
        super().__init__()
        E = config.embedding_size or config.hidden_size
        self.word = nn.Embedding(config.vocab_size, E, padding_idx=config.pad_token_id)
        self.position = nn.Embedding(config.max_positions, E) if config.position_biased_input else None
        self.token_type = nn.Embedding(config.type_vocab_size, E) if config.type_vocab_size else None
        self.projection = nn.Linear(E, config.hidden_size, bias=False) if E != config.hidden_size else None
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout)
        self.max_length = config.max_positions

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                words: torch.Tensor | None = None, positions: torch.Tensor | None = None) -> torch.Tensor:
        """`words` (B, T, E): word vectors to use instead of looking input_ids up (inputs_embeds).
        `positions` (B, T) or (1, T): position_ids for the absolute table, when there is one
        (position_biased_input); relative attention counts slots whatever they say, as in
        transformers."""
        T = input_ids.shape[1]
        x = self.word(input_ids) if words is None else words  # (B, T, E)
        if self.position is not None and positions is not None:
            x = x + self.position(positions)
        elif self.position is not None:
            if T > self.max_length:
                raise BertkitError(f"sequence length {T} exceeds the model's maximum of {self.max_length} tokens")
            x = x + self.position.weight[:T]
        if self.token_type is not None:
            x = x + (self.token_type.weight[0] if token_type_ids is None else self.token_type(token_type_ids))
        if self.projection is not None:
            x = self.projection(x)  # (B, T, H)
        return self.dropout(self.norm(x))


class EnhancedMaskDecoder(MLMHead):
    """The enhanced mask decoder (sec. 3.2, Fig. 2): the MLM head, but decoding from states that
    have seen *absolute* positions, which relative attention alone cannot tell apart ("a new
    store opened beside the new mall": store and mall have the same context).

    Keys and values are the input of the encoder's last layer, H; the queries start as H plus an
    absolute position embedding and go through that same last layer `steps` times (n = 2 in the
    paper, parameters shared with the last layer). steps = 0 switches EMD off: the plain MLM head
    on the encoder's output. transformers has no EMD: the position table is saved under a name
    it ignores, and `enhanced_mask_decoder` in config.json restores EMD when bertkit loads it.
    """

    uses_hidden_states = True

    def __init__(self, config: DebertaConfig, backbone: EncoderModel, steps: int = 2):
        super().__init__(config, backbone.embeddings.word)
        self.position = nn.Embedding(config.max_positions, config.hidden_size)
        self.steps = steps
        # A reference, not a submodule: the last block belongs to the encoder and is saved there.
        self._encoder = (backbone.encoder,)

    def forward(self, out):
        if self.steps == 0:
            return super().forward(out)
        encoder = self._encoder[0]
        states = out.hidden_states[-2]  # (B, T, H): what the last layer reads
        T = states.shape[1]
        if T > self.position.num_embeddings:
            raise BertkitError(f"sequence length {T} exceeds the decoder's {self.position.num_embeddings} positions")
        mask = attention_mask_4d(out.attention_mask)
        context = encoder.context(T, states.device)
        last = encoder.layer_for(encoder.num_layers - 1)
        query = states + self.position.weight[:T]  # (B, T, H)
        for _ in range(self.steps):
            query, _ = last(states, mask, query=query, **context)
        return {"logits": self.predict(at_masked(out, query))}  # (B, T, V) or (K, V)


def build_backbone(config: DebertaConfig, with_pooler: bool) -> EncoderModel:
    return EncoderModel(DebertaEmbeddings(config), DebertaEncoder(config), pooler=None)


def build_head(kind, config, backbone):
    word = backbone.embeddings.word
    if kind == "mlm":
        return EnhancedMaskDecoder(config, backbone) if config.enhanced_mask_decoder else MLMHead(config, word)
    if kind == "multiple-choice" and config.family == "deberta":
        raise BertkitError("DeBERTa v1 has no multiple-choice head in transformers to load or save; "
                           "use a deberta-v2 (v3) model")
    if kind in ("classification", "multiple-choice"):
        # The "context pooler": dense + activation on the first token, trained with the task.
        return FirstTokenHead(config, act=config.pooler_act, input_dropout=config.pooler_dropout,
                              hidden_dropout=classifier_dropout(config),
                              outputs=1 if kind == "multiple-choice" else None)
    if kind == "pretraining":
        # DeBERTaV3 pre-trains a discriminator (He et al., 2021, sec. 3): ELECTRA's head, reused.
        return ReplacedTokenHead(config)
    return standard_head(kind, config, word)


register_family(Family("deberta-v2", DebertaConfig, build_backbone, build_head, bare_has_pooler=False))


@dataclass(frozen=True)
class DebertaV1Config(DebertaConfig):
    """DeBERTa v1: plain distances clamped at max_relative_positions, separate position
    projections, no table norm, no convolution, no key bias."""

    family: str = "deberta"
    vocab_size: int = 50265
    position_buckets: int = -1
    share_att_key: bool = False
    norm_rel_ebd: str = "none"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.position_buckets > 0 or self.share_att_key or self.norm_rel_ebd != "none" or self.conv_kernel_size:
            raise BertkitError("config: position_buckets, share_att_key, norm_rel_ebd and the conv layer "
                               "are DeBERTa v2 features; use family 'deberta-v2'")

    @property
    def key_bias(self) -> bool:
        return False


register_family(Family("deberta", DebertaV1Config, build_backbone, build_head, bare_has_pooler=False))

IDEA = "disentangled attention: content and relative position scored separately (c2p + p2c)"
# microsoft/deberta-base: BPE vocabulary of RoBERTa, distances clamped at 512, no absolute positions.
register_preset("deberta-base", DebertaV1Config(hidden_size=768, num_layers=12, num_heads=12,
                                                intermediate_size=3072), IDEA)
# microsoft/deberta-v3-{xsmall,small,base,large} configs: 128,100 SentencePiece tokens, 256 log
# buckets over 512 positions, shared keys, normalized position table, no absolute positions.
_V3 = DebertaConfig(hidden_size=768, num_layers=12, num_heads=12, intermediate_size=3072)
register_preset("deberta-v3-xsmall", _V3.replace(hidden_size=384, num_heads=6, intermediate_size=1536), IDEA)
register_preset("deberta-v3-small", _V3.replace(num_layers=6), IDEA)
register_preset("deberta-v3-base", _V3, IDEA)
register_preset("deberta-v3-large", _V3.replace(hidden_size=1024, num_layers=24, num_heads=16,
                                                intermediate_size=4096), IDEA)
# The presets pre-trained with replaced-token detection and GDES (objectives/gdes.py).
V3_PRESETS = ("deberta-v3-xsmall", "deberta-v3-small", "deberta-v3-base", "deberta-v3-large")
