"""Sentence embeddings: mean of the token vectors over real tokens (Reimers & Gurevych, 2019,
sec. 3: MEAN pooling was their best strategy) or the first token's vector (CLS, as BERT's
classifier reads it), then L2-normalized; and search of a corpus for the nearest texts (by cosine,
or by the similarity function a sentence-transformers folder names).

A model loaded from a sentence-transformers folder embeds as sentence-transformers runs it
(`prepared`): its length, pooling, prompt, Dense layers and normalization come from the folder's
files. all-MiniLM-L6-v2 was trained and is run at 256 tokens although its position table has
512, and a text cut at 512 gives another vector.

Shapes: B batch, T sequence length, H hidden size.
"""

from __future__ import annotations

import importlib
import io
import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from ..errors import BertkitError, first_line
from ..files import decode_text, parse_json, positive_int
from .base import check_texts, length_batches, report_truncated, serving

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
    from the folder it was loaded from), read with errors that name the file. `where` names the
    folder in messages, or says that they came with a loaded model."""

    def __init__(self, files: dict[str, bytes], where: str):
        self.files, self.where = files, where

    def name(self, relative: str) -> str:
        return f"{self.where}/{relative}"

    def json(self, relative: str, expect: type = dict, default=None):
        if relative not in self.files:
            return default
        return parse_json(decode_text(self.files[relative], self.name(relative)), self.name(relative), expect)

    def modules(self) -> list[tuple[str, str]]:
        """modules.json as (type's last name, folder) pairs, in order; [] without one."""
        listed = self.json(ST_MODULES, list, [])
        return [(str(m.get("type", "")).rpartition(".")[2], str(m.get("path", ""))) if isinstance(m, dict)
                else (repr(m), "") for m in listed]


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


def saved_pooling(files: STFiles) -> tuple[str | None, bool]:
    """The pooling of a sentence-transformers model, from the config of the Pooling module that
    modules.json lists (pooling_mode, or the pooling_mode_* flags before sentence-transformers 6),
    and its include_prompt; (None, True) without one. A mode bertkit does not have (max, several
    concatenated, ...) is an error rather than a silently different vector."""
    folders = [folder for kind, folder in files.modules() if kind == "Pooling"]
    if not folders:
        return None, True
    name = f"{folders[0]}/config.json"
    config = files.json(name)
    if config is None:
        raise BertkitError(f"{files.name(ST_MODULES)} lists a Pooling module but {files.name(name)} is missing")
    modes = config.get("pooling_mode")
    if modes is None:
        modes = [mode for key, mode in ST_POOLING_FLAGS.items() if config.get(key) is True] or ["mean"]
    modes = [modes] if isinstance(modes, str) else list(modes)
    if len(modes) != 1 or modes[0] not in POOLING:
        raise BertkitError(f"{files.name(name)}: pooling mode {' + '.join(map(str, modes))} is not one bertkit "
                           f"has ({', '.join(POOLING)}); choose one with pooling= (--pooling)")
    return modes[0], config.get("include_prompt", True) is not False


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
    (`pooling`, mean by default) -> Normalize, the layout of all-MiniLM-L6-v2. `pooling` other than
    the model's own Pooling module's is refused: the folder would describe another model."""
    files = dict(model.companion_files)
    listed = STFiles(files, "(the model's files)")
    if listed.modules():
        saved, _ = saved_pooling(listed)
        if pooling is not None and saved is not None and pooling != saved:
            raise BertkitError(f"the model's sentence-transformers Pooling module pools by {saved}, not {pooling}; "
                               "leave pooling out to train it as it is")
        config = listed.json(ST_CONFIG, default={})
    else:
        pooling = pooling or "mean"
        modules = [(0, "", "Transformer"), (1, "1_Pooling", "Pooling"), (2, "2_Normalize", "Normalize")]
        files[ST_MODULES] = json.dumps([{"idx": i, "name": str(i), "path": path,
                                         "type": f"sentence_transformers.models.{kind}"}
                                        for i, path, kind in modules], indent=2).encode()
        flags = {key: mode == pooling for key, mode in ST_POOLING_FLAGS.items()}
        files["1_Pooling/config.json"] = json.dumps({"word_embedding_dimension": model.config.hidden_size, **flags,
                                                     "include_prompt": True}, indent=2).encode()
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
    linear = nn.Linear(n_in, n_out, bias=config.get("bias", True) is not False)
    residual = None
    if config.get("use_residual") is True:
        residual = nn.Identity() if n_in == n_out else nn.Linear(n_in, n_out, bias=False)
    dense = Dense(linear, _activation(config.get("activation_function", "torch.nn.modules.activation.Tanh"), name),
                  residual, folder)
    state, weights = _dense_weights(files, folder)
    expected = dense.state_dict()
    if set(state) != set(expected):
        raise BertkitError(f"{weights}: holds {', '.join(sorted(state)) or 'nothing'}; the Dense module of {name} "
                           f"needs {', '.join(sorted(expected))}")
    for key, tensor in sorted(state.items()):
        if tensor.shape != expected[key].shape:
            raise BertkitError(f"{weights}: {key} has shape {tuple(tensor.shape)}, expected {tuple(expected[key].shape)}")
    dense.load_state_dict({k: v.float() for k, v in state.items()})
    return dense.eval()


def with_dense_weights(files: dict[str, bytes], after: nn.Sequential) -> dict[str, bytes]:
    """The sentence-transformers files with each Dense module's weights replaced by the live
    module's (after fine-tuning), as model.safetensors in its folder, where sentence-transformers
    looks first."""
    from safetensors.torch import save

    files = dict(files)
    for dense in (m for m in after if isinstance(m, Dense)):
        files.pop(f"{dense.folder}/pytorch_model.bin", None)
        state = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in dense.state_dict().items()}
        files[f"{dense.folder}/model.safetensors"] = save(state)
    return files


def saved_modules(files: STFiles) -> nn.Sequential:
    """What sentence-transformers runs after pooling, in modules.json's order: Dense layers
    (read with their weights) and Normalize. Any other module, or a Dense before the Pooling
    (it would run on every token), gives a vector bertkit cannot reproduce, so it is an error
    rather than a silently different embedding."""
    after, pooled = [], False
    for kind, folder in files.modules():
        if kind not in ST_RUN:
            raise BertkitError(f"{files.name(ST_MODULES)}: module {kind!r} is not one bertkit runs ({', '.join(ST_RUN)})")
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
    `after` (Dense layers, Normalize). `listed`: sentence-transformers modules decide these (so
    also whether the vector is normalized). `similarity`: how search compares vectors."""
    max_length: int
    pooling: str
    lowercase: bool = False
    prompt: str = ""
    after: nn.Sequential = field(default_factory=nn.Sequential)
    listed: bool = False
    similarity: str = "cosine"
    prompts: dict = field(default_factory=lambda: {"query": "", "document": ""})  # by name, for with_prompt
    include_prompt: bool = True  # whether the Pooling module pools the prompt's tokens too

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


def prepared(source, tokenizer=None, max_length: int | None = None, pooling: str | None = None):
    """(model, SentenceSettings) checked for embedding: `source` a Model or a directory (or hub
    id). What is not given comes from the model's sentence-transformers files, which a Model
    loaded from a folder carries (Model.companion_files), then from a directory's task.json (a
    fine-tuned model's length, where those files give none); else the model's maximum length
    and mean pooling."""
    from ..interop.hf import resolve
    from ..model import Model
    from .finetune import load_model

    directory = None if isinstance(source, Model) else resolve(source)
    model = load_model(source if directory is None else directory, tokenizer)
    files = STFiles(model.companion_files, str(directory) if directory is not None else "(the model's files)")
    most = model.backbone.embeddings.max_length
    if max_length is None:  # a saved length longer than the position table is cut to it
        max_length = min(saved_max_length(files, directory, model.tokenizer) or most, most)
    if not 1 <= max_length <= most:
        raise BertkitError(f"max length must be between 1 and the model's maximum of {most} tokens, got {max_length}")
    if max_length <= model.tokenizer.frame.specials(pair=False):
        raise BertkitError(f"max length {max_length} leaves no room for text beside the special tokens")
    saved, include_prompt = saved_pooling(files) if pooling is None else (None, True)
    pooling = pooling or saved or "mean"
    if pooling not in POOLING:
        raise BertkitError(f"unknown pooling {pooling!r}; choose one of {', '.join(POOLING)}")
    prompt, prompts = saved_prompts(files)
    if prompt and not include_prompt:  # (CLS too: sentence-transformers then pools the text's first token)
        raise BertkitError(f"{files.name(ST_MODULES)}: the Pooling module leaves the prompt's tokens out "
                           "(include_prompt false), which bertkit does not; pass pooling= to embed anyway")
    lowercase = files.json(ST_CONFIG, default={}).get("do_lower_case") is True
    after = saved_modules(files).to(next(model.parameters()).device)
    return model, SentenceSettings(max_length, pooling, lowercase, prompt, after, listed=bool(files.modules()),
                                   similarity=saved_similarity(files), prompts=prompts, include_prompt=include_prompt)


def embed(model, texts: list[str], batch_size: int = 32, max_length: int | None = None,
          normalize: bool | None = None, progress: bool = False, pooling: str | None = None, bf16: bool = False,
          tokenizer=None, prompt_name: str | None = None) -> torch.Tensor:
    """(len(texts), H) float32 sentence embeddings. `model` is a Model that carries its tokenizer
    (or gets `tokenizer`), or a model directory. What is not given follows the model's
    sentence-transformers files (its length, Pooling, prompt, Dense and Normalize modules) or a
    fine-tuned directory's max_length; otherwise the model's maximum length and mean pooling.
    `normalize`: None follows the files (a plain model's vectors are L2-normalized), True
    normalizes, False gives the raw vectors (a Normalize module skipped). Texts longer than
    max_length are cut, with one warning that counts them. `bf16` runs the model under autocast to
    bf16 (faster where the hardware has bf16, to about two or three significant digits).
    `prompt_name`: one of the model's prompts (config_sentence_transformers.json) before each text
    instead of its default one, as sentence-transformers' encode(prompt_name=...)."""
    if batch_size < 1:
        raise BertkitError(f"batch size must be at least 1, got {batch_size}")
    check_texts(texts)
    model, settings = prepared(model, tokenizer, max_length, pooling)
    return _embed(model, texts, settings.with_prompt(prompt_name), batch_size, normalize, progress, bf16)


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
            batch = model.tokenizer([texts[i] for i in batch_of], max_length=max_length)
            ids, mask, types = (batch[k].to(device) for k in ("input_ids", "attention_mask", "token_type_ids"))
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                # the encoder alone: a head's work (an MLM head's vocabulary projection of every
                # token) would be thrown away, and a multiple-choice head wants (B, C, T) inputs
                hidden = model.backbone(ids, mask, types).last_hidden_state.float()
            chunks.append(after(settings.pool(hidden, mask)).cpu())
    width = after(torch.zeros(1, model.config.hidden_size, device=device)).shape[-1]
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
    if top_k < 1:
        raise BertkitError(f"top_k must be at least 1, got {top_k}")
    check_texts(queries, "queries")
    check_texts(corpus, "corpus")
    if not corpus:
        raise BertkitError("the corpus to search is empty")
    if batch_size < 1:
        raise BertkitError(f"batch size must be at least 1, got {batch_size}")
    model, settings = prepared(model, tokenizer, max_length, pooling)  # loaded once
    options = {"progress": False, "bf16": False, **embedding, "normalize": None}  # the vectors the model gives
    q, c = (_embed(model, texts, settings.with_prompt(name), batch_size, **options)
            for texts, name in ((queries, "query"), (corpus, "document")))
    best = similarity(q, c, settings.similarity).topk(min(top_k, len(corpus)), dim=1)
    return [[{"index": i, "text": corpus[i], "score": round(v, 6)} for v, i in zip(vs, ix)]
            for vs, ix in zip(best.values.tolist(), best.indices.tolist())]
