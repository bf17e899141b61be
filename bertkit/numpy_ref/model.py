"""BERT for masked-LM pre-training in NumPy: the forward pass and its hand-written backward.

    model = BertForMaskedLM(get_preset("mini-bert").config)            # N(0, 0.02) init, float32
    logits = model.forward(input_ids, attention_mask)                   # (B, T, V)
    step = model.forward_backward(input_ids, attention_mask, labels)    # loss; grads in model.grads

The computation is BERT's (Devlin et al., 2019): embeddings -> post-LN blocks -> MLM head whose
decoder is the word-embedding table. Parameter names are the torch model's
(`bertkit.build(..., head="mlm").named_parameters()`), so weights move between the two by name.

Backpropagation runs the ops in reverse, each op turning the gradient of its output into the
gradient of its input (ops.py). With `recompute=True` a block keeps only its input during the
forward pass and runs its forward again just before its backward (activation checkpointing,
Chen et al., 2016): memory for one block's activations instead of all of them, for about one
more forward pass of compute.

Dimension legend: B batch, T sequence length, H hidden size, N heads, D head size, F
intermediate size, V vocabulary, K predicted (masked) positions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config import EncoderConfig
from ..errors import BertkitError
from .ops import GELU, Dropout, Embeddings, LayerNorm, Linear, SelfAttention, cross_entropy

DTYPES = (np.float32, np.float64)
IGNORE_INDEX = -100  # label of a position without a prediction (torch's and transformers' value)


def check_supported(config: EncoderConfig) -> None:
    """The NumPy reference implements BERT itself: post-LN blocks and the exact GELU."""
    if config.family != "bert":
        raise BertkitError(f"the NumPy reference implements BERT; this config is {config.family!r}")
    if config.norm_first:
        raise BertkitError("the NumPy reference implements post-LN BERT; this config is pre-LN (norm_first)")
    if config.hidden_act not in ("gelu", "gelu_python"):  # (transformers' gelu_python is the erf GELU too)
        raise BertkitError(f"the NumPy reference implements the exact GELU; this config uses {config.hidden_act!r}")


def compute_dtype(dtype) -> type:
    """float32 or float64 as NumPy's scalar type; any other (float16, int, a name NumPy does not
    know such as "bfloat16") is one error line."""
    asked = getattr(dtype, "__name__", dtype)
    try:
        found = np.dtype(dtype).type
    except TypeError:
        found = None
    if found not in DTYPES:
        raise BertkitError(f"the NumPy reference computes in float32 or float64, not {asked}")
    return found


def parameter_shapes(config: EncoderConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter's name and shape, named as in the torch Model with an MLM head."""
    H, F, V = config.hidden_size, config.intermediate_size, config.vocab_size
    shapes = {"backbone.embeddings.word.weight": (V, H),
              "backbone.embeddings.position.weight": (config.max_positions, H)}
    if config.type_vocab_size:
        shapes["backbone.embeddings.token_type.weight"] = (config.type_vocab_size, H)
    shapes.update({"backbone.embeddings.norm.weight": (H,), "backbone.embeddings.norm.bias": (H,)})
    for i in range(config.num_layers):
        p = f"backbone.encoder.layers.{i}."
        for name, out, inp in (("attn.query", H, H), ("attn.key", H, H), ("attn.value", H, H),
                               ("attn.out_proj", H, H), ("ffn.up", F, H), ("ffn.down", H, F)):
            shapes[p + name + ".weight"] = (out, inp)
            shapes[p + name + ".bias"] = (out,)
        for norm in ("attn_norm", "ffn_norm"):
            shapes[p + norm + ".weight"] = (H,)
            shapes[p + norm + ".bias"] = (H,)
    shapes.update({"head.transform.weight": (H, H), "head.transform.bias": (H,),
                   "head.norm.weight": (H,), "head.norm.bias": (H,), "head.bias": (V,)})
    if not config.tie_word_embeddings:
        shapes["head.decoder.weight"] = (V, H)
    return shapes


def init_params(config: EncoderConfig, dtype, seed: int) -> dict[str, np.ndarray]:
    """BERT's initializer (as the torch side's layers/init.py): matrices and embeddings
    ~ N(0, initializer_range), biases 0, LayerNorm gains 1, the padding row 0."""
    rng = np.random.default_rng(seed)
    params = {}
    for name, shape in parameter_shapes(config).items():
        if name.endswith("norm.weight"):
            value = np.ones(shape)
        elif len(shape) == 2:
            value = rng.normal(0.0, config.initializer_range, shape)
        else:
            value = np.zeros(shape)
        params[name] = value.astype(dtype)
    params["backbone.embeddings.word.weight"][config.pad_token_id] = 0
    return params


class Block:
    """One post-LN transformer block (BERT; Vaswani et al., 2017, sec. 3.1):
        h = LN(x + Dropout(Attention(x)));   y = LN(h + Dropout(W2 GELU(W1 h)))
    Backward follows the same two residual sums in reverse: a sum passes its gradient to both
    of its inputs unchanged."""

    def __init__(self, params, grads, name: str, config: EncoderConfig):
        eps = config.layer_norm_eps
        self.attn = SelfAttention(params, grads, f"{name}.attn", config.num_heads, config.attention_dropout)
        self.attn_dropout = Dropout(config.hidden_dropout)
        self.attn_norm = LayerNorm(params, grads, f"{name}.attn_norm", eps)
        self.up = Linear(params, grads, f"{name}.ffn.up.weight", f"{name}.ffn.up.bias")
        self.act = GELU()
        self.down = Linear(params, grads, f"{name}.ffn.down.weight", f"{name}.ffn.down.bias")
        self.ffn_dropout = Dropout(config.hidden_dropout)
        self.ffn_norm = LayerNorm(params, grads, f"{name}.ffn_norm", eps)
        self.ops = (self.attn, self.attn_dropout, self.attn_norm, self.up, self.act, self.down,
                    self.ffn_dropout, self.ffn_norm)

    def forward(self, x: np.ndarray, mask_bias: np.ndarray | None, seed: int | None) -> np.ndarray:
        """x (B, T, H) -> (B, T, H). `seed` (training) seeds this block's dropout masks, so a
        recomputation draws the same ones; None = no dropout."""
        rng = None if seed is None else np.random.default_rng(seed)
        a = self.attn_dropout.forward(self.attn.forward(x, mask_bias, rng), rng)
        h = self.attn_norm.forward(x + a)                                    # (B, T, H)
        f = self.down.forward(self.act.forward(self.up.forward(h)))          # (B, T, F) -> (B, T, H)
        return self.ffn_norm.forward(h + self.ffn_dropout.forward(f, rng))   # (B, T, H)

    def backward(self, dy: np.ndarray) -> np.ndarray:
        dh = self.ffn_norm.backward(dy)                     # gradient of h + f
        df = self.ffn_dropout.backward(dh)
        dh = dh + self.up.backward(self.act.backward(self.down.backward(df)))
        dx = self.attn_norm.backward(dh)                    # gradient of x + a
        return dx + self.attn.backward(self.attn_dropout.backward(dx))

    def release(self) -> None:
        for op in self.ops:
            op.release()


class MLMHead:
    """BERT's masked-LM head (sec. 3.1, task #1; transformers' BertLMPredictionHead):
    dense + GELU + LayerNorm, then the decoder z = x E^T + b with E the word-embedding table."""

    def __init__(self, params, grads, config: EncoderConfig):
        decoder = "backbone.embeddings.word.weight" if config.tie_word_embeddings else "head.decoder.weight"
        self.transform = Linear(params, grads, "head.transform.weight", "head.transform.bias")
        self.act = GELU()
        self.norm = LayerNorm(params, grads, "head.norm", config.layer_norm_eps)
        self.decoder = Linear(params, grads, decoder, "head.bias")
        self.ops = (self.transform, self.act, self.norm, self.decoder)

    def forward(self, h: np.ndarray) -> np.ndarray:
        """(..., H) -> (..., V)."""
        return self.decoder.forward(self.norm.forward(self.act.forward(self.transform.forward(h))))

    def backward(self, dz: np.ndarray) -> np.ndarray:
        return self.transform.backward(self.act.backward(self.norm.backward(self.decoder.backward(dz))))

    def release(self) -> None:
        for op in self.ops:
            op.release()


@dataclass
class StepResult:
    loss: float          # mean cross-entropy over the predicted positions
    accuracy: float      # fraction of predicted positions whose argmax is the label
    predicted: int       # K, the number of predicted positions


class BertForMaskedLM:
    """BERT with its masked-LM head, parameters and gradients as two dicts of NumPy arrays.

    `training` turns dropout on (eval() / train() switch it); `recompute` trades compute for
    memory in forward_backward (see the module docstring)."""

    def __init__(self, config: EncoderConfig, dtype=np.float32, seed: int = 0,
                 params: dict[str, np.ndarray] | None = None):
        check_supported(config)
        dtype = compute_dtype(dtype)
        self.config, self.dtype = config, dtype
        self.params = init_params(config, dtype, seed) if params is None else self._checked(params)
        self.grads = {k: np.zeros_like(v) for k, v in self.params.items()}
        self.embeddings = Embeddings(self.params, self.grads, "backbone.embeddings", config.layer_norm_eps,
                                     config.pad_token_id, config.type_vocab_size > 0, config.hidden_dropout)
        self.blocks = [Block(self.params, self.grads, f"backbone.encoder.layers.{i}", config)
                       for i in range(config.num_layers)]
        self.head = MLMHead(self.params, self.grads, config)
        self.rng = np.random.default_rng(seed)  # seeds for the dropout masks
        self.training = False
        self.recompute = False

    def _checked(self, params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        shapes = parameter_shapes(self.config)
        missing, unexpected = sorted(set(shapes) - set(params)), sorted(set(params) - set(shapes))
        if missing or unexpected:
            raise BertkitError(f"parameters do not match the config: missing {missing[:5]}, "
                               f"unexpected {unexpected[:5]}")
        out = {}
        for name, shape in shapes.items():
            value = np.asarray(params[name])
            if value.shape != shape:
                raise BertkitError(f"parameter {name} has shape {value.shape}; the config needs {shape}")
            out[name] = np.array(value, dtype=self.dtype)  # a copy: the model owns its arrays
        return out

    # ---- modes and housekeeping -------------------------------------------------------------
    def train(self) -> "BertForMaskedLM":
        self.training = True
        return self

    def eval(self) -> "BertForMaskedLM":
        self.training = False
        return self

    def zero_grad(self) -> None:
        for g in self.grads.values():
            g.fill(0)

    def astype(self, dtype) -> "BertForMaskedLM":
        """A copy of this model computing in `dtype` (float32 or float64)."""
        return BertForMaskedLM(self.config, dtype, params=self.params)

    def num_parameters(self) -> int:
        """Unique parameters (the tied decoder counts once), as torch and transformers count."""
        return sum(v.size for v in self.params.values())

    def save_pretrained(self, path, dtype: str | None = None) -> None:
        """Hugging Face BertForMaskedLM format (config.json + model.safetensors), in `dtype`
        (None: the model's own, so a float64 model's training is kept whole); see hf_io.py."""
        from .hf_io import save_pretrained

        save_pretrained(self, path, dtype)

    # ---- inputs -----------------------------------------------------------------------------
    def _inputs(self, input_ids, attention_mask, token_type_ids):
        """Checked integer ids, the additive mask bias (B, 1, 1, T) or None, and token types."""
        ids = np.asarray(input_ids)
        if ids.ndim != 2 or not np.issubdtype(ids.dtype, np.integer) or ids.shape[1] < 1:
            raise BertkitError(f"input_ids must be a (batch, length) integer array, length >= 1; got {ids.dtype} "
                               f"{ids.shape}")
        if ids.shape[1] > self.config.max_positions:
            raise BertkitError(f"sequence length {ids.shape[1]} exceeds the model's maximum of "
                               f"{self.config.max_positions} tokens")
        if ids.size and (ids.min() < 0 or ids.max() >= self.config.vocab_size):
            raise BertkitError(f"input_ids must lie in [0, {self.config.vocab_size})")
        types = None
        if token_type_ids is not None:
            types = np.asarray(token_type_ids)
            if types.shape != ids.shape:
                raise BertkitError(f"token_type_ids has shape {types.shape} but input_ids has {ids.shape}")
            if types.size and (types.min() < 0 or types.max() >= max(self.config.type_vocab_size, 1)):
                raise BertkitError(f"token_type_ids must lie in [0, {self.config.type_vocab_size})")
        return ids, self._mask_bias(attention_mask, ids.shape), types

    def _mask_bias(self, attention_mask, shape) -> np.ndarray | None:
        """The (B, T) padding mask (1/True = real token) as an additive score bias: 0 for real
        keys, -inf for padding, so softmax gives padding exactly zero weight. A row with no
        real token attends everywhere (finite numbers instead of NaN), as on the torch side."""
        if attention_mask is None:
            return None
        keys = np.asarray(attention_mask)
        if keys.shape != shape:
            raise BertkitError(f"attention_mask has shape {keys.shape} but input_ids has {shape}")
        keys = keys.astype(bool)
        keys |= ~keys.any(axis=-1, keepdims=True)
        if keys.all():
            return None
        bias = np.where(keys, 0.0, -np.inf).astype(self.dtype)
        return bias[:, None, None, :]  # (B, 1, 1, T)

    # ---- forward ----------------------------------------------------------------------------
    def hidden_states(self, input_ids, attention_mask=None, token_type_ids=None) -> np.ndarray:
        """The encoder's last hidden states (B, T, H). Each block's cache is released as soon as
        the next block has its input: inference holds one block's activations at a time."""
        ids, mask_bias, types = self._inputs(input_ids, attention_mask, token_type_ids)
        x = self.embeddings.forward(ids, types)
        self.embeddings.release()
        for block in self.blocks:
            x = block.forward(x, mask_bias, None)
            block.release()
        return x

    def forward(self, input_ids, attention_mask=None, token_type_ids=None) -> np.ndarray:
        """Masked-LM logits (B, T, V) for every position (dropout off, whatever the mode).
        Rows at padding positions are finite numbers without meaning (the torch side's differ)."""
        logits = self.head.forward(self.hidden_states(input_ids, attention_mask, token_type_ids))
        self.head.release()
        return logits

    __call__ = forward

    def mlm_loss(self, input_ids, attention_mask, labels, token_type_ids=None) -> StepResult:
        """The masked-LM loss and accuracy without gradients (evaluation; dropout off)."""
        h = self.hidden_states(input_ids, attention_mask, token_type_ids)    # (B, T, H)
        flat, where = self._label_positions(labels, h.shape[:2])             # (B*T,), (K,)
        if where.size == 0:
            return StepResult(0.0, 0.0, 0)
        logits = self.head.forward(h.reshape(-1, h.shape[-1])[where])        # (K, V)
        self.head.release()
        loss, _ = cross_entropy(logits, flat[where])
        return StepResult(loss, float(np.mean(logits.argmax(axis=-1) == flat[where])), int(where.size))

    def _label_positions(self, labels, shape) -> tuple[np.ndarray, np.ndarray]:
        """(labels flattened, the positions that have one), checked: a shape other than the ids'
        or a label outside the vocabulary would score other positions or other tokens silently
        (a negative label indexes from the end)."""
        labels = np.asarray(labels)
        if labels.shape != tuple(shape):
            raise BertkitError(f"labels has shape {labels.shape} but input_ids has {tuple(shape)}")
        if labels.dtype.kind not in "iu":  # a float label array failed as NumPy's IndexError
            raise BertkitError(f"labels must be integer token ids (or -100), got {labels.dtype}")
        flat = labels.reshape(-1)
        where = np.flatnonzero(flat != IGNORE_INDEX)
        if where.size and (flat[where].min() < 0 or flat[where].max() >= self.config.vocab_size):
            raise BertkitError(f"labels must be -100 or lie in [0, {self.config.vocab_size})")
        return flat, where

    # ---- training ---------------------------------------------------------------------------
    def forward_backward(self, input_ids, attention_mask, labels, token_type_ids=None,
                         scale: float = 1.0) -> StepResult:
        """One micro-batch: the MLM loss at the positions whose label is not -100, and the
        gradient of `scale * loss` added into `self.grads` (scale = 1 / accumulation steps).

        The vocabulary projection runs only at the K predicted positions, never at the ~85% of
        tokens without a label: the largest matmul of the step shrinks by as much (MosaicBERT;
        Geiping & Goldstein 2023, Cramming)."""
        ids, mask_bias, types = self._inputs(input_ids, attention_mask, token_type_ids)
        flat_labels, where = self._label_positions(labels, ids.shape)  # (B*T,), (K,)
        seeds = (self.rng.integers(2**63, size=len(self.blocks) + 1).tolist() if self.training
                 else [None] * (len(self.blocks) + 1))
        B, T = ids.shape
        H = self.config.hidden_size

        # Forward, keeping each block's input; its insides only without recomputation.
        rng = None if seeds[0] is None else np.random.default_rng(seeds[0])
        x = self.embeddings.forward(ids, types, rng)
        inputs = []
        for block, seed in zip(self.blocks, seeds[1:]):
            inputs.append(x)
            x = block.forward(x, mask_bias, seed)
            if self.recompute:
                block.release()

        if where.size == 0:  # nothing to predict: zero loss, zero gradient (as the torch side)
            self._release()
            return StepResult(0.0, 0.0, 0)
        logits = self.head.forward(x.reshape(B * T, H)[where])       # (K, H) -> (K, V)
        targets = flat_labels[where]
        loss, dlogits = cross_entropy(logits, targets)
        accuracy = float(np.mean(logits.argmax(axis=-1) == targets))
        if scale != 1.0:
            dlogits *= scale

        # Backward, in exactly the reverse order.
        dx = np.zeros((B * T, H), dtype=self.dtype)
        dx[where] = self.head.backward(dlogits)                      # scatter (K, H) back
        dx = dx.reshape(B, T, H)                                     # (B, T, H)
        for block, x_in, seed in zip(reversed(self.blocks), reversed(inputs), reversed(seeds[1:])):
            if self.recompute:
                block.forward(x_in, mask_bias, seed)                 # same seed, same dropout masks
            dx = block.backward(dx)
            block.release()
        self.embeddings.backward(dx)
        self._release()
        return StepResult(loss, accuracy, int(where.size))

    def _release(self) -> None:
        self.embeddings.release()
        self.head.release()
        for block in self.blocks:
            block.release()
