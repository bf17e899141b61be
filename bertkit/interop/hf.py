"""Hugging Face checkpoints in and out: the only place that knows Hugging Face names.

Loading is strict (DESIGN.md rule 8): every tensor in the file is either mapped to one of our
parameters (with its shape checked) or matched by an explicit ignore rule; every parameter of
ours is either loaded or, only for a head the caller asked for on top of a checkpoint that lacks
it, freshly initialized with a warning.
"""

from __future__ import annotations

import functools
import json
import os
import re
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from ..config import EncoderConfig
from ..errors import BertkitError
from ..model import Model

# ---------------------------------------------------------------------------------------------
# Configs
# ---------------------------------------------------------------------------------------------

# HF config key -> our EncoderConfig field (shared by the whole family).
CONFIG_KEYS = {
    "vocab_size": "vocab_size",
    "hidden_size": "hidden_size",
    "num_hidden_layers": "num_layers",
    "num_attention_heads": "num_heads",
    "intermediate_size": "intermediate_size",
    "hidden_act": "hidden_act",
    "max_position_embeddings": "max_positions",
    "type_vocab_size": "type_vocab_size",
    "layer_norm_eps": "layer_norm_eps",
    "pad_token_id": "pad_token_id",
    "hidden_dropout_prob": "hidden_dropout",
    "attention_probs_dropout_prob": "attention_dropout",
    "classifier_dropout": "classifier_dropout",
    "initializer_range": "initializer_range",
    "tie_word_embeddings": "tie_word_embeddings",
}

# Architecture class names are <Prefix><Suffix>, e.g. BertForMaskedLM.
CLASS_PREFIX = {"bert": "Bert"}
HEAD_SUFFIX = {
    "Model": None,
    "ForMaskedLM": "mlm",
    "ForPreTraining": "pretraining",
    "ForSequenceClassification": "classification",
    "ForTokenClassification": "token-classification",
    "ForQuestionAnswering": "qa",
}
TOKENIZER_CLASS = {"bert": "BertTokenizer"}
AUTO = "auto"


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise BertkitError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    if not isinstance(data, dict):
        raise BertkitError(f"{path}: expected a JSON object at the top level")
    return data


def _family_of(hf: dict, source: Path) -> str:
    model_type = hf.get("model_type")
    if model_type is None:  # very old conversions: infer from the architecture's class name
        for arch in hf.get("architectures") or []:
            for family, prefix in CLASS_PREFIX.items():
                if arch.startswith(prefix) and arch[len(prefix):] in HEAD_SUFFIX:
                    return family
        raise BertkitError(f"{source}: no model_type (and no architecture bertkit recognizes)")
    if model_type not in CLASS_PREFIX:
        raise BertkitError(f"{source}: unknown model_type {model_type!r}; bertkit loads: "
                           f"{', '.join(sorted(CLASS_PREFIX))}")
    return model_type


def config_from_hf(hf: dict, source: Path) -> EncoderConfig:
    """Our config from a Hugging Face config.json dict. Keys that do not change the encoder's
    computation (use_cache, torch_dtype, transformers_version, ...) are ignored by design."""
    family = _family_of(hf, source)
    if hf.get("is_decoder") or hf.get("add_cross_attention"):
        raise BertkitError(f"{source}: is_decoder/add_cross_attention is set; bertkit implements "
                           "bidirectional encoders only (no causal or cross-attention)")
    position_type = hf.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise BertkitError(f"{source}: position_embedding_type {position_type!r} is not supported "
                           "(only 'absolute')")
    fields = {ours: hf[theirs] for theirs, ours in CONFIG_KEYS.items() if theirs in hf}
    if fields.get("pad_token_id") is None:
        fields.pop("pad_token_id", None)
    if fields.get("classifier_dropout") is None:
        fields.pop("classifier_dropout", None)
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
    try:
        return EncoderConfig(family=family, **fields)
    except BertkitError as e:
        raise BertkitError(f"{source}: {e}") from None
    except TypeError as e:
        raise BertkitError(f"{source}: a value has the wrong type ({e})") from None


def config_to_hf(config: EncoderConfig, head: str | None) -> dict:
    if config.norm_first:
        raise BertkitError(f"a pre-LN {config.family} model has no Hugging Face equivalent; "
                           "it cannot be saved in Hugging Face format")
    # transformers sizes its QA layer by num_labels, so a QA model must say 2 (start, end).
    labels = ("LABEL_0", "LABEL_1") if head == "qa" else config.labels
    hf = {
        "architectures": [architecture_name(config.family, head)],
        "model_type": config.family,
        **{theirs: getattr(config, ours) for theirs, ours in CONFIG_KEYS.items()},
        "id2label": {str(i): name for i, name in enumerate(labels)},
        "label2id": {name: i for i, name in enumerate(labels)},
    }
    if config.type_vocab_size == 0:
        raise BertkitError(f"a {config.family} model without token types cannot be saved for transformers")
    return hf


def architecture_name(family: str, head: str | None) -> str:
    suffix = next(s for s, kind in HEAD_SUFFIX.items() if kind == head)
    return CLASS_PREFIX[family] + suffix


def head_from_architectures(hf: dict, source: Path) -> str | None:
    archs = hf.get("architectures") or []
    if not archs:
        return None  # no architecture recorded: the bare encoder
    for arch in archs:
        for prefix in CLASS_PREFIX.values():
            if arch.startswith(prefix) and arch[len(prefix):] in HEAD_SUFFIX:
                return HEAD_SUFFIX[arch[len(prefix):]]
    raise BertkitError(
        f"{source}: architecture {archs[0]!r} is not supported; supported heads: "
        f"{', '.join(HEAD_SUFFIX)} (pass head=None to load only the encoder)")


# ---------------------------------------------------------------------------------------------
# Parameter names: one table per part, {i} = layer index, {p} = weight|bias
# ---------------------------------------------------------------------------------------------

BERT_ENCODER = [
    ("embeddings.word_embeddings.weight", "embeddings.word.weight"),
    ("embeddings.position_embeddings.weight", "embeddings.position.weight"),
    ("embeddings.token_type_embeddings.weight", "embeddings.token_type.weight"),
    ("embeddings.LayerNorm.{p}", "embeddings.norm.{p}"),
    ("encoder.layer.{i}.attention.self.query.{p}", "encoder.layers.{i}.attn.query.{p}"),
    ("encoder.layer.{i}.attention.self.key.{p}", "encoder.layers.{i}.attn.key.{p}"),
    ("encoder.layer.{i}.attention.self.value.{p}", "encoder.layers.{i}.attn.value.{p}"),
    ("encoder.layer.{i}.attention.output.dense.{p}", "encoder.layers.{i}.attn.out_proj.{p}"),
    ("encoder.layer.{i}.attention.output.LayerNorm.{p}", "encoder.layers.{i}.attn_norm.{p}"),
    ("encoder.layer.{i}.intermediate.dense.{p}", "encoder.layers.{i}.ffn.up.{p}"),
    ("encoder.layer.{i}.output.dense.{p}", "encoder.layers.{i}.ffn.down.{p}"),
    ("encoder.layer.{i}.output.LayerNorm.{p}", "encoder.layers.{i}.ffn_norm.{p}"),
    ("pooler.dense.{p}", "pooler.dense.{p}"),
]
BERT_MLM = [
    ("cls.predictions.transform.dense.{p}", "transform.{p}"),
    ("cls.predictions.transform.LayerNorm.{p}", "norm.{p}"),
    ("cls.predictions.bias", "bias"),
    ("cls.predictions.decoder.weight", "decoder.weight"),
]
BERT_HEADS = {
    None: [],
    "mlm": BERT_MLM,
    "pretraining": [(hf, "mlm." + ours) for hf, ours in BERT_MLM]
                   + [("cls.seq_relationship.{p}", "pair.classifier.{p}")],
    "classification": [("classifier.{p}", "classifier.{p}")],
    "token-classification": [("classifier.{p}", "classifier.{p}")],
    "qa": [("qa_outputs.{p}", "qa.{p}")],
}
# Tensors real files carry that are not parameters of any model, or duplicates of one.
ALWAYS_IGNORED = [
    r"embeddings\.position_ids",             # a buffer older transformers saved
    r"cls\.predictions\.decoder\.bias",      # tied to cls.predictions.bias in transformers
]
HEAD_PREFIX = {"bert": "bert."}  # where transformers nests the encoder inside a head model


@functools.lru_cache(maxsize=None)
def _pattern(template: str) -> re.Pattern:
    regex = re.escape(template).replace(r"\{i\}", r"(?P<i>\d+)").replace(r"\{p\}", r"(?P<p>weight|bias)")
    return re.compile(regex + "$")


@dataclass(frozen=True)
class NameMap:
    """Maps between Hugging Face names (without the family prefix) and our parameter names."""
    rules: tuple[tuple[str, str], ...]  # (hf template, our template), ours already prefixed

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


def name_map(family: str, head: str | None, encoder_prefix: str = "") -> NameMap:
    """`encoder_prefix` is prepended to the encoder's HF names ("bert." inside head models)."""
    rules = [(encoder_prefix + hf, "backbone." + ours) for hf, ours in BERT_ENCODER]
    rules += [(hf, "head." + ours) for hf, ours in BERT_HEADS[head]]
    return NameMap(tuple(rules))


def _all_head_patterns() -> list[re.Pattern]:
    """Weights of any head: ignored when the caller chose a different head."""
    return [_pattern(hf) for rules in BERT_HEADS.values() for hf, _ in rules] + [_pattern("pooler.dense.{p}")]


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
    try:
        with warnings.catch_warnings():  # torch warns about pickle protocols before refusing; we explain instead
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as e:  # pickle refusals come as UnpicklingError/RuntimeError with long text
        if "weights_only" in str(e) or "Unsupported global" in str(e):
            raise BertkitError(
                f"{path}: refused to unpickle: the file holds Python objects beyond tensors "
                "(loaded with weights_only=True for safety); re-save it as safetensors where you "
                "trust it") from None
        raise BertkitError(f"{path}: not a readable PyTorch checkpoint ({str(e).splitlines()[0]})") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise BertkitError(f"{path}: expected a mapping of names to tensors")
    return state


WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


def read_weights(directory: Path) -> tuple[dict[str, torch.Tensor], Path]:
    """All tensors of a checkpoint directory (single file or shards), and the file to name in errors."""
    for name in WEIGHT_FILES:
        path = directory / name
        if not path.exists():
            continue
        if name.endswith(".index.json"):
            shards = sorted(set(_read_json(path).get("weight_map", {}).values()))
            if not shards:
                raise BertkitError(f"{path}: weight_map is empty")
            state = {}
            for shard in shards:
                if not (directory / shard).exists():
                    raise BertkitError(f"{path}: shard {shard} is missing")
                state.update(_load_file(directory / shard))
            return state, path
        return _load_file(path), path
    raise BertkitError(f"{directory}: no weights found (expected one of {', '.join(WEIGHT_FILES)})")


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------

def resolve(path_or_id: str | os.PathLike) -> Path:
    """A local directory, or a Hugging Face Hub id downloaded with huggingface_hub."""
    path = Path(path_or_id).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise BertkitError(f"{path}: is a file; expected a checkpoint directory with config.json")
    text = str(path_or_id)
    if not re.fullmatch(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?", text):
        raise BertkitError(f"{path}: no such directory")
    try:
        from huggingface_hub import snapshot_download
        local = snapshot_download(text, allow_patterns=["*.json", "*.safetensors", "*.bin", "*.txt", "*.model"])
    except Exception as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise BertkitError(f"{text}: no such directory, and not downloadable from the Hugging Face Hub "
                           f"({type(e).__name__}: {first})") from None
    return Path(local)


def _old_tf_names(name: str) -> str:
    # Checkpoints converted from the original TensorFlow release call LayerNorm's parameters
    # gamma/beta.
    return re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", name))


def _mlm_output_bias(state: dict[str, torch.Tensor], tied: bool) -> dict[str, torch.Tensor]:
    """transformers adds `cls.predictions.decoder.bias` to the MLM logits and ties it to
    `cls.predictions.bias` only when the word embeddings are tied; files may hold either or both.
    Put the one transformers would use under the name our table maps."""
    own, decoder = "cls.predictions.bias", "cls.predictions.decoder.bias"
    if decoder in state and (not tied or own not in state):
        return {**state, own: state[decoder]}
    return state


def load_state(model: Model, state: dict[str, torch.Tensor], source: Path, head_from_file: bool) -> None:
    config, family = model.config, model.config.family
    names = name_map(family, model.head_kind)
    prefix = HEAD_PREFIX[family]
    params = dict(model.named_parameters())  # tied parameters appear once, under their first name
    tied = {n for n, p in model.named_parameters(remove_duplicate=False)} - set(params)
    other_heads = _all_head_patterns()
    ignored = [re.compile(p + "$") for p in ALWAYS_IGNORED]
    if config.tie_word_embeddings:
        ignored.append(re.compile(r"cls\.predictions\.decoder\.weight$"))  # the tied copy

    state = _mlm_output_bias(state, config.tie_word_embeddings)
    loaded: dict[str, torch.Tensor] = {}
    skipped: list[str] = []
    for raw_name, tensor in state.items():
        hf_name = _old_tf_names(raw_name)
        hf_name = hf_name[len(prefix):] if hf_name.startswith(prefix) else hf_name
        ours = names.to_ours(hf_name)
        if ours is not None and ours in tied:
            ours = None  # e.g. the decoder tied to the word embeddings
        if ours is None or ours not in params:
            if any(p.match(hf_name) for p in ignored + other_heads):
                skipped.append(raw_name)
                continue
            raise BertkitError(f"{source}: unexpected tensor {raw_name!r}, not part of a "
                               f"{architecture_name(family, model.head_kind)}")
        expected = tuple(params[ours].shape)
        if tuple(tensor.shape) != expected:
            raise BertkitError(f"{source}: tensor {raw_name!r} has shape {tuple(tensor.shape)} but the "
                               f"config needs {expected}")
        if ours in loaded:
            raise BertkitError(f"{source}: tensor {raw_name!r} appears twice (with and without {prefix!r})")
        loaded[ours] = tensor

    missing = [n for n in params if n not in loaded]
    missing_encoder = [n for n in missing if n.startswith("backbone.")]
    if missing_encoder or (missing and head_from_file):
        shown = [names.to_hf(n) or n for n in missing_encoder or missing]
        raise BertkitError(f"{source}: missing {len(shown)} tensor(s): {', '.join(shown[:5])}"
                           + (" ..." if len(shown) > 5 else ""))
    if missing:
        warnings.warn(f"{source}: {len(missing)} head parameter(s) not in the checkpoint are freshly "
                      f"initialized: {', '.join(missing)}", stacklevel=3)
    with torch.no_grad():
        for name, tensor in loaded.items():
            params[name].copy_(tensor.to(params[name].dtype))


def from_pretrained(path_or_id: str | os.PathLike, head: str | None = AUTO, num_labels: int | None = None,
                    dtype: torch.dtype | None = None) -> Model:
    """Load a Hugging Face-format checkpoint (or one bertkit wrote). The head comes from the
    config's `architectures` unless `head` names one (then missing head weights are initialized)."""
    directory = resolve(path_or_id)
    config_path = directory / "config.json"
    if not config_path.exists():
        raise BertkitError(f"{directory}: no config.json (not a Hugging Face model directory)")
    hf = _read_json(config_path)
    config = config_from_hf(hf, config_path)
    head_from_file = head == AUTO
    if head_from_file:
        head = head_from_architectures(hf, config_path)
    if num_labels is not None and num_labels != config.num_labels:
        config = config.replace(num_labels=num_labels, label_names=())
    state, weights_path = read_weights(directory)
    model = Model(config, head)
    load_state(model, state, weights_path, head_from_file)
    if dtype is not None:
        model.to(dtype)
    if any((directory / f).exists() for f in ("tokenizer.json", "vocab.txt")):
        from ..data import load_tokenizer
        model.tokenizer = load_tokenizer(directory)
    return model.eval()


# ---------------------------------------------------------------------------------------------
# Saving
# ---------------------------------------------------------------------------------------------

def hf_state_dict(model: Model) -> dict[str, torch.Tensor]:
    prefix = HEAD_PREFIX[model.config.family] if model.head_kind is not None else ""
    names = name_map(model.config.family, model.head_kind, prefix)
    state = {}
    for ours, param in model.named_parameters():  # a tied decoder is written once, as the embedding
        hf_name = names.to_hf(ours)
        if hf_name is None:
            raise BertkitError(f"parameter {ours!r} has no Hugging Face name")
        state[hf_name] = param.detach().to("cpu").contiguous()
    if "cls.predictions.bias" in state:  # the copy transformers reads when the decoder is untied
        state["cls.predictions.decoder.bias"] = state["cls.predictions.bias"].clone()
    return state


def save_pretrained(model: Model, path: str | os.PathLike) -> None:
    """Write config.json, model.safetensors and the tokenizer files. Files are written to a
    temporary directory first and moved into place, so a failure leaves any earlier save intact."""
    from safetensors.torch import save_file

    target = Path(path)
    target.mkdir(parents=True, exist_ok=True)
    hf = config_to_hf(model.config, model.head_kind)
    state = hf_state_dict(model)
    with tempfile.TemporaryDirectory(dir=target, prefix=".saving-") as tmp:
        tmp = Path(tmp)
        (tmp / "config.json").write_text(json.dumps(hf, indent=2) + "\n")
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        if model.tokenizer is not None:
            model.tokenizer.save(tmp, TOKENIZER_CLASS[model.config.family], model.config.max_positions)
        for f in tmp.iterdir():
            os.replace(f, target / f.name)
