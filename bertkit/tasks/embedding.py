"""Sentence embeddings: mean of the token vectors over real tokens (Reimers & Gurevych, 2019,
sec. 3: MEAN pooling was their best strategy) or the first token's vector (CLS, as BERT's
classifier reads it), then L2-normalized; and search of a corpus for the nearest texts (by cosine,
or by the similarity function a sentence-transformers folder names).

A model loaded from a sentence-transformers folder embeds as sentence-transformers runs it
(`prepared`): its length, pooling, prompt, Dense layers, normalization and truncate_dim come from
the folder's files. all-MiniLM-L6-v2 was trained and is run at 256 tokens although its position
table has 512, and a text cut at 512 gives another vector.

Shapes: B batch, T sequence length, H hidden size.
"""

from __future__ import annotations

import copy
import importlib
import io
import json
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from ..config import check_field_types
from ..errors import BertkitError, first_line, outside_stacklevel
from ..files import decode_text, parse_json, positive_int, shown
from .base import check_count, check_texts, length_batches, report_truncated, serving, streamed

POOLING = ("mean", "cls")
ST_CONFIG = "sentence_bert_config.json"  # sentence-transformers' settings of its Transformer module
ST_MODULES = "modules.json"              # its pipeline: Transformer, Pooling, Normalize, ...
# The Pooling config's flags before sentence-transformers 6 (which writes pooling_mode instead)
ST_POOLING_FLAGS = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean",
                    "pooling_mode_max_tokens": "max", "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                    "pooling_mode_weightedmean_tokens": "weightedmean", "pooling_mode_lasttoken": "lasttoken"}
ST_RUN = ("Transformer", "Pooling", "Dense", "Normalize")  # the module types bertkit runs as they do
ST_SETTINGS = "config_sentence_transformers.json"  # its prompts and similarity function
SIMILARITY = ("cosine", "dot", "euclidean", "manhattan")  # sentence-transformers' similarity_fn_name values


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T, H), (B, T) -> (B, H): the average over positions where the mask is set."""
    weights = attention_mask.to(hidden.dtype).unsqueeze(-1)  # (B, T, 1)
    return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)


class STFiles:
    """A model's sentence-transformers files (Model.companion_files: relative path -> bytes, kept
    from the folder it was loaded from), read with errors that name the file: in the folder they
    were read from where they remember it (interop.hf.FolderFiles), else `where` (a model's
    files built in memory)."""

    def __init__(self, files: dict[str, bytes], where: str):
        from ..interop.hf import FolderFiles

        self.files = files
        self.where = str(files.folder) if isinstance(files, FolderFiles) else where

    def name(self, relative: str) -> str:
        return f"{self.where}/{relative}"

    def json(self, relative: str, expect: type = dict, default=None):
        if relative not in self.files:
            return default
        return parse_json(decode_text(self.files[relative], self.name(relative)), self.name(relative), expect)

    def modules(self) -> list[tuple[str, str]]:
        """modules.json as (kind, folder) pairs, in order, kind one of the modules bertkit runs
        (ST_RUN); [] without one. A module is known by its whole type, as sentence-transformers
        imports it (interop.hf.ST_MODULE_TYPES): "my_package.layers.Normalize" is someone's own
        code, which sentence-transformers refuses to run without trust_remote_code, not its
        Normalize. Any other module is an error naming its type, rather than a vector bertkit
        cannot reproduce."""
        from ..interop.hf import ST_MODULE_TYPES

        modules = []
        for entry in self.json(ST_MODULES, list, []):
            written = entry.get("type") if isinstance(entry, dict) else None
            if not isinstance(written, str):
                raise BertkitError(f"{self.name(ST_MODULES)}: {shown(json.dumps(entry))} is not a module entry "
                                   "with a type")
            if written not in ST_MODULE_TYPES:
                raise BertkitError(self._unknown(written))
            modules.append((ST_MODULE_TYPES[written], str(entry.get("path", ""))))
        return modules

    def _unknown(self, written: str) -> str:
        """The error line for a module type bertkit does not run: one of sentence-transformers'
        others (LSTM, Dropout ...), or custom code that only looks like one of its four."""
        if written.startswith("sentence_transformers."):
            return (f"{self.name(ST_MODULES)}: module type {written!r} is not one bertkit runs "
                    f"(sentence-transformers' {', '.join(ST_RUN)})")
        return (f"{self.name(ST_MODULES)}: module type {written!r} is custom code, not a sentence-transformers "
                f"module (sentence-transformers runs it only with trust_remote_code); bertkit runs "
                f"sentence-transformers' {', '.join(ST_RUN)}")


def saved_max_length(files: STFiles, directory: Path | None, tokenizer) -> int | None:
    """The length a model is meant to embed at, as sentence-transformers reads it: its
    max_seq_length, else (as sentence-transformers 6 keeps it) the tokenizer's model_max_length
    where modules.json lists the model's modules; else the max_length bertkit finetune saved in a
    directory's task.json; None if none says. (A folder fine-tuned for embeddings has the same
    length in both; one fine-tuned for another task keeps its sentence-transformers length for
    embedding, as sentence-transformers does.)"""
    from .finetune import _task_settings

    length = positive_int(files.json(ST_CONFIG, default={}), "max_seq_length", files.name(ST_CONFIG))
    if length is None and files.modules():
        length = tokenizer.config.get("model_max_length")
    if length is None and directory is not None:
        length = _task_settings(directory).get("max_length")
    return length


def _pooling_module(files: STFiles) -> tuple[str, dict] | None:
    """The config of the Pooling module modules.json lists (its relative name, its contents);
    None where it lists none."""
    folders = [folder for kind, folder in files.modules() if kind == "Pooling"]
    if not folders:
        return None
    name = f"{folders[0]}/config.json"
    config = files.json(name)
    if config is None:
        raise BertkitError(f"{files.name(ST_MODULES)} lists a Pooling module but {files.name(name)} is missing")
    return name, config


def _pooling_modes(config: dict) -> list[str]:
    """A Pooling config's modes (pooling_mode, or the pooling_mode_* flags before
    sentence-transformers 6; mean where it names none), several where they are concatenated."""
    modes = config.get("pooling_mode")
    if modes is None:
        modes = [mode for key, mode in ST_POOLING_FLAGS.items() if config.get(key) is True] or ["mean"]
    return [modes] if isinstance(modes, str) else list(modes)


def _converted(files: STFiles) -> bool:
    """Whether the folder is another sentence-transformers model type's save (a CrossEncoder's:
    config_sentence_transformers.json names its model_type), which SentenceTransformer loads as
    its default Transformer -> mean Pooling, whatever modules.json lists."""
    return files.json(ST_SETTINGS, default={}).get("model_type", "SentenceTransformer") != "SentenceTransformer"


def saved_pooling(files: STFiles) -> tuple[str | None, bool]:
    """The pooling of a sentence-transformers model, from the config of the Pooling module that
    modules.json lists, and its include_prompt; (None, True) for a model without
    sentence-transformers modules. A mode bertkit does not have (max, several concatenated, ...)
    is an error rather than a silently different vector; so is a modules.json that lists no
    Pooling module at all, for which sentence-transformers makes no sentence vector (its encode
    fails: it gives token vectors only), unless the folder is another model type's save
    (`_converted`: mean)."""
    if not files.modules():
        return None, True
    found = _pooling_module(files)
    if found is None and _converted(files):
        return "mean", True
    if found is None:
        raise BertkitError(f"{files.name(ST_MODULES)} lists no Pooling module, so sentence-transformers makes no "
                           "sentence vector of this model (only token vectors); choose a pooling with pooling= "
                           "(--pooling) to pool its tokens anyway")
    name, config = found
    modes = _pooling_modes(config)
    if len(modes) != 1 or modes[0] not in POOLING:
        raise BertkitError(f"{files.name(name)}: pooling mode {' + '.join(map(str, modes))} is not one bertkit "
                           f"has ({', '.join(POOLING)}); choose one with pooling= (--pooling)")
    return modes[0], config.get("include_prompt", True) is not False


def replaced_pooling(files: STFiles, pooling: str) -> str | None:
    """What the caller's `pooling` replaces in a sentence-transformers folder, said in words (the
    start of a warning: sentence-transformers does not pool that folder so); None where the
    folder pools so itself or has no sentence-transformers modules."""
    if not files.modules():
        return None
    found = _pooling_module(files)
    if found is not None:
        name, config = found
        modes, of = _pooling_modes(config), files.name(name)
    elif _converted(files):
        model_type = files.json(ST_SETTINGS)["model_type"]
        modes, of = ["mean"], f"{files.where} (a {model_type} save)"
    else:
        return f"pooling {pooling} pools a model whose {files.name(ST_MODULES)} lists no Pooling module"
    if modes == [pooling]:
        return None
    return f"pooling {pooling} replaces the {' + '.join(map(str, modes))} pooling of {of}"


def _pooling_config(hidden_size: int, pooling: str) -> bytes:
    """A Pooling module's config.json for `pooling`, in the flags every sentence-transformers
    version reads."""
    flags = {key: mode == pooling for key, mode in ST_POOLING_FLAGS.items()}
    return json.dumps({"word_embedding_dimension": hidden_size, **flags, "include_prompt": True}, indent=2).encode()


def _pooling_files(files: STFiles, pooling: str, hidden_size: int) -> dict[str, bytes]:
    """The files that make a sentence-transformers folder pool by `pooling`: its Pooling module's
    config with that mode, written as the file had it (pooling_mode, or the flags); or, where
    modules.json lists no Pooling module, one added right after the Transformer."""
    found = _pooling_module(files)
    if found is not None:
        name, config = found
        kept = {k: v for k, v in config.items() if k != "pooling_mode" and k not in ST_POOLING_FLAGS}
        mode = {"pooling_mode": pooling} if "pooling_mode" in config else \
            {key: m == pooling for key, m in ST_POOLING_FLAGS.items()}
        return {name: json.dumps({**kept, **mode}, indent=2).encode()}
    listed = files.json(ST_MODULES, list)
    at = next((i + 1 for i, (kind, _) in enumerate(files.modules()) if kind == "Transformer"), 0)
    folder = f"{at}_Pooling"
    listed.insert(at, {"idx": at, "name": folder, "path": folder, "type": "sentence_transformers.models.Pooling"})
    listed = [{**entry, "idx": i} for i, entry in enumerate(listed)]
    return {ST_MODULES: json.dumps(listed, indent=2).encode(),
            f"{folder}/config.json": _pooling_config(hidden_size, pooling)}


def saved_truncate_dim(files: STFiles) -> int | None:
    """How many leading dimensions of the model's vectors sentence-transformers keeps: the
    truncate_dim it saves for SentenceTransformer(..., truncate_dim=...) (a Matryoshka model read
    at a smaller size); None keeps them all."""
    return positive_int(files.json(ST_SETTINGS, default={}), "truncate_dim", files.name(ST_SETTINGS))


def saved_prompts(files: STFiles) -> tuple[str, dict[str, str]]:
    """The prompt sentence-transformers puts before every text (its default_prompt_name's, "" for
    none) and every prompt the model names (e5's {"query": "query: ", "passage": "passage: "}),
    with sentence-transformers' own empty "query" and "document" where the model names none."""
    config = files.json(ST_SETTINGS, default={})
    prompts = config.get("prompts") or {}
    if not isinstance(prompts, dict) or not all(isinstance(p, str) for p in prompts.values()):
        raise BertkitError(f"{files.name(ST_SETTINGS)}: prompts must map names to texts")
    prompts = {"query": "", "document": "", **prompts}
    name = config.get("default_prompt_name")
    if name is None:
        return "", prompts
    if name not in prompts:
        raise BertkitError(f"{files.name(ST_SETTINGS)}: default_prompt_name {name!r} names no prompt in prompts")
    return prompts[name], prompts


def saved_similarity(files: STFiles) -> str:
    """How sentence-transformers compares this model's vectors (its similarity_fn_name; cosine
    when it names none)."""
    name = files.json(ST_SETTINGS, default={}).get("similarity_fn_name") or "cosine"
    if name not in SIMILARITY:
        raise BertkitError(f"{files.name(ST_SETTINGS)}: similarity_fn_name {name!r} is not one of "
                           f"{', '.join(SIMILARITY)}")
    return name


def similarity(queries: torch.Tensor, corpus: torch.Tensor, name: str) -> torch.Tensor:
    """(Q, H), (N, H) -> (Q, N) scores, higher is nearer, as sentence-transformers' similarity
    functions give them: cosine, dot product, or minus the euclidean / manhattan distance."""
    if name == "cosine":
        return F.normalize(queries, dim=-1) @ F.normalize(corpus, dim=-1).T
    if name == "dot":
        return queries @ corpus.T
    return -torch.cdist(queries, corpus, p=2.0 if name == "euclidean" else 1.0)


def sentence_files(model, max_length: int, pooling: str | None = None) -> dict[str, bytes]:
    """The sentence-transformers files a model trained for embeddings is saved with, so that
    sentence-transformers loads the folder and embeds as bertkit does: the model's own (its
    max_seq_length set to `max_length`), or for a model without them Transformer -> Pooling
    (`pooling`, mean by default) -> Normalize, the layout of all-MiniLM-L6-v2. A `pooling` other
    than the folder's own Pooling module's replaces it, as it does in embed(), with a warning
    (sentence-transformers pools the original folder otherwise); the saved folder's Pooling module
    says `pooling`, so that it describes the model as trained."""
    files = copy.copy(model.companion_files)  # a copy that still knows its folder, for messages
    listed = STFiles(files, "(the model's files)")
    if listed.modules():
        if pooling is None:
            saved_pooling(listed)  # the folder's own, which training follows: one bertkit has
        elif (replaced := replaced_pooling(listed, pooling)) is not None:
            warnings.warn(f"{replaced}; the fine-tuned folder is saved pooling by {pooling}",
                          stacklevel=outside_stacklevel())
            files.update(_pooling_files(listed, pooling, model.config.hidden_size))
        config = listed.json(ST_CONFIG, default={})
    else:
        pooling = pooling or "mean"
        modules = [(0, "", "Transformer"), (1, "1_Pooling", "Pooling"), (2, "2_Normalize", "Normalize")]
        files[ST_MODULES] = json.dumps([{"idx": i, "name": str(i), "path": path,
                                         "type": f"sentence_transformers.models.{kind}"}
                                        for i, path, kind in modules], indent=2).encode()
        files["1_Pooling/config.json"] = _pooling_config(model.config.hidden_size, pooling)
        config = {"do_lower_case": False}
    files[ST_CONFIG] = json.dumps({**config, "max_seq_length": max_length}, indent=2).encode()
    return files


class Dense(nn.Module):
    """sentence-transformers' Dense module: activation(linear(x)), plus x (or a projection of it)
    when it was trained with a residual connection. `folder`: where its files are (2_Dense)."""

    def __init__(self, linear: nn.Linear, activation: nn.Module, residual: nn.Module | None, folder: str = ""):
        super().__init__()
        self.linear, self.activation, self.residual, self.folder = linear, activation, residual, folder

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, in) -> (B, out)
        out = self.activation(self.linear(x))
        return out if self.residual is None else out + self.residual(x)


class Normalize(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(x, dim=-1)


def _activation(name: object, where: str) -> nn.Module:
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


def _dense_weights(files: STFiles, folder: str) -> tuple[dict[str, torch.Tensor], str]:
    from safetensors.torch import load

    for weights in ("model.safetensors", "pytorch_model.bin"):
        data = files.files.get(f"{folder}/{weights}")
        if data is None:
            continue
        try:
            state = load(data) if weights.endswith(".safetensors") else \
                torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        except Exception as e:  # safetensors' and torch's own errors, and pickle refusals
            raise BertkitError(f"{files.name(f'{folder}/{weights}')}: not readable weights ({first_line(e)})") from None
        return state, files.name(f"{folder}/{weights}")
    raise BertkitError(f"{files.name(folder)}: no model.safetensors or pytorch_model.bin (the Dense module's weights)")


def _dense(files: STFiles, folder: str) -> Dense:
    name = files.name(f"{folder}/config.json")
    config = files.json(f"{folder}/config.json")
    if config is None:
        raise BertkitError(f"{name} is missing (the Dense module's settings)")
    n_in, n_out = (positive_int(config, key, name) for key in ("in_features", "out_features"))
    if n_in is None or n_out is None:
        raise BertkitError(f"{name}: in_features and out_features are both needed")
    with torch.device("meta"):  # shapes only: the file's weights are checked against them before any memory
        linear = nn.Linear(n_in, n_out, bias=config.get("bias", True) is not False)  # (a config's 10^9 features)
        residual = None
        if config.get("use_residual") is True:
            residual = nn.Identity() if n_in == n_out else nn.Linear(n_in, n_out, bias=False)
        dense = Dense(linear, _activation(config.get("activation_function", "torch.nn.modules.activation.Tanh"),
                                          name), residual, folder)
    state, weights = _dense_weights(files, folder)
    expected = dense.state_dict()
    if set(state) != set(expected):
        raise BertkitError(f"{weights}: holds {', '.join(sorted(state)) or 'nothing'}; the Dense module of {name} "
                           f"needs {', '.join(sorted(expected))}")
    for key, tensor in sorted(state.items()):
        if tensor.shape != expected[key].shape:
            raise BertkitError(f"{weights}: {key} has shape {tuple(tensor.shape)}, expected {tuple(expected[key].shape)}")
    dense.load_state_dict({k: v.float() for k, v in state.items()}, assign=True)
    return dense.eval()


def with_dense_weights(files: dict[str, bytes], after: nn.Sequential) -> dict[str, bytes]:
    """The sentence-transformers files with each Dense module's weights replaced by the live
    module's (after fine-tuning), as model.safetensors in its folder, where sentence-transformers
    looks first."""
    from safetensors.torch import save

    files = copy.copy(files)  # still knowing its folder
    for dense in (m for m in after if isinstance(m, Dense)):
        files.pop(f"{dense.folder}/pytorch_model.bin", None)
        state = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in dense.state_dict().items()}
        files[f"{dense.folder}/model.safetensors"] = save(state)
    return files


def saved_modules(files: STFiles) -> nn.Sequential:
    """What sentence-transformers runs after pooling, in modules.json's order: Dense layers
    (read with their weights) and Normalize. Any other module (STFiles.modules), or a Dense
    before the Pooling (it would run on every token), gives a vector bertkit cannot reproduce, so
    it is an error rather than a silently different embedding."""
    after, pooled = [], False
    for kind, folder in files.modules():
        pooled = pooled or kind == "Pooling"
        if kind == "Dense" and not pooled:
            raise BertkitError(f"{files.name(ST_MODULES)}: a Dense module before the Pooling runs on every token; "
                               "bertkit runs Dense layers on the pooled vector only")
        if kind == "Dense":
            after.append(_dense(files, folder))
        elif kind == "Normalize":
            after.append(Normalize())
    return nn.Sequential(*after)


@dataclass
class SentenceSettings:
    """How a model turns a text into one vector, as its sentence-transformers files (or the
    caller) say: the text gets `prompt` before it (and is lowercased with `lowercase`), is cut to
    `max_length` tokens, its token vectors pooled (`pooling`: "mean" or "cls") and passed through
    `after` (Dense layers, Normalize), then cut to its first `truncate_dim` dimensions (None: all),
    where sentence-transformers cuts it, after every module, Normalize too, so a normalized
    model's cut vectors are no longer unit length. `listed`: sentence-transformers modules decide
    these (so also whether the vector is normalized). `similarity`: how search compares vectors."""
    max_length: int
    pooling: str
    lowercase: bool = False
    prompt: str = ""
    after: nn.Sequential = field(default_factory=nn.Sequential)
    listed: bool = False
    similarity: str = "cosine"
    prompts: dict = field(default_factory=lambda: {"query": "", "document": ""})  # by name, for with_prompt
    include_prompt: bool = True  # whether the Pooling module pools the prompt's tokens too
    truncate_dim: int | None = None

    def __post_init__(self) -> None:
        check_field_types(self)  # a wrong type is one line naming the field, not a failure mid-embedding

    def with_prompt(self, name: str | None) -> SentenceSettings:
        """These settings with the model's prompt named `name` (None: unchanged, the default prompt).
        "query" and "document" are always there (sentence-transformers' encode_query and
        encode_document take them, empty where the model names none)."""
        if name is None:
            return self
        if name not in self.prompts:
            raise BertkitError(f"the model has no prompt named {name!r} (its prompts: {', '.join(map(repr, self.prompts))})")
        if self.prompts[name] and not self.include_prompt:
            raise BertkitError(f"the Pooling module leaves the prompt's tokens out (include_prompt false), which "
                               f"bertkit does not; prompt {name!r} cannot be used")
        return replace(self, prompt=self.prompts[name])

    def read(self, texts: list[str]) -> list[str]:
        """The texts as the model reads them: the prompt before each, lowercased if asked."""
        texts = [self.prompt + t for t in texts]
        return [t.lower() for t in texts] if self.lowercase else texts

    def pool(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """(B, T, H) token vectors -> (B, H): the mean over real tokens, or the first token's."""
        return mean_pool(hidden, attention_mask) if self.pooling == "mean" else hidden[:, 0]

    def vector(self, pooled: torch.Tensor, after: nn.Module) -> torch.Tensor:
        """(B, H) pooled -> (B, H'): through `after` (the modules, or some of them), then cut to
        truncate_dim, as sentence-transformers' encode gives it (its training losses see the
        whole vector)."""
        return after(pooled)[:, :self.truncate_dim]


def prepared(source, tokenizer=None, max_length: int | None = None, pooling: str | None = None):
    """(model, SentenceSettings) checked for embedding: `source` a Model or a directory (or hub
    id). What is not given comes from the model's sentence-transformers files, which a Model
    loaded from a folder carries (Model.companion_files), then from a directory's task.json (a
    fine-tuned model's length, where those files give none); else the model's maximum length
    and mean pooling. A `pooling` that replaces a folder's own (or pools one that lists no
    Pooling module) is followed, with a warning: the vectors are then not sentence-transformers'
    for that folder."""
    from ..interop.hf import resolve
    from ..model import Model
    from .finetune import load_model

    directory = None if isinstance(source, Model) else resolve(source)
    model = load_model(source if directory is None else directory, tokenizer)
    files = STFiles(model.companion_files, str(directory) if directory is not None else "(the model's files)")
    most = model.backbone.embeddings.max_length
    if max_length is not None and (isinstance(max_length, bool) or not isinstance(max_length, int)):
        raise BertkitError(f"max length must be a whole number, got {max_length!r}")  # not a TypeError below
    if max_length is None:  # a saved length longer than the position table is cut to it
        max_length = min(saved_max_length(files, directory, model.tokenizer) or most, most)
    if not 1 <= max_length <= most:
        raise BertkitError(f"max length must be between 1 and the model's maximum of {most} tokens, got {max_length}")
    if max_length <= model.tokenizer.frame.specials(pair=False):
        raise BertkitError(f"max length {max_length} leaves no room for text beside the special tokens")
    replaced = None
    if pooling is None:
        saved, include_prompt = saved_pooling(files)
        pooling = saved or "mean"
    elif pooling not in POOLING:
        raise BertkitError(f"unknown pooling {pooling!r}; choose one of {', '.join(POOLING)}")
    else:
        include_prompt, replaced = True, replaced_pooling(files, pooling)
    prompt, prompts = saved_prompts(files)
    if prompt and not include_prompt:  # (CLS too: sentence-transformers then pools the text's first token)
        raise BertkitError(f"{files.name(ST_MODULES)}: the Pooling module leaves the prompt's tokens out "
                           "(include_prompt false), which bertkit does not; pass pooling= to embed anyway")
    lowercase = files.json(ST_CONFIG, default={}).get("do_lower_case") is True
    after = saved_modules(files).to(next(model.parameters()).device)
    compare, truncate_dim = saved_similarity(files), saved_truncate_dim(files)
    if replaced is not None:  # said once everything else is known to be usable
        warnings.warn(f"{replaced}; the vectors are not sentence-transformers' for this folder",
                      stacklevel=outside_stacklevel())
    return model, SentenceSettings(max_length, pooling, lowercase, prompt, after, listed=bool(files.modules()),
                                   similarity=compare, prompts=prompts, include_prompt=include_prompt,
                                   truncate_dim=truncate_dim)


def embed(model, texts: list[str], batch_size: int = 32, max_length: int | None = None,
          normalize: bool | None = None, progress: bool = False, pooling: str | None = None, bf16: bool = False,
          tokenizer=None, prompt_name: str | None = None,
          stream: bool = False) -> torch.Tensor | Iterator[torch.Tensor]:
    """(len(texts), H) float32 sentence embeddings. `model` is a Model that carries its tokenizer
    (or gets `tokenizer`), or a model directory. What is not given follows the model's
    sentence-transformers files (its length, Pooling, prompt, Dense and Normalize modules, and
    truncate_dim: only the first dimensions are kept) or a fine-tuned directory's max_length;
    otherwise the model's maximum length and mean pooling. `normalize`: None follows the files (a
    plain model's vectors are L2-normalized), True normalizes (after truncate_dim's cut, as
    sentence-transformers' normalize_embeddings), False gives the raw vectors (a Normalize module
    skipped). Texts longer than max_length are cut, with one warning that counts them. `bf16`
    runs the model under autocast to bf16 (faster where the hardware has bf16, to about two or
    three significant digits). `pooling` replaces a folder's own with a warning (the vectors are
    then not sentence-transformers' for it). `prompt_name`: one of the model's prompts
    (config_sentence_transformers.json) before each text instead of its default one, as
    sentence-transformers' encode(prompt_name=...). `stream=True` gives an iterator of each
    text's (H,) vector instead, as soon as its window of texts is done (base.streamed)."""
    check_count(batch_size)
    check_texts(texts)
    if normalize is not None and not isinstance(normalize, bool):  # "no" is truthy: it normalized
        raise BertkitError(f"normalize must be True, False or None, got {normalize!r}")
    model, settings = prepared(model, tokenizer, max_length, pooling)
    settings = settings.with_prompt(prompt_name)
    if bf16:
        from ..pretraining import warn_if_emulated_bf16

        warn_if_emulated_bf16(model.device)
    if not stream:
        return _embed(model, texts, settings, batch_size, normalize, progress, bf16)
    return streamed(model, texts, batch_size, bf16, lambda part: _embed(model, part, settings, batch_size, normalize,
                                                                        False, bf16), progress, "embedding")


@torch.no_grad()
def _embed(model, texts: list[str], settings: SentenceSettings, batch_size: int, normalize: bool | None,
           progress: bool, bf16: bool) -> torch.Tensor:
    """The vectors, in eval mode; the model is left in the mode it was in (a dev evaluation in the
    middle of training must not switch its dropout off for the rest of it)."""
    from ..model import evaluating

    with evaluating(model):
        return _embed_eval(model, texts, settings, batch_size, normalize, progress, bf16)


def _embed_eval(model, texts: list[str], settings: SentenceSettings, batch_size: int, normalize: bool | None,
                progress: bool, bf16: bool) -> torch.Tensor:
    max_length, after = settings.max_length, settings.after
    if normalize is False:  # raw: the folder's Normalize modules too are left out
        after = nn.Sequential(*[m for m in after if not isinstance(m, Normalize)])
    texts = settings.read(texts)
    device = next(model.parameters()).device  # the tokenizer gives CPU tensors
    specials = model.tokenizer.frame.specials(pair=False)
    lengths = [len(ids) + specials for ids in model.tokenizer.encode_plain(texts)]
    report_truncated(sum(n > max_length for n in lengths), len(texts), max_length)
    # Batches of similar length pad little; the caller's order is restored at the end.
    batches, chunks = length_batches([min(n, max_length) for n in lengths], batch_size), []
    with serving(model, len(batches), bf16):
        for batch_of in tqdm(batches, disable=not progress, desc="embedding", unit="batch"):
            batch = model.tokenizer([texts[i] for i in batch_of], max_length=max_length,
                                    return_token_type_ids=True, return_attention_mask=True)
            ids, mask, types = (batch[k].to(device) for k in ("input_ids", "attention_mask", "token_type_ids"))
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                # the encoder alone: a head's work (an MLM head's vocabulary projection of every
                # token) would be thrown away, and a multiple-choice head wants (B, C, T) inputs
                hidden = model.backbone(ids, mask, types).last_hidden_state.float()
            chunks.append(settings.vector(settings.pool(hidden, mask), after).cpu())
    width = settings.vector(torch.zeros(1, model.config.hidden_size, device=device), after).shape[-1]
    vectors = torch.cat(chunks) if chunks else torch.zeros(0, width)
    result = torch.empty_like(vectors)
    result[torch.tensor([i for batch_of in batches for i in batch_of], dtype=torch.long)] = vectors
    return F.normalize(result, dim=-1) if normalize or (normalize is None and not settings.listed) else result


def search(model, queries: list[str], corpus: list[str], top_k: int = 5, batch_size: int = 32,
           max_length: int | None = None, pooling: str | None = None, tokenizer=None,
           **embedding) -> list[list[dict]]:
    """For each query, the `top_k` corpus texts nearest by the model's similarity function (a
    sentence-transformers folder's similarity_fn_name: cosine by default, dot, or minus the
    euclidean or manhattan distance, as its model.similarity scores), best first:
    [{"index", "text", "score"}]. `model`, `max_length`, `pooling` and `tokenizer` are as for
    embed(); `embedding` goes to it too (progress, bf16). Queries and corpus texts get the
    model's "query" and "document" prompts (empty where it names none, not its default prompt),
    as sentence-transformers' encode_query and encode_document give them."""
    check_count(top_k, "top_k")
    check_texts(queries, "queries")
    check_texts(corpus, "corpus")
    if not corpus:
        raise BertkitError("the corpus to search is empty")
    check_count(batch_size)
    model, settings = prepared(model, tokenizer, max_length, pooling)  # loaded once
    options = {"progress": False, "bf16": False, **embedding, "normalize": None}  # the vectors the model gives
    q, c = (_embed(model, texts, settings.with_prompt(name), batch_size, **options)
            for texts, name in ((queries, "query"), (corpus, "document")))
    best = similarity(q, c, settings.similarity).topk(min(top_k, len(corpus)), dim=1)
    return [[{"index": i, "text": corpus[i], "score": v} for v, i in zip(vs, ix)]
            for vs, ix in zip(best.values.tolist(), best.indices.tolist())]
