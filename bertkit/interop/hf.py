"""Hugging Face checkpoints in and out: the only place that knows Hugging Face names.

Loading is strict (DESIGN.md rule 8): every tensor in the file is either mapped to one of our
parameters (with its shape checked) or matched by an explicit ignore rule; every parameter of
ours is either loaded or, only for a head the caller asked for on top of a checkpoint that lacks
it, freshly initialized with a warning.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import tempfile
import warnings
import weakref
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..config import EncoderConfig, FieldTypeError
from ..errors import BertkitError, first_line, outside_stacklevel, refused_global
from ..files import decode_text, no_config, parse_json, read_json, remove_stale_staging, shard_files, within_folder
from ..hub import resolve
from ..model import Model, check_num_labels, model_dtype
from ..models import get_family
from .hf_names import FAMILIES, HEAD_SUFFIX, HFFamily, deberta_version_of

# ---------------------------------------------------------------------------------------------
# Configs
# ---------------------------------------------------------------------------------------------

AUTO = "auto"


def _split_architecture(arch: str) -> tuple[HFFamily, str | None] | None:
    """'RobertaForMaskedLM' -> (the RoBERTa spec, "mlm"); None if no family has this class."""
    for spec in FAMILIES.values():
        suffix = arch[len(spec.class_prefix):]
        if arch.startswith(spec.class_prefix) and suffix in HEAD_SUFFIX and HEAD_SUFFIX[suffix] in spec.heads:
            return spec, HEAD_SUFFIX[suffix]
    return None


def _architectures(hf: dict, source: Path) -> list[str]:
    """config.json's class names: a list of strings, or one name written without its list."""
    archs = hf.get("architectures") or []
    archs = [archs] if isinstance(archs, str) else archs
    if not (isinstance(archs, list) and all(isinstance(a, str) for a in archs)):
        raise BertkitError(f"{source}: architectures must be a list of class names, got {hf['architectures']!r}")
    return archs


def _family_of(hf: dict, source: Path) -> HFFamily:
    model_type = hf.get("model_type")
    if model_type is None:  # very old conversions: infer from the architecture's class name
        for arch in _architectures(hf, source):
            found = _split_architecture(arch)
            if found:
                return found[0]
        raise BertkitError(f"{source}: no model_type (and no architecture bertkit recognizes)")
    if not isinstance(model_type, str):
        raise BertkitError(f"{source}: model_type must be a string, got {model_type!r}")
    if model_type not in FAMILIES:
        custom = (" (its config's auto_map points at the repository's own code, which transformers runs only with "
                  "trust_remote_code and bertkit does not run)" if hf.get("auto_map") else "")
        raise BertkitError(f"{source}: unknown model_type {model_type!r}{custom}; bertkit loads: "
                           f"{', '.join(sorted(FAMILIES))}")
    return FAMILIES[model_type]


def config_from_hf(hf: dict, source: Path) -> EncoderConfig:
    """Our config from a Hugging Face config.json dict. Keys that do not change the encoder's
    computation (use_cache, torch_dtype, transformers_version, ...) are ignored by design."""
    spec = _family_of(hf, source)
    if hf.get("is_decoder") or hf.get("add_cross_attention"):
        raise BertkitError(f"{source}: is_decoder/add_cross_attention is set; bertkit implements "
                           "bidirectional encoders only (no causal or cross-attention)")
    if hf.get("talking_head"):
        raise BertkitError(f"{source}: talking_head attention is not supported")
    if spec.config_in is not None:
        try:
            hf = spec.config_in(hf)
        except BertkitError as e:
            raise BertkitError(f"{source}: {e}") from None
    position_type = hf.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise BertkitError(f"{source}: position_embedding_type {position_type!r} is not supported "
                           "(only 'absolute')")
    values = {**spec.defaults, **hf}
    fields = {ours: values[theirs] for theirs, ours in spec.config_keys.items() if theirs in values}
    fields.update(spec.fixed)
    for optional in ("pad_token_id", "classifier_dropout"):
        if fields.get(optional, 0) is None:
            del fields[optional]
    id2label = hf.get("id2label")
    if id2label:
        try:
            names = [id2label[k] for k in sorted(id2label, key=int)]
        except ValueError:
            raise BertkitError(f"{source}: id2label keys must be integers, got {sorted(id2label)}") from None
        fields["num_labels"] = len(names)
        if names != [f"LABEL_{i}" for i in range(len(names))]:
            fields["label_names"] = tuple(names)
    elif "num_labels" in hf:
        fields["num_labels"] = hf["num_labels"]
    if hf.get("problem_type") is not None:
        fields["problem_type"] = hf["problem_type"]
    try:
        return get_family(spec.model_type).config_class(family=spec.model_type, **fields)
    except FieldTypeError as e:  # named as the file names it
        theirs = next((k for k, ours in spec.config_keys.items() if ours == e.field and k in values), e.field)
        raise BertkitError(f"{source}: {theirs} {e.problem}") from None
    except BertkitError as e:
        raise BertkitError(f"{source}: {e}") from None
    except TypeError as e:
        raise BertkitError(f"{source}: a value has the wrong type ({e})") from None


def config_to_hf(config: EncoderConfig, head: str | None) -> dict:
    spec = FAMILIES[config.family]
    refuse = f"this {config.family} model cannot be saved in Hugging Face format"
    if config.norm_first and not spec.fixed.get("norm_first"):
        raise BertkitError(f"{refuse}: transformers has no pre-LN {config.family}")
    if config.type_vocab_size == 0 and not spec.token_types_optional and "type_vocab_size" not in spec.fixed:
        raise BertkitError(f"{refuse}: transformers' {config.family} always has token types")
    for name, value in spec.fixed.items():
        if getattr(config, name) != value:
            raise BertkitError(f"{refuse}: transformers fixes {name} = {value}, this model has {getattr(config, name)}")
    # transformers sizes its QA layer by num_labels: a QA head must say 2 (ALBERT's SOP layer is
    # sized by num_labels too, as bertkit's is)
    labels = ("LABEL_0", "LABEL_1") if head == "qa" else config.labels
    values = {theirs: getattr(config, ours) for theirs, ours in spec.config_keys.items()}
    values = {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}  # JSON has lists
    values = {k: v for k, v in values.items() if v is not None}  # None: transformers' own default
    if spec.config_out is not None:
        values = spec.config_out(values)
    return {
        "architectures": [architecture_name(config.family, head)],
        "model_type": config.family,
        **values,
        "id2label": {str(i): name for i, name in enumerate(labels)},
        "label2id": {name: i for i, name in enumerate(labels)},
        **({"problem_type": config.problem_type} if config.problem_type else {}),
    }


def architecture_name(family: str, head: str | None) -> str:
    spec = FAMILIES[family]
    if head not in spec.heads:
        raise BertkitError(f"transformers has no {family} class for the {head!r} head")
    return spec.class_prefix + next(s for s, kind in HEAD_SUFFIX.items() if kind == head)


def head_from_architectures(hf: dict, source: Path) -> str | None:
    archs = _architectures(hf, source)
    if not archs:
        return None  # no architecture recorded: the bare encoder
    for arch in archs:
        found = _split_architecture(arch)
        if found:
            return found[1]
    # Another family's class name over this model_type (XLMRobertaForMaskedLM on a roberta
    # config): model_type decides the computation, the name's ending the head.
    heads = _family_of(hf, source).heads
    for arch in archs:
        for suffix, head in HEAD_SUFFIX.items():
            if suffix.startswith("For") and arch.endswith(suffix) and head in heads:
                return head
    raise BertkitError(
        f"{source}: architecture {archs[0]!r} is not supported; supported heads: "
        f"{', '.join(HEAD_SUFFIX)} (pass head=None to load only the encoder)")


# ---------------------------------------------------------------------------------------------
# Parameter names
# ---------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _pattern(template: str) -> re.Pattern:
    regex = re.escape(template).replace(r"\{p\}", r"(?P<p>weight|bias)")
    regex = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>\\d+)", regex)  # {i}, {g}, ... -> a number
    return re.compile(regex + "$")


@dataclass(frozen=True)
class NameMap:
    """Maps between Hugging Face names and our parameter names, both directions."""
    rules: tuple[tuple[str, str], ...]  # (hf template, our template)

    def _translate(self, name: str, direction: slice) -> str | None:
        for source, target in (rule[direction] for rule in self.rules):
            m = _pattern(source).match(name)
            if m:
                return target.format(**m.groupdict())
        return None

    def to_ours(self, hf_name: str) -> str | None:
        return self._translate(hf_name, slice(None))

    def to_hf(self, our_name: str) -> str | None:
        return self._translate(our_name, slice(None, None, -1))


def name_map(spec: HFFamily, config: EncoderConfig, head: str | None, encoder_prefix: str = "") -> NameMap:
    """`encoder_prefix` is prepended to the encoder's HF names ("bert." inside head models).
    Where a head has two layouts, both load and the config's choice comes first (it is saved)."""
    head_rules = spec.heads[head]
    if head == "mlm" and spec.modern_mlm is not None:
        head_rules = head_rules + spec.modern_mlm if config.legacy_mlm else spec.modern_mlm + head_rules
    rules = [(encoder_prefix + hf, "backbone." + ours) for hf, ours in spec.encoder]
    rules += [(hf, "head." + ours) for hf, ours in head_rules]
    return NameMap(tuple(rules))


def _parts_not_built(spec: HFFamily) -> list[re.Pattern]:
    """HF names of optional parts (any head, the pooler): skipped when the chosen head lacks them."""
    names = [hf for rules in [*spec.heads.values(), spec.modern_mlm or []] for hf, _ in rules]
    names += [hf for hf, ours in spec.encoder if ours.startswith("pooler.")]
    return [_pattern(n) for n in names]


def _heads_holding(spec: HFFamily, hf_names: list[str]) -> list[str]:
    """The heads whose weights include any of `hf_names`."""
    found = []
    for head, rules in spec.heads.items():
        rules = rules + (spec.modern_mlm or []) if head == "mlm" else rules
        patterns = [_pattern(hf) for hf, _ in rules]
        if head is not None and any(p.match(n) for p in patterns for n in hf_names):
            found.append(head)
    return found


class UnusedHeadWarning(UserWarning):
    """The file holds tensors of a head the loaded model does not have (most often: its config
    names no architecture, so the bare encoder was loaded without them)."""


# ---------------------------------------------------------------------------------------------
# Reading tensors
# ---------------------------------------------------------------------------------------------

def _load_file(path: Path) -> dict[str, torch.Tensor]:
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file
        try:
            return load_file(str(path))
        except (SafetensorError, OSError) as e:
            raise BertkitError(f"{path}: not a readable safetensors file ({e})") from None
        except RuntimeError as e:  # torch maps the tensors after reading the header: the file shrank between
            if "mapping size" not in str(e):
                raise
            raise BertkitError(f"{path}: not a readable safetensors file ({first_line(e)}); it may have been cut "
                               "short or replaced while it was read") from None
    try:
        with warnings.catch_warnings():  # torch warns about pickle protocols before refusing; we explain instead
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as e:  # pickle refusals come as UnpicklingError/RuntimeError with long text
        raise _unreadable_bin(path, e) from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise BertkitError(f"{path}: expected a mapping of names to tensors")
    return state


def _unreadable_bin(path: Path, error: Exception) -> BertkitError:
    """One line for a file torch.load(weights_only=True) did not read. torch's text begins
    "Weights only load failed" whatever stopped its safe unpickler, a text file as much as a
    pickled class: a refusal for safety is told by the global it names (a class, os.system ...);
    a plain Python pickle (pickle.dump, not torch.save) it cannot read at all."""
    text, unsafe = str(error), refused_global(error)
    if unsafe:
        return BertkitError(
            f"{path}: refused to unpickle: the file holds Python objects beyond tensors ({unsafe}; "
            "loaded with weights_only=True for safety); re-save it as safetensors where you trust it")
    with open(path, "rb") as f:
        start = f.read(1)
    pickled, zipped = start == b"\x80", zipfile.is_zipfile(path)  # b"\x80": a pickle's PROTO opcode
    reason = re.search(r"WeightsUnpickler error:\s*(.+)", text)
    if pickled and not zipped and reason:
        return BertkitError(
            f"{path}: refused to unpickle: a plain Python pickle, not a torch.save checkpoint "
            f"({reason[1].strip()}; loaded with weights_only=True for safety); re-save it as safetensors "
            "where you trust it")
    if start and not (pickled or zipped):
        return BertkitError(f"{path}: not a readable PyTorch checkpoint (neither the zip archive torch.save "
                            "writes nor a pickle)")
    return BertkitError(f"{path}: not a readable PyTorch checkpoint ({first_line(error)})")


WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


def read_weights(directory: Path) -> tuple[dict[str, torch.Tensor], Path]:
    """All tensors of a checkpoint directory (single file or shards), and the file to name in errors."""
    for name in WEIGHT_FILES:
        path = directory / name
        if not path.exists():
            continue
        return (_read_shards(path) if name.endswith(".index.json") else _load_file(path)), path
    raise BertkitError(f"{directory}: no weights found (expected one of {', '.join(WEIGHT_FILES)})")


def _read_shards(index: Path) -> dict[str, torch.Tensor]:
    """The tensors of the shards an index's weight_map names (files.shard_files)."""
    state = {}
    for shard in shard_files(index):
        state.update(_load_file(shard))
    return state


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------

def _old_tf_names(name: str) -> str:
    # Checkpoints converted from the original TensorFlow release call LayerNorm's parameters
    # gamma/beta.
    return re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", name))


def _mlm_output_bias(state: dict[str, torch.Tensor], spec: HFFamily) -> dict[str, torch.Tensor]:
    """transformers adds the decoder's own bias to the MLM logits, tied to the head's bias when
    the word embeddings are tied and the file's two agree; files may hold either or both. The
    decoder's, where the file has it, is the one used either way: put it under the name our
    table maps, and drop the other."""
    if spec.tied_bias is None:
        return state
    own, decoder = spec.tied_bias
    state = dict(state)
    if decoder in state:
        state[own] = state.pop(decoder)
    return state


def derived_tensors(model: Model) -> dict[str, torch.Tensor]:
    """Tensors a module computes from parameters instead of holding, by our full names: those a
    module returns from its `derived_tensors()` (names relative to it). DeBERTa-v3's pre-training
    discriminator computes its embedding table as E_G + E_Delta (objectives/gdes.py). Files hold
    them under the plain parameter name, so transformers and a plain bertkit model read them as
    ordinary weights; loading into the module that derives them skips them."""
    found = {}
    with torch.no_grad():
        for prefix, module in model.named_modules():
            derive = getattr(module, "derived_tensors", None)
            if derive is not None:
                found.update({f"{prefix}.{name}": tensor for name, tensor in derive().items()})
    return found


class TiedCopyDiffers(BertkitError):
    """The file holds a tied parameter's copy (the MLM decoder weight of tied word embeddings)
    with values of its own: the model must be built untied to run as transformers runs it."""


class FreshHeadWarning(UserWarning):
    """Head (or pooler) weights the checkpoint lacks, or holds with another shape, were freshly
    initialized: news when loading a model to use it, expected when fine-tuning a new head."""


def match_state(model: Model, state: dict[str, torch.Tensor], source: Path,
                head_from_file: bool) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Map a checkpoint's tensors onto `model`'s parameters, checking names and shapes: returns
    (our name -> tensor for every parameter the file holds, the names of those it lacks). It reads
    only names and shapes, so `model` may live on the meta device."""
    config = model.config
    spec = FAMILIES[config.family]
    names = name_map(spec, config, model.head_kind)
    params = dict(model.named_parameters())  # tied parameters appear once, under their first name
    first_name = {id(p): n for n, p in params.items()}
    tied = {n: first_name[id(p)] for n, p in model.named_parameters(remove_duplicate=False) if n not in params}
    copies: dict[str, tuple[str, torch.Tensor]] = {}  # tied name -> (file's name, tensor)
    unused_head: list[str] = []  # the file's names of a head the model was not built with
    file_name: dict[str, str] = {}  # ours -> the file's name, for messages
    derived = set(derived_tensors(model))
    ignored = [re.compile(p + "$") for p in spec.ignored]
    parts = _parts_not_built(spec)

    fused: dict[str, tuple[int, ...]] = {}  # the file's fused tensors (name without prefix -> shape)
    pieces: set[str] = set()  # the names they are split into
    held = {_old_tf_names(n).removeprefix(spec.encoder_prefix) for n in state}
    if spec.to_common is not None:
        fused, pieces = _fused_shapes(spec, config.num_heads, names, params)
        for raw_name, tensor in state.items():  # checked as the file holds them: split, they had made-up names
            needed = fused.get(_old_tf_names(raw_name).removeprefix(spec.encoder_prefix))
            if needed is not None and tuple(tensor.shape) != needed:
                raise BertkitError(f"{source}: tensor {raw_name!r} has shape {tuple(tensor.shape)} but the config "
                                   f"needs {needed}")
        state = spec.to_common(state, config.num_heads)
    loaded: dict[str, torch.Tensor] = {}
    for raw_name, tensor in _mlm_output_bias(state, spec).items():
        hf_name = _old_tf_names(raw_name).removeprefix(spec.encoder_prefix)
        ours = names.to_ours(hf_name)
        if ours in tied:  # a copy of a tied parameter (the decoder weight = the word embeddings)
            copies[ours] = raw_name, tensor
            continue
        if ours in derived:
            continue  # computed from other parameters
        if ours not in params:
            if any(p.match(hf_name) for p in ignored):
                continue  # a buffer
            if any(p.match(hf_name) for p in parts):
                if ours is None:  # a head's (the pooler is the encoder's, named even when not built)
                    unused_head.append(hf_name)
                continue  # a part (head, pooler) the chosen head does not have
            root = raw_name.split(".")[0] + "."
            other = (root in {f.encoder_prefix for f in FAMILIES.values()} - {spec.encoder_prefix}
                     or deberta_version_of(raw_name) not in (None, config.family))
            raise BertkitError(f"{source}: unexpected tensor {raw_name!r}, not part of a "
                               f"{architecture_name(config.family, model.head_kind)}"
                               + (f" (named as another family's weights: the config's is {config.family})"
                                  if other else ""))
        expected = tuple(params[ours].shape)
        if tuple(tensor.shape) != expected and not head_from_file and ours.startswith("head."):
            continue  # a head asked for with another label count: freshly initialized (warned below)
        if tuple(tensor.shape) != expected:
            raise BertkitError(f"{source}: tensor {raw_name!r} has shape {tuple(tensor.shape)} but the "
                               f"config needs {expected}")
        if ours in loaded:
            first, prefix = file_name[ours], spec.encoder_prefix
            how = ""
            if _old_tf_names(first) != first or _old_tf_names(raw_name) != raw_name:
                how = " (LayerNorm's old gamma/beta name and its weight/bias name)"
            elif first.removeprefix(prefix) == raw_name.removeprefix(prefix):
                how = f" (with and without {prefix!r})"
            raise BertkitError(f"{source}: tensors {first!r} and {raw_name!r} are one parameter under two "
                               f"names{how}; the file must hold it once")
        loaded[ours] = tensor
        file_name[ours] = raw_name

    for ours, (raw_name, tensor) in copies.items():
        primary = tied[ours]
        if primary not in loaded and tuple(tensor.shape) == tuple(params[primary].shape):
            loaded[primary] = tensor  # only the copy is in the file: it is the tied parameter
        elif primary in loaded and not torch.equal(loaded[primary], tensor):
            raise TiedCopyDiffers(f"{source}: tensor {raw_name!r} should equal {file_name[primary]!r} (the "
                                  "config ties them) but holds other values")
    if unused_head and head_from_file:
        heads = " or ".join(f"head={h!r}" for h in _heads_holding(spec, unused_head))
        warnings.warn(f"{source}: {len(unused_head)} tensor(s) of a head that a "
                      f"{architecture_name(config.family, model.head_kind)} does not have are not used: "
                      f"{', '.join(unused_head[:4])}{' ...' if len(unused_head) > 4 else ''}"
                      f"{f' (pass {heads} to load them)' if heads else ''}",
                      UnusedHeadWarning, stacklevel=outside_stacklevel())
    missing = [n for n in params if n not in loaded]
    # The pooler serves the classification heads: a masked-LM checkpoint (BertForMaskedLM, what
    # pre-training saves) has none, so a new classifier on it starts with a fresh one, as in
    # transformers; so does the bare encoder (a file whose config names no architecture, or one
    # saved without its pooler). Any other encoder tensor must be there.
    missing_encoder = [n for n in missing if n.startswith("backbone.") and not n.startswith("backbone.pooler.")]
    missing_head = [n for n in missing if not (model.head_kind is None and n.startswith("backbone.pooler."))]
    if missing_encoder or (missing_head and head_from_file):
        shown = [names.to_hf(n) or n for n in missing_encoder or missing_head]
        if pieces & set(shown):  # a fused tensor (ModernBERT's Wqkv) named as the file names it
            shown = [n for n in shown if n not in pieces] + [n for n in fused if n not in held]
        fresh = "" if missing_encoder else (  # transformers' Auto classes start it fresh with a warning
            f" of the head config.json's architectures name; from_pretrained(..., head={model.head_kind!r}) starts "
            "it fresh")
        raise BertkitError(f"{source}: missing {len(shown)} tensor(s): {', '.join(shown[:5])}"
                           + (" ..." if len(shown) > 5 else "") + fresh)
    return loaded, missing


def _fused_shapes(spec, num_heads: int, names: NameMap, params: dict) -> tuple[dict[str, tuple[int, ...]], set[str]]:
    """The tensors a family's files hold fused (ModernBERT's Wqkv, DeBERTa v1's in_proj): their
    names in the file with the shapes the model needs, and the names of the pieces they split into.
    Our parameters' shapes put through spec.from_common on the meta device."""
    common = {names.to_hf(n): torch.empty(p.shape, device="meta") for n, p in params.items() if names.to_hf(n)}
    layout = spec.from_common(common, num_heads)
    return {n: tuple(t.shape) for n, t in layout.items() if n not in common}, set(common) - set(layout)


def load_state(model: Model, state: dict[str, torch.Tensor], source: Path, head_from_file: bool) -> None:
    """Copy a checkpoint into a built `model`; parameters the file lacks (a new head, a pooler)
    keep their fresh initialization, with a FreshHeadWarning."""
    fill(model, *match_state(model, state, source, head_from_file), source)


def fill(model: Model, loaded: dict[str, torch.Tensor], missing: list[str], source: Path) -> None:
    """Copy matched tensors (match_state's) into a built `model`, warning about the `missing` ones."""
    if missing:
        warnings.warn(f"{source}: {len(missing)} head (or pooler) parameter(s) not in the checkpoint, or there "
                      f"with another shape (another label count), are freshly initialized: {', '.join(missing)}",
                      FreshHeadWarning, stacklevel=outside_stacklevel())
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, tensor in loaded.items():
            params[name].copy_(tensor.to(params[name].dtype))


@contextlib.contextmanager
def parameters_on_meta():
    """Modules built inside get their parameters on the meta device: shapes without storage, so
    neither their memory nor the initializers (nn.Linear's own and ours) cost anything, and a
    config.json with absurd sizes (a 10^10-row embedding) reaches the shape check without
    allocating them. Every tensor made inside is a meta tensor (torch's default-device context):
    the families' constructors make nothing but parameters (position tables are made in forward;
    DistilBERT's sinusoidal table is copied into one), which materialize() then replaces."""
    with torch.device("meta"):
        yield


def check_depth(spec: HFFamily, config: EncoderConfig, state: dict[str, torch.Tensor], source: Path) -> None:
    """A config with layers the file holds no tensor of fails as match_state would fail on their
    missing tensors, but before the model is built: building 100000 layers takes minutes, even
    without storage. `{i}` in a family's encoder names is the layer's depth (hf_names.py)."""
    depth = [_pattern(hf) for hf, _ in spec.encoder if "{i}" in hf]
    names = {_old_tf_names(name).removeprefix(spec.encoder_prefix) for name in state}
    held = {int(m["i"]) for name in names for p in depth if (m := p.match(name))}
    absent = [i for i in range(config.num_layers) if i not in held]
    if depth and absent:
        roots = sorted({name.split(".")[0] for name in state if "." in name})
        other = (f" (its tensors are named {', '.join(r + '.*' for r in roots[:3])}: weights of another family "
                 f"than the config's {config.family}?)" if not held and roots else "")
        raise BertkitError(f"{source}: missing every tensor of {len(absent)} of the config's {config.num_layers} "
                           f"layers: layer(s) {', '.join(map(str, absent[:5]))}{' ...' if len(absent) > 5 else ''}"
                           f"{other}")


def materialize(model: Model, loaded: dict[str, torch.Tensor]) -> None:
    """Give a meta-built `model` the checkpoint's tensors as its parameters: each copied into its
    own storage in the parameter's dtype (a file's tensors may be views of one memory-mapped
    file), one new Parameter per shared one, so tied and shared weights stay shared."""
    first_name = {id(p): n for n, p in model.named_parameters()}
    made: dict[int, nn.Parameter] = {}
    with torch.no_grad():
        for module in model.modules():
            for name, param in module._parameters.items():
                if param is None:
                    continue
                if id(param) not in made:
                    value = torch.empty(param.shape, dtype=param.dtype).copy_(loaded[first_name[id(param)]])
                    made[id(param)] = nn.Parameter(value, requires_grad=param.requires_grad)
                module._parameters[name] = made[id(param)]


def file_dtype(hf: dict, state: dict[str, torch.Tensor], config: Path, weights: Path) -> torch.dtype:
    """The dtype a checkpoint is stored in, as transformers' dtype="auto" finds it: config.json's
    dtype (torch_dtype before transformers 5), else the first floating tensor's; one the models
    cannot run in (float8) is refused, naming the file that says it."""
    name = hf.get("dtype") or hf.get("torch_dtype")
    if name is not None:
        return model_dtype(str(name), f"{config}: dtype", also="")
    stored = next((t.dtype for t in state.values() if t.is_floating_point()), torch.float32)
    return model_dtype(stored, f"{weights}: the tensors' dtype", also=' (load it with dtype="float32")')


def from_pretrained(path_or_id: str | os.PathLike, head: str | None = AUTO, num_labels: int | None = None,
                    dtype: torch.dtype | str | None = None, revision: str | None = None,
                    token: str | bool | None = None) -> Model:
    """Load a Hugging Face-format checkpoint (or one bertkit wrote), or a Hub id (downloaded at
    `revision` with `token`, as transformers takes them). The head comes from the
    config's `architectures` unless `head` names one (then missing head weights are initialized).
    The parameters are float32 unless `dtype` says otherwise: a torch dtype, or "auto" for the
    file's own (what transformers 5 does by default; float32 here keeps fine-tuning's master
    weights exact and runs bf16 through autocast).

    The model's parameters are built on the meta device and then made from the file's tensors,
    skipping a random initialization the checkpoint would overwrite (most of bert-base's load time);
    only when the file lacks some head or pooler weights is it built for real, so that those
    start from the family's initializer."""
    if not isinstance(path_or_id, (str, os.PathLike)):
        raise BertkitError(f"from_pretrained takes a folder or a hub id, not {type(path_or_id).__name__}")
    root = resolve(path_or_id, revision, token)
    inner = transformer_folder(root)
    directory = root / inner
    config_path = directory / "config.json"
    if not config_path.exists():
        raise no_config(directory)
    hf = read_json(config_path)
    config = config_from_hf(hf, config_path)
    carried = carried_keys(hf, config, config_path)
    head_from_file = head == AUTO
    if head_from_file:
        head = head_from_architectures(hf, config_path)
    check_num_labels(head, num_labels)
    if num_labels is not None and num_labels != config.num_labels:
        config = config.replace(num_labels=num_labels, label_names=())
        head_from_file = False  # the file's head has other shapes: it starts fresh, with a warning
    state, weights_path = read_weights(directory)
    if dtype == "auto":
        dtype = file_dtype(hf, state, config_path, weights_path)
    elif dtype is not None:
        dtype = model_dtype(dtype, also=' (a torch dtype or its name), or "auto"')

    check_depth(FAMILIES[config.family], config, state, weights_path)

    def matched(config: EncoderConfig) -> tuple[Model, dict[str, torch.Tensor], list[str]]:
        """A model of `config` built on the meta device, and the file's tensors matched to it."""
        with parameters_on_meta():
            try:
                model = Model(config, head)
            except BertkitError as e:  # an option only a head reads (ELECTRA's summary_type)
                raise BertkitError(f"{config_path}: {e}") from None
            except RuntimeError as e:  # sizes past what torch can describe (a hidden_size of 2e9)
                raise BertkitError(f"{config_path}: the model it describes is too large to build "
                                   f"({first_line(e)})") from None
        return model, *match_state(model, state, weights_path, head_from_file)

    try:
        model, loaded, missing = matched(config)
    except TiedCopyDiffers as e:  # transformers then leaves the two untied, each as stored; so do we
        warnings.warn(f"{e}; it is loaded untied (tie_word_embeddings=False), as transformers does",
                      stacklevel=outside_stacklevel())
        config = config.replace(tie_word_embeddings=False)
        model, loaded, missing = matched(config)
    if missing:
        model = Model(config, head)
        fill(model, loaded, missing, weights_path)
    else:
        materialize(model, loaded)
    if dtype is not None:
        model.to(dtype)
    from ..data.tokenizer import TOKENIZER_FILES, load_tokenizer

    if any((directory / f).exists() for f in TOKENIZER_FILES):  # RoBERTa's vocab.json, DeBERTa's spm.model too
        model.tokenizer = load_tokenizer(directory)
    model.companion_files = companion_files(root, inner)
    model.carried_config = carried
    return model.eval()


# config.json keys never written back from the file: save_pretrained writes its own (labels,
# architectures, dtype), or they describe weights or code a save does not keep
NOT_CARRIED = frozenset({"architectures", "model_type", "id2label", "label2id", "num_labels", "problem_type",
                         "dtype", "torch_dtype", "transformers_version", "_name_or_path", "_commit_hash",
                         "auto_map", "quantization_config", "pruned_heads", "_attn_implementation",
                         "attn_implementation"})


def carried_keys(hf: dict, config: EncoderConfig, source: Path) -> dict:
    """The keys of a config.json that bertkit does not read (bos/eos_token_id, finetuning_task,
    task_specific_params, a CrossEncoder's activation, a user's own keys ...), kept to be written
    back, as transformers keeps every key of a config it loads. A key is unread when the file
    without it gives the same config. (The family's own keys are written from the config anyway,
    and the label names are left out of the probes: parsing thousands of them once per key made
    loading slow.)"""
    own = _family_of(hf, source).config_keys
    light = {k: v for k, v in hf.items() if k not in ("id2label", "label2id")}
    kept = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            reference = config_from_hf(light, source)
        except BertkitError:  # (the labels made it valid): probe with them
            light, reference = hf, config
        for key in light:
            if key in NOT_CARRIED or key in own:
                continue
            try:
                unread = config_from_hf({k: v for k, v in light.items() if k != key}, source) == reference
            except BertkitError:
                unread = False
            if unread:
                kept[key] = hf[key]
    return kept


# weight files of the other layouts, which a save of model.safetensors leaves stale (shards: by pattern)
STALE_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.safetensors.index.json")

ST_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")
# What sentence-transformers writes in a module's folder (Pooling, Normalize: config.json; Dense:
# its weights too): all that is kept of one and saved back, whatever else lies beside them
MODULE_FILES = ("config.json", "model.safetensors", "pytorch_model.bin")

# The modules.json `type` spellings that sentence-transformers 6.2 resolves to the four modules
# bertkit runs: the packages that export each class (`sentence_transformers.models`, the layout
# before 5.4 and still mapped by its deprecated-import table, also as the old module file
# `models.Pooling.Pooling`), the files that define it, and the older file the table maps
# (`sentence_transformer.modules.normalize`, Normalize's home in 5.x). It imports any other
# `sentence_transformers.*` path too, but only these name the classes; a type outside its namespace
# is custom code it runs only with trust_remote_code.
ST_MODULE_TYPES = {f"sentence_transformers.{path}": kind for kind, paths in {
    "Transformer": ("models.Transformer", "models.Transformer.Transformer", "base.modules.Transformer",
                    "base.modules.transformer.Transformer", "sentence_transformer.modules.Transformer",
                    "cross_encoder.modules.Transformer", "sparse_encoder.modules.Transformer",
                    "sparse_encoder.models.Transformer"),
    "Pooling": ("models.Pooling", "models.Pooling.Pooling", "sentence_transformer.modules.Pooling",
                "sentence_transformer.modules.pooling.Pooling"),
    "Dense": ("models.Dense", "models.Dense.Dense", "base.modules.Dense", "base.modules.dense.Dense",
              "sentence_transformer.modules.Dense", "cross_encoder.modules.Dense", "sparse_encoder.modules.Dense",
              "sparse_encoder.models.Dense"),
    "Normalize": ("models.Normalize", "models.Normalize.Normalize", "base.modules.Normalize",
                  "base.modules.normalize.Normalize", "sentence_transformer.modules.Normalize",
                  "sentence_transformer.modules.normalize.Normalize"),
}.items() for path in paths}


class FolderFiles(dict):
    """A model's sentence-transformers files (relative path -> bytes) that remember the folder
    they were read from, so that a message about one of them names it on disk, also after the
    model was handed on as an object (to fine-tuning, which saves them back)."""

    def __init__(self, files: dict[str, bytes], folder: Path):
        super().__init__(files)
        self.folder = folder


def _modules(directory: Path) -> list:
    """The entries of a sentence-transformers folder's modules.json; [] without one."""
    path = directory / "modules.json"
    listed = parse_json(decode_text(path.read_bytes(), str(path)), str(path), object) if path.is_file() else []
    return listed if isinstance(listed, list) else []


def _module_folder(entry) -> str:
    """A modules.json entry's folder, "" for the model folder itself or one that would lie outside it."""
    folder = str(entry.get("path", "")) if isinstance(entry, dict) else ""
    return folder if folder and within_folder(folder) else ""


def _is_transformer(entry) -> bool:
    """Whether a modules.json entry is sentence-transformers' own Transformer module, spelled as it
    resolves it (a custom class that is also called Transformer is not)."""
    return isinstance(entry, dict) and ST_MODULE_TYPES.get(str(entry.get("type", ""))) == "Transformer"


def transformer_folder(directory: Path) -> str:
    """Where a sentence-transformers folder keeps its Transformer module's files (config.json,
    weights, tokenizer), as sentence-transformers finds them: in the folder modules.json gives
    the Transformer entry, "" for the folder itself (as sentence-transformers has saved them since
    version 2) or a subfolder (0_Transformer/ in folders saved before, which it still loads; or
    any other name, even beside a model of its own at the top, which sentence-transformers then
    ignores). A subfolder without a config.json holds no model: "" then, as without modules.json."""
    entry = next((entry for entry in _modules(directory) if _is_transformer(entry)), None)
    folder = _module_folder(entry)
    return folder if folder and (directory / folder / "config.json").is_file() else ""


def companion_files(directory: Path, inner: str = "") -> FolderFiles:
    """sentence-transformers' files in a model folder: its settings and the folders of the modules
    modules.json lists after the Transformer (1_Pooling, 2_Dense, 2_Normalize ...), as relative
    path -> bytes. Nothing of them is a parameter here; they are kept to be written back. From a
    folder whose Transformer sits in a subfolder, they are kept as the current layout has them:
    the Transformer at the top (path ""), with the subfolder's sentence_bert_config.json (the
    only one sentence-transformers reads for it: the top's, if any, is left out), as
    save_pretrained writes the model. `inner`: that subfolder (`transformer_folder`), "" for none."""
    files = {name: _companion_bytes(directory, directory / name) for name in ST_FILES if (directory / name).is_file()}
    listed = _modules(directory)
    if inner:
        listed = [{**entry, "path": ""} if _is_transformer(entry) else entry for entry in listed]
        files["modules.json"] = (json.dumps(listed, indent=2) + "\n").encode()
        inner_config = directory / inner / "sentence_bert_config.json"
        files.pop("sentence_bert_config.json", None)
        if inner_config.is_file():
            files["sentence_bert_config.json"] = inner_config.read_bytes()
    for entry in listed:
        folder = _module_folder(entry)  # saved back under it
        if folder and not (directory / folder).resolve().is_relative_to(directory.resolve()):
            raise BertkitError(f"{directory / folder}: a link to {(directory / folder).resolve()}, outside the model "
                               "folder; a module's files are read from the model folder only")
        if folder and (directory / folder).is_dir():
            for name in MODULE_FILES:
                if (directory / folder / name).is_file():
                    files[f"{folder}/{name}"] = _companion_bytes(directory, directory / folder / name)
    return FolderFiles(files, directory)


def _companion_bytes(directory: Path, path: Path) -> bytes:
    """A sentence-transformers file's bytes, which a save writes back as they are: a link out of
    the model folder is refused (a folder from elsewhere linking to ~/.ssh/id_rsa would have it
    copied into every folder saved from it), but for the Hub cache's links into the repo's blobs/."""
    real, root = path.resolve(), directory.resolve()
    cache = root.parent.parent / "blobs" if root.parent.name == "snapshots" else None
    if not (real.is_relative_to(root) or (cache is not None and real.is_relative_to(cache))):
        raise BertkitError(f"{path}: a link to {real}, outside the model folder; sentence-transformers' files are "
                           "read from the model folder only")
    return path.read_bytes()


# ---------------------------------------------------------------------------------------------
# Saving
# ---------------------------------------------------------------------------------------------

def hf_state_dict(model: Model) -> dict[str, torch.Tensor]:
    spec = FAMILIES[model.config.family]
    names = name_map(spec, model.config, model.head_kind,
                     spec.encoder_prefix if model.head_kind is not None else "")
    state = {}
    tensors = {**dict(model.named_parameters()), **derived_tensors(model)}  # a tied decoder: once, as the embedding
    for ours, tensor in tensors.items():
        hf_name = names.to_hf(ours)
        if hf_name is None:
            adapter = any(part in ours.split(".") for part in ("base_layer", "lora_A", "lora_B", "base_model"))
            raise BertkitError(f"parameter {ours!r} has no Hugging Face name" + (
                "; a PEFT adapter's: merge it first (merge_and_unload()), or save the adapter with the PeftModel's "
                "save_pretrained" if adapter else ""))
        state[hf_name] = tensor.detach().to("cpu").contiguous()
    if spec.tied_bias and spec.tied_bias[0] in state:  # the copy transformers reads when untied
        own, decoder = spec.tied_bias
        state[decoder] = state[own].clone()
    if spec.from_common is not None:
        state = spec.from_common(state, model.config.num_heads)
    return state


class EnhancedMaskDecoderWarning(UserWarning):
    """A masked-LM head decoding through DeBERTa's enhanced mask decoder (bertkit only) was saved
    under transformers' class name: transformers loads it without complaint but decodes with the
    plain head."""


_TOLD_EMD: weakref.WeakSet = weakref.WeakSet()  # models warned once already (a run saves at every checkpoint)


def _warn_enhanced_mask_decoder(model: Model, target: Path) -> None:
    from ..models.deberta import DebertaConfig

    emd = isinstance(model.config, DebertaConfig) and model.config.enhanced_mask_decoder
    if not emd or model.head_kind != "mlm" or model in _TOLD_EMD:
        return
    _TOLD_EMD.add(model)
    staged = next((i for i, part in enumerate(target.parts) if part.startswith(".writing-")), None)
    if staged is not None:  # a run's staging folder (train/checkpoint.py): name the folder it is written into
        target = Path(*target.parts[:staged])
    warnings.warn(f"{target}: saved as {architecture_name(model.config.family, 'mlm')}, but transformers lacks the "
                  "enhanced mask decoder: it loads the same encoder but its MLM logits differ; bertkit reloads it "
                  "as saved (enhanced_mask_decoder=false trains the plain head)", EnhancedMaskDecoderWarning,
                  stacklevel=outside_stacklevel())  # (where Model.save_pretrained was called)


def save_pretrained(model: Model, path: str | os.PathLike) -> None:
    """Write config.json, model.safetensors and the tokenizer files. Files are written to a
    temporary directory first and moved into place, so a failure leaves any earlier save intact.
    Weights an earlier save left in the folder in another layout (pytorch_model.bin, shards and
    their index) are removed once the new ones are in place: a loader that prefers them would
    read the old model beside the new config."""
    from safetensors.torch import save_file

    target = Path(path)
    target.mkdir(parents=True, exist_ok=True)
    hf = config_to_hf(model.config, model.head_kind)
    for key, value in model.carried_config.items():
        if hf.get(key) is None:  # what the config itself says wins
            hf[key] = value
    if model.tokenizer is not None:  # ids the config leaves open (ModernBERT's): the tokenizer's own
        for key, token in (("bos_token_id", "cls_token_id"), ("cls_token_id", "cls_token_id"),
                           ("eos_token_id", "sep_token_id"), ("sep_token_id", "sep_token_id")):
            if key in hf and hf[key] is None:
                hf[key] = getattr(model.tokenizer, token)
    state = hf_state_dict(model)
    stored = next((t.dtype for t in state.values() if t.is_floating_point()), torch.float32)
    hf["dtype"] = str(stored).removeprefix("torch.")  # what transformers 5 loads by default
    remove_stale_staging(target)
    with tempfile.TemporaryDirectory(dir=target, prefix=".saving-") as tmp:
        tmp = Path(tmp)
        (tmp / "config.json").write_text(json.dumps(hf, indent=2) + "\n")
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        if model.tokenizer is not None:
            # the longest sequence the model takes: RoBERTa's positions start after the padding id
            family = FAMILIES[model.config.family]
            model.tokenizer.save(tmp, family.tokenizer_class, model.backbone.embeddings.max_length)
        for name, data in model.companion_files.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_bytes(data)
        for f in tmp.iterdir():
            if f.is_dir():  # a module folder: its files move one by one, beside any already there
                (target / f.name).mkdir(exist_ok=True)
                for g in f.iterdir():
                    os.replace(g, target / f.name / g.name)
            else:
                os.replace(f, target / f.name)
    for stale in target.iterdir():
        if stale.name in STALE_WEIGHTS or re.fullmatch(r"(model|pytorch_model)-\d{5}-of-\d{5}\.(safetensors|bin)",
                                                       stale.name):
            stale.unlink()
    _warn_enhanced_mask_decoder(model, target)
