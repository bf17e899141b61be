"""Hugging Face Hub ids, for users with internet: a local directory is used as it is; an id
(`bert-base-uncased`, `org/name`) is downloaded with huggingface_hub, only the files loading reads
(`hub_files`). Knows file names, no model: interop/ and data/ both resolve through it."""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

from .errors import BertkitError, first_line


def resolve(path_or_id: str | os.PathLike, revision: str | None = None, token: str | bool | None = None) -> Path:
    """A local directory, or a Hugging Face Hub id downloaded with huggingface_hub (at `revision`,
    a branch, tag or commit; with `token` for a private or gated repo, else the logged-in one or
    HF_TOKEN)."""
    path = Path(path_or_id).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise BertkitError(f"{path}: is a file; expected a checkpoint directory with config.json")
    text = str(path_or_id)
    if not re.fullmatch(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?", text):
        raise BertkitError(f"{path}: no such directory")
    try:
        from huggingface_hub import HfApi, snapshot_download
        where = {k: v for k, v in (("revision", revision), ("token", token)) if v is not None}
        with _hub_logging_quiet():
            try:  # download what loading reads, not every format the repo holds; model_info, not
                # list_repo_files, which retried for 23 s offline before the cache could answer
                siblings = HfApi().model_info(text, **where).siblings
                wanted = hub_files([s.rfilename for s in siblings]) if siblings is not None else FALLBACK_PATTERNS
            except Exception:  # offline (then the cache answers), or an error snapshot_download reports
                wanted = FALLBACK_PATTERNS
            local = snapshot_download(text, allow_patterns=wanted, **where)
    except Exception as e:
        # "runs/besst" beside a local runs/ may be a mistyped folder rather than a Hub id
        local_parent = (f"; if a local folder was meant, {path.parent}/ holds no {path.name!r}"
                        if path.parent.is_dir() and str(path.parent) != "." else "")
        from . import model  # noqa: F401  (registers every family's presets)
        from .config import PRESETS

        preset = (f"; {text} is also a bertkit preset, which has no trained weights (bertkit.build({text!r}) makes "
                  "one with random weights)" if text in PRESETS else "")
        raise BertkitError(f"{text}: no such directory, and not downloadable from the Hugging Face Hub "
                           f"({type(e).__name__}: {first_line(e)}){_hub_advice(e, text)}{local_parent}"
                           f"{preset}") from None
    return Path(local)


HUB_SUFFIXES = (".json", ".txt", ".model", ".safetensors", ".bin")  # configs, vocabularies, spm models, weights
FALLBACK_PATTERNS = ["*.json", "*.safetensors", "*.bin", "*.txt", "*.model"]  # when the file list is unknown


def hub_files(files: list[str]) -> list[str]:
    """The files of a hub repo that loading reads: configs, tokenizer files and one copy of the
    weights (safetensors where a folder has them, else the .bin files) at the top and in
    sentence-transformers' module folders (1_Pooling, 2_Dense ...). Other runtimes' exports
    (onnx/, openvino/, coreml/, TensorFlow, Flax) and other folders (checkpoint-500/) are left:
    all-MiniLM-L6-v2 would otherwise fetch three times the bytes transformers does."""
    kept = [f for f in files if f.endswith(HUB_SUFFIXES) and f.rpartition("/")[2] != "training_args.bin"
            and ("/" not in f or re.fullmatch(r"\d+_[^/]+/[^/]+", f))]
    with_safetensors = {f.rpartition("/")[0] for f in kept if f.endswith(".safetensors")}
    return [f for f in kept if not (f.endswith((".bin", ".bin.index.json")) and f.rpartition("/")[0] in with_safetensors)]


def _hub_advice(error: Exception, repo: str) -> str:
    """What to do about a hub refusal: log in for a private or gated repo, check the revision."""
    kind = type(error).__name__
    if kind == "GatedRepoError":
        return f"; it is gated: accept its terms at https://huggingface.co/{repo} and log in (hf auth login, or HF_TOKEN)"
    if kind == "RepositoryNotFoundError":
        return "; if it is private, log in (hf auth login, or set HF_TOKEN)"
    if kind == "RevisionNotFoundError":
        return "; the repo has no such revision"
    return ""


@contextlib.contextmanager
def datasets_quietly(datasets, name: str):
    """Around datasets.load_dataset of the hub set `name`: when the Hub cannot be reached, its
    offline mode, so a cached copy loads and a missing one fails at once (the loader retried for
    ~28 s, a logged line each time, before its one-line error); the retries' logging is silenced."""
    from huggingface_hub import HfApi

    try:
        HfApi().dataset_info(name)
        unreachable = False
    except Exception as e:  # the network's errors (httpx's, requests'); a refusal (unknown name) is datasets' to say
        unreachable = any(kind.__name__ in ("TransportError", "ConnectionError", "OfflineModeIsEnabled")
                          for kind in type(e).__mro__)
    offline = datasets.config.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = offline or unreachable
    try:
        with _hub_logging_quiet():
            yield
    finally:
        datasets.config.HF_HUB_OFFLINE = offline


@contextlib.contextmanager
def _hub_logging_quiet():
    """huggingface_hub's logging at errors only, then as it was: its retries offline are a line
    each, and bertkit's error says it once."""
    from huggingface_hub.utils import logging as hub_logging

    verbosity = hub_logging.get_verbosity()
    hub_logging.set_verbosity_error()
    try:
        yield
    finally:
        hub_logging.set_verbosity(verbosity)
