"""Bad checkpoints give one clear line naming the problem, and a non-zero exit with no traceback."""

import gzip
import io
import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

import bertkit
from conftest import randomize
from test_hf_parity import hf_config, hf_model, tiny_hf_config


@pytest.fixture
def good(tmp_path):
    path = tmp_path / "good"
    hf_model("BertForMaskedLM", tiny_hf_config()).save_pretrained(path)
    return path


def edit_config(path, **changes):
    config = json.loads((path / "config.json").read_text())
    config.update(changes)
    (path / "config.json").write_text(json.dumps(config))


def edit_weights(path, fn):
    state = load_file(path / "model.safetensors")
    fn(state)
    save_file(state, path / "model.safetensors")


class NotATensor:  # a pickled global that weights_only=True refuses
    pass


def break_missing_config(p):
    (p / "config.json").unlink()


def break_model_type(p):
    edit_config(p, model_type="gpt2")


def break_custom_code(p):  # nomic-embed's layout: its own model code, named by auto_map
    edit_config(p, model_type="nomic_bert", auto_map={"AutoModel": "nomic-ai/nomic-bert-2048--modeling_hf_nomic_bert.NomicBertModel"})


def break_shape(p):
    edit_weights(p, lambda s: s.update({"bert.embeddings.word_embeddings.weight": torch.zeros(98, 32)}))


def break_no_weights(p):
    (p / "model.safetensors").unlink()


def break_missing_tensor(p):
    edit_weights(p, lambda s: s.pop("bert.encoder.layer.1.output.dense.weight"))


def break_pickle(p):
    (p / "model.safetensors").unlink()
    with open(p / "pytorch_model.bin", "wb") as f:
        pickle.dump({"weight": NotATensor()}, f)


def break_corrupt_safetensors(p):
    (p / "model.safetensors").write_bytes(b"\x00garbage" * 10)


def break_json(p):
    (p / "config.json").write_text('{"model_type": "bert",\n  "hidden_size": 32,,\n}')


def break_decoder(p):
    edit_config(p, is_decoder=True)


def break_unexpected(p):
    edit_weights(p, lambda s: s.update({"bert.encoder.layer.0.adapter.weight": torch.zeros(3)}))


def break_architecture(p):
    edit_config(p, architectures=["BertLMHeadModel"])


def break_empty_bin(p):
    (p / "model.safetensors").unlink()
    (p / "pytorch_model.bin").write_bytes(b"")  # torch's EOFError has no message


def break_vocab_encoding(p):
    (p / "vocab.txt").write_bytes("[PAD]\n[UNK]\ncaf\u00e9\n".encode("latin-1"))


def break_architecture_string(p):
    edit_config(p, architectures="BertLMHeadModel")  # one name, not a list


def break_index_list(p):
    (p / "model.safetensors").unlink()
    (p / "model.safetensors.index.json").write_text(json.dumps({"weight_map": ["a"]}))


def break_index_values(p):
    (p / "model.safetensors").unlink()
    (p / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": 1}}))


def shard_at(name):
    """An index whose every tensor lives in the shard `name` (the folder's weights, moved there)."""
    def breaker(p):
        state = load_file(p / "model.safetensors")
        (p / "model.safetensors").unlink()
        save_file(state, p / name.replace("{out}", str(p.parent)))
        (p / "model.safetensors.index.json").write_text(
            json.dumps({"weight_map": {k: name.replace("{out}", str(p.parent)) for k in state}}))
    return breaker


def break_gamma_and_weight(p):  # the old TensorFlow name beside the new one, for one LayerNorm
    edit_weights(p, lambda s: s.update({"bert.embeddings.LayerNorm.gamma": s["bert.embeddings.LayerNorm.weight"] + 1}))


def break_garbage_bin(p):
    (p / "model.safetensors").unlink()
    (p / "pytorch_model.bin").write_bytes(b"garbage" * 10)


def break_unsafe_global(p):  # torch.save's own format, holding a class weights_only=True refuses
    (p / "model.safetensors").unlink()
    torch.save({"weight": NotATensor()}, p / "pytorch_model.bin")


def break_nonexistent(p):
    import shutil
    shutil.rmtree(p)


CASES = {
    "missing config.json": (break_missing_config, ["no config.json"]),
    "unknown model_type": (break_model_type, ["unknown model_type 'gpt2'", "config.json"]),
    "custom code": (break_custom_code, ["unknown model_type 'nomic_bert'", "trust_remote_code and bertkit does not run"]),
    "wrong shape": (break_shape, ["bert.embeddings.word_embeddings.weight", "(98, 32)", "(99, 32)"]),
    "no weights file": (break_no_weights, ["no weights found", "model.safetensors"]),
    "missing tensor": (break_missing_tensor, ["missing 1 tensor", "encoder.layer.1.output.dense.weight"]),
    "pickle refused": (break_pickle, ["pytorch_model.bin", "refused to unpickle"]),
    "corrupt safetensors": (break_corrupt_safetensors, ["model.safetensors", "not a readable safetensors"]),
    "invalid json": (break_json, ["config.json", "not valid JSON", "line 2"]),
    "decoder config": (break_decoder, ["is_decoder", "bidirectional encoders only"]),
    "unexpected tensor": (break_unexpected, ["unexpected tensor", "adapter.weight"]),
    "unsupported architecture": (break_architecture, ["BertLMHeadModel", "not supported"]),
    "directory does not exist": (break_nonexistent, ["no such directory"]),
    "empty pytorch_model.bin": (break_empty_bin, ["pytorch_model.bin", "not a readable PyTorch checkpoint (EOFError)"]),
    "vocab.txt not UTF-8": (break_vocab_encoding, ["vocab.txt, line 3: not UTF-8 text"]),
    "architectures a string": (break_architecture_string, ["'BertLMHeadModel' is not supported"]),
    "weight_map a list": (break_index_list, ["model.safetensors.index.json: weight_map must map tensor names to "
                                             "shard file names"]),
    "weight_map of numbers": (break_index_values, ["model.safetensors.index.json: weight_map must map tensor names "
                                                   "to shard file names"]),
    "dropout null": (lambda p: edit_config(p, hidden_dropout_prob=None),
                     ["config.json: hidden_dropout_prob must be a number, got None"]),
    "size a float": (lambda p: edit_config(p, type_vocab_size=2.0),
                     ["config.json: type_vocab_size must be an integer, got 2.0"]),
    "range a string": (lambda p: edit_config(p, initializer_range="x"),
                       ["config.json: initializer_range must be a number, got 'x'"]),
    "tie a string": (lambda p: edit_config(p, tie_word_embeddings="false"),
                     ["config.json: tie_word_embeddings must be true or false, got 'false'"]),
    "model_type a list": (lambda p: edit_config(p, model_type=["bert"]),
                          ["config.json: model_type must be a string, got ['bert']"]),
    "architectures a number": (lambda p: edit_config(p, architectures=5),
                               ["config.json: architectures must be a list of class names, got 5"]),
    # sizes no memory holds: refused by the shape check, before anything is allocated
    "huge vocabulary": (lambda p: edit_config(p, vocab_size=10 ** 10),
                        ["'bert.embeddings.word_embeddings.weight' has shape (99, 32)", "(10000000000, 32)"]),
    "huge intermediate size": (lambda p: edit_config(p, intermediate_size=10 ** 12),
                               ["intermediate.dense", "(1000000000000"]),
    "another family's weights": (lambda p: edit_config(p, model_type="roberta", architectures=["RobertaForMaskedLM"]),
                                 ["its tensors are named bert.*",
                                  "weights of another family than the config's roberta"]),
    "ALBERT config, BERT weights": (lambda p: edit_config(p, model_type="albert", architectures=["AlbertForMaskedLM"]),
                                    ["unexpected tensor 'bert.", "named as another family's weights: the config's "
                                     "is albert"]),
    "hidden size past torch's sizes": (lambda p: edit_config(p, hidden_size=2_000_000_000, num_attention_heads=1),
                                       ["config.json: the model it describes is too large to build"]),
    # read as transformers reads it: a gzip bomb of a config is not JSON, not gigabytes decompressed
    "config gzipped": (lambda p: (p / "config.json").write_bytes(gzip.compress((p / "config.json").read_bytes())),
                       ["config.json, line", "not text"]),
    "config nested too deeply": (lambda p: (p / "config.json").write_text('{"a":' * 100_000),
                                 ["config.json: JSON nested too deeply to read"]),
    "layers the file lacks": (lambda p: edit_config(p, num_hidden_layers=100_000),  # in a second, not minutes
                              ["missing every tensor of 99998 of the config's 100000 layers: layer(s) 2, 3"]),
    "gamma beside weight": (break_gamma_and_weight, ["'bert.embeddings.LayerNorm.gamma'",
                                                     "'bert.embeddings.LayerNorm.weight'",
                                                     "LayerNorm's old gamma/beta name and its weight/bias name"]),
    "garbage pytorch_model.bin": (break_garbage_bin, ["pytorch_model.bin: not a readable PyTorch checkpoint (neither "
                                                      "the zip archive torch.save writes nor a pickle)"]),
    "unsafe global": (break_unsafe_global, ["pytorch_model.bin: refused to unpickle", "NotATensor"]),
    "shard in the folder above": (shard_at("../outside.safetensors"),
                                  ["model.safetensors.index.json: shard '../outside.safetensors' lies outside"]),
    "shard at an absolute path": (shard_at("{out}/outside.safetensors"), ["/outside.safetensors' lies outside"]),
}


@pytest.mark.parametrize("case", CASES)
def test_library_raises_one_clear_error(case, good):
    breaker, words = CASES[case]
    breaker(good)
    with pytest.raises(bertkit.BertkitError) as info:
        bertkit.from_pretrained(good)
    message = str(info.value)
    assert "\n" not in message
    for w in words:
        assert w in message, (w, message)


def _one_error_line(code, out, err, words):
    assert code == 2
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("bertkit: error: "), err
    assert all(w in lines[0] for w in words), lines[0]
    assert out == ""


@pytest.mark.parametrize("case", CASES)
def test_cli_prints_one_line_and_exits_nonzero(case, good, capsys, monkeypatch):
    from bertkit.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    breaker, words = CASES[case]
    breaker(good)
    code = main(["info", str(good)])
    _one_error_line(code, *capsys.readouterr(), words)


@pytest.mark.parametrize("case", ["corrupt safetensors", "vocab.txt not UTF-8"])
def test_the_command_in_its_own_process_prints_one_line_and_exits_nonzero(case, good):
    # as a user's shell sees it: nothing else on stderr (import-time warnings), the exit status
    breaker, words = CASES[case]
    breaker(good)
    run = subprocess.run([sys.executable, "-m", "bertkit.cli", "info", str(good)],
                         capture_output=True, text=True, timeout=120,
                         env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    _one_error_line(run.returncode, run.stdout, run.stderr, words)


@pytest.mark.parametrize("argv, flag", [
    (["finetune", "--task", "classification", "--model", "mini-bert", "--train", "t.csv", "--eval", "e.csv",
      "--out", ""], "--out"),
    (["pretrain", "--corpus", "", "--out", "run"], "--corpus"),
    (["bench", "--quick", "--json", ""], "--json"),
    (["visualize", "bench", ""], "RESULTS.json"),
    (["visualize", "curves", "runs/one", ""], "RUN"),
])
def test_an_empty_path_is_refused_not_read_as_the_current_folder(argv, flag, tmp_path, capsys, monkeypatch):
    from bertkit.cli import main

    monkeypatch.chdir(tmp_path)  # where --out "" would have written the model, and --json "" nothing
    code = main(argv)
    _one_error_line(code, *capsys.readouterr(), [f"{flag}: an empty path"])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc, where no folder can be made")
@pytest.mark.parametrize("argv", [["visualize", "distillation-temperature", "--logits", "3,1"],
                                  ["compare", "--parameters-only"]])
def test_an_out_folder_that_cannot_be_made_is_one_line_before_any_work(argv, capsys):
    from bertkit.cli import main

    code = main([*argv, "--out", "/proc/bertkit-nowhere"])  # root may "write" there by os.access
    _one_error_line(code, *capsys.readouterr(), ["--out /proc/bertkit-nowhere: cannot write in /proc"])


@pytest.mark.parametrize("row, said", [({"text": "", "text_pair": "only second"}, "the object's 'text' is empty"),
                                       ({"text_pair": "only second"}, "the object needs 'text'"),
                                       ({"text": 5}, "'text' must be a string, got 5")])  # said it was missing
def test_an_input_object_missing_or_with_an_empty_text_says_which(row, said, tmp_path, capsys):
    from bertkit.cli import main

    inputs = tmp_path / "in.jsonl"  # (read before the model is looked for)
    inputs.write_text(json.dumps(row) + "\n")
    code = main(["predict", "classify", "--model", str(tmp_path / "model"), "--input", str(inputs)])
    _one_error_line(code, *capsys.readouterr(), [f"{inputs}, line 1: {said}"])


def test_a_mistyped_folder_under_a_local_one_says_the_local_folder_lacks_it(tmp_path, monkeypatch, capsys):
    from bertkit.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    code = main(["info", "runs/besst"])  # read as a Hub id "owner/name" too, as transformers reads it
    _one_error_line(code, *capsys.readouterr(), ["runs/besst: no such directory",
                                                 "if a local folder was meant, runs/ holds no 'besst'"])


def test_a_preset_name_where_a_checkpoint_is_needed_says_it_is_a_preset(tmp_path, monkeypatch, capsys):
    from bertkit.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    code = main(["predict", "fill-mask", "--model", "mini-bert", "a [MASK] film"])
    _one_error_line(code, *capsys.readouterr(), ["mini-bert: no such directory", "mini-bert is also a bertkit "
                                                 "preset, which has no trained weights"])


def test_hub_id_without_network_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(bertkit.BertkitError, match="bert-base-uncased: no such directory, and not downloadable"):
        bertkit.from_pretrained("bert-base-uncased")


def test_failed_save_leaves_the_earlier_checkpoint_intact(good):
    before = {f.name: f.read_bytes() for f in good.iterdir()}
    model = bertkit.from_pretrained(good)
    pre_ln = bertkit.Model(model.config.replace(norm_first=True), head="mlm")
    with pytest.raises(bertkit.BertkitError, match="pre-LN"):
        pre_ln.save_pretrained(good)
    assert {f.name: f.read_bytes() for f in good.iterdir()} == before


def test_save_overwrites_cleanly_and_reloads(good):
    import os
    import time

    from bertkit.files import STALE_STAGING_S

    model = bertkit.from_pretrained(good)
    randomize(model, seed=11)
    killed, writing = good / ".saving-killed", good / ".saving-now"  # a killed save's leftover, and one in progress
    for folder in (killed, writing):
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"partial")
    old = time.time() - STALE_STAGING_S - 60
    os.utime(killed, (old, old))
    model.save_pretrained(good)
    assert [f.name for f in good.iterdir() if f.name.startswith(".saving-")] == [writing.name]
    writing.joinpath("model.safetensors").unlink()
    writing.rmdir()
    again = bertkit.from_pretrained(good)
    for (n, a), (_, b) in zip(model.named_parameters(), again.named_parameters()):
        assert torch.equal(a, b), n
    assert transformers.BertForMaskedLM.from_pretrained(good) is not None


BAD_INPUTS = {  # (input_ids, token_type_ids) -> words the one-line error must carry
    "one sequence without a batch": (torch.tensor([5, 6, 7]), None, ["(3,)", "ids[None]"]),
    "a list": ([[5, 6, 7]], None, ["input_ids must be a (batch, length) tensor", "got list"]),
    "three dimensions": (torch.zeros(1, 2, 3, dtype=torch.long), None, ["(1, 2, 3)"]),
    "float ids": (torch.tensor([[5.0, 6.0]]), None, ["int64 or int32", "float32"]),
    "int16 ids": (torch.tensor([[5, 6]], dtype=torch.int16), None, ["int64 or int32", "int16"]),
    "uint8 token types": (torch.tensor([[5, 6]]), torch.tensor([[0, 1]], dtype=torch.uint8), ["token_type_ids", "uint8"]),
    "no positions": (torch.zeros(2, 0, dtype=torch.long), None, ["(2, 0)", "length >= 1"]),
    "id past the vocabulary": (torch.tensor([[5, 120]]), None, ["input_ids", "120", "0..119"]),
    "negative id": (torch.tensor([[-1, 5]]), None, ["input_ids", "-1"]),
    "token type past the table": (torch.tensor([[5, 6]]), torch.tensor([[0, 2]]), ["token_type_ids", "2", "0..1"]),
    "token types of another shape": (torch.tensor([[5, 6]]), torch.tensor([[0, 1, 1]]), ["token_type_ids", "(1, 3)"]),
}


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_forward_refuses_bad_ids_in_one_line(case):
    """Ids the embeddings cannot look up get one clear error before any work (torch's own is an
    IndexError on CPU and a device-side assert on CUDA)."""
    ids, types, words = BAD_INPUTS[case]
    model = bertkit.build("bert-base", num_layers=1, vocab_size=120, hidden_size=32, num_heads=2,
                          intermediate_size=64).eval()
    with pytest.raises(bertkit.BertkitError) as info:
        model(ids, token_type_ids=types)
    message = str(info.value)
    assert "\n" not in message and all(w in message for w in words), message


@pytest.mark.parametrize("family", ["bert", "deberta-v2", "modernbert"])
def test_a_mask_that_is_not_one_and_zero_is_refused(family):
    """An additive 0 / -inf mask was read as one (nonzero: attend), so its pads attended and its
    tokens did not, and the unpadded and padded paths disagreed (by 2.3 on DeBERTa and ModernBERT;
    outside tester). Bool, int and float masks of 0 and 1 give one answer."""
    name = {"bert": "bert-base", "deberta-v2": "deberta-v3-base", "modernbert": "modernbert-base"}[family]
    model = bertkit.build(name, head="mlm", num_layers=1, vocab_size=120, hidden_size=32, num_heads=2,
                          intermediate_size=64, pad_token_id=0).eval()
    ids = torch.randint(5, 120, (2, 7))
    mask = torch.ones(2, 7)
    mask[1, 4:] = 0
    for bad, said in [(mask * 2, r"attention_mask\[0, 0\] is 2: a mask is 1 \(or True\) for a real token and 0 "),
                      ((1 - mask) * -1e9, r"attention_mask\[1, 4\] is -1e\+09: .*\(an additive 0 / -inf mask is not "
                                          r"one\)$")]:
        with pytest.raises(bertkit.BertkitError, match=said):
            model(ids, bad)
    with torch.no_grad():
        want = model(ids, mask.long()).logits
        for same in (mask, mask.bool(), mask.to(torch.int32)):
            assert torch.equal(model(ids, same).logits, want)


def test_a_model_on_the_meta_device_runs_on_shapes_alone():
    """The id range check reads values, which meta tensors lack: it is skipped there, as the
    shape checks are not."""
    model = bertkit.build("bert-base", head="classification", num_layers=1, hidden_size=32, num_heads=2,
                          intermediate_size=64).to("meta").eval()
    ids = torch.zeros(2, 5, dtype=torch.long, device="meta")
    assert model(ids).logits.shape == (2, 2)
    with pytest.raises(bertkit.BertkitError, match="ids\\[None\\]"):
        model(ids[0])


def test_python_api_arguments_of_the_wrong_type_are_one_error_naming_them(minilm_dir, tmp_path):
    """Each was a raw AttributeError / TypeError from deep inside (or, for a tokenizer path given
    to Model, a string kept as the tokenizer that failed at first use)."""
    from bertkit.objectives import MaskedLM
    from bertkit.train import Trainer, TrainSettings

    model = bertkit.build("mini-bert", head="mlm", num_layers=1, hidden_size=16, num_heads=2, intermediate_size=16)
    tok = bertkit.load_tokenizer(minilm_dir)
    for call, said in [(lambda: bertkit.Model("mini-bert"), "Model takes an EncoderConfig, not str"),
                       (lambda: bertkit.build(model), "build takes a preset name or an EncoderConfig, not Model"),
                       (lambda: bertkit.student_from_teacher("bert-base"), "the teacher must be a Model"),
                       (lambda: bertkit.from_pretrained(None), "from_pretrained takes a folder or a hub id"),
                       (lambda: bertkit.load_tokenizer(None), "load_tokenizer takes a folder or a tokenizer file"),
                       (lambda: Trainer(model, None, TrainSettings(steps=1), tmp_path), "Trainer takes an objective"),
                       (lambda: bertkit.Model(model.config, tokenizer=5), "tokenizer must be a bertkit Tokenizer"),
                       (lambda: tok([None]), "texts: item 0 is NoneType, not a string"),
                       (lambda: tok(["a"], [None]), "text_pairs: item 0 is NoneType, not a string"),
                       (lambda: tok.encode(5), "text must be a string, not int"),
                       (lambda: bertkit.build(bertkit.EncoderConfig(family="albert")),
                        r"bertkit\.models\.albert\.AlbertConfig\(\.\.\.\)")]:
        with pytest.raises(bertkit.BertkitError, match=said):
            call()
    assert MaskedLM(model)  # (the objective itself is fine)
    # a tokenizer path given to Model is loaded, as the task helpers' tokenizer= is
    assert bertkit.Model(model.config, "mlm", tokenizer=minilm_dir).tokenizer.encode("a b") == tok.encode("a b")


def test_presets_are_known_without_importing_the_models_first():
    code = "from bertkit.config import get_preset; print(get_preset('bert-base').config.num_layers)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "12", done.stderr


def test_a_name_too_long_for_the_file_system_is_one_line(capsys):
    from bertkit.cli import main

    assert main(["info", "L" * 300]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bertkit: error: File name too long: LLL") and len(err.strip().splitlines()) == 1, err


def test_help_and_version_that_cannot_be_written_are_one_error_line(monkeypatch, capsys):
    # argparse dropped the failed write and the command exited 0 with nothing written
    import errno

    from bertkit.cli import main

    class Full(io.StringIO):
        def write(self, text):
            raise OSError(errno.ENOSPC, "No space left on device")

    for argv in (["--help"], ["--version"], ["finetune", "--help"]):
        monkeypatch.setattr(sys, "stdout", Full())
        assert main(argv) == 2, argv
        assert capsys.readouterr().err.strip() == "bertkit: error: No space left on device (while writing)"


@pytest.mark.slow  # (three processes of their own: ~10 s)
def test_what_the_file_system_refuses_is_one_line_and_results_are_utf8_in_any_locale(minilm_dir, tmp_path):
    """A name longer than the file system allows and results written to a full device were
    tracebacks; in a locale that is not UTF-8 (Python's UTF-8 mode off) the first é printed was."""
    model = bertkit.build("mini-bert", head="mlm", num_layers=1, hidden_size=16, num_heads=2, intermediate_size=16,
                          vocab_size=30522)
    model.tokenizer = bertkit.load_tokenizer(minilm_dir)
    model.save_pretrained(tmp_path / "m")
    cli = [sys.executable, "-m", "bertkit"]
    with open("/dev/full", "w") as full:
        done = subprocess.run([*cli, "info", str(tmp_path / "m")], stdout=full, stderr=subprocess.PIPE, text=True)
    assert done.returncode == 2 and done.stderr.strip() == "bertkit: error: No space left on device (while writing)"
    closed = subprocess.run(["sh", "-c", f"'{sys.executable}' -m bertkit models >&-"], capture_output=True, text=True)
    assert closed.returncode == 0 and not closed.stderr  # stdout closed by the caller: nothing to write to
    (tmp_path / "in.txt").write_text("un café [MASK] 🎉\n", encoding="utf-8")
    done = subprocess.run([*cli, "predict", "fill-mask", "--model", str(tmp_path / "m"), "--input",
                           str(tmp_path / "in.txt"), "--json"], capture_output=True,
                          env={**os.environ, "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""})
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert json.loads(done.stdout.decode("utf-8").splitlines()[0])["text"] == "un café [MASK] 🎉"


def test_info_names_the_tokenizer_s_size_and_a_tokenizer_that_is_not_the_model_s(minilm_dir, tmp_path, capsys):
    """It said "tokenizer": true for a 30,522-token tokenizer beside a 99-token model, which the
    next command then failed on."""
    from bertkit.cli import main

    for vocab, warned in ((30522, False), (99, True)):
        model = bertkit.build("mini-bert", head="mlm", num_layers=1, hidden_size=16, num_heads=2, intermediate_size=16,
                              vocab_size=vocab)
        model.tokenizer = bertkit.load_tokenizer(minilm_dir)
        (model.to(torch.bfloat16) if warned else model).save_pretrained(tmp_path / str(vocab))
        assert main(["info", str(tmp_path / str(vocab))]) == 0
        out, err = capsys.readouterr()
        assert json.loads(out)["tokenizer_vocab"] == 30522
        assert json.loads(out)["dtype"] == ("bfloat16" if warned else "float32")  # as stored
        assert ("the tokenizer has 30,522 tokens but the model's vocabulary 99" in err) is warned, err


@pytest.mark.parametrize("family, variant, fused", [
    ("modernbert", "no-bias-window4", "model.layers.1.attn.Wqkv.weight"),  # (3H, H): Q, K, V one after another
    ("deberta", "both-clamped", "deberta.encoder.layer.1.attention.self.in_proj.weight"),  # v1: interleaved per head
])
def test_a_fused_tensor_of_the_wrong_shape_or_missing_is_named_as_the_file_names_it(family, variant, fused, tmp_path):
    """A file's fused Q, K, V of the wrong shape was split first: ModernBERT's was then named as
    a 'query' tensor of a made-up shape, DeBERTa v1's a RuntimeError from a reshape. Missing, they
    were named as the three pieces no file holds."""
    path = tmp_path / family
    cls = {"modernbert": "ModernBertForMaskedLM", "deberta": "DebertaForMaskedLM"}[family]
    hf_model(cls, hf_config(family, variant, cls)).save_pretrained(path)
    H = json.loads((path / "config.json").read_text())["hidden_size"]
    edit_weights(path, lambda s: s.update({fused: s[fused][: 2 * H].clone()}))
    with pytest.raises(bertkit.BertkitError, match=rf"tensor '{re.escape(fused)}' has shape \({2 * H}, {H}\) but the "
                                                   rf"config needs \({3 * H}, {H}\)"):
        bertkit.from_pretrained(path)
    edit_weights(path, lambda s: s.pop(fused))
    with pytest.raises(bertkit.BertkitError, match=rf"missing 1 tensor\(s\): {re.escape(fused.split('.', 1)[1])}$"):
        bertkit.from_pretrained(path)


def test_a_results_file_that_cannot_be_written_leaves_the_earlier_one_whole(tmp_path, monkeypatch):
    """evaluate's --out and --predictions go through write_text: a write that fails part way (a
    full disk) left a cut file where the earlier results were."""
    from bertkit.files import write_text

    earlier = tmp_path / "metrics.json"
    earlier.write_text('{"accuracy": 0.9}\n')

    def full_disk(self, text, *args, **kwargs):
        with open(self, "w") as f:
            f.write(text[:3])  # part of it, then the disk is full
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full_disk)
    with pytest.raises(bertkit.BertkitError, match="^--out .*metrics.json: could not write it .No space left"):
        write_text(earlier, '{"accuracy": 0.5}\n')
    monkeypatch.undo()
    assert earlier.read_text() == '{"accuracy": 0.9}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json"]  # no staged part left
    write_text(earlier, '{"accuracy": 0.5}\n')
    assert earlier.read_text() == '{"accuracy": 0.5}\n'
