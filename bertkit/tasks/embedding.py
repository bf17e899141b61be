"""Sentence embeddings: mean of the token vectors over real tokens (Reimers & Gurevych, 2019,
sec. 3: MEAN pooling was their best strategy) or the first token's vector (CLS, as BERT's
classifier reads it), then L2-normalized; and cosine search of a corpus for the nearest texts.

Given a model directory rather than a loaded Model, the length and pooling default to what the
directory says (`sentence_settings`), so that a sentence-transformers model embeds as
sentence-transformers runs it: all-MiniLM-L6-v2 was trained and is run at 256 tokens although
its position table has 512, and a text cut at 512 gives another vector.

Shapes: B batch, T sequence length, H hidden size.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from ..errors import BertkitError
from ..files import positive_int, read_json
from .base import check_texts, length_batches, report_truncated, serving

POOLING = ("mean", "cls")
ST_CONFIG = "sentence_bert_config.json"  # sentence-transformers' settings of its Transformer module
ST_MODULES = "modules.json"              # its pipeline: Transformer, Pooling, Normalize, ...
ST_POOLING_MODES = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls"}
ST_RUN = ("Transformer", "Pooling", "Dense", "Normalize")  # the module types bertkit runs as they do


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T, H), (B, T) -> (B, H): the average over positions where the mask is set."""
    weights = attention_mask.to(hidden.dtype).unsqueeze(-1)  # (B, T, 1)
    return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)


def saved_max_length(directory: Path) -> int | None:
    """The length a model directory is meant to embed at: the max_length bertkit finetune saved
    in task.json (the latest training; a model fine-tuned from a sentence-transformers folder keeps
    that folder's files too), else sentence-transformers' max_seq_length; None if neither."""
    from .finetune import _task_settings

    length = _task_settings(directory).get("max_length")
    path = directory / ST_CONFIG
    if length is None and path.is_file():
        length = positive_int(read_json(path), "max_seq_length", path)
    return length


def saved_pooling(directory: Path) -> str | None:
    """The pooling of a sentence-transformers directory: the Pooling module that modules.json
    lists, read from its config.json; None without one. A mode bertkit does not have (max,
    several concatenated, ...) is an error rather than a silently different vector."""
    path = directory / ST_MODULES
    if not path.is_file():
        return None
    modules = read_json(path, list)
    pooling = [m for m in modules if isinstance(m, dict) and str(m.get("type", "")).endswith(".Pooling")]
    if not pooling:
        return None
    config_path = directory / str(pooling[0].get("path", "")) / "config.json"
    if not config_path.is_file():
        raise BertkitError(f"{path} lists a Pooling module but {config_path} is missing")
    config = read_json(config_path)
    modes = sorted(k for k, v in config.items() if k.startswith("pooling_mode_") and v is True)
    if len(modes) != 1 or modes[0] not in ST_POOLING_MODES:
        named = " + ".join(m.removeprefix("pooling_mode_") for m in modes) or "none"
        raise BertkitError(f"{config_path}: pooling mode {named} is not one bertkit has ({', '.join(POOLING)}); "
                           "choose one with pooling= (--pooling)")
    return ST_POOLING_MODES[modes[0]]


class Dense(nn.Module):
    """sentence-transformers' Dense module: activation(linear(x)), plus x (or a projection of it)
    when it was trained with a residual connection."""

    def __init__(self, linear: nn.Linear, activation: nn.Module, residual: nn.Module | None):
        super().__init__()
        self.linear, self.activation, self.residual = linear, activation, residual

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, in) -> (B, out)
        out = self.activation(self.linear(x))
        return out if self.residual is None else out + self.residual(x)


class Normalize(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(x, dim=-1)


def _activation(name: object, where: Path) -> nn.Module:
    """A torch.nn activation module named by its import path, as Dense's config.json gives it."""
    module, _, attribute = str(name).rpartition(".")
    found = None
    if str(name).startswith("torch.nn."):
        try:
            found = getattr(importlib.import_module(module), attribute, None)
        except ImportError:
            found = None
    if not (isinstance(found, type) and issubclass(found, nn.Module)):
        raise BertkitError(f"{where}: activation_function {name!r} is not a torch.nn module bertkit can make")
    return found()


def _dense(folder: Path) -> Dense:
    from ..interop.hf import read_weights

    path = folder / "config.json"
    if not path.is_file():
        raise BertkitError(f"{path} is missing (the Dense module's settings)")
    config = read_json(path)
    n_in, n_out = (positive_int(config, key, path) for key in ("in_features", "out_features"))
    if n_in is None or n_out is None:
        raise BertkitError(f"{path}: in_features and out_features are both needed")
    linear = nn.Linear(n_in, n_out, bias=config.get("bias", True) is not False)
    residual = None
    if config.get("use_residual") is True:
        residual = nn.Identity() if n_in == n_out else nn.Linear(n_in, n_out, bias=False)
    dense = Dense(linear, _activation(config.get("activation_function", "torch.nn.modules.activation.Tanh"), path),
                  residual)
    state, weights = read_weights(folder)
    expected = dense.state_dict()
    if set(state) != set(expected):
        raise BertkitError(f"{weights}: holds {', '.join(sorted(state)) or 'nothing'}; the Dense module of {path} "
                           f"needs {', '.join(sorted(expected))}")
    for key, tensor in state.items():
        if tensor.shape != expected[key].shape:
            raise BertkitError(f"{weights}: {key} has shape {tuple(tensor.shape)}, expected {tuple(expected[key].shape)}")
    dense.load_state_dict({k: v.float() for k, v in state.items()})
    return dense.eval()


def saved_modules(directory: Path) -> nn.Sequential:
    """What sentence-transformers runs after pooling, in modules.json's order: Dense layers
    (read with their weights) and Normalize. Any other module would give a vector bertkit cannot
    reproduce, so it is an error rather than a silently different embedding."""
    path = directory / ST_MODULES
    modules = read_json(path, list) if path.is_file() else []
    after = []
    for entry in modules:
        kind = str(entry.get("type", "")).rpartition(".")[2] if isinstance(entry, dict) else repr(entry)
        if kind not in ST_RUN:
            raise BertkitError(f"{path}: module {kind!r} is not one bertkit runs ({', '.join(ST_RUN)})")
        if kind == "Dense":
            after.append(_dense(directory / str(entry.get("path", ""))))
        elif kind == "Normalize":
            after.append(Normalize())
    return nn.Sequential(*after)


def saved_lowercase(directory: Path) -> bool:
    """sentence-transformers lowercases texts before its tokenizer when do_lower_case is set."""
    path = directory / ST_CONFIG
    return path.is_file() and read_json(path).get("do_lower_case") is True


def prepared(source, tokenizer=None, max_length: int | None = None, pooling: str | None = None):
    """(model, max_length, pooling, lowercase, after) checked for embedding: `source` a Model or a
    directory (or hub id); a length or pooling not given comes from the directory
    (saved_max_length, saved_pooling), else the model's maximum and mean pooling. A directory's
    sentence-transformers files also give `lowercase` (its do_lower_case) and `after`, the
    modules to run on the pooled vectors (saved_modules)."""
    from ..interop.hf import resolve
    from ..model import Model
    from .finetune import load_model

    directory = None if isinstance(source, Model) else resolve(source)
    model = load_model(source if directory is None else directory, tokenizer)
    most = model.backbone.embeddings.max_length
    if max_length is None:  # a saved length longer than the position table is cut to it
        max_length = min(saved_max_length(directory) or most, most) if directory is not None else most
    if not 1 <= max_length <= most:
        raise BertkitError(f"max length must be between 1 and the model's maximum of {most} tokens, got {max_length}")
    if max_length <= model.tokenizer.frame.specials(pair=False):
        raise BertkitError(f"max length {max_length} leaves no room for text beside the special tokens")
    if pooling is None:
        pooling = (saved_pooling(directory) if directory is not None else None) or "mean"
    if pooling not in POOLING:
        raise BertkitError(f"unknown pooling {pooling!r}; choose one of {', '.join(POOLING)}")
    if directory is None:
        return model, max_length, pooling, False, nn.Sequential()
    device = next(model.parameters()).device
    return model, max_length, pooling, saved_lowercase(directory), saved_modules(directory).to(device)


def embed(model, texts: list[str], batch_size: int = 32, max_length: int | None = None,
          normalize: bool = True, progress: bool = False, pooling: str | None = None, bf16: bool = False,
          tokenizer=None) -> torch.Tensor:
    """(len(texts), H) float32 sentence embeddings. `model` is a Model that carries its tokenizer
    (or gets `tokenizer`), or a model directory, whose own settings then give the defaults: its
    sentence-transformers max_seq_length and Pooling module, or a fine-tuned model's max_length
    (otherwise the model's maximum length and mean pooling). Texts longer than max_length are cut,
    with one warning that counts them. `bf16` runs the model under autocast to bf16 (faster where
    the hardware has bf16, to about two or three significant digits)."""
    if batch_size < 1:
        raise BertkitError(f"batch size must be at least 1, got {batch_size}")
    check_texts(texts)
    model, max_length, pooling, lowercase, after = prepared(model, tokenizer, max_length, pooling)
    return _embed(model, texts, batch_size, max_length, normalize, progress, pooling, bf16, lowercase, after)


@torch.no_grad()
def _embed(model, texts: list[str], batch_size: int, max_length: int, normalize: bool, progress: bool,
           pooling: str, bf16: bool, lowercase: bool = False, after: nn.Module = nn.Sequential()) -> torch.Tensor:
    model.eval()
    if lowercase:
        texts = [t.lower() for t in texts]
    device = next(model.parameters()).device  # the tokenizer gives CPU tensors
    specials = model.tokenizer.frame.specials(pair=False)
    lengths = [len(ids) + specials for ids in model.tokenizer.encode_plain(texts)]
    report_truncated(sum(n > max_length for n in lengths), len(texts), max_length)
    # Batches of similar length pad little; the caller's order is restored at the end.
    batches, chunks = length_batches([min(n, max_length) for n in lengths], batch_size), []
    with serving(model, len(batches), bf16):
        for batch_of in tqdm(batches, disable=not progress, desc="embedding", unit="batch"):
            batch = model.tokenizer([texts[i] for i in batch_of], max_length=max_length)
            ids, mask, types = (batch[k].to(device) for k in ("input_ids", "attention_mask", "token_type_ids"))
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                # the encoder alone: a head's work (an MLM head's vocabulary projection of every
                # token) would be thrown away, and a multiple-choice head wants (B, C, T) inputs
                hidden = model.backbone(ids, mask, types).last_hidden_state.float()
            chunks.append(after(mean_pool(hidden, mask) if pooling == "mean" else hidden[:, 0]).cpu())
    width = after(torch.zeros(1, model.config.hidden_size, device=device)).shape[-1]
    vectors = torch.cat(chunks) if chunks else torch.zeros(0, width)
    result = torch.empty_like(vectors)
    result[torch.tensor([i for batch_of in batches for i in batch_of], dtype=torch.long)] = vectors
    return F.normalize(result, dim=-1) if normalize else result


def search(model, queries: list[str], corpus: list[str], top_k: int = 5, batch_size: int = 32,
           max_length: int | None = None, pooling: str | None = None, tokenizer=None,
           **embedding) -> list[list[dict]]:
    """For each query, the `top_k` corpus texts by cosine similarity of their embeddings, best
    first: [{"index", "text", "score"}]. `model`, `max_length`, `pooling` and `tokenizer` are as
    for embed(); `embedding` goes to it too (progress, bf16)."""
    if top_k < 1:
        raise BertkitError(f"top_k must be at least 1, got {top_k}")
    check_texts(queries, "queries")
    check_texts(corpus, "corpus")
    if not corpus:
        raise BertkitError("the corpus to search is empty")
    if batch_size < 1:
        raise BertkitError(f"batch size must be at least 1, got {batch_size}")
    model, max_length, pooling, lowercase, after = prepared(model, tokenizer, max_length, pooling)  # loaded once
    options = {"progress": False, "bf16": False, **embedding, "normalize": True}  # cosine = dot of unit vectors
    q, c = (_embed(model, texts, batch_size, max_length, pooling=pooling, lowercase=lowercase, after=after, **options)
            for texts in (queries, corpus))
    best = (q @ c.T).topk(min(top_k, len(corpus)), dim=1)
    return [[{"index": i, "text": corpus[i], "score": round(v, 6)} for v, i in zip(vs, ix)]
            for vs, ix in zip(best.values.tolist(), best.indices.tolist())]
