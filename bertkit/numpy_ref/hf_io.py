"""Hugging Face BERT checkpoints in and out of the NumPy model, without torch.

Hugging Face names come from `bertkit.interop.bert_names`, the torch-free part of interop's
tables (BERT's) that the torch side builds on too. Loading is as strict as the torch
side's: every tensor in the file is used or explicitly ignored, every shape is checked.
"""

from __future__ import annotations

import functools
import json
import os
import re
import tempfile
from pathlib import Path

import numpy as np

from ..config import EncoderConfig
from ..errors import BertkitError
from ..files import no_config, output_dir, read_json, remove_stale_staging, shard_files
from ..interop.bert_names import BERT_BLOCK, BERT_EMBEDDINGS, BERT_KEYS, BERT_MLM
from .model import BertForMaskedLM, compute_dtype, parameter_shapes
from .safetensors import SafetensorsFile, save_dtype, save_file

# Hugging Face names and ours, as templates ({i} a layer number, {p} weight|bias), from interop's
# torch-free table of BERT's names; ours are a model's full names, the encoder's HF names relative to
# ENCODER, the prefix transformers nests the encoder under.
CONFIG_KEYS = BERT_KEYS
ENCODER = "bert."
NAMES = ([(hf, f"backbone.{ours}") for hf, ours in BERT_EMBEDDINGS]
         + [(f"encoder.layer.{{i}}.{hf}", f"backbone.encoder.layers.{{i}}.{ours}") for hf, ours in BERT_BLOCK]
         + [(hf, f"head.{ours}") for hf, ours in BERT_MLM])
# transformers keeps a second handle on the MLM output bias (tied to cls.predictions.bias).
DECODER_BIAS = "cls.predictions.decoder.bias"
# In the file but not parameters of a masked LM: buffers, BertForPreTraining's pooler and NSP.
IGNORED = [r"(bert\.)?embeddings\.(position_ids|token_type_ids)", r"(bert\.)?pooler\.dense\.(weight|bias)",
           r"cls\.seq_relationship\.(weight|bias)"]
MLM_ARCHITECTURES = ("BertForMaskedLM", "BertForPreTraining")


@functools.lru_cache(maxsize=None)
def _regex(template: str) -> re.Pattern:
    return re.compile(re.escape(template).replace(r"\{i\}", r"(?P<i>\d+)").replace(r"\{p\}", r"(?P<p>weight|bias)"))


def _translate(name: str, source: int) -> str | None:
    for pair in NAMES:
        m = _regex(pair[source]).fullmatch(name)
        if m:
            return pair[1 - source].format(**m.groupdict())
    return None


def to_ours(hf_name: str) -> str | None:
    """Our name for a file's tensor name, or None. Old conversions of the TensorFlow release
    call LayerNorm's parameters gamma/beta; a bare BertModel file has no "bert." prefix."""
    name = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", hf_name))
    return _translate(name.removeprefix(ENCODER), 0)


def to_hf(ours: str) -> str:
    name = _translate(ours, 1)
    if name is None:
        raise KeyError(ours)
    return name if name.startswith("cls.") else ENCODER + name


def config_from_hf(hf: dict, source: Path) -> EncoderConfig:
    model_type = hf.get("model_type", "bert")
    if model_type != "bert":
        raise BertkitError(f"{source}: model_type {model_type!r}; the NumPy reference loads BERT (model_type 'bert')")
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise BertkitError(f"{source}: position_embedding_type {hf['position_embedding_type']!r} is not supported")
    if hf.get("is_decoder") or hf.get("add_cross_attention"):
        raise BertkitError(f"{source}: a decoder BERT (is_decoder/add_cross_attention) is not supported")
    fields = {ours: hf[theirs] for theirs, ours in CONFIG_KEYS.items() if hf.get(theirs) is not None}
    try:
        return EncoderConfig(family="bert", **fields)
    except BertkitError as e:
        raise BertkitError(f"{source}: {e}") from None
    except TypeError as e:
        raise BertkitError(f"{source}: a value has the wrong type ({e})") from None


def config_to_hf(config: EncoderConfig) -> dict:
    values = {theirs: getattr(config, ours) for theirs, ours in CONFIG_KEYS.items()
              if getattr(config, ours) is not None}  # None: transformers' own default
    return {"architectures": ["BertForMaskedLM"], "model_type": "bert", **values}


def _weight_files(directory: Path) -> list[Path]:
    single, index = directory / "model.safetensors", directory / "model.safetensors.index.json"
    if single.exists():
        return [single]
    if index.exists():
        return shard_files(index)
    for pickled in ("pytorch_model.bin", "pytorch_model.bin.index.json"):
        if (directory / pickled).exists():
            raise BertkitError(f"{directory / pickled}: a PyTorch pickle checkpoint needs torch to read; the "
                               "NumPy reference reads safetensors (load it with bertkit.from_pretrained and "
                               "save_pretrained it once to convert)")
    raise BertkitError(f"{directory}: no weights found (expected model.safetensors)")


def from_pretrained(path: str | os.PathLike, dtype=np.float32) -> BertForMaskedLM:
    """A BERT masked-LM checkpoint directory (Hugging Face or bertkit format: config.json and
    safetensors of any float dtype) as a NumPy model computing in `dtype`."""
    dtype = compute_dtype(dtype)  # checked before any tensor is read in it
    directory = Path(path).expanduser()
    if not directory.is_dir():
        raise BertkitError(f"{directory}: no such directory")
    config_path = directory / "config.json"
    if not config_path.exists():
        raise no_config(directory)
    hf = read_json(config_path)
    config = config_from_hf(hf, config_path)
    archs = hf.get("architectures") or []
    if archs and not any(a in MLM_ARCHITECTURES for a in archs):
        raise BertkitError(f"{config_path}: architecture {archs[0]}; the NumPy reference needs a masked-LM "
                           f"head ({' or '.join(MLM_ARCHITECTURES)})")
    shapes = parameter_shapes(config)
    params: dict[str, np.ndarray] = {}
    decoder_bias = None
    for file in _weight_files(directory):
        tensors = SafetensorsFile(file)
        for name in tensors.keys():
            if name == DECODER_BIAS:
                decoder_bias = tensors.get(name, dtype)
                continue
            ours = to_ours(name)
            if ours == "head.decoder.weight" and config.tie_word_embeddings:
                continue  # a copy of the word embeddings
            if ours is None or ours not in shapes:
                if any(re.fullmatch(p, name) for p in IGNORED):
                    continue
                raise BertkitError(f"{file}: unexpected tensor {name!r}, not part of a BertForMaskedLM")
            if tensors.dtype(name) not in ("F64", "F32", "F16", "BF16"):
                raise BertkitError(f"{file}: tensor {name!r} is {tensors.dtype(name)}, not floating point")
            if tensors.shape(name) != shapes[ours]:
                raise BertkitError(f"{file}: tensor {name!r} has shape {tensors.shape(name)} but the config "
                                   f"needs {shapes[ours]}")
            if ours in params:
                raise BertkitError(f"{file}: tensor {name!r} appears twice (with and without {ENCODER!r})")
            params[ours] = tensors.get(name, dtype)
    if "head.bias" not in params and decoder_bias is not None:
        params["head.bias"] = decoder_bias  # files that keep only the decoder's handle
    missing = [to_hf(n) for n in shapes if n not in params]
    if missing:
        raise BertkitError(f"{directory}: missing {len(missing)} tensor(s): {', '.join(missing[:5])}"
                           + (" ..." if len(missing) > 5 else "")
                           + " (the NumPy reference needs a BERT masked-LM checkpoint)")
    return BertForMaskedLM(config, dtype, params=params)


def check_savable(config: EncoderConfig) -> None:
    """Whether save_pretrained can write a model of this config; a trainer with an output folder
    asks before training, so a run is not lost at its end."""
    if config.type_vocab_size == 0:
        raise BertkitError("this model cannot be saved in Hugging Face format: transformers' BERT always "
                           "has token types (type_vocab_size >= 1)")


def save_pretrained(model: BertForMaskedLM, path: str | os.PathLike, dtype: str | None = None) -> None:
    """config.json and model.safetensors (in `dtype`; None: the model's own, float32 or float64,
    which transformers loads as either) in transformers' BertForMaskedLM layout, which
    `bertkit.from_pretrained` and `transformers.BertForMaskedLM.from_pretrained` load. A tied
    decoder is written once, as the word embeddings; the output bias is written under both of
    transformers' names. Files go to a temporary directory first and are moved into place."""
    check_savable(model.config)
    dtype = save_dtype(dtype)  # (checked before any folder is made)
    target = output_dir(path, keep=(), flag="")  # a file there: one line, not mkdir's error
    target.mkdir(parents=True, exist_ok=True)
    state = {to_hf(name): value for name, value in model.params.items()}
    state[DECODER_BIAS] = state["cls.predictions.bias"]
    stored = dtype or next(iter(state.values())).dtype.name  # config.json names it, as transformers writes it
    remove_stale_staging(target)
    with tempfile.TemporaryDirectory(dir=target, prefix=".saving-") as tmp:
        tmp = Path(tmp)
        (tmp / "config.json").write_text(json.dumps({**config_to_hf(model.config), "dtype": stored}, indent=2) + "\n")
        save_file(state, tmp / "model.safetensors", dtype=dtype, metadata={"format": "pt"})
        for f in tmp.iterdir():
            os.replace(f, target / f.name)
