"""The bare encoder: embeddings -> block stack -> optional pooler.

Shapes: B batch, T sequence length, H hidden size.
"""

from __future__ import annotations

import torch
from torch import nn

from ..errors import BertkitError
from .block import Encoder
from .masks import attention_mask_4d, key_padding_mask
from .packing import Packing
from .scratch import func_transforming
from .output import EncoderOutput


class Pooler(nn.Module):
    """BERT's pooler (sec. 3): dense + tanh on the first ([CLS]) token, feeding sentence-level heads."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(x[:, 0]))  # (B, H)


class EncoderModel(nn.Module):
    """`projection` maps embeddings of width E to the hidden width H when they differ (the
    factorized embeddings of ALBERT and ELECTRA)."""

    def __init__(self, embeddings: nn.Module, encoder: Encoder, pooler: nn.Module | None = None,
                 projection: nn.Module | None = None):
        super().__init__()
        self.embeddings = embeddings
        self.projection = projection
        self.encoder = encoder
        self.pooler = pooler
        # Run the blocks on real tokens only (packing.py); False keeps the padded computation.
        self.unpad = True
        # Whether the head reads the first position's state (Head.reads_first_token); the pooler does.
        self.reads_first_token = False

    def forward(self, input_ids: torch.Tensor | None, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, output_attentions: bool = False,
                output_hidden_states: bool = False, rows: torch.Tensor | None = None,
                inputs_embeds: torch.Tensor | None = None, position_ids: torch.Tensor | None = None
                ) -> EncoderOutput:
        """`rows` (B, T) bool: the positions whose final states the caller needs (MLM: the masked
        ones); last_hidden_state is then (K, H), those states in row-major order, and the last
        block computes little else (Encoder.forward). `inputs_embeds` (B, T, E): word vectors
        in place of input_ids (None then), e.g. for gradients with respect to the input.
        `position_ids` (B, T) or (1, T): see Model.forward."""
        if inputs_embeds is not None:
            input_ids = stand_in_ids(input_ids, inputs_embeds, self.embeddings)
        check_ids(input_ids, token_type_ids, self.embeddings)
        keys = key_padding_mask(attention_mask, input_ids)  # (B, T) bool or None
        check_mask(attention_mask)
        check_positions(position_ids, input_ids, keys, self.embeddings)
        given = {} if position_ids is None else {"positions": position_ids.to(input_ids.device)}
        x = self.embeddings(input_ids, token_type_ids, words=inputs_embeds, **given)  # (B, T, E)
        if self.projection is not None:
            x = self.projection(x)                          # (B, T, H)
        # torch.jit.trace records one batch's control flow: unpadding (its lengths) and dropping an
        # all-True mask would hold only for that batch's mask, so a trace keeps the padded path;
        # so do a torch.func transform (vmap cannot branch on a batched tensor's values) and a
        # whole-model torch.compile / torch.export (one graph, no break on the mask's values;
        # model.compile() compiles the blocks alone and keeps unpadding); a meta tensor has no
        # values to branch on (shapes only, e.g. to size a model's outputs without memory).
        static_flow = (torch.jit.is_tracing() or func_transforming() or torch.compiler.is_compiling()
                       or input_ids.is_meta)
        padded = keys is not None and (static_flow or not bool(keys.all()))  # all-True masks nothing: drop it
        # A first position that is read (the pooler, a classifier on [CLS]) but is padding (left
        # padding) is not in the packed stream: the padded computation gives it the state
        # transformers gives it (a pad query attending to the real tokens, or what the family's
        # SelfAttention.padding_queries says).
        first_pad = (padded and not static_flow and (self.pooler is not None or self.reads_first_token)
                     and not bool(keys[:, 0].all()))
        unpad = self.unpad and padded and not static_flow and not first_pad
        packing = Packing.from_mask(keys, self.encoder.bucket_work) if unpad else None
        if packing is not None and self.encoder.slot_distances and not packing.contiguous:
            packing = None  # a mask hole between two tokens would shorten their distance in the packed stream
        if packing is not None:
            x = packing.unpad(x)                            # (total, H)
        # The positions whose final states this forward needs: `rows` and, for the pooler, each
        # first ([CLS]) token.
        wanted, first = rows, None
        if rows is not None and self.pooler is not None:
            first = torch.zeros_like(rows)
            first[:, 0] = True
            wanted = rows | first
        needed = None if rows is None else _indices(wanted, keys if packing is not None else None)
        mask = attention_mask_4d(keys if padded else None)  # (B, 1, 1, T) or None
        x, attentions, states = self.encoder(x, mask, output_attentions, packing, output_hidden_states,
                                             rows=needed)
        if packing is not None:
            states = tuple(packing.pad(s) for s in states)  # (B, T, H)
        if needed is None:
            x = x if packing is None else packing.pad(x)    # (B, T, H)
            pooled = self.pooler(x) if self.pooler is not None else None
            x = x if rows is None else x[rows]              # (K, H)
        else:  # x: (K', H), the states at `wanted`
            pooled = self.pooler(x[first[wanted]][:, None]) if first is not None else None  # (B, H)
            x = x[rows[wanted]]                             # (K, H)
        return EncoderOutput(
            last_hidden_state=x,
            pooler_output=pooled,
            attentions=attentions if output_attentions else None,
            hidden_states=states if output_hidden_states else None,
            attention_mask=keys,
            real_tokens=None if packing is None else packing.index,
        )


def stand_in_ids(input_ids, inputs_embeds, embeddings: nn.Module) -> torch.Tensor:
    """(B, T) ids that give inputs_embeds' rows their shape and positions: none of them padding,
    so RoBERTa numbers them pad+1, pad+2, ... as transformers does for inputs_embeds."""
    if input_ids is not None:
        raise BertkitError("give input_ids or inputs_embeds, not both")
    width = embeddings.word.embedding_dim
    if not isinstance(inputs_embeds, torch.Tensor) or inputs_embeds.dim() != 3 or inputs_embeds.shape[-1] != width:
        got = tuple(inputs_embeds.shape) if isinstance(inputs_embeds, torch.Tensor) else type(inputs_embeds).__name__
        raise BertkitError(f"inputs_embeds must be (batch, length, {width}), the word embedding width; got {got}")
    if inputs_embeds.dtype != embeddings.word.weight.dtype and not torch.is_autocast_enabled(inputs_embeds.device.type):
        raise BertkitError(f"inputs_embeds are {inputs_embeds.dtype} but the model's weights are "
                           f"{embeddings.word.weight.dtype}: convert one to the other")
    real = 1 if embeddings.word.padding_idx == 0 else 0
    return torch.full(inputs_embeds.shape[:2], real, dtype=torch.long, device=inputs_embeds.device)  # (B, T)


ID_DTYPES = (torch.int64, torch.int32)  # what an embedding lookup takes (not int16, uint8, ...)


def _recording(t: torch.Tensor) -> bool:
    """Whether `t`'s values cannot be checked: shapes only (meta, empty), or recorded."""
    return (torch.jit.is_tracing() or torch.compiler.is_compiling() or func_transforming() or t.numel() == 0
            or t.is_meta)


def check_mask(attention_mask: torch.Tensor | None) -> None:
    """One error for a mask that is not 1 / True for real tokens and 0 for padding: an additive
    0 / -inf mask was read as one, its pads attending and its tokens not, and the unpadded and
    padded paths then disagreed (by 2.3 on DeBERTa and ModernBERT). Skipped while recording."""
    if attention_mask is None or attention_mask.dtype == torch.bool or _recording(attention_mask):
        return
    odd = (attention_mask != 0) & (attention_mask != 1)
    if bool(odd.any()):
        b, t = odd.nonzero()[0].tolist()
        raise BertkitError(f"attention_mask[{b}, {t}] is {attention_mask[b, t].item():g}: a mask is 1 (or True) "
                           "for a real token and 0 for padding (an additive 0 / -inf mask is not one)")


def check_ids(input_ids, token_type_ids, embeddings: nn.Module) -> None:
    """One clear error for ids the embeddings cannot look up (torch's own: an IndexError on CPU,
    a device-side assert that poisons the CUDA context on GPU). The value checks are skipped
    where they cannot run: while torch.jit.trace, torch.compile or a torch.func transform records
    (they would freeze or break on data)."""
    tensor = isinstance(input_ids, torch.Tensor)
    if not (tensor and input_ids.dim() == 2 and input_ids.shape[1] > 0 and input_ids.dtype in ID_DTYPES):
        got = f"shape {tuple(input_ids.shape)}, {input_ids.dtype}" if tensor else type(input_ids).__name__
        hint = " (one sequence: pass ids[None])" if tensor and input_ids.dim() == 1 else ""
        raise BertkitError("input_ids must be a (batch, length) tensor of int64 or int32 token ids, length >= 1; "
                           f"got {got}{hint}")
    if token_type_ids is not None and getattr(token_type_ids, "shape", None) != input_ids.shape:
        got = tuple(getattr(token_type_ids, "shape", ())) or type(token_type_ids).__name__
        raise BertkitError(f"token_type_ids has shape {got} but input_ids has {tuple(input_ids.shape)}")
    if token_type_ids is not None and token_type_ids.dtype not in ID_DTYPES:
        raise BertkitError(f"token_type_ids must be int64 or int32, got {token_type_ids.dtype}")
    if _recording(input_ids):
        return
    for name, ids, table in (("input_ids", input_ids, embeddings.word),
                             ("token_type_ids", token_type_ids, getattr(embeddings, "token_type", None))):
        if ids is None or table is None:
            continue
        low, high = (int(v) for v in torch.aminmax(ids))
        if low < 0 or high >= table.num_embeddings:
            added = "; tokens added to a tokenizer need model.resize_token_embeddings(len(tokenizer))" \
                if name == "input_ids" and low >= 0 else ""
            raise BertkitError(f"{name} holds id {low if low < 0 else high}, outside the embedding table's "
                               f"{table.num_embeddings} rows (ids 0..{table.num_embeddings - 1}){added}")


def check_positions(position_ids, input_ids: torch.Tensor, keys: torch.Tensor | None,
                    embeddings: nn.Module) -> None:
    """One clear error for position_ids the embeddings cannot follow: not (B, T) or (1, T)
    integers, outside the position table, or, for rotary positions, not a shift of each
    sequence's slots (only differences count there; see ModernEmbeddings.rotary_positions)."""
    if position_ids is None:
        return
    B, T = input_ids.shape
    if not (isinstance(position_ids, torch.Tensor) and position_ids.dtype in ID_DTYPES and position_ids.dim() == 2
            and position_ids.shape[0] in (1, B) and position_ids.shape[1] == T):
        got = (f"shape {tuple(position_ids.shape)}, {position_ids.dtype}" if isinstance(position_ids, torch.Tensor)
               else type(position_ids).__name__)
        raise BertkitError(f"position_ids must be a ({B}, {T}) or (1, {T}) tensor of int64 or int32 positions, "
                           f"as input_ids; got {got}")
    if torch.jit.is_tracing() or torch.compiler.is_compiling() or func_transforming() or position_ids.is_meta:
        return
    table = getattr(embeddings, "position", None)
    size = table.num_embeddings if isinstance(table, nn.Embedding) else None
    low, high = (int(v) for v in torch.aminmax(position_ids))
    if low < 0 or (size is not None and high >= size):
        raise BertkitError(f"position_ids holds {low if low < 0 else high}, outside the position table's {size} rows "
                           f"(0..{size - 1})" if size is not None else f"position_ids holds {low}, below 0")
    if getattr(embeddings, "rotary_positions", False):
        shift = (position_ids.to(input_ids.device) - torch.arange(T, device=input_ids.device)).expand(B, T)
        real = keys if keys is not None else torch.ones_like(shift, dtype=torch.bool)
        first = shift.gather(1, real.long().argmax(1, keepdim=True))  # (B, 1): at each first real token
        if ((shift != first) & real).any():
            raise BertkitError("position_ids must count up by one over each sequence's real tokens here: this "
                               "family's positions are rotations, relative between tokens, so a shift (as left "
                               "padding gives) changes nothing and other orders cannot be followed")


def _indices(wanted: torch.Tensor, real: torch.Tensor | None) -> torch.Tensor | None:
    """(B, T) bool -> indices into the encoder's flattened tokens: all B * T of them, or only the
    real ones when the stream is packed (`real`). None when a wanted position is padding, which
    the packed stream does not hold: then every token is computed and the rows picked after."""
    if real is not None:
        if (wanted & ~real).any():
            return None
        wanted = wanted[real]  # (total,)
    return wanted.flatten().nonzero().squeeze(1)
