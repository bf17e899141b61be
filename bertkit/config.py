"""Typed, frozen model configuration and the preset registry.

A config describes the architecture only: the family (`family`, Hugging Face's `model_type`) and
the sizes. Everything is validated on construction, so a model is never built from a config that
cannot work. Family-specific fields live in subclasses next to the family (models/<family>.py).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

from .errors import BertkitError

# Activation names accepted in configs (transformers' names, less the two with parameters:
# prelu and xielu); layers/activations.py implements each one.
ACTIVATIONS = ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "quick_gelu", "relu", "silu", "swish", "tanh",
               "gelu_python", "gelu_python_tanh", "gelu_accurate", "gelu_10", "mish", "relu6", "relu2",
               "leaky_relu", "hardswish", "sigmoid", "laplace", "sqrtsoftplus", "linear")

HEADS = (None, "mlm", "pretraining", "classification", "token-classification", "qa", "multiple-choice")

# How a sequence classifier's outputs are read (transformers' problem_type): a softmax over the
# labels, a sigmoid per label (several may hold), or real values.
PROBLEM_TYPES = ("single_label_classification", "multi_label_classification", "regression")

# What each annotated field type holds, as the error says it. Integers are ints (not 2.0, not
# true), as transformers' own strict configs want them; a float field takes an int as well.
_KINDS = {
    "int": ("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    "float": ("a number", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)),
    "bool": ("true or false", lambda v: isinstance(v, bool)),
    "str": ("a string", lambda v: isinstance(v, str)),
    "tuple": ("a list", lambda v: isinstance(v, (tuple, list))),  # JSON gives lists
}


@functools.lru_cache(maxsize=None)
def _field_types(config_class: type) -> dict[str, tuple[str, ...]]:
    """Field name -> the kinds its annotation allows ("float | None" -> ("float", "None"))."""
    return {f.name: tuple(k.strip().split("[")[0] for k in str(f.type).split("|"))
            for f in dataclasses.fields(config_class)}


class FieldTypeError(BertkitError):
    """A config field holding a value of the wrong type. Configs come from JSON, where any key may
    hold any type: a wrong one is refused on construction, by name, not as a TypeError from deep
    inside torch when the model is built. `field` and `problem` let the reader of a file name the
    file's own key (interop/hf.py: hidden_dropout_prob for hidden_dropout)."""

    def __init__(self, field: str, problem: str, what: str = "config"):
        super().__init__(f"{what}: {field} {problem}")
        self.field, self.problem = field, problem


def _type_problem(config_class: type, name: str, value: Any) -> str | None:
    """Why `value` cannot be field `name` of `config_class` ("must be an integer, got 2.0"), or
    None when it can."""
    kinds = _field_types(config_class)[name]
    if value is None and "None" in kinds:
        return None
    known = [_KINDS[k] for k in kinds if k in _KINDS]
    if len(known) < len([k for k in kinds if k != "None"]) or any(ok(value) for _, ok in known):
        return None  # a type this check does not know: the field's own validation takes it
    return f"must be {' or '.join(words for words, _ in known)}, got {value!r}"


def check_field_types(settings: Any, what: str | None = None) -> None:
    """Refuse a settings dataclass whose field holds a value of the wrong type (a string where a
    number goes, "no" for a bool), naming the field, on construction: not as a TypeError from deep
    inside a run. Fields whose annotation names another class are left to their own checks."""
    for f in dataclasses.fields(settings):
        problem = _type_problem(type(settings), f.name, getattr(settings, f.name))
        if problem:
            raise FieldTypeError(f.name, problem, what or type(settings).__name__)


@dataclass(frozen=True)
class EncoderConfig:
    family: str = "bert"
    vocab_size: int = 30522
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    max_positions: int = 512
    type_vocab_size: int = 2  # 0 = no token-type (segment) embedding at all
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.1
    classifier_dropout: float | None = None  # None = use hidden_dropout, as BERT does
    norm_first: bool = False  # False: post-LN (BERT, 2018); True: pre-LN (Xiong et al., 2020)
    initializer_range: float = 0.02
    tie_word_embeddings: bool = True
    num_labels: int = 2
    label_names: tuple[str, ...] = ()  # index -> label; empty means LABEL_0, LABEL_1, ...
    problem_type: str | None = None  # one of PROBLEM_TYPES; None: regression for one output, else single-label

    # Fields naming an activation (families add theirs: a pooler's, a convolution's ...), each
    # checked against ACTIVATIONS on construction.
    ACTIVATION_FIELDS = ("hidden_act",)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            if isinstance(getattr(self, f.name), list) and "tuple" in _field_types(type(self))[f.name]:
                # (JSON's and a caller's lists: a tuple keeps the frozen config hashable and equal)
                object.__setattr__(self, f.name, tuple(getattr(self, f.name)))
        check_field_types(self, "config")
        positive = ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size",
                    "max_positions", "num_labels")
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise BertkitError(f"config: {name} must be a positive integer, got {value!r}")
        if self.type_vocab_size < 0:
            raise BertkitError(f"config: type_vocab_size must be >= 0, got {self.type_vocab_size}")
        if self.hidden_size % self.num_heads:
            raise BertkitError(
                f"config: hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}")
        for name in self.ACTIVATION_FIELDS:
            if getattr(self, name) not in ACTIVATIONS:
                raise BertkitError(
                    f"config: unknown {name} {getattr(self, name)!r}; known: {', '.join(ACTIVATIONS)}")
        for name in (f.name for f in dataclasses.fields(self) if f.name.endswith("_dropout")):  # families' too
            value = getattr(self, name)
            if value is not None and not 0.0 <= value < 1.0:
                raise BertkitError(f"config: {name} must be in [0, 1), got {value}")
        if not self.layer_norm_eps > 0:
            raise BertkitError(f"config: layer_norm_eps must be > 0, got {self.layer_norm_eps}")
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise BertkitError(
                f"config: pad_token_id {self.pad_token_id} is outside the vocabulary (size {self.vocab_size})")
        if self.problem_type is not None and self.problem_type not in PROBLEM_TYPES:
            raise BertkitError(f"config: problem_type must be one of {', '.join(PROBLEM_TYPES)}, "
                               f"got {self.problem_type!r}")
        if self.label_names and len(self.label_names) != self.num_labels:
            raise BertkitError(
                f"config: {len(self.label_names)} label_names given for num_labels={self.num_labels}")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def labels(self) -> tuple[str, ...]:
        return self.label_names or tuple(f"LABEL_{i}" for i in range(self.num_labels))

    def replace(self, **overrides: Any) -> "EncoderConfig":
        """A copy with some fields changed; an unknown field is an error, never ignored."""
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise BertkitError(
                f"config: unknown field(s) {', '.join(unknown)} for {type(self).__name__}; "
                f"known: {', '.join(sorted(known))}")
        return dataclasses.replace(self, **overrides)


@dataclass(frozen=True)
class Preset:
    name: str
    config: EncoderConfig
    idea: str  # the family's distinctive idea, one line, shown by `bertkit models`
    note: str = ""  # e.g. where a published parameter count is only approximate


PRESETS: dict[str, Preset] = {}


def register_preset(name: str, config: EncoderConfig, idea: str, note: str = "") -> None:
    if name in PRESETS:
        raise ValueError(f"preset {name!r} registered twice")
    PRESETS[name] = Preset(name, config, idea, note)


def get_preset(name: str) -> Preset:
    from . import models  # noqa: F401  (the families register their presets when imported)

    try:
        return PRESETS[name]
    except KeyError:
        raise BertkitError(f"unknown model {name!r}; known presets: {', '.join(sorted(PRESETS))}") from None

