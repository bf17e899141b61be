"""`Model`: an encoder plus an optional task head, the object users build, load, run and save."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path

import torch
from torch import nn

from .config import HEADS, EncoderConfig, get_preset
from .errors import BertkitError, outside_stacklevel
from .files import output_dir
from .layers import EncoderOutput, init_weights
from .layers.dense import pack, packed, unpack
from .models import assemble


# the dtypes a model computes in (float8 and the like load, then fail in the first addition)
RUNNABLE_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def model_dtype(value, what: str = "dtype", also: str = " (a torch dtype or its name)") -> torch.dtype:
    """A dtype the models run in, from a torch dtype or its name ("bfloat16", "torch.float16",
    "half", as transformers takes them), else one error naming `what` and `also`, what else it takes."""
    found = getattr(torch, value.removeprefix("torch."), None) if isinstance(value, str) else value
    if not any(found is d for d in RUNNABLE_DTYPES):
        raise BertkitError(f"{what} must be float32, float64, float16 or bfloat16{also}, got {value!r}")
    return found


class Model(nn.Module):
    """An encoder of any family (`config.family`) with an optional head (`head`: None, "mlm",
    "pretraining", "classification", "token-classification", "qa", "multiple-choice") and the
    tokenizer that goes with it. Build one with `bertkit.build(preset_or_config, head=...)` or
    load one with `bertkit.from_pretrained(path)`; `model(input_ids, attention_mask,
    token_type_ids)` returns an EncoderOutput (last_hidden_state, logits, ...);
    `save_pretrained(path)` writes Hugging Face format."""

    def __init__(self, config: EncoderConfig, head: str | None = None, tokenizer=None):
        super().__init__()
        if not isinstance(config, EncoderConfig):  # a preset's name: bertkit.build(name)
            raise BertkitError(f"Model takes an EncoderConfig, not {type(config).__name__} "
                               "(bertkit.build(name) builds a preset)")
        if head not in HEADS:
            raise BertkitError(f"unknown head {head!r}; choose one of {', '.join(map(str, HEADS))}")
        self.config = config
        self.head_kind = head
        self.backbone, self.head = assemble(config, head)
        self.tokenizer = tokenizer
        # Other tools' files of the folder it was loaded from (sentence-transformers' pooling and
        # settings), relative path -> bytes: written back by save_pretrained, so a copy embeds alike.
        self.companion_files: dict[str, bytes] = {}
        # config.json entries that change nothing here but mean something to other tools (the
        # special-token ids, ModernBERT's sparse_prediction ...): save_pretrained writes them back.
        self.carried_config: dict = {}
        init_weights(self, config.initializer_range)

    def forward(self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, output_attentions: bool = False,
                output_hidden_states: bool = False, masked_positions: torch.Tensor | None = None,
                inputs_embeds: torch.Tensor | None = None, position_ids: torch.Tensor | None = None
                ) -> EncoderOutput:
        """`masked_positions` (B, T) bool: compute MLM logits only there; `logits` is then (K, V)
        and `last_hidden_state` (K, H) for the K True entries in row-major order (what an MLM loss
        needs, at a fraction of the cost: the vocabulary projection and the last block, all but
        its keys and values, run on those rows only).

        A multiple-choice model takes (B, C, T) inputs, each context paired with each of its C
        choices, and runs them as B * C sequences: `logits` is (B, C), one score per choice, and
        the encoder's outputs are per sequence, (B * C, T, H), as in transformers.

        `inputs_embeds` (B, T, E) (multiple choice: (B, C, T, E)) stands for input_ids, which is
        then None: the word vectors themselves, as transformers takes them (e.g. to take
        gradients with respect to them); positions, token types and LayerNorm still apply.

        `position_ids` (B, T) or (1, T) (multiple choice: (B, C, T)): which row of the position
        table each token gets, as in transformers, e.g. numbering a left-padded sequence from its
        first real token so that it reads as it does alone. Families without a position table
        have nothing to number: DeBERTa's relative attention ignores them (as transformers does),
        and ModernBERT's rotary positions take them only as a shift, which changes nothing."""
        choices = None
        if self.head_kind == "multiple-choice":
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, choices = _flat_choices(
                input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        shape = getattr(input_ids, "shape", None) if input_ids is not None else getattr(inputs_embeds, "shape", (None,))[:-1]
        if masked_positions is not None:
            if self.head is None or not self.head.predicts_tokens:
                held = (f"its {self.head_kind!r} head is a {type(self.head).__name__}, which predicts no tokens"
                        if self.head is not None else "it has no head")
                raise BertkitError(f"masked_positions needs a masked-LM head; {held}")
            if masked_positions.shape != shape:
                raise BertkitError(f"masked_positions has shape {tuple(masked_positions.shape)} but the input "
                                   f"has {tuple(shape)}")
            masked_positions = masked_positions.to(device=self.backbone.embeddings.word.weight.device,
                                                   dtype=torch.bool)
        head_needs_states = self.head is not None and self.head.uses_hidden_states
        # A head that reads every layer (DeBERTa's enhanced mask decoder) gets them in full: the
        # backbone then computes every token and picks the rows at the end.
        out = self.backbone(input_ids, attention_mask, token_type_ids, output_attentions,
                            output_hidden_states or head_needs_states, rows=masked_positions,
                            inputs_embeds=inputs_embeds, position_ids=position_ids)
        out.masked_positions = masked_positions
        if self.head is not None:
            for name, value in self._head(out).items():
                setattr(out, name, value)
        if choices is not None:
            out.logits = out.logits.view(-1, choices)  # (B, C)
        if not output_hidden_states:
            out.hidden_states = None
        return out

    def _head(self, out: EncoderOutput) -> dict[str, torch.Tensor]:
        """The head's outputs; a head whose scores are compared runs in fp32 under bf16 autocast
        (Head.fp32_scores), on the encoder's states as they are, where its weights are fp32 (a
        model cast to fp16 / bf16 runs its head as autocast runs it: fp32 states would meet half
        weights)."""
        device = out.last_hidden_state.device.type
        weight = next(self.head.parameters(), None)
        if not (self.head.fp32_scores and torch.amp.is_autocast_available(device)  # (not on meta)
                and torch.is_autocast_enabled(device) and weight is not None and weight.dtype == torch.float32):
            return self.head(out)
        exact = {k: getattr(out, k).float() for k in ("last_hidden_state", "pooler_output")
                 if getattr(out, k) is not None}
        with torch.autocast(device, enabled=False):
            return self.head(dataclasses.replace(out, **exact))

    def compile(self, freeze: bool = False, **options) -> "Model":
        """torch.compile the transformer blocks in place (residual + LayerNorm and the other
        elementwise work fused), with the token count as a dynamic dimension: a batch of new
        lengths reuses the compiled code instead of recompiling. Attention over packed tokens
        stays eager (its length-bucket loop depends on the data; see SelfAttention._unpadded),
        and on CPU the linears stay oneDNN calls with the activation fused (layers/dense.py).
        On the 2-core CPU this does not pay (bert-base, compiled against eager in one process:
        mixed lengths fp32 -6%, bf16 -2 to +9%, full-length bf16 -11%, the fp32 MLM training
        step within noise): eager already runs the matmuls that dominate through oneDNN.

        freeze=True (inference only, the model in eval mode): the weights become constants of
        the graph. Weights changed afterwards are not seen: compile again. Other `options` go
        to torch.compile, e.g. mode="max-autotune". Returns the model."""
        if freeze:
            if self.training:
                raise BertkitError("compile(freeze=True) is for inference: call model.eval() first")
            options["options"] = {**options.get("options", {}), "freezing": True}
        options.setdefault("dynamic", True)
        encoder = self.backbone.encoder
        # the blocks the forward pass calls (ALBERT's layers are groups of shared blocks), each once
        blocks = {id(b): b for b in map(encoder.layer_for, range(self.config.num_layers))}
        for block in blocks.values():
            block.compile(**options)
        return self

    def prepack(self, enabled: bool = True, dtype: torch.dtype | None = None) -> "Model":
        """For inference on CPU (the model in eval mode): keep every linear layer's weight also
        in oneDNN's blocked layout, which each matmul would otherwise rearrange it into on the
        fly (layers/dense.py). Measured on bert-base (2-core EPYC, in one process): +7% in bf16,
        +5% in fp32, the same numbers, for a second copy of those weights (bert-base: +170 MB in
        bf16). A weight replaced, moved or changed in place afterwards serves unpacked again
        (edits through `.data`, or in place on weights made under torch.inference_mode, are not
        seen: prepack again); `train()` drops the copies, as does prepack(False). On other
        devices and dtypes it does nothing, bf16 included on a CPU whose oneDNN has no bf16
        matmul (AVX2 only). dtype=torch.bfloat16 on an fp32 model packs bf16
        copies instead, which serve only under CPU autocast to bf16, computing what autocast
        would without casting the weights on each call. Returns the model."""
        if dtype is not None:
            given, dtype = dtype, model_dtype(dtype, "prepack's dtype")
            if dtype not in (torch.bfloat16, self.dtype):
                raise BertkitError(f"prepack's dtype is bfloat16 (copies for autocast) or the model's own "
                                   f"{self.dtype}, got {given!r}: cast the model (model.to(dtype)) to run in another")
        if enabled and self.training:
            raise BertkitError("prepack() is for inference: call model.eval() first")
        for module in self.modules():
            if type(module) is nn.Linear:
                pack(module, dtype) if enabled else unpack(module)
        return self

    @contextlib.contextmanager
    def prepacked(self, bf16: bool = False):
        """prepack() for the duration of a `with` block, for autocast to bf16 if `bf16`, and the
        copies dropped again at its end (the memory they hold is not kept). A model already
        prepacked stays as it is. For loops over many batches, where the packing (bert-base:
        40 ms for bf16 copies, 140 ms in fp32) is repaid many times over (tasks/base.py)."""
        if any(packed(m) for m in self.modules() if type(m) is nn.Linear):
            yield self
            return
        self.prepack(dtype=torch.bfloat16 if bf16 else None)
        try:
            yield self
        finally:
            self.prepack(False)

    @torch.no_grad()
    def resize_token_embeddings(self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None,
                                mean_resizing: bool = True) -> nn.Embedding:
        """Grow (or cut) the word embeddings to `new_num_tokens` rows (rounded up to a multiple of
        `pad_to_multiple_of`), as transformers' resize_token_embeddings: after tokens were added
        to the tokenizer, model.resize_token_embeddings(len(tokenizer)). An MLM head's decoder
        follows (tied: the same new table; untied: its own rows) and so does its output bias.
        New rows start at the mean of the old ones (`mean_resizing`; transformers draws them
        within about 1e-6 of it; a tied head's bias at 0, as there), else from the model's
        initializer (a bias at 0). config.vocab_size follows.
        Returns the new embedding module (the old one, untouched, without arguments)."""
        from .layers.heads import MLMHead

        word = self.backbone.embeddings.word
        if new_num_tokens is None and pad_to_multiple_of is None:
            return word
        self._refuse_if_shared("resizing one would split the pair; build the pair with vocab_size=len(tokenizer) "
                               "instead, or save a trained model and resize it loaded alone")
        n = word.num_embeddings if new_num_tokens is None else new_num_tokens
        for name, value in (("new_num_tokens", n), ("pad_to_multiple_of", pad_to_multiple_of)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise BertkitError(f"{name} must be a whole number of at least 1, got {value!r}")
        if pad_to_multiple_of:
            n = -(-n // pad_to_multiple_of) * pad_to_multiple_of
        config = self.config.replace(vocab_size=n)  # checked (a pad id past the cut) before any table changes
        self.prepack(False)  # the serving copies are of the old tables
        std = self.config.initializer_range
        padding = word.padding_idx if word.padding_idx is not None and word.padding_idx < n else None
        new = nn.Embedding(n, word.embedding_dim, padding_idx=padding, device=word.weight.device,
                           dtype=word.weight.dtype)
        new.weight.copy_(_resized(word.weight, n, mean_resizing, std))
        new.weight.requires_grad_(word.weight.requires_grad)
        for head in [m for m in self.modules() if isinstance(m, MLMHead)]:
            tied = head.decoder.weight is word.weight
            if tied:
                head.decoder.weight = new.weight
            else:
                head.decoder.weight = nn.Parameter(_resized(head.decoder.weight, n, mean_resizing, std),
                                                   requires_grad=head.decoder.weight.requires_grad)
            head.decoder.out_features = n
            if head.bias is not None:  # (a tied head's: zeros, as transformers pads it)
                head.bias = nn.Parameter(_resized(head.bias, n, mean_resizing and not tied, 0.0),
                                         requires_grad=head.bias.requires_grad)
        self.backbone.embeddings.word = new
        self.config = config
        return new

    # transformers' names, for tools written against its models (PEFT, training scripts)
    def get_input_embeddings(self) -> nn.Embedding:
        """The word-embedding table."""
        return self.backbone.embeddings.word

    def get_output_embeddings(self) -> nn.Linear | None:
        """An MLM head's decoder (the word embeddings' weight where tied), the pre-training head's
        too (MLM + NSP/SOP, whose decoder sits in its MLM part), else None."""
        from .layers.heads import MLMHead

        return next((m.decoder for m in self.head.modules() if isinstance(m, MLMHead)), None) if self.head else None

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        """Put another word-embedding table of the same shape in; a tied MLM decoder follows it
        (tie_weights). Another vocabulary size is resize_token_embeddings' work."""
        word = self.backbone.embeddings.word
        if not isinstance(value, nn.Embedding) or value.weight.shape != word.weight.shape:
            shape = tuple(value.weight.shape) if isinstance(value, nn.Embedding) else type(value).__name__
            raise BertkitError(f"set_input_embeddings takes an nn.Embedding of shape {tuple(word.weight.shape)}, "
                               f"got {shape} (another vocabulary size: resize_token_embeddings)")
        self._refuse_if_shared("replacing them in one would split the pair")
        self.backbone.embeddings.word = value
        self.tie_weights()

    def _refuse_if_shared(self, why: str) -> None:
        """The embedding table of an ELECTRA or GDES pair is both models': one alone may not change it."""
        if getattr(self.backbone.embeddings, "shared", False):
            raise BertkitError("this model shares its embeddings with another (an ELECTRA or DeBERTa-v3 generator / "
                               f"discriminator pair): {why}")

    def tie_weights(self) -> None:
        """Point a tied MLM decoder (config.tie_word_embeddings) at the word embeddings again, as
        transformers' tie_weights does: a table replaced or loaded on its own left it on the old one."""
        decoder = self.get_output_embeddings()
        if decoder is not None and self.config.tie_word_embeddings:
            decoder.weight = self.get_input_embeddings().weight

    def enable_input_require_grads(self) -> None:
        """Make the word embeddings' output require grad even when the table is frozen, as
        transformers does for adapters (PEFT, LoRA) on a frozen model: the gradient then reaches
        the trainable parts inside the stack through every path. (transformers' checkpointing switch
        turns this on too, for its reentrant checkpoints; bertkit's are non-reentrant and need not.)"""
        def require_grads(module, inputs, output):
            output.requires_grad_(True)

        self.disable_input_require_grads()
        self._input_grads_hook = self.get_input_embeddings().register_forward_hook(require_grads)

    def disable_input_require_grads(self) -> None:
        hook = self.__dict__.pop("_input_grads_hook", None)
        if hook is not None:
            hook.remove()

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs: dict | None = None) -> None:
        """Activation checkpointing in training (the encoder's `checkpointing`): each block's
        activations are recomputed in the backward pass. Non-reentrant whatever the kwargs say."""
        self.backbone.encoder.checkpointing = True

    def gradient_checkpointing_disable(self) -> None:
        self.backbone.encoder.checkpointing = False

    @property
    def is_gradient_checkpointing(self) -> bool:
        return self.backbone.encoder.checkpointing

    def train(self, mode: bool = True) -> "Model":
        if mode:
            self.prepack(False)  # training changes the weights and needs the plain ones
        return super().train(mode)

    @property
    def tokenizer(self):
        """The tokenizer that goes with the model (None: none); save_pretrained writes its files.
        Set it to a Tokenizer or a path to one's files."""
        return self._tokenizer

    @tokenizer.setter
    def tokenizer(self, tokenizer) -> None:
        self._tokenizer = _tokenizer(tokenizer)  # (a path loaded now: a string failed in the first save)

    @property
    def device(self) -> torch.device:
        """Where the parameters are (as transformers' models say)."""
        return next(self.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        """The parameters' floating-point dtype."""
        return next(p.dtype for p in self.parameters() if p.is_floating_point())

    def num_parameters(self, only_trainable: bool = False, exclude_embeddings: bool = False) -> int:
        """Unique parameters (a tied decoder counts once), as `transformers` counts them:
        `only_trainable` those with requires_grad, `exclude_embeddings` without the weights of the
        embedding tables (words, positions, token types; a decoder tied to the words with them)."""
        tables = {id(m.weight) for m in self.modules() if isinstance(m, nn.Embedding)}
        return sum(p.numel() for p in self.parameters() if (p.requires_grad or not only_trainable)
                   and not (exclude_embeddings and id(p) in tables))

    def save_pretrained(self, path: str | Path) -> None:
        """Write Hugging Face format: config.json, model.safetensors, tokenizer files."""
        from .interop.hf import save_pretrained  # interop knows the foreign names; models do not

        save_pretrained(self, output_dir(path, keep=(), flag=""))  # a file there: one line, not mkdir's error

    @torch.no_grad()
    def load_weights(self, directory: str | Path) -> None:
        """Copy the weights of a folder save_pretrained wrote (a checkpoint of this model) into
        this model, in place: how a training run resumes (train/ knows no checkpoint names)."""
        from .interop.hf import load_state, read_weights

        state, path = read_weights(Path(directory))
        load_state(self, state, path, head_from_file=True)


@contextlib.contextmanager
def evaluating(model: nn.Module):
    """Eval mode (dropout off) for a block of inference, then the caller's mode back: a picture
    or a prediction taken in the middle of training must not switch its dropout off for good."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def _resized(table: torch.Tensor, rows: int, mean: bool, std: float) -> torch.Tensor:
    """(V, ...) -> (rows, ...): the first rows kept, new ones the old rows' mean, or drawn from
    N(0, std) (an output bias: zeros)."""
    out = table.new_empty((rows, *table.shape[1:]))
    kept = min(rows, table.shape[0])
    out[:kept] = table[:kept]
    if rows > kept:
        if mean:
            out[kept:] = table.float().mean(0).to(table.dtype)
        elif std:
            out[kept:].normal_(0.0, std)
        else:
            out[kept:].zero_()
    return out


def _flat_choices(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds):
    """(B, C, T) inputs (inputs_embeds (B, C, T, E)) -> (B * C, T) each ((B * C, T, E)), and C."""
    given = input_ids if inputs_embeds is None else inputs_embeds
    name, dims = ("input_ids", 3) if inputs_embeds is None else ("inputs_embeds", 4)
    if not isinstance(given, torch.Tensor) or given.dim() != dims or given.shape[1] == 0:
        got = f"shape {tuple(given.shape)}" if isinstance(given, torch.Tensor) else type(given).__name__
        raise BertkitError(f"a multiple-choice model takes (batch, choices, length{', width' * (dims == 4)}) "
                           f"{name}, each context paired with each of its choices; got {got}")
    shape = given.shape[:3]
    flat = []
    for what, t in (("attention_mask", attention_mask), ("token_type_ids", token_type_ids),
                    ("position_ids", position_ids)):
        if t is not None and getattr(t, "shape", None) != shape:
            raise BertkitError(f"{what} has shape {tuple(getattr(t, 'shape', ()))} but {name} has {tuple(shape)}")
        flat.append(None if t is None else t.reshape(-1, t.shape[-1]))
    ids = None if input_ids is None else input_ids.reshape(-1, shape[-1])  # (B * C, T)
    embeds = None if inputs_embeds is None else inputs_embeds.reshape(-1, *inputs_embeds.shape[2:])  # (B * C, T, E)
    return ids, *flat, embeds, shape[1]


def _tokenizer(tokenizer):
    """A Model's tokenizer: None, a Tokenizer, or a path to load one from (as the task helpers'
    tokenizer= takes it); anything else was kept and failed later ('str' object is not callable)."""
    from .data.tokenizer import Tokenizer, load_tokenizer

    if tokenizer is None or isinstance(tokenizer, Tokenizer):
        return tokenizer
    if isinstance(tokenizer, (str, os.PathLike)):
        return load_tokenizer(tokenizer)
    raise BertkitError(f"tokenizer must be a bertkit Tokenizer or a path to its files, not {type(tokenizer).__name__}")


def check_num_labels(head: str | None, num_labels: int | None) -> None:
    """transformers sizes its QA layer by num_labels, 2: another count would be silently unused."""
    if num_labels not in (None, 2) and head == "qa":
        raise BertkitError(f"a qa head scores each token as start and end: num_labels is 2 there, not {num_labels}")


def build(name: str | EncoderConfig, head: str | None = None, num_labels: int | None = None, tokenizer=None,
          **overrides) -> Model:
    """A freshly initialized model from a preset name (see `list_models()`) or a config.

    `overrides` change config fields by name (typed; an unknown name is an error). `tokenizer`
    (a Tokenizer or a path to its files) goes with the model: save_pretrained, and so every
    checkpoint and final model a Trainer writes, saves it beside the weights."""
    if not isinstance(name, (str, EncoderConfig)):
        raise BertkitError(f"build takes a preset name or an EncoderConfig, not {type(name).__name__}")
    config = name if isinstance(name, EncoderConfig) else get_preset(name).config
    check_num_labels(head, num_labels)
    if num_labels is not None:
        overrides["num_labels"] = num_labels
    if overrides:
        config = config.replace(**overrides)
    tokenizer = _tokenizer(tokenizer)
    if tokenizer is not None:  # ids past the embedding rows failed in the first forward (checked before building)
        from .data.tokenizer import check_vocab_fits

        check_vocab_fits(tokenizer, config.vocab_size, config.type_vocab_size)
    return Model(config, head, tokenizer)


STUDENT_SETTINGS = ("hidden_dropout", "attention_dropout")  # a student's own; its shape is the teacher's


# the student each teacher family distills into: DistilBERT for BERT (Sanh et al., 2019); for RoBERTa
# a RoBERTa of fewer blocks, as Hugging Face distilled distilroberta-base
STUDENT_FAMILY = {"bert": "distilbert", "roberta": "roberta"}


def student_from_teacher(teacher: Model, layers=None, head: str | None = "mlm", **dropout) -> Model:
    """A student initialized from its teacher (Sanh et al., 2019, sec. 3): a DistilBERT of a BERT,
    a RoBERTa of a RoBERTa (STUDENT_FAMILY); same widths, len(layers) blocks copied from the
    teacher's `layers` (default: half of its blocks, spread evenly from the first to the last, 0,
    2, 4, 7, 9, 11 of 12); `dropout` (STUDENT_SETTINGS) replaces the teacher's dropout rates."""
    from .models.distilbert import copy_blocks_from_teacher, copy_from_teacher, default_teacher_layers, student_config

    if not isinstance(teacher, Model):
        raise BertkitError(f"the teacher must be a Model (bertkit.from_pretrained(path, head='mlm')), "
                           f"not {type(teacher).__name__}")
    if teacher.config.family not in STUDENT_FAMILY:
        raise BertkitError(f"a student is initialized from a BERT teacher (DistilBERT) or a RoBERTa one "
                           f"(DistilRoBERTa), not from {teacher.config.family}")
    depth = teacher.config.num_layers
    layers = default_teacher_layers(depth) if layers is None else tuple(layers)
    if not layers or any(not 0 <= i < depth for i in layers) or list(layers) != sorted(set(layers)):
        raise BertkitError(f"teacher layers {','.join(map(str, layers)) or '(none)'}: give increasing block "
                           f"indices in 0..{depth - 1} (the teacher has {depth} blocks)")
    unknown = sorted(set(dropout) - set(STUDENT_SETTINGS))
    if unknown:
        raise BertkitError(f"a student takes its shape from its teacher; only {', '.join(STUDENT_SETTINGS)} "
                           f"are its own, not {', '.join(unknown)}")
    bert = teacher.config.family == "bert"
    config = student_config(teacher.config, len(layers)) if bert else teacher.config.replace(num_layers=len(layers))
    student = Model(config.replace(**dropout), head, tokenizer=teacher.tokenizer)
    (copy_from_teacher if bert else copy_blocks_from_teacher)(student, teacher, layers)
    return student


def build_electra_pair(discriminator: str | EncoderConfig = "electra-small",
                       generator: str | EncoderConfig | None = None, **overrides) -> tuple[Model, Model]:
    """(generator, discriminator) for replaced-token-detection pre-training, sharing one embedding
    module (Clark et al., 2020, sec. 3.2). The generator defaults to the one released with the
    discriminator preset (electra-small -> electra-small-generator). `overrides` change the
    discriminator preset's fields, as build's do, and the generator follows them
    (models.electra.generator_config: depth, vocabulary ... alike, its width the released fraction
    of the discriminator's): build_electra_pair("electra-small", num_layers=2, hidden_size=64,
    num_heads=2, intermediate_size=128) is a small pair."""
    from .models.electra import GENERATOR_FOR, generator_config, share_embeddings

    preset = discriminator if isinstance(discriminator, str) and discriminator in GENERATOR_FOR else None
    if generator is None and preset is None:
        raise BertkitError(f"name the generator (a preset or an EncoderConfig) for a discriminator that is not "
                           f"one of the ELECTRA presets {', '.join(GENERATOR_FOR)}, or build from one of them "
                           "with overrides: build_electra_pair('electra-small', num_layers=2, ...)")
    if overrides and (preset is None or generator is not None):
        raise BertkitError("overrides change an ELECTRA discriminator preset and the generator made for it; "
                           "with a config or a named generator, give the configs as they should be")
    d = build(discriminator, head="pretraining", **overrides)
    g = build(generator if generator is not None else generator_config(preset, d.config, overrides), head="mlm")
    if d.config.family != "electra" or g.config.family != "electra":
        raise BertkitError("an ELECTRA pair needs two electra configs")
    share_embeddings(g, d)
    if g.config.hidden_size > d.config.hidden_size:
        import warnings

        warnings.warn(f"the generator ({g.config.hidden_size} wide) is wider than the discriminator "
                      f"({d.config.hidden_size}): ELECTRA found generators 1/4 to 1/2 of the discriminator's size "
                      "best (sec. 3.2), a stronger one making its task too hard", UserWarning,
                      stacklevel=outside_stacklevel())
    return g, d
