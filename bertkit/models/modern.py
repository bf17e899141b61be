"""ModernBERT (Warner et al., 2024): the encoder rebuilt with what decoders learned since 2018.

- Rotary position embeddings (RoPE; Su et al., 2021, sec. 3.4) instead of a position table: each
  query and key is turned, pair of dimensions by pair, by an angle proportional to its position,
  so a score depends on how far apart two tokens are, not on where they are.
- GeGLU feed-forward (Shazeer, 2020): the up-projection makes two halves, and GELU(first) *
  second goes down.
- Alternating attention (sec. 2.1.2): every `global_every`-th layer attends globally, the others
  within a sliding window of `local_attention` tokens (half on each side), with a smaller RoPE base.
- Pre-LN blocks with no biases, LayerNorm right after the embeddings (so the first block needs
  no norm of its own) and after the last block.

Unpadding, ModernBERT's other speed idea, is bertkit's fast path for every family (packing.py).

Shapes: B batch, T sequence length, H hidden size, N heads, D head size, I intermediate size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from ..config import EncoderConfig, FieldTypeError, register_preset
from ..errors import BertkitError
from ..layers import (Encoder, EncoderModel, FeedForward, Head, MLMHead, SelfAttention, TransformerBlock,
                      activation, classifier_dropout)
from ..layers.dropout import Dropout
from ..layers.heads import on_real_tokens
from ..layers.output import EncoderOutput
from . import Family, register_family

LAYER_TYPES = ("global", "local")
POOLINGS = ("cls", "mean")


@dataclass(frozen=True)
class ModernConfig(EncoderConfig):
    family: str = "modernbert"
    vocab_size: int = 50368
    num_layers: int = 22
    intermediate_size: int = 1152  # each GeGLU half; the up-projection is twice as wide
    max_positions: int = 8192
    type_vocab_size: int = 0
    layer_norm_eps: float = 1e-5
    pad_token_id: int = 50283
    hidden_dropout: float = 0.0  # after the embeddings (blocks drop after attention: attention_dropout)
    attention_dropout: float = 0.0
    classifier_dropout: float | None = 0.0
    norm_first: bool = True
    global_every: int = 3  # layers 0, 3, 6, ... are global, unless layer_types says otherwise
    layer_types: tuple[str, ...] = ()  # per layer, from LAYER_TYPES; () = by global_every
    global_rope_theta: float = 160_000.0
    local_rope_theta: float = 10_000.0
    local_attention: int = 128  # window width of the local layers (tokens up to half of it away)
    attention_bias: bool = False
    mlp_bias: bool = False
    norm_bias: bool = False
    mlp_dropout: float = 0.0
    classifier_pooling: str = "cls"
    classifier_activation: str = "gelu"
    classifier_bias: bool = False
    decoder_bias: bool = True

    ACTIVATION_FIELDS = ("hidden_act", "classifier_activation")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.norm_first:
            raise BertkitError("config: ModernBERT's blocks are pre-LN (norm_first must be true)")
        object.__setattr__(self, "layer_types", tuple(self.layer_types))  # JSON gives lists
        if self.layer_types and len(self.layer_types) != self.num_layers:
            raise BertkitError(f"config: layer_types has {len(self.layer_types)} entries for "
                               f"num_layers={self.num_layers}")
        if unknown := sorted(set(self.layer_types) - set(LAYER_TYPES)):
            raise BertkitError(f"config: unknown layer type(s) {', '.join(unknown)}; known: {', '.join(LAYER_TYPES)}")
        # (FieldTypeError: a config.json's error names its own key, global_attn_every_n_layers)
        if self.global_every < 1:
            raise FieldTypeError("global_every", f"must be >= 1, got {self.global_every}")
        if self.local_attention < 0:  # 0 and 1 leave each token alone in a local layer, as in transformers
            raise FieldTypeError("local_attention", f"must be >= 0 (the sliding window's width), "
                                 f"got {self.local_attention}")
        if self.head_dim % 2:
            raise BertkitError(f"config: rotary embeddings turn pairs of dimensions; head size {self.head_dim} is odd")
        if not (self.global_rope_theta > 0 and self.local_rope_theta > 0):
            raise BertkitError("config: global_rope_theta and local_rope_theta must be > 0")
        if self.classifier_pooling not in POOLINGS:
            raise BertkitError(f"config: classifier_pooling must be one of {', '.join(POOLINGS)}, "
                               f"got {self.classifier_pooling!r}")
        if not 0.0 <= self.mlp_dropout < 1.0:
            raise BertkitError(f"config: mlp_dropout must be in [0, 1), got {self.mlp_dropout}")

    def is_global(self, i: int) -> bool:
        if self.layer_types:
            return self.layer_types[i] == "global"
        return i % self.global_every == 0


def rotary_table(theta: float, dim: int, length: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of position * theta^(-2k/D) for positions 0..length-1, each (length, D): the
    angle of pair k repeated for both its halves (the layout `rotate` expects)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))  # (D/2,)
    angles = torch.arange(length, device=device).float()[:, None] * inv_freq.to(device)  # (T, D/2)
    angles = torch.cat((angles, angles), dim=-1)  # (T, D)
    return angles.cos(), angles.sin()


class RotaryAttention(SelfAttention):
    """Attention with RoPE on queries and keys; local layers see a sliding window."""

    def __init__(self, config: ModernConfig, is_global: bool):
        super().__init__(config, bias=config.attention_bias)
        self.theta = config.global_rope_theta if is_global else config.local_rope_theta
        self.window = None if is_global else config.local_attention // 2
        self.out_dropout = Dropout(config.attention_dropout)

    def rotate(self, x, positions, rotary=None, **context):
        """x (..., H): each head's vector, as D/2 pairs (d, d + D/2), turned by position * its
        frequency: x cos + rotate_half(x) sin, computed in fp32 from cos / sin rounded to x's dtype
        first, as transformers' ModernBERT does (its rotary embedding returns them in x's dtype)."""
        cos, sin = (t[positions].to(x.dtype).float()[..., None, :] for t in rotary[self.theta])  # (..., 1, D)
        heads = x.unflatten(-1, (self.num_heads, self.head_dim)).float()  # (..., N, D)
        first, second = heads.chunk(2, dim=-1)
        turned = torch.cat((-second, first), dim=-1)  # (..., N, D)
        return (heads * cos + turned * sin).to(x.dtype).flatten(-2)  # (..., H)

    def forward(self, *args, **kwargs):
        out, probs = super().forward(*args, **kwargs)
        return self.out_dropout(out), probs


class GatedFeedForward(FeedForward):
    """GeGLU: down(drop(act(a) * g)) where (a, g) = up(x), each (..., I). In inference the
    up-projection goes into the forward's shared scratch buffer and the halves combine in place
    (feedforward.py)."""

    def __init__(self, config: ModernConfig):
        super().__init__(config, up_width=2 * config.intermediate_size, bias=config.mlp_bias)
        self.dropout = Dropout(config.mlp_dropout)
        self.recycle = False  # FeedForward's hand-written backward is for one activation, not a gate

    fusable = False  # oneDNN's fused activation would act on the gate too

    def activate(self, h: torch.Tensor, in_place: bool) -> torch.Tensor:
        a, gate = h.chunk(2, dim=-1)  # 2 x (..., I), from h (..., 2I)
        if in_place:
            return self.act_in_place(a).mul_(gate)
        return self.dropout(self.act(a) * gate)

    def reuses_memory(self) -> bool:
        return not (self.training and self.dropout.p > 0)


def truncated(weight: torch.Tensor, std: float) -> None:
    """N(0, std) cut at 2 std, ModernBERT's initializer (its initializer_cutoff_factor)."""
    nn.init.trunc_normal_(weight, 0.0, std, -2 * std, 2 * std)


def into_stream(std: float, layers: int) -> float:
    """The std of projections back into the residual stream: std / sqrt(2 * layers), so the
    residual sum does not grow with depth (as GPT-2)."""
    return std / math.sqrt(2 * layers)


def _norm(config: ModernConfig):
    return lambda: nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps, bias=config.norm_bias)


class ModernEncoder(Encoder):
    """Alternating global and local blocks; the RoPE tables are computed once per forward."""

    def __init__(self, config: ModernConfig):
        # The blocks' own residual dropout is off: ModernBERT drops after attention only.
        plain = config.replace(hidden_dropout=0.0)
        blocks = [TransformerBlock(plain, attn=RotaryAttention(config, config.is_global(i)),
                                   ffn=GatedFeedForward(config), norm=_norm(config))
                  for i in range(config.num_layers)]
        blocks[0].attn_norm = nn.Identity()  # its input is the embeddings' LayerNorm output
        super().__init__(blocks, final_norm=_norm(config)())
        self.head_dim = config.head_dim
        self.thetas = sorted({block.attn.theta for block in blocks})
        self.bucket_work = any(block.attn.window is not None for block in blocks)  # window masks per bucket

    @torch.no_grad()
    def initialize(self, std: float) -> None:
        """Projections out of the stream get std, those back into it (attention output, GeGLU
        down) `into_stream`'s."""
        into = into_stream(std, len(self.layers))
        for block in self.layers:
            for linear in (block.attn.query, block.attn.key, block.attn.value, block.ffn.up):
                truncated(linear.weight, std)
            for linear in (block.attn.out_proj, block.ffn.down):
                truncated(linear.weight, into)

    def context(self, length, device):
        return {"rotary": {theta: rotary_table(theta, self.head_dim, length, device) for theta in self.thetas}}


class ModernEmbeddings(nn.Module):
    """Word embeddings, LayerNorm, dropout: no positions (RoPE) and no token types."""

    # Positions enter as rotations, which only their differences survive: position_ids that
    # shift a whole sequence (left padding's) change nothing; others cannot be followed.
    rotary_positions = True

    def __init__(self, config: ModernConfig):
        super().__init__()
        self.word = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.norm = _norm(config)()
        self.dropout = Dropout(config.hidden_dropout)
        # The length it was trained for: tasks truncate to it. Rotary positions have no table to
        # run off, so longer inputs still run (as in transformers), only outside that training.
        self.max_length = config.max_positions

    @torch.no_grad()
    def initialize(self, std: float) -> None:
        truncated(self.word.weight, std)
        self.word.weight[self.word.padding_idx].zero_()  # bertkit's convention: padding embeds to 0

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                words: torch.Tensor | None = None, positions: torch.Tensor | None = None) -> torch.Tensor:
        """`words` (B, T, E): word vectors to use instead of looking input_ids up (inputs_embeds).
        `positions`: checked to be shifts (rotary_positions), so they change nothing here."""
        words = self.word(input_ids) if words is None else words  # (B, T, H)
        return self.dropout(self.norm(words))  # (B, T, H); token types ignored


class ModernHead(Head):
    """Classifier heads: dense + activation + LayerNorm (the MLM head's transform), dropout,
    linear. `pooling` "cls" / "mean" makes one vector per sequence (sequence classification;
    "first-real" reads each sequence's first real token, as multiple choice does in transformers);
    None scores every token (token classification, and QA with two outputs: start, end)."""

    fp32_scores = True

    def __init__(self, config: ModernConfig, outputs: int, pooling: str | None, names: tuple[str, ...]):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size, bias=config.classifier_bias)
        self.act = activation(config.classifier_activation)
        self.norm = _norm(config)()
        self.dropout = Dropout(classifier_dropout(config))
        self.classifier = nn.Linear(config.hidden_size, outputs)
        self.pooling = pooling
        self.reads_first_token = pooling == "cls"
        self.names = names
        self.depth = config.num_layers

    @torch.no_grad()
    def initialize(self, std: float) -> None:
        truncated(self.dense.weight, into_stream(std, self.depth))
        truncated(self.classifier.weight, self.classifier.in_features ** -0.5)

    def forward(self, out: EncoderOutput) -> dict[str, torch.Tensor]:
        x = out.last_hidden_state  # (B, T, H)
        if self.pooling == "cls":
            x = x[:, 0]  # (B, H)
        elif self.pooling == "first-real":
            first = 0 if out.attention_mask is None else out.attention_mask.int().argmax(-1)  # (B,)
            x = x[torch.arange(x.shape[0], device=x.device), first]  # (B, H)
        elif self.pooling == "mean":
            keep = torch.ones_like(x[..., 0]) if out.attention_mask is None else out.attention_mask.to(x.dtype)
            x = (x * keep[..., None]).sum(1) / keep.sum(1, keepdim=True)  # (B, H)
        logits = on_real_tokens(out, x, lambda h: self.classifier(self.dropout(self.norm(self.act(self.dense(h))))))
        # (B, C) or (B, T, C)
        if len(self.names) == 1:
            return {self.names[0]: logits}
        return dict(zip(self.names, logits.unbind(dim=-1)))  # QA: (B, T) each


class ModernMLMHead(MLMHead):
    """The shared MLM head with ModernBERT's optional biases and its initializer."""

    def __init__(self, config: ModernConfig, word_embeddings: nn.Embedding):
        super().__init__(config, word_embeddings, act=config.classifier_activation,
                         transform_bias=config.classifier_bias, norm_bias=config.norm_bias,
                         output_bias=config.decoder_bias)
        self.depth = config.num_layers

    @torch.no_grad()
    def initialize(self, std: float) -> None:
        truncated(self.transform.weight, into_stream(std, self.depth))


def build_backbone(config: ModernConfig, with_pooler: bool) -> EncoderModel:
    return EncoderModel(ModernEmbeddings(config), ModernEncoder(config))


def build_head(kind, config: ModernConfig, backbone):
    if kind == "mlm":
        return ModernMLMHead(config, backbone.embeddings.word)
    if kind == "classification":
        return ModernHead(config, config.num_labels, config.classifier_pooling, ("logits",))
    if kind == "multiple-choice":  # transformers pools "cls" here at each sequence's first real token
        pooling = "first-real" if config.classifier_pooling == "cls" else config.classifier_pooling
        return ModernHead(config, 1, pooling, ("logits",))
    if kind == "token-classification":
        return ModernHead(config, config.num_labels, None, ("logits",))
    if kind == "qa":
        return ModernHead(config, 2, None, ("start_logits", "end_logits"))
    if kind == "pretraining":
        raise BertkitError("ModernBERT has no sentence-pair (NSP or SOP) head; use its MLM head "
                           "(head='mlm'; pretrain --objective mlm)")
    raise ValueError(f"unknown head kind {kind!r}")


register_family(Family("modernbert", ModernConfig, build_backbone, build_head, bare_has_pooler=False))

IDEA = "rotary positions, GeGLU, pre-LN without biases, global attention every 3rd layer and local windows between"
# answerdotai/ModernBERT-base and -large: OLMo's BPE vocabulary padded to 50,368, 8,192 tokens.
register_preset("modernbert-base", ModernConfig(), IDEA)
register_preset("modernbert-large", ModernConfig(hidden_size=1024, num_layers=28, num_heads=16,
                                                 intermediate_size=2624), IDEA)
