"""Task heads. Each reads the encoder output and returns the output fields it fills.
Shapes: B batch, T sequence length, H hidden size, E embedding size, V vocabulary, C labels.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..config import EncoderConfig
from .activations import activation
from .dense import bare, dense, linear, serving_weight
from .dropout import Dropout
from .scratch import plain_eager
from .output import EncoderOutput


class Head(nn.Module):
    """What a head asks of the encoder: its pooler (`uses_pooler`), the first position's state
    even where that is padding (`reads_first_token`, a classifier on [CLS]: left padding puts a
    pad there), and every layer's states (`uses_hidden_states`, e.g. a decoder that reuses the
    last layer). `predicts_tokens`: it projects onto the vocabulary, and can do so for
    `out.masked_positions` only. `fp32_scores`: its scores are compared with each other (a class,
    a choice, a span's ends by argmax), so under bf16 autocast it runs in fp32: bf16 keeps about
    3 digits, close scores rounded to a tie, and argmax then took the first (a nearly untrained
    multiple-choice model scored 1.0 in bf16 on data whose answers were all the first choice).
    Its matmuls are a sliver of the encoder's."""

    uses_pooler = False
    reads_first_token = False
    uses_hidden_states = False
    predicts_tokens = False
    fp32_scores = False


def at_masked(out: EncoderOutput, states: torch.Tensor) -> torch.Tensor:
    """(B, T, H) states -> (K, H) at the K masked positions; unchanged when no positions are
    given or the states are already those K rows (the backbone's output under masked_positions).
    The vocabulary projection, the costliest matmul of MLM training, then skips the ~85% of
    tokens that carry no loss (MosaicBERT; Geiping & Goldstein 2023, Cramming)."""
    if out.masked_positions is None or states.dim() == 2:
        return states
    return states[out.masked_positions]


def on_real_tokens(out: EncoderOutput, states: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor]):
    """fn(states), per token. Where the backbone skipped the pads (their states zeros), fn runs on
    the real tokens alone and the pads get zeros: no work there, and no zero rows through a
    LayerNorm, whose 1 / sqrt(eps) overflows float16 (a .half() model's backward then made its
    head's gradients NaN, 0 x inf). (B, T, H) -> (B, T, ...); (K, H) rows as they are."""
    real = out.real_tokens  # (total,), the packing's: found once, at the embeddings
    if states.dim() != 3 or real is None:
        return fn(states)
    y = fn(states.reshape(-1, states.shape[-1]).index_select(0, real))  # (total, ...)
    return y.new_zeros(states.shape[0] * states.shape[1], *y.shape[1:]).index_copy(0, real, y).view(
        *states.shape[:2], *y.shape[1:])


def classifier_dropout(config: EncoderConfig) -> float:
    return config.hidden_dropout if config.classifier_dropout is None else config.classifier_dropout


class MLMHead(Head):
    """Masked-LM head (BERT sec. 3.1, task #1): dense + activation + LayerNorm, then a decoder whose
    weight is the word-embedding matrix (tied, Press & Wolf 2017) plus a per-token output bias.
    `act` overrides the config's activation (RoBERTa's and ELECTRA's heads always use GELU);
    ModernBERT's head may leave out the dense layer's, the norm's and the output's biases."""

    predicts_tokens = True

    def __init__(self, config: EncoderConfig, word_embeddings: nn.Embedding, act: str | None = None,
                 transform_bias: bool = True, norm_bias: bool = True, output_bias: bool = True):
        super().__init__()
        H, E = config.hidden_size, word_embeddings.embedding_dim
        self.transform = nn.Linear(H, E, bias=transform_bias)
        self.act = activation(act or config.hidden_act)
        self.norm = nn.LayerNorm(E, eps=config.layer_norm_eps, bias=norm_bias)
        self.decoder = nn.Linear(E, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.decoder.weight = word_embeddings.weight
        self.bias = nn.Parameter(torch.zeros(config.vocab_size)) if output_bias else None

    def predict(self, hidden: torch.Tensor) -> torch.Tensor:
        """(..., H) hidden states -> (..., V) vocabulary logits."""
        x = self.norm(self.act(dense(hidden, self.transform)))  # (..., E)
        if not bare(self.decoder):  # through the module: its hooks, a LoRA or quantized layer (bias added after)
            logits = self.decoder(x)  # (..., V)
            return logits if self.bias is None else logits + self.bias
        if not plain_eager(x):
            return F.linear(x, self.decoder.weight, self.bias)  # (..., V)
        if torch.is_grad_enabled():
            return _Decoder.apply(x, self.decoder.weight, self.bias)
        return linear(x, serving_weight(self.decoder), self.bias)

    def forward(self, out: EncoderOutput) -> dict[str, torch.Tensor]:
        # (the vocabulary projection, the costliest part, skips the pads: logits 0 there)
        return {"logits": on_real_tokens(out, at_masked(out, out.last_hidden_state), self.predict)}  # (B, T, V)


class _Decoder(torch.autograd.Function):
    """F.linear(x, W, b) whose weight gradient is a plain contiguous (V, E) tensor. A tied W gets
    two gradients, the decoder's and the word embedding's, and autograd adds them in place only
    into a contiguous tensor; F.linear's comes out as a transposed view, so every step paid for a
    third (V, E) tensor (bert-base: 94 MB, fresh, page-faulted in). Same matmuls otherwise, and
    differentiable twice (the backward is made of differentiable ops)."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        return linear(x, weight, bias)  # (..., V)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        need = ctx.needs_input_grad
        g = grad.reshape(-1, grad.shape[-1])                                       # (N, V)
        g_x = grad @ weight if need[0] else None                                   # (..., E)
        g_weight = g.t().mm(x.reshape(-1, x.shape[-1])) if need[1] else None       # (V, E)
        g_bias = g.sum(0) if need[2] else None
        return g_x, g_weight, g_bias


class PairHead(Head):
    """Sentence-pair classifier on the pooled output: NSP (BERT, two-way) or SOP (ALBERT, whose
    layer transformers sizes by num_labels: two as released and as pre-training uses it)."""

    uses_pooler = True

    def __init__(self, config: EncoderConfig, dropout: float = 0.0, outputs: int = 2):
        super().__init__()
        self.dropout = Dropout(dropout)
        self.classifier = nn.Linear(config.hidden_size, outputs)

    def forward(self, out: EncoderOutput) -> dict[str, torch.Tensor]:
        return {"pair_logits": self.classifier(self.dropout(out.pooler_output))}  # (B, outputs)


class PreTrainingHead(Head):
    """MLM + pair prediction, BERT's two pre-training tasks together."""

    uses_pooler = True
    predicts_tokens = True

    def __init__(self, mlm: nn.Module, pair: nn.Module):
        super().__init__()
        self.mlm = mlm
        self.pair = pair

    def forward(self, out: EncoderOutput) -> dict[str, torch.Tensor]:
        return {**self.mlm(out), **self.pair(out)}


class SequenceClassificationHead(Head):
    """Dropout + linear on the pooled [CLS] vector (BERT sec. 4.1). `outputs` (default: the
    config's labels) is 1 for multiple choice: one score per (context, choice) sequence (sec. 4.4)."""

    uses_pooler = True
    fp32_scores = True

    def __init__(self, config: EncoderConfig, outputs: int | None = None):
        super().__init__()
        self.dropout = Dropout(classifier_dropout(config))
        self.classifier = nn.Linear(config.hidden_size, outputs or config.num_labels)

    def forward(self, out: EncoderOutput) -> dict[str, torch.Tensor]:
        return {"logits": self.classifier(self.dropout(out.pooler_output))}  # (B, C)


class FirstTokenHead(Head):
    """Sentence classifier with its own hidden layer on the first token, for encoders without a
    pre-trained pooler: dropout, dense, activation (tanh for RoBERTa, GELU for ELECTRA, ReLU for
    DistilBERT), dropout, projection to `outputs` (default: the config's labels; 1 for multiple
    choice). `dense=False` leaves the hidden layer out (an ELECTRA sequence summary may)."""

    reads_first_token = True
    fp32_scores = True

    def __init__(self, config: EncoderConfig, act: str, input_dropout: float, hidden_dropout: float,
                 outputs: int | None = None, dense: bool = True):
        super().__init__()
        self.input_dropout = Dropout(input_dropout)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size) if dense else nn.Identity()
        self.act = activation(act)
        self.dropout = Dropout(hidden_dropout)
        self.out_proj = nn.Linear(config.hidden_size, outputs or config.num_labels)

    def forward(self, out: EncoderOutput) -> dict[str, torch.Tensor]:
        x = self.act(self.dense(self.input_dropout(out.last_hidden_state[:, 0])))  # (B, H)
        return {"logits": self.out_proj(self.dropout(x))}                            # (B, C)


class TokenClassificationHead(Head):
    """Dropout + linear on every token (BERT sec. 5.3, NER)."""

    fp32_scores = True

    def __init__(self, config: EncoderConfig, dropout: float | None = None):
        super().__init__()
        self.dropout = Dropout(classifier_dropout(config) if dropout is None else dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, out: EncoderOutput) -> dict[str, torch.Tensor]:
        return {"logits": self.classifier(self.dropout(out.last_hidden_state))}  # (B, T, C)


class SpanHead(Head):
    """Extractive QA (BERT sec. 4.2): one linear layer scores every token as span start and end."""

    fp32_scores = True

    def __init__(self, config: EncoderConfig, dropout: float = 0.0):
        super().__init__()
        self.dropout = Dropout(dropout)
        self.qa = nn.Linear(config.hidden_size, 2)

    def forward(self, out: EncoderOutput) -> dict[str, torch.Tensor]:
        start, end = self.qa(self.dropout(out.last_hidden_state)).unbind(dim=-1)  # 2 x (B, T)
        return {"start_logits": start, "end_logits": end}


def standard_head(kind: str, config: EncoderConfig, word_embeddings: nn.Embedding) -> nn.Module:
    """BERT's heads by kind; families override the kinds where their heads differ."""
    if kind == "mlm":
        return MLMHead(config, word_embeddings)
    if kind == "pretraining":
        return PreTrainingHead(MLMHead(config, word_embeddings), PairHead(config))
    if kind == "classification":
        return SequenceClassificationHead(config)
    if kind == "token-classification":
        return TokenClassificationHead(config)
    if kind == "qa":
        return SpanHead(config)
    if kind == "multiple-choice":
        return SequenceClassificationHead(config, outputs=1)
    raise ValueError(f"unknown head kind {kind!r}")
