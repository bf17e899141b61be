"""Hugging Face Hub ids, without the network: the files a download asks for (chosen from a repo's
listing), a model read by id from a local hub cache as transformers reads it (also for
fine-tuning), and refusals that say what to do."""

from __future__ import annotations

import shutil
import types

import pytest
import torch

import bertkit
from bertkit.hub import hub_files

# the listing of sentence-transformers/all-MiniLM-L6-v2, with a Dense module and a training folder added
MINILM_REPO = [".gitattributes", "1_Pooling/config.json", "README.md", "config.json", "config_sentence_transformers.json",
               "data_config.json", "model.safetensors", "modules.json", "onnx/model.onnx", "onnx/model_qint8_avx512.onnx",
               "openvino/openvino_model.bin", "openvino/openvino_model.xml", "openvino/openvino_model_qint8_quantized.bin",
               "pytorch_model.bin", "rust_model.ot", "sentence_bert_config.json", "special_tokens_map.json",
               "tf_model.h5", "tokenizer.json", "tokenizer_config.json", "train_script.py", "vocab.txt",
               "2_Dense/config.json", "2_Dense/pytorch_model.bin", "checkpoint-500/model.safetensors",
               "training_args.bin", "coreml/fill-mask/float32_model.mlpackage/Data/com.apple.CoreML/weights/weight.bin"]


def test_a_download_asks_for_one_copy_of_the_weights_and_the_files_loading_reads():
    wanted = set(hub_files(MINILM_REPO))
    assert {"model.safetensors", "config.json", "tokenizer.json", "vocab.txt", "modules.json", "1_Pooling/config.json",
            "sentence_bert_config.json", "2_Dense/config.json", "2_Dense/pytorch_model.bin"} <= wanted
    assert not any(f.startswith(("onnx/", "openvino/", "coreml/", "checkpoint-500/")) for f in wanted)
    assert "pytorch_model.bin" not in wanted and "training_args.bin" not in wanted  # safetensors are there
    sharded = ["config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
               "model.safetensors.index.json", "pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin",
               "pytorch_model.bin.index.json", "spm.model"]
    assert hub_files(sharded) == [f for f in sharded if "pytorch_model" not in f]
    only_bin = ["config.json", "pytorch_model.bin", "spm.model", "tokenizer_config.json"]  # deberta-v3-base
    assert hub_files(only_bin) == only_bin


def test_from_pretrained_downloads_that_list(minilm_dir, monkeypatch, tmp_path):
    import huggingface_hub

    asked = []

    def download(repo, allow_patterns, **where):
        asked.append((allow_patterns, where))
        return str(minilm_dir)

    def listing(self, repo, **where):  # the repo's files, as model_info lists them (its siblings)
        asked.append(where)
        return types.SimpleNamespace(siblings=[types.SimpleNamespace(rfilename=f) for f in MINILM_REPO])

    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", listing)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", download)
    monkeypatch.chdir(tmp_path)
    assert bertkit.from_pretrained("sentence-transformers/all-MiniLM-L6-v2").config.hidden_size == 384
    assert asked == [{}, (hub_files(MINILM_REPO), {})]
    asked.clear()  # a revision and a token, as transformers takes them, reach both calls
    bertkit.from_pretrained("sentence-transformers/all-MiniLM-L6-v2", revision="v1.0", token="hf_x")
    assert asked == [{"revision": "v1.0", "token": "hf_x"}, (hub_files(MINILM_REPO), {"revision": "v1.0", "token": "hf_x"})]


@pytest.fixture
def hub_cache(minilm_dir, tmp_path, monkeypatch):
    """all-MiniLM-L6-v2 as `org/minilm` in a hub cache of its own, the hub offline."""
    import huggingface_hub.constants as hub

    cache = tmp_path / "hub"
    sha = "0123456789abcdef" * 2 + "01234567"
    snapshot = cache / "models--org--minilm" / "snapshots" / sha
    shutil.copytree(minilm_dir, snapshot, ignore=shutil.ignore_patterns("model.safetensors"))
    (snapshot / "model.safetensors").symlink_to(minilm_dir / "model.safetensors")
    (cache / "models--org--minilm" / "refs").mkdir()
    (cache / "models--org--minilm" / "refs" / "main").write_text(sha)
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)
    monkeypatch.chdir(tmp_path)
    return cache


def test_a_hub_id_loads_from_the_cache_as_transformers_loads_it(hub_cache):
    from transformers import AutoModel

    ours = bertkit.from_pretrained("org/minilm")
    theirs = AutoModel.from_pretrained("org/minilm").eval()
    batch = ours.tokenizer(["A hub model, read by its id."])
    with torch.no_grad():
        expected = theirs(**{k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}).last_hidden_state
        got = ours(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).last_hidden_state
    assert (got - expected).abs().max() < 1e-5


def test_finetune_takes_a_hub_id(hub_cache, tmp_path):
    from bertkit.tasks import FinetuneSettings, TextExample, finetune

    data = [TextExample(t, None, label) for t, label in [("good film", "pos"), ("bad film", "neg")] * 4]
    metrics = finetune("classification", "org/minilm", data, data, tmp_path / "out",
                       FinetuneSettings(steps=1, batch_size=4, max_length=16, progress=False))
    assert metrics["steps"] == 1 and (tmp_path / "out" / "model.safetensors").exists()
    with pytest.raises(bertkit.BertkitError, match="org/nothing: neither a preset .* nor a model directory or "
                                                   "Hugging Face Hub id"):
        finetune("classification", "org/nothing", data, data, tmp_path / "out2", FinetuneSettings(steps=1))


@pytest.mark.parametrize("error, advice", [("GatedRepoError", "accept its terms at https://huggingface.co/org/gated"),
                                           ("RepositoryNotFoundError", "if it is private, log in")])
def test_a_refused_download_says_what_to_do(monkeypatch, tmp_path, error, advice):
    import huggingface_hub
    from huggingface_hub import errors

    def refuse(*args, **kwargs):
        e = getattr(errors, error).__new__(getattr(errors, error))  # as the hub's 401 / 403 answers raise them
        e.args = ("403 Client Error.",)
        raise e

    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", refuse)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", refuse)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(bertkit.BertkitError, match=advice):
        bertkit.from_pretrained("org/gated")


def test_an_unreachable_hub_is_told_at_once(monkeypatch, tmp_path):
    """Offline, the file listing must not retry (list_repo_files did, for 23 s) before the cache
    is asked: the whole lookup fails without a single retry."""
    import huggingface_hub.constants as hub
    from huggingface_hub.utils import _http

    sleeps = []
    monkeypatch.setattr(_http.time, "sleep", sleeps.append)  # each retry waits first
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(hub, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.chdir(tmp_path)
    with pytest.raises(bertkit.BertkitError, match="org/minilm: no such directory, and not downloadable"):
        bertkit.from_pretrained("org/minilm")
    assert sleeps == []


def test_an_unreachable_hub_is_told_at_once_for_data_sets_too(monkeypatch, tmp_path):
    """A hub data set retried five times (28 s, a logged line each) before its one-line error:
    offline, the datasets loader runs in its offline mode (a cached copy would still load)."""
    datasets = pytest.importorskip("datasets")
    import huggingface_hub.constants as hub
    from huggingface_hub.utils import _http

    from bertkit.data import open_corpus
    from bertkit.tasks import load_examples

    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", False)  # the suite runs offline (conftest): here the network is tried
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    sleeps = []
    monkeypatch.setattr(_http.time, "sleep", sleeps.append)  # each retry waits first
    monkeypatch.chdir(tmp_path)  # (the name is no folder here; with a network, the Hub has no such set)
    with pytest.raises(bertkit.BertkitError, match="someone/sst2: no such file or directory, and it could not be "
                       "loaded as a Hugging Face data set"):
        load_examples("classification", "someone/sst2", "train")
    with pytest.raises(bertkit.BertkitError, match="could not be loaded as a Hugging Face data set"):
        open_corpus("someone/texts").check()
    assert sleeps == []


def test_a_tokenizer_loads_by_hub_id_too(hub_cache, minilm_dir):
    by_id = bertkit.load_tokenizer("org/minilm")
    assert by_id.encode("A tokenizer read by its id.") == bertkit.load_tokenizer(minilm_dir).encode(
        "A tokenizer read by its id.")
    with pytest.raises(bertkit.BertkitError, match="vocb.txt: no such file or directory"):  # a file name: no hub
        bertkit.load_tokenizer("vocb.txt")
