"""`bertkit pretrain` end to end on real text (movie reviews) with tiny models: the run
directory, resume, every objective by name, the NumPy backend, typed settings, and one-line
errors for bad input."""

import errno
import json
import os
import re
import shutil

import pytest
import torch
from safetensors.torch import load_file

import bertkit
from bertkit.cli import DEMO_REVIEWS, main, pretrain_job, parser
from bertkit.data import DataWarning, builtin

TINY = ["--override", "num_layers=1", "--override", "hidden_size=32", "--override", "num_heads=2",
        "--override", "intermediate_size=64", "--override", "vocab_size=600"]
FAST = ["--batch-size", "8", "--max-length", "32", "--eval-batches", "2", "--no-progress", "--precision", "fp32"]


@pytest.fixture(autouse=True)
def cache(tmp_path_factory, monkeypatch):
    """One token/tokenizer cache for the module's runs (tokenizers train once per corpus)."""
    monkeypatch.setenv("BERTKIT_CACHE", str(tmp_path_factory.getbasetemp() / "bertkit-cache"))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A plain-text corpus: 300 real reviews, one document each (blank line between), 30 of
    them from imdb's dev split, which the held-out rule for files (the same text hash) keeps out."""
    imdb = builtin("imdb")
    path = tmp_path_factory.mktemp("corpus") / "reviews.txt"
    path.write_text("\n\n".join(r.text for r in imdb.train[:270] + imdb.dev[:30]) + "\n", encoding="utf-8")
    return path


def pretrain(*args):
    return main(["pretrain", *args])


def error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("bertkit: error: "), err
    return err[-1]


def test_the_held_out_text_does_not_depend_on_how_a_step_is_split(corpus, tmp_path, capsys):
    # --batch-size 16 and --batch-size 8 --accumulation 2 train alike; the held-out set was
    # --eval-batches batches of 8 in the second, half the text, and another loss
    quiet = ["--override", "hidden_dropout=0", "--override", "attention_dropout=0"]
    fast = [a for a in FAST if a not in ("--batch-size", "8")]
    scores = []
    for name, split in (("whole", ["--batch-size", "16"]), ("split", ["--batch-size", "8", "--accumulation", "2"])):
        out = tmp_path / name
        same = ["--tokenizer", str(tmp_path / "whole")] if name == "split" else []  # (WordPiece training varies)
        assert pretrain("--corpus", str(corpus), "--out", str(out), "--steps", "2", *same, *TINY, *quiet, *fast,
                        *split) == 0
        batches = 2 * (2 if name == "split" else 1)  # --eval-batches 2 of the step's size
        assert f"held-out data: reviews.txt (dev), {batches} batches" in capsys.readouterr().err
        scores.append(json.loads((out / "metrics.json").read_text()))
    assert scores[0]["mlm_loss"] == pytest.approx(scores[1]["mlm_loss"], rel=1e-4)


def test_run_directory_holds_model_tokenizer_metrics_curve_and_checkpoints(corpus, tmp_path, capsys):
    out = tmp_path / "run"
    assert pretrain("--corpus", str(corpus), "--out", str(out), "--steps", "6", "--save-every", "3", *TINY, *FAST) == 0
    captured = capsys.readouterr()
    assert "held-out metrics" in captured.out and "what it learned" in captured.out
    # the held-out text is the corpus's dev documents (by hash), never trained on
    assert "held-out data: reviews.txt (dev)" in captured.err
    for name in ("config.json", "model.safetensors", "tokenizer.json", "vocab.txt", "metrics.json",
                 "metrics.jsonl", "loss_curve.png"):
        assert (out / name).is_file(), name
    assert [p.name for p in sorted((out / "checkpoints").glob("step-*"))] == ["step-00000003", "step-00000006"]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["step"] == 6 and 0 <= metrics["mlm_accuracy"] <= 1 and metrics["perplexity"] > 1
    model = bertkit.from_pretrained(out)  # `--model OUT` works everywhere
    assert model.head_kind == "mlm" and model.config.num_layers == 1
    assert model.tokenizer.vocab_size <= 600 == model.config.vocab_size


def test_a_second_run_writing_the_same_folder_at_once_is_refused(corpus, tmp_path, capsys):
    # Two runs into one --out both finished, their logs interleaved and the later model over the other's.
    from bertkit.files import LOCK_FILE, run_lock

    out = tmp_path / "run"
    with run_lock(out):  # a run in progress (flock: another open of the file conflicts, here too)
        assert pretrain("--corpus", str(corpus), "--out", str(out), "--steps", "2", *TINY, *FAST) == 2
        assert f"--out {out}: another bertkit run (process {os.getpid()}) is writing there" in error_line(capsys)
        assert main(["finetune", "--task", "classification", "--model", "mini-bert", "--train", str(corpus),
                     "--eval", str(corpus), "--out", str(out)]) == 2
        assert "another bertkit run" in error_line(capsys)
    assert not out.exists()  # made for the lock, left empty: removed
    nested = tmp_path / "a" / "b" / "c"
    assert pretrain("--corpus", str(tmp_path / "missing.txt"), "--out", str(nested), "--steps", "1", *TINY) == 2
    assert "missing.txt" in error_line(capsys) and not (tmp_path / "a").exists()  # each folder it made
    killed = [out / ".saving-x1", out / ".writing-x2", out / "checkpoints" / ".writing-x3"]  # a SIGKILL's leftovers
    for folder in killed:
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(b"half")
    assert pretrain("--corpus", str(corpus), "--out", str(out), "--steps", "1", *TINY, *FAST) == 0
    assert (out / "model.safetensors").exists() and not (out / LOCK_FILE).exists()  # free once the run ends
    assert not any(folder.exists() for folder in killed)


def test_an_out_given_with_a_tilde_is_one_folder_in_home(corpus, tmp_path, monkeypatch):
    # --out=~/x reaches bertkit unexpanded: the run wrote its log to ./~/x and its model to $HOME/x
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    assert pretrain("--corpus", str(corpus), "--out=~/run", "--steps", "1", *TINY, *FAST) == 0
    assert not (tmp_path / "~").exists()
    assert {"model.safetensors", "metrics.json", "job.json"} <= {p.name for p in (tmp_path / "home" / "run").iterdir()}


def test_fill_mask_on_the_run(corpus, tmp_path, capsys):
    out = tmp_path / "run"
    pretrain("--corpus", str(corpus), "--out", str(out), "--steps", "2", *TINY, *FAST)
    capsys.readouterr()
    assert main(["predict", "fill-mask", "--model", str(out), "--json", "--top-k", "3", "a [MASK] movie"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["text"] == "a [MASK] movie" and len(record["predictions"]) == 3
    tokenizer = bertkit.load_tokenizer(out)
    for p in record["predictions"]:
        assert tokenizer.id_to_token(p["id"]) == p["token"] and 0 <= p["score"] <= 1


def test_resume_continues_bit_for_bit(corpus, tmp_path, monkeypatch, capsys):
    from bertkit.train import Trainer

    common = ["--corpus", str(corpus), "--steps", "8", "--save-every", "4", "--eval-every", "4", *TINY, *FAST]
    assert pretrain("--out", str(tmp_path / "whole"), *common) == 0
    # the same job interrupted (Ctrl-C) during step 6, after its step-4 checkpoint
    real_step = Trainer.train_step

    def interrupted(self):
        if self.step == 5:
            raise KeyboardInterrupt
        return real_step(self)

    monkeypatch.setattr(Trainer, "train_step", interrupted)
    capsys.readouterr()
    assert pretrain("--out", str(tmp_path / "split"), *common) == 130
    assert not (tmp_path / "split" / "model.safetensors").exists()
    checkpoint = tmp_path / "split" / "checkpoints" / "step-00000004"
    assert capsys.readouterr().err.splitlines()[-1] == (  # what survived, and how to go on
        f"bertkit: interrupted at or after step 4: {checkpoint} is intact; continue with bertkit pretrain "
        f"--out {tmp_path / 'split'} --resume")
    with pytest.raises(bertkit.BertkitError, match=re.escape(  # loading the run's folder names what does load
            f"{tmp_path / 'split'}: no config.json (not a Hugging Face model directory); a pre-training run without "
            f"its final model: its newest checkpoint, {checkpoint}, loads")):
        bertkit.from_pretrained(tmp_path / "split")
    assert bertkit.from_pretrained(checkpoint).config.num_layers == 1
    monkeypatch.setattr(Trainer, "train_step", lambda self: (_ for _ in ()).throw(KeyboardInterrupt))
    assert pretrain("--out", str(tmp_path / "early"), *common) == 130
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"bertkit: interrupted before the first checkpoint; nothing in {tmp_path / 'early'} to resume from: start "
        "the run again")
    monkeypatch.setattr(Trainer, "train_step", real_step)
    assert pretrain("--out", str(tmp_path / "split"), "--resume") == 0  # the settings come from the run's job.json
    a = load_file(tmp_path / "whole" / "model.safetensors")
    b = load_file(tmp_path / "split" / "model.safetensors")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    log = [json.loads(line) for line in (tmp_path / "split" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if r["split"] == "train"] == list(range(1, 9))  # no step twice


def test_a_run_interrupted_at_its_end_says_what_it_takes_to_finish(corpus, tmp_path, monkeypatch, capsys):
    """Ctrl-C while the final model is saved: --resume finishes it, its final evaluation logged
    once (it was twice); Ctrl-C once metrics.json is written: the run is finished, and the line
    says so (it advised a --resume that then said the run had finished)."""
    from bertkit.train import checkpoint, loop

    common = ["--corpus", str(corpus), "--steps", "4", "--save-every", "2", "--eval-every", "2", *TINY, *FAST]
    assert pretrain("--out", str(tmp_path / "whole"), *common) == 0
    real_save = checkpoint.save_final
    monkeypatch.setattr(checkpoint, "save_final", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt))
    out = tmp_path / "cut"
    capsys.readouterr()
    assert pretrain("--out", str(out), *common) == 130
    assert capsys.readouterr().err.splitlines()[-1].startswith("bertkit: interrupted at or after step 4: ")
    monkeypatch.setattr(checkpoint, "save_final", real_save)
    assert pretrain("--out", str(out), "--resume") == 0

    def logged(run):
        return [(r["step"], r["split"]) for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())]

    assert logged(out) == logged(tmp_path / "whole")
    assert logged(out).count((4, "eval")) == 1
    monkeypatch.setattr(loop, "plot_curves", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt))
    out = tmp_path / "drawing"
    capsys.readouterr()
    assert pretrain("--out", str(out), *common) == 130
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"bertkit: interrupted after the run finished: its final model and metrics.json are saved in {out}; "
        f"loss_curve.png was not drawn: bertkit visualize curves {out} --out {out} draws the run's curves (curves.png)")
    assert main(["visualize", "curves", str(out), "--out", str(out)]) == 0  # the advice works
    assert (out / "curves.png").stat().st_size > 0
    assert bertkit.from_pretrained(out).config.num_layers == 1


@pytest.mark.parametrize("preset, objective, extra", [
    ("bert-base", "mlm+nsp", []),
    ("albert-base", "mlm+sop", ["--override", "embedding_size=16"]),
    ("roberta-base", "mlm", []),
    ("deberta-v3-xsmall", "mlm", []),
    ("electra-small", "rtd", []),
    ("deberta-v3-xsmall", "rtd", ["--override", "num_layers=2"]),  # generator: half the depth
    ("distilbert-base", "distill", ["--teacher", "bert-base"]),
])
def test_every_objective_by_name(preset, objective, extra, corpus, tmp_path, capsys):
    out = tmp_path / "run"
    code = pretrain("--model", preset, "--objective", objective, "--corpus", str(corpus), "--out", str(out),
                    "--steps", "3", "--save-every", "2", *TINY, *extra, *FAST)
    err = capsys.readouterr().err
    assert code == 0, err
    # DeBERTa's enhanced mask decoder is said once, when the run starts, not again at each save
    assert err.count("enhanced mask decoder") == (preset.startswith("deberta") and objective == "mlm"), err
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["step"] == 3 and all(v == v for v in metrics.values())  # no NaN
    root = bertkit.from_pretrained(out)
    assert root.config.family == bertkit.PRESETS[preset].config.family
    if objective == "rtd":  # the discriminator at the root, the generator beside it
        assert root.head_kind == "pretraining" and "rtd_accuracy" in metrics
        assert bertkit.from_pretrained(out / "generator").head_kind == "mlm"
        assert main(["predict", "fill-mask", "--model", str(out), "a [MASK] film"]) == 2  # the masked LM is beside
        assert f"its generator, {out / 'generator'}, is one" in capsys.readouterr().err
        # the default weight named on resuming is the weight the run has: not another setting
        assert pretrain("--model", preset, "--objective", objective, "--corpus", str(corpus), "--out", str(out),
                        "--steps", "4", "--resume", "--set", "rtd_weight=50", *TINY, *extra, *FAST) == 0, \
            capsys.readouterr().err
    if preset == "roberta-base":  # fill-mask takes the model's own <mask> and BERT's [MASK]
        capsys.readouterr()
        assert main(["predict", "fill-mask", "--model", str(out), "--json", "a <mask> film", "a [MASK] film"]) == 0
        first, second = (json.loads(line) for line in capsys.readouterr().out.splitlines())
        assert first["predictions"] == second["predictions"]
        assert (first["text"], second["text"]) == ("a <mask> film", "a [MASK] film")  # each as it was given
    if preset.startswith("deberta") and objective == "mlm":  # MLM through the enhanced mask decoder, as DeBERTa pre-trains
        assert root.config.enhanced_mask_decoder and type(root.head).__name__ == "EnhancedMaskDecoder"
    if objective in ("mlm+nsp", "mlm+sop"):
        assert f"{objective[4:]}_accuracy" in metrics


def test_numpy_backend_writes_a_checkpoint_torch_loads(corpus, tmp_path):
    out = tmp_path / "numpy"
    assert pretrain("--backend", "numpy", "--corpus", str(corpus), "--out", str(out), "--steps", "3",
                    *TINY, *FAST) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["backend"] == "numpy" and metrics["step"] == 3 and metrics["processes"] == 1
    model = bertkit.from_pretrained(out)
    assert model.head_kind == "mlm" and model.tokenizer is not None and (out / "loss_curve.png").is_file()
    assert json.loads((out / "job.json").read_text())["backend"] == "numpy"  # its settings, as a torch run's


def test_settings_come_from_defaults_then_config_file_then_flags(tmp_path):
    config = tmp_path / "job.toml"
    config.write_text('objective = "mlm+nsp"\nbatch_size = 16\n[train]\nlr = 2e-4\ntime_budget = "2m"\n'
                      'betas = [0.9, 0.999]\n[architecture]\nnum_layers = 5\n')
    args = parser().parse_args(["pretrain", "--config", str(config), "--batch-size", "4", "--override", "num_heads=2",
                                "--set", "eps=1e-8"])
    job = pretrain_job(args)
    assert (job.model, job.objective, job.batch_size) == ("mini-bert", "mlm+nsp", 4)
    assert job.train == {"lr": 2e-4, "time_budget": 120.0, "betas": (0.9, 0.999), "eps": 1e-8}
    assert job.architecture == {"num_layers": 5, "num_heads": 2}
    settings = job.settings()
    assert settings.time_budget == 120.0 and settings.steps is None and settings.lr == 2e-4
    default = pretrain_job(parser().parse_args(["pretrain"])).settings()
    assert default.time_budget == 600.0 and default.steps is None  # `bertkit pretrain`: 10 minutes


def test_a_config_file_without_settings_is_said(tmp_path, capsys):
    """Its lines all commented out, or the wrong file: the run is the default one, which is said."""
    files = (("empty.toml", "# steps = 3\n"), ("tables.toml", "[train]\n# lr = 1e-3\n"), ("empty.json", "{}"))
    for name, text in files:
        config = tmp_path / name
        config.write_text(text)
        job = pretrain_job(parser().parse_args(["pretrain", "--config", str(config), "--batch-size", "4"]))
        assert job.batch_size == 4 and job.settings() == pretrain_job(parser().parse_args(["pretrain"])).settings()
        assert capsys.readouterr().err == f"bertkit: warning: {config} holds no settings: the defaults apply, and " \
                                          "the flags given\n"
    config.write_text('{"batch_size": 8}')
    pretrain_job(parser().parse_args(["pretrain", "--config", str(config)]))
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("args, words", [
    (["--model", "bert-huge"], "unknown model 'bert-huge'"),
    (["--objective", "mlm+xyz"], "unknown objective"),
    (["--model", "roberta-base", "--objective", "mlm+nsp"], "does not fit roberta-base"),
    (["--model", "roberta-base", "--objective", "mlm+nsp"], "use its MLM head (head='mlm'; pretrain --objective mlm)"),
    (["--model", "modernbert-base", "--objective", "mlm+sop"], "ModernBERT has no sentence-pair (NSP or SOP) head"),
    (["--time-budget", "1h30"], "'1h30' is not a duration"),  # 90 minutes, or 1 h 30 s? not guessed
    (["--model", "bert-base", "--objective", "rtd"], "rtd"),
    (["--override", "num_layerz=2"], "unknown key 'num_layerz'"),
    (["--override", "num_layers=two"], "num_layers = 'two' is not a valid int"),
    (["--set", "betas=0.9"], "betas"),
    (["--time-budget", "ten minutes"], "not a duration"),
    (["--corpus", "no/such/file.txt"], "no such file"),
    (["--max-length", "1000"], "longer than"),
    (["--backend", "numpy", "--objective", "mlm+nsp"], "NumPy backend trains masked-LM only"),
    (["--backend", "numpy", "--model", "roberta-base"], "NumPy backend implements BERT only, not roberta"),
    (["--objective", "mlm+nsp", "--override", "type_vocab_size=1"], "sentence pairs need 2 token types"),
    (["--backend", "numpy", "--override", "hidden_act=gelu_new"], "implements the exact GELU"),
    (["--backend", "gpu"], "unknown backend"),
    (["--resume"], "no checkpoint"),
])
def test_bad_input_is_one_clear_line(args, words, corpus, tmp_path, capsys):
    code = pretrain("--corpus", str(corpus), "--out", str(tmp_path / "run"), "--steps", "2", *TINY, *FAST, *args)
    assert code == 2
    assert words in error_line(capsys)


def test_corpus_too_small_for_one_batch(tmp_path, capsys):
    small = tmp_path / "small.txt"
    small.write_text("One short review.\n\nAnother one.\n")
    assert pretrain("--corpus", str(small), "--out", str(tmp_path / "run"), "--steps", "2", *TINY, *FAST,
                    "--override", "vocab_size=400", "--batch-size", "64") == 2
    assert "fewer than one batch" in error_line(capsys)


def test_config_file_errors_name_file_and_key(tmp_path, capsys):
    config = tmp_path / "job.toml"
    config.write_text("[train]\nlearning_rate = 1e-3\n")
    assert pretrain("--config", str(config)) == 2
    line = error_line(capsys)
    assert str(config) in line and "learning_rate" in line
    config.write_text("model = 3\n")
    assert pretrain("--config", str(config)) == 2
    assert "model = 3" in error_line(capsys)


def test_an_existing_run_is_never_overwritten(corpus, tmp_path, capsys):
    out = tmp_path / "run"
    assert pretrain("--corpus", str(corpus), "--out", str(out), "--steps", "2", *TINY, *FAST) == 0
    before = (out / "model.safetensors").read_bytes()
    assert pretrain("--corpus", str(corpus), "--out", str(out), "--steps", "2", *TINY, *FAST) == 2
    assert "already holds a run" in error_line(capsys)
    assert (out / "model.safetensors").read_bytes() == before
    model = tmp_path / "model"  # a model folder without checkpoints: its files would be overwritten
    model.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (model / name).write_bytes((out / name).read_bytes())
    assert pretrain("--corpus", str(corpus), "--out", str(model), "--steps", "2", *TINY, *FAST) == 2
    assert "holds config.json, model.safetensors, tokenizer.json, which this run would overwrite" in error_line(capsys)
    assert (model / "model.safetensors").read_bytes() == before
    assert pretrain("--corpus", str(corpus), "--out", str(model / "config.json"), "--steps", "2", *TINY, *FAST) == 2
    assert "config.json: a file, not a folder" in error_line(capsys)


def test_disk_full_while_saving_keeps_the_previous_checkpoint(corpus, tmp_path, capsys, monkeypatch):
    from bertkit.train import checkpoint

    out = tmp_path / "run"
    real_save = checkpoint.save_models
    calls = []

    def fills_the_disk(models, directory):
        calls.append(directory)
        if len(calls) == 2:  # the second checkpoint: half its files, then ENOSPC
            real_save({"": models[""]}, directory)
            raise OSError(errno.ENOSPC, "No space left on device")
        real_save(models, directory)

    monkeypatch.setattr(checkpoint, "save_models", fills_the_disk)
    assert pretrain("--corpus", str(corpus), "--out", str(out), "--steps", "6", "--save-every", "2",
                    *TINY, *FAST) == 2
    line = error_line(capsys)
    assert "No space left on device" in line and "step-00000002 is intact" in line
    kept = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert kept == ["step-00000002"]  # no half-written folder left behind
    monkeypatch.setattr(checkpoint, "save_models", real_save)
    assert pretrain("--corpus", str(corpus), "--out", str(out), "--steps", "6", "--save-every", "2", "--resume",
                    *TINY, *FAST) == 0  # and the run continues from it
    assert json.loads((out / "metrics.json").read_text())["step"] == 6


@pytest.mark.parametrize("failure", ["torch", "safetensors"])
def test_a_full_disk_inside_torch_or_safetensors_is_one_line_too(failure, corpus, tmp_path, capsys, monkeypatch):
    # A full disk reaches us as RuntimeError from torch.save and as SafetensorError from
    # safetensors, not as OSError: still one line naming the intact checkpoint.
    import safetensors.torch
    from safetensors import SafetensorError

    from bertkit.train import checkpoint

    out = tmp_path / "run"
    real = torch.save if failure == "torch" else safetensors.torch.save_file
    calls = []

    def fills_the_disk(*args, **kwargs):
        calls.append(1)
        if failure == "torch" and len(calls) == 2:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 1024 vs 998")
        if failure == "safetensors" and len(calls) == 2:
            raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
        return real(*args, **kwargs)

    if failure == "torch":
        monkeypatch.setattr(checkpoint.torch, "save", fills_the_disk)
    else:
        monkeypatch.setattr(safetensors.torch, "save_file", fills_the_disk)
    assert pretrain("--corpus", str(corpus), "--out", str(out), "--steps", "6", "--save-every", "2",
                    *TINY, *FAST) == 2
    line = error_line(capsys)
    assert "could not write a checkpoint at step 4" in line and "step-00000002 is intact" in line
    assert ("the file was cut short" if failure == "torch" else "No space left on device") in line
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-00000002"]


def test_a_resumed_run_keeps_its_settings_and_must_have_steps_left(corpus, tmp_path, capsys, monkeypatch):
    out = str(tmp_path / "run")
    assert pretrain("--corpus", str(corpus), "--out", out, "--steps", "4", "--save-every", "2", *TINY, *FAST) == 0
    capsys.readouterr()
    umask = os.umask(0)
    os.umask(umask)
    for folder in (tmp_path / "run" / "checkpoints").iterdir():  # as mkdir makes them, not mkdtemp's 0700
        assert folder.stat().st_mode & 0o777 == 0o777 & ~umask, folder
    assert pretrain("--out", out, "--resume", "--batch-size", "16", "--seed", "3") == 2
    line = error_line(capsys)
    assert "this run was started with other settings (batch_size 8 -> 16; seed 0 -> 3)" in line and "job.json" in line
    assert pretrain("--out", out, "--resume", "--whole-word", "--static-masks", "2") == 2
    assert "settings (whole_word false -> true; static_masks none -> 2)" in error_line(capsys)  # as a file writes them
    log = (tmp_path / "run" / "metrics.jsonl").read_text()
    assert pretrain("--out", out, "--resume") == 2
    assert error_line(capsys).endswith("the run has finished its 4 steps; give more --steps to train on")
    assert pretrain("--out", out, "--resume", "--time-budget", "1h") == 2
    assert error_line(capsys).endswith("give more --steps to train on (a time budget does not lift them)")
    assert (tmp_path / "run" / "metrics.jsonl").read_text() == log  # refused: its log as it was
    assert pretrain("--out", out, "--resume", "--steps", "2") == 2
    assert "the run is at step 4, past the 2 steps asked for" in error_line(capsys)
    assert pretrain("--out", out, "--resume", "--steps", "6") == 0
    assert "steps 4 -> 6: the learning-rate schedule stretches" in capsys.readouterr().err
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["step"] == 6
    monkeypatch.chdir(corpus.parent)  # the same corpus, named from its own folder, is the same corpus
    assert pretrain("--corpus", corpus.name, "--out", out, "--resume", "--steps", "8") == 0
    assert "steps 6 -> 8" in capsys.readouterr().err  # from the steps asked last (it said 4 -> 8)
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["step"] == 8
    (tmp_path / "run" / "job.json").unlink()  # it went on with the defaults: another model, another corpus
    assert pretrain("--out", out, "--resume", "--steps", "10") == 2
    assert "job.json: missing, so --resume does not know the run's settings" in error_line(capsys)


def test_a_run_that_used_its_time_budget_is_told_to_get_a_longer_one(corpus, tmp_path, capsys):
    """More --steps cannot lift a budget the run keeps: the message named them as a way on."""
    out = str(tmp_path / "run")
    assert pretrain("--corpus", str(corpus), "--out", out, "--time-budget", "1s", *TINY, *FAST) == 0
    capsys.readouterr()
    assert pretrain("--out", out, "--resume", "--steps", "100000") == 2
    assert error_line(capsys).endswith("--resume: the run has used its time budget of 1 s; give a longer "
                                       "--time-budget to train on (more --steps alone do not lift it)")


def test_resume_refuses_a_corpus_changed_since_the_run_started(corpus, tmp_path, capsys):
    """The same settings on other text give another epoch order and other examples: refused by the
    fingerprints job.json holds. A job.json from before they were recorded still resumes."""
    text = tmp_path / "reviews.txt"
    text.write_text(corpus.read_text(encoding="utf-8"), encoding="utf-8")
    out = str(tmp_path / "run")
    assert pretrain("--corpus", str(text), "--out", out, "--steps", "1", "--save-every", "1", *TINY, *FAST) == 0
    job = json.loads((tmp_path / "run" / "job.json").read_text())
    assert set(job["fingerprints"]) == {"corpus", "eval_corpus"}
    with open(text, "a", encoding="utf-8") as f:
        f.write("\nOne more review, added after the run started.\n")
    capsys.readouterr()
    assert pretrain("--out", out, "--resume", "--steps", "2") == 2
    assert error_line(capsys).endswith(f"--resume: the corpus {text} changed since the run started (its fingerprint "
                                       "differs); resuming would train on other batches: start a new run, or "
                                       "restore the corpus")
    # a run inside its corpus folder would read its own files as text, and change the corpus under it
    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "a.txt").write_text(corpus.read_text(encoding="utf-8"), encoding="utf-8")
    assert pretrain("--corpus", str(tmp_path / "texts"), "--out", str(tmp_path / "texts" / "run"), "--steps", "1",
                    *TINY, *FAST) == 2
    assert "is inside the --corpus folder" in error_line(capsys) and not (tmp_path / "texts" / "run").exists()
    (tmp_path / "linking").mkdir()  # ... or inside a folder the corpus reads through a link
    (tmp_path / "linking" / "texts").symlink_to(tmp_path / "texts", target_is_directory=True)
    assert pretrain("--corpus", str(tmp_path / "linking"), "--out", str(tmp_path / "texts" / "run"), "--steps", "1",
                    *TINY, *FAST) == 2
    assert "is inside the --corpus folder" in error_line(capsys)
    del job["fingerprints"], job["format"]  # as runs of an older bertkit wrote it: taken on trust, said so
    (tmp_path / "run" / "job.json").write_text(json.dumps(job))
    assert pretrain("--out", out, "--resume", "--steps", "2") == 0
    said = capsys.readouterr().err
    assert "job.json holds no fingerprint of the corpus (an older bertkit's): the corpus is taken as the one the " \
           "run started on, and is fingerprinted from now on" in said
    assert "was started by an older bertkit: resumed, it goes on with this version's training examples" in said
    job = json.loads((tmp_path / "run" / "job.json").read_text())  # and from now on it is checked (it was not)
    assert set(job["fingerprints"]) == {"corpus", "eval_corpus"} and job["format"] >= 1 and job["train"]["steps"] == 2
    with open(text, "a", encoding="utf-8") as f:
        f.write("\nAnd another.\n")
    assert pretrain("--out", out, "--resume", "--steps", "3") == 2
    said = capsys.readouterr().err
    assert "changed since the run started" in said and "steps 2 -> 3" not in said  # (a run that does not go on)


def test_a_small_corpus_says_its_vocabulary_and_a_skipped_file_once(corpus, tmp_path, capsys, monkeypatch):
    # the model silently got the few tokens the corpus gave; the skipped-file warning came twice
    # (tokenizer training and the data pipeline), once without "bertkit: "
    monkeypatch.setenv("BERTKIT_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "reviews.txt").write_text("\n\n".join(corpus.read_text().split("\n\n")[:80]))
    (folder / "img.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    asked = 20000
    assert pretrain("--corpus", str(folder), "--out", str(tmp_path / "run"), "--steps", "1", *TINY, *FAST,
                    "--override", f"vocab_size={asked}") == 0
    err = capsys.readouterr().err
    gave = bertkit.load_tokenizer(tmp_path / "run").vocab_size
    assert gave < asked and f"the tokenizer has {gave:,} of the {asked:,} tokens asked for" in err, err
    skipped = [line for line in err.splitlines() if "skipped 1 file(s)" in line]
    assert len(skipped) == 1 and skipped[0].startswith("bertkit: warning: "), skipped


def test_an_albert_run_s_tokenizer_and_config_ids_agree_in_transformers(corpus, tmp_path):
    # the trained ALBERT tokenizer had DeBERTa-v3's ids: AlbertConfig's default bos/eos (2, 3) named [SEP]/[UNK]
    import transformers

    small = tmp_path / "small.txt"
    small.write_text("\n\n".join(corpus.read_text().split("\n\n")[:80]))
    assert pretrain("--model", "albert-base", "--corpus", str(small), "--out", str(tmp_path / "run"), "--steps", "1",
                    *TINY, *FAST, "--override", "embedding_size=16", "--override", "vocab_size=800") == 0
    ours = bertkit.load_tokenizer(tmp_path / "run")
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path / "run")
    config = transformers.AutoConfig.from_pretrained(tmp_path / "run")
    assert type(theirs).__name__.startswith("AlbertTokenizer")
    assert theirs.convert_ids_to_tokens([config.bos_token_id, config.eos_token_id, config.pad_token_id]) == \
        [theirs.cls_token, theirs.sep_token, theirs.pad_token]
    text = "The film was UNBELIEVABLY good, naïve résumé!"
    assert ours.encode(text) == theirs.encode(text) and ours.encode(text, "a pair") == theirs.encode(text, "a pair")


def test_a_damaged_cached_tokenizer_is_trained_again(corpus, tmp_path, capsys, monkeypatch):
    """Its tokenizer.json deleted, the retrained one could not replace the folder and the broken one
    was read; cut short, every run failed on it."""
    monkeypatch.setenv("BERTKIT_CACHE", str(tmp_path / "cache"))
    common = ["--corpus", str(corpus), "--steps", "1", *TINY, *FAST]
    assert pretrain(*common, "--out", str(tmp_path / "a")) == 0
    (folder,) = (tmp_path / "cache" / "tokenizers").iterdir()
    good = (folder / "tokenizer.json").read_text()
    for i, damage in enumerate(["delete", "truncate"]):
        if damage == "delete":
            (folder / "tokenizer.json").unlink()
        else:
            (folder / "tokenizer.json").write_text(good[:500])
        capsys.readouterr()
        assert pretrain(*common, "--out", str(tmp_path / f"b{i}")) == 0
        err = capsys.readouterr().err
        assert f"warning: the cached tokenizer at {folder} is damaged (tokenizer.json: " in err, err
        assert "training a wordpiece tokenizer" in err
        assert bertkit.load_tokenizer(folder).vocab_size == 600  # (retrained: ties may order it differently)
    assert [p.name for p in (tmp_path / "cache" / "tokenizers").iterdir()] == [folder.name]


def test_a_cache_folder_that_cannot_be_written_is_one_line(corpus, tmp_path, capsys, monkeypatch, minilm_dir):
    monkeypatch.setenv("BERTKIT_CACHE", str(corpus))  # a file: the trained tokenizer's cache
    assert pretrain("--corpus", str(corpus), "--out", str(tmp_path / "a"), "--steps", "1", *TINY, *FAST) == 2
    assert f"BERTKIT_CACHE={corpus}: the cache cannot be written there (Not a directory)" in error_line(capsys)
    tiny = TINY[:-2]  # without vocab_size=600: the given tokenizer's vocabulary (now the token cache fails)
    assert pretrain("--corpus", str(corpus), "--tokenizer", str(minilm_dir), "--out", str(tmp_path / "b"),
                    "--steps", "1", *tiny, *FAST) == 2
    assert f"BERTKIT_CACHE={corpus}: the cache cannot be written there (Not a directory)" in error_line(capsys)

@pytest.mark.parametrize("config, words", [
    ("train = 3\n", "[train] must be a table of settings"),
    ("steps = 3\n", "steps is a training setting; put it under [train]"),
    ("hidden_size = 64\n", "hidden_size is a model setting; put it under [architecture]"),
    ("[architecture]\nfamily = \"roberta\"\n", "the family cannot be overridden"),
    ("objective = \"distill\"\n", "distill needs a teacher"),
    ("teacher = \"bert-base\"\n", "--teacher and --teacher-layers are for --objective distill, not mlm"),
    # values in quotes are text, not a spelling of a number or boolean (a flag's text is read as its type)
    ("whole_word = \"yes\"\n", 'whole_word = "yes" is not a valid bool (expected bool, not text in quotes)'),
    ("[train]\nsteps = \"2\"\n", 'steps = "2" is not a valid int or none (expected int, not text in quotes)'),
    ("[train]\nbetas = \"0.9,0.99\"\n", "expected a list, not text in quotes"),
    ("[architecture]\nnum_layers = \"2\"\n", '[architecture]: num_layers = "2" is not a valid int'),
    # the other way round: a top-level setting inside a table
    ("[train]\nbatch_size = 4\n", "[train]: batch_size is a top-level setting; put it above the tables"),
    ("[architecture]\nmax_length = 64\n", "[architecture]: max_length is a top-level setting"),
    ("[architecture]\nlr = 0.1\n", "[architecture]: lr is a training setting; put it under [train]"),
    # a misspelt key: the nearest known one
    ("batchsize = 4\n", "unknown key 'batchsize' (did you mean batch_size?)"),
    ("[train]\nwarmpu = 0.1\n", "unknown key 'warmpu' (did you mean warmup?)"),
    # an empty path would mean the working folder: corpus = "" read every file in it
    ("corpus = \"\"\n", "corpus = '' is an empty path; give a file or folder, or leave the key out"),
    ("out = \" \"\n", "out = ' ' is an empty path"),
    ("[train]\ntime_budget = \"3 parsecs\"\n", "job.toml [train]: time_budget: '3 parsecs' is not a duration"),
    ("temperature = 2.0\n", "temperature is a training setting; put it under [train]"),  # a loss setting
    ("embedding_size = 32\n", "embedding_size is a model setting; put it under [architecture]"),  # ALBERT's, ELECTRA's
])
def test_config_mistakes_are_one_line_that_says_where_the_setting_goes(tmp_path, capsys, config, words):
    path = tmp_path / "job.toml"
    path.write_text(config)
    assert pretrain("--config", str(path), "--out", str(tmp_path / "run")) == 2
    assert words in error_line(capsys)
    path = tmp_path / "job.yaml"
    path.write_text("steps: 3\n")
    assert pretrain("--config", str(path)) == 2
    assert "config files are TOML (.toml) or JSON (.json), not .yaml" in error_line(capsys)


def test_config_paths_are_read_from_the_working_directory_and_a_near_miss_is_named(tmp_path, monkeypatch, capsys,
                                                                                  corpus):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    shutil.copy(corpus, jobs / "corpus.txt")
    (jobs / "job.toml").write_text('corpus = "corpus.txt"\n')
    monkeypatch.chdir(tmp_path)
    assert pretrain("--config", "jobs/job.toml", "--out", str(tmp_path / "run"), "--steps", "1", *TINY, *FAST) == 2
    assert error_line(capsys) == (
        f"bertkit: error: jobs/job.toml: corpus = 'corpus.txt' is read from the working directory ({tmp_path}), as "
        "a flag's path is, and is not there; the one beside the file is jobs/corpus.txt: give that path, or an "
        "absolute one")
    assert not (tmp_path / "run").exists()
    monkeypatch.chdir(jobs)  # from the file's own folder the same file names it
    assert pretrain_job(parser().parse_args(["pretrain", "--config", "job.toml"])).corpus == "corpus.txt"


def test_a_built_in_corpus_or_preset_in_a_config_file_is_a_name_even_beside_a_file_so_named(tmp_path, monkeypatch):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "imdb").write_text("not the corpus\n")
    (jobs / "bert-base").mkdir()
    (jobs / "job.toml").write_text('corpus = "imdb"\nobjective = "distill"\nteacher = "bert-base"\n'
                                   'model = "distilbert-base"\n')
    monkeypatch.chdir(tmp_path)
    job = pretrain_job(parser().parse_args(["pretrain", "--config", "jobs/job.toml"]))
    assert (job.corpus, job.teacher) == ("imdb", "bert-base")


@pytest.mark.parametrize("pair, words", [
    ("batch_size=8", "--set: batch_size is not a training setting; give it as --batch-size"),
    ("num_layers=4", "--set: num_layers is a model setting; give it as --override num_layers=VALUE"),
])
def test_set_names_the_flag_for_a_setting_it_does_not_take(pair, words, capsys):
    assert pretrain("--set", pair) == 2  # (flags have no tables to put it in)
    assert words in error_line(capsys)


def test_flags_turn_off_the_booleans_a_config_file_turned_on(tmp_path):
    config = tmp_path / "job.toml"
    config.write_text("whole_word = true\n[train]\ncompile = true\nskip_nonfinite = true\n")
    job = pretrain_job(parser().parse_args(["pretrain", "--config", str(config)]))
    assert job.whole_word and job.train["compile"] and job.train["skip_nonfinite"]
    job = pretrain_job(parser().parse_args(["pretrain", "--config", str(config), "--no-whole-word", "--no-compile",
                                            "--no-skip-nonfinite"]))
    assert not job.whole_word and not job.train["compile"] and not job.train["skip_nonfinite"]


def test_a_config_file_without_an_extension_is_read_as_json_and_says_so(tmp_path, capsys):
    config = tmp_path / "job"
    config.write_text("steps = 3\n")
    assert pretrain("--config", str(config)) == 2
    assert error_line(capsys).endswith("not valid JSON (line 1, column 1: Expecting value); a TOML file needs the "
                                       ".toml extension")


@pytest.mark.slow  # 10 s; the Trainer's own two-process test (test_train.py) stays in the default suite
def test_the_same_command_under_torchrun_matches_one_process(corpus, tmp_path):
    """2 processes (gloo) with the global batch split between them == 1 process with all of it
    (no dropout, so the only differences are the order of float sums)."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    args = ["pretrain", "--corpus", str(corpus), "--steps", "4", *TINY, *FAST,
            "--override", "hidden_dropout=0", "--override", "attention_dropout=0"]
    assert main([*args, "--out", str(tmp_path / "one")]) == 0
    assert main([*args, "--out", str(tmp_path / "init"), "--lr", "0"]) == 0  # the initial weights
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([torchrun, "--standalone", "--nproc_per_node=2", "-m", "bertkit", *args,
                           "--out", str(tmp_path / "two")], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((tmp_path / "two" / "metrics.json").read_text())["processes"] == 2
    # The two halves of a masked batch hold different numbers of masked tokens; each process
    # weighs its loss by its share of the step's masked tokens, so the two runs differ only by the
    # order of float sums (a mean of the processes' means differed by about 2% of the update, a
    # wrong split of the batch by about all of it). The check is relative to how far training moved.
    init, a, b = (load_file(tmp_path / run / "model.safetensors") for run in ("init", "one", "two"))
    moved = sum(((a[k] - init[k]) ** 2).sum() for k in a).sqrt().item()
    apart = sum(((a[k] - b[k]) ** 2).sum() for k in a).sqrt().item()
    print(f"update {moved:.2e}, one vs two processes {apart:.2e}")
    assert moved > 1e-3 and apart <= 1e-4 * moved
    # held-out scores: every process scores whole batches, as one process does (a mean of each
    # process's mean over its own masked tokens was another number)
    one, two = (json.loads((tmp_path / run / "metrics.json").read_text()) for run in ("one", "two"))
    print("held-out mlm_loss", one["mlm_loss"], two["mlm_loss"])
    assert two["mlm_loss"] == pytest.approx(one["mlm_loss"], rel=2e-6)
    assert two["mlm_accuracy"] == pytest.approx(one["mlm_accuracy"], abs=1e-9)


@pytest.mark.slow  # 60-75 s; `make demo` runs the whole of it
def test_demo_pretrains_on_imdb_then_shows_the_finished_run(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--time-budget", "3s", "--sentiment-examples", "200"]) == 0
    first = capsys.readouterr()
    assert "held-out data: imdb" in first.err and "what it learned" in first.out
    metrics = json.loads((out / "metrics.json").read_text())
    assert 0 < metrics["train_seconds"] < 60 and 0 <= metrics["mlm_accuracy"] <= 1
    config = bertkit.from_pretrained(out).config
    assert config.num_layers == 3  # the Mini-BERT itself, dropout off for a budget of minutes
    assert config.hidden_dropout == 0 and config.attention_dropout == 0
    assert json.loads((out / "sentiment" / "task.json").read_text())["settings"]["truncation"] == "head+tail"
    # then fine-tuned on IMDB sentiment: test accuracy over the whole test split, predictions
    sentiment = json.loads((out / "sentiment" / "metrics.json").read_text())
    assert sentiment["train_examples"] == 200 and sentiment["eval_examples"] > 2000
    assert "IMDB sentiment, test split: accuracy" in first.out and (out / "sentiment" / "loss_curve.png").exists()
    shown = [line.split() for line in first.out.splitlines() if any(r[:40] in line for r, _ in DEMO_REVIEWS)]
    assert [words[-3] for words in shown] == [reader for _, reader in DEMO_REVIEWS]
    assert len(shown) == len(DEMO_REVIEWS) and all(words[-2] in ("positive", "negative") for words in shown)
    assert main(["demo", "--out", str(out)]) == 0  # again: shown, not retrained, not overwritten
    again = capsys.readouterr()
    assert "holds a finished pre-training run" in again.err and "finished sentiment model" in again.err
    assert json.loads((out / "metrics.json").read_text()) == metrics
    assert json.loads((out / "sentiment" / "metrics.json").read_text()) == sentiment


def test_distill_a_roberta_teacher_into_a_roberta_student(corpus, tmp_path, capsys):
    """DistilRoBERTa's recipe: --model roberta-base names the student's family, its shape comes
    from the teacher (it was refused: only DistilBERT students); a BERT-family preset is refused."""
    from bertkit.data import TokenizerSettings, train_tokenizer

    texts = corpus.read_text(encoding="utf-8").split("\n")
    teacher = bertkit.build("roberta-base", head="mlm", num_layers=4, hidden_size=32, num_heads=2,
                            intermediate_size=64, vocab_size=600)
    teacher.tokenizer = train_tokenizer(texts, TokenizerSettings.for_family("roberta", vocab_size=600))
    teacher.save_pretrained(tmp_path / "teacher")
    args = ["--objective", "distill", "--teacher", str(tmp_path / "teacher"), "--corpus", str(corpus), *FAST]
    assert pretrain("--model", "roberta-base", *args, "--out", str(tmp_path / "s"), "--steps", "2") == 0
    assert "distill on a roberta student of 2 layers x 32" in capsys.readouterr().err
    student = bertkit.from_pretrained(tmp_path / "s")
    assert (student.config.family, student.config.num_layers, student.head_kind) == ("roberta", 2, "mlm")
    assert json.loads((tmp_path / "s" / "config.json").read_text())["architectures"] == ["RobertaForMaskedLM"]
    assert pretrain("--model", "distilbert-base", *args, "--out", str(tmp_path / "bad"), "--steps", "2") == 2
    assert "is of the roberta family, whose student is not distilbert-base" in error_line(capsys)


def test_distill_from_a_checkpoint_teacher_with_chosen_layers(corpus, tmp_path, minilm_dir, capsys):
    teacher = bertkit.build("bert-base", head="mlm", num_layers=4, hidden_size=32, num_heads=2,
                            intermediate_size=64)
    teacher.tokenizer = bertkit.load_tokenizer(minilm_dir)
    teacher.save_pretrained(tmp_path / "teacher")
    out = tmp_path / "student"
    args = ["--model", "distilbert-base", "--objective", "distill", "--teacher", str(tmp_path / "teacher"),
            "--corpus", str(corpus), *FAST]
    assert pretrain(*args, "--out", str(out), "--teacher-layers", "1,3", "--steps", "2") == 0
    student = bertkit.from_pretrained(out)
    assert student.config.family == "distilbert" and student.config.num_layers == 2
    # the banner says the shape it trains, not the preset's 6 x 768 it did not build
    said = capsys.readouterr()
    assert "distill on a distilbert student of 2 layers x 32, its shape from the teacher" in said.err
    assert "distill_ce" in said.out and "cosine_loss" in said.out  # the loss's own terms, held out
    assert student.tokenizer.vocab_size == teacher.tokenizer.vocab_size == student.config.vocab_size
    # a teacher whose weights changed since the run started: resuming would distill another model
    changed = bertkit.build("bert-base", head="mlm", num_layers=4, hidden_size=32, num_heads=2, intermediate_size=64)
    changed.tokenizer = teacher.tokenizer
    changed.save_pretrained(tmp_path / "teacher2")
    shutil.copy(tmp_path / "teacher2" / "model.safetensors", tmp_path / "teacher" / "model.safetensors")
    assert pretrain(*args, "--out", str(out), "--teacher-layers", "1,3", "--steps", "3", "--resume") == 2
    line = error_line(capsys)
    assert "--resume: the teacher " in line and "changed since the run started (its weights' fingerprint" in line
    assert pretrain(*args, "--out", str(tmp_path / "bad"), "--teacher-layers", "", "--steps", "2") == 2
    assert "teacher layers (none): give increasing block indices in 0..3" in error_line(capsys)
    # a --tokenizer whose vocabulary is not the teacher's would feed it ids it reads as other words
    (tmp_path / "words").mkdir()
    (tmp_path / "words" / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a"]))
    assert pretrain(*args, "--out", str(tmp_path / "bad"), "--tokenizer", str(tmp_path / "words" / "vocab.txt"),
                    "--steps", "2") == 2
    assert "its vocabulary is not the teacher's" in error_line(capsys)
    # a student transformers cannot hold (DistilBERT fixes layer_norm_eps) is refused before training, not at its save
    odd = bertkit.build("bert-base", head="mlm", num_layers=2, hidden_size=32, num_heads=2, intermediate_size=64,
                        layer_norm_eps=1e-5)
    odd.tokenizer = teacher.tokenizer
    odd.save_pretrained(tmp_path / "odd")
    assert pretrain("--model", "distilbert-base", "--objective", "distill", "--teacher", str(tmp_path / "odd"),
                    "--corpus", str(corpus), *FAST, "--out", str(tmp_path / "bad"), "--steps", "2") == 2
    assert "transformers fixes layer_norm_eps = 1e-12, this model has 1e-05" in error_line(capsys)
    assert not (tmp_path / "bad" / "checkpoints").exists() or not any((tmp_path / "bad" / "checkpoints").iterdir())
    capsys.readouterr()
    assert pretrain(*args, "--out", str(tmp_path / "bad"), "--teacher-layers", "3,1", "--steps", "2") == 2
    assert "give increasing block indices in 0..3" in error_line(capsys)
    (tmp_path / "empty").mkdir()  # not a model at all: its missing tokenizer was blamed first
    assert pretrain(*args[:5], str(tmp_path / "empty"), *args[6:], "--out", str(tmp_path / "bad"), "--steps", "2") == 2
    assert error_line(capsys) == f"bertkit: error: {tmp_path / 'empty'}: no config.json (not a Hugging Face model " \
                                 "directory)"
    assert pretrain(*args, "--out", str(tmp_path / "bad"), "--override", "num_layers=2") == 2
    assert "student's shape comes from the teacher" in error_line(capsys)
    quiet = ["--override", "hidden_dropout=0", "--override", "attention_dropout=0"]  # the README's advice
    assert pretrain(*args, "--out", str(tmp_path / "quiet"), *quiet, "--steps", "2") == 0
    config = bertkit.from_pretrained(tmp_path / "quiet").config
    assert config.hidden_dropout == config.attention_dropout == 0 < teacher.config.hidden_dropout
    small = bertkit.build("bert-base", head="mlm", num_layers=2, hidden_size=32, num_heads=2, intermediate_size=64,
                          vocab_size=1000)  # a --tokenizer larger than the teacher's vocabulary: refused up front
    small.save_pretrained(tmp_path / "small")
    assert pretrain("--model", "distilbert-base", "--objective", "distill", "--teacher", str(tmp_path / "small"),
                    "--tokenizer", str(minilm_dir), "--corpus", str(corpus), *FAST, "--out", str(tmp_path / "bad"),
                    "--steps", "2") == 2
    assert "the tokenizer has 30522 tokens but the model's vocabulary has 1000" in error_line(capsys)
    assert not (tmp_path / "bad" / "job.json").exists()
    # a checkpoint without a trained MLM head (an encoder alone, here MiniLM's) would teach random
    # soft targets: refused
    assert pretrain("--model", "distilbert-base", "--objective", "distill", "--teacher", str(minilm_dir),
                    "--corpus", str(corpus), *FAST, "--out", str(tmp_path / "bad"), "--steps", "2") == 2
    assert "has no trained masked-LM head" in error_line(capsys)


def test_a_tokenizer_that_adds_no_special_tokens_is_one_error_line(corpus, tmp_path, capsys):
    from tokenizers import Tokenizer, models, pre_tokenizers

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    words = sorted({w for w in corpus.read_text(encoding="utf-8").lower().split()})[:500]
    backend = Tokenizer(models.WordPiece({t: i for i, t in enumerate(specials + words)}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()  # and no post-processor: nothing frames a text
    backend.save(str(tmp_path / "tokenizer.json"))
    out = tmp_path / "run"
    assert pretrain("--tokenizer", str(tmp_path / "tokenizer.json"), "--corpus", str(corpus), "--out", str(out),
                    "--override", "vocab_size=505", "--steps", "1", *FAST) == 2
    assert "frames a text with no special tokens" in error_line(capsys)
    assert not (out / "model.safetensors").exists()


def test_a_run_whose_held_out_loss_is_not_finite_still_reports(corpus, tmp_path, capsys):
    out = tmp_path / "lost"
    assert pretrain("--corpus", str(corpus), "--out", str(out), "--steps", "4", "--lr", "1e9", "--warmup", "0",
                    "--skip-nonfinite", *TINY, *FAST) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["skipped_steps"] >= 1 and metrics["mlm_loss"] is None  # the weights are gone: said, not hidden
    printed = capsys.readouterr().out
    assert "mlm_loss n/a" in printed and f"skipped steps (non-finite loss): {metrics['skipped_steps']}" in printed


def test_loss_settings_reach_the_objective_and_are_refused_for_another(capsys, tmp_path):
    # distill's temperature and term weights and rtd's discriminator weight are --set like any
    # training setting, kept in job.json (so --resume keeps them), and refused for an objective
    # that has no such term
    from bertkit.cli import parser, pretrain_job
    from bertkit.objectives import build_objective

    job = pretrain_job(parser().parse_args(["pretrain", "--model", "distilbert-base", "--objective", "distill",
                                            "--teacher", "bert-base", "--set", "temperature=4", "--set",
                                            "alpha_cos=0", "--set", "lr=1e-4"]))
    assert job.loss == {"temperature": 4.0, "alpha_cos": 0.0} and job.train["lr"] == 1e-4
    assert job.record()["loss"] == job.loss
    tiny = dict(num_layers=2, hidden_size=32, num_heads=2, intermediate_size=64, vocab_size=100)
    distill = build_objective("distill", "distilbert-base", teacher="bert-base", loss=job.loss, **tiny)
    rtd = build_objective("rtd", "electra-small", loss={"rtd_weight": 20}, **tiny)
    assert (distill.temperature, distill.alpha_cos, distill.alpha_ce) == (4.0, 0.0, 5.0) and rtd.weight == 20
    assert pretrain("--set", "temperature=4", "--out", str(tmp_path / "x")) == 2
    assert "temperature is a setting of objective distill, not mlm" in error_line(capsys)
    assert pretrain("--model", "distilbert-base", "--objective", "distill", "--teacher", "bert-base",
                    "--set", "temperature=0", "--out", str(tmp_path / "x")) == 2
    assert "temperature must be a finite number above 0, got 0.0" in error_line(capsys)
    assert not (tmp_path / "x").exists()


def test_loss_settings_survive_resume_and_a_run_started_from_its_job_json(corpus, tmp_path):
    out = tmp_path / "rtd"
    common = ["--model", "electra-small", "--objective", "rtd", "--corpus", str(corpus), *TINY, *FAST]
    assert pretrain(*common, "--set", "rtd_weight=20", "--steps", "2", "--save-every", "1", "--out", str(out)) == 0
    assert json.loads((out / "job.json").read_text())["loss"] == {"rtd_weight": 20.0}
    # the same value given again is no change; the objective comes from job.json
    assert pretrain("--out", str(out), "--resume", "--steps", "3", "--set", "rtd_weight=20") == 0
    # job.json as a --config file: its loss table is read as [train]'s keys are
    assert pretrain("--config", str(out / "job.json"), "--out", str(tmp_path / "again"), "--steps", "1") == 0
    assert json.loads((tmp_path / "again" / "job.json").read_text())["loss"] == {"rtd_weight": 20.0}


@pytest.mark.slow
def test_a_resumed_torchrun_run_continues_each_processs_random_stream(corpus, tmp_path):
    """With dropout on, every process draws its own masks; a checkpoint keeps every process's
    stream, so a 2-process run resumed from it ends as the uninterrupted run does (each process
    was given rank 0's stream before, and the runs parted by ~2e-3)."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    def run(out, *extra):
        done = subprocess.run([torchrun, "--standalone", "--nproc_per_node=2", "-m", "bertkit", "pretrain",
                               "--corpus", str(corpus), *TINY, *FAST, "--save-every", "2", "--out", str(out), *extra],
                              env=env, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stderr[-2000:]

    run(tmp_path / "whole", "--steps", "4")
    run(tmp_path / "split", "--steps", "2")
    run(tmp_path / "split", "--resume", "--steps", "4")
    a, b = (load_file(tmp_path / r / "model.safetensors") for r in ("whole", "split"))
    assert max((a[k] - b[k]).abs().max().item() for k in a) <= 1e-6


def test_a_corpus_whose_documents_all_fall_on_one_side_of_the_held_out_split_says_so(tmp_path, capsys):
    # a text file without blank lines is one document: held out, the training side was "the corpus is empty"
    from bertkit.data.corpora import split_of

    words = " ".join(f"word{i}" for i in range(400))
    held = next(f"{words} {n}." for n in range(1000) if split_of(f"{words} {n}.") == "dev")
    one = tmp_path / "one.txt"
    one.write_text(held + "\n")
    assert pretrain("--corpus", str(one), "--out", str(tmp_path / "run"), "--steps", "1", *TINY, *FAST) == 2
    assert error_line(capsys).endswith("one.txt: all 1 document(s) fell in the held-out share (documents are split "
                                       "by a hash of their text, about 1 in 10 held out; in a text file, blank lines "
                                       "separate documents): give the held-out text with --eval-corpus, or more "
                                       "documents")


def test_a_run_without_held_out_text_logs_and_reports_no_empty_scores(tmp_path, capsys):
    """Every document on the training side of the hash: no held-out evaluation (said), and then
    no metrics.jsonl lines of a step alone and no "held-out metrics" line of training counts."""
    from bertkit.data.corpora import split_of

    docs = [d for d in (f"review {n} says the film was fine. it was long and slow." for n in range(400))
            if split_of(d) == "train"][:60]
    (tmp_path / "train.txt").write_text("\n\n".join(docs) + "\n")
    assert pretrain("--corpus", str(tmp_path / "train.txt"), "--out", str(tmp_path / "run"), "--steps", "2",
                    "--eval-every", "1", *TINY, *FAST) == 0
    said = capsys.readouterr()
    assert "no held-out evaluation" in said.err
    assert "held-out metrics: none, no held-out text (step 2, tokens" in said.out
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["split"] for r in logged] == ["train", "train"]


def test_held_out_text_is_never_the_training_text(tmp_path, capsys):
    """--eval-corpus naming the training file or folder (or a file in it) is refused before any
    work; a named data set is held out by its dev split, as the default held-out text is."""
    from bertkit.pretraining import PretrainJob, corpora

    (tmp_path / "docs").mkdir()
    text = tmp_path / "docs" / "a.txt"
    text.write_text("one document.\n\nanother one.\n")
    inside = f"is inside the training folder {tmp_path / 'docs'}"
    for corpus, held, said in ((text, text, "is the training corpus"), (tmp_path / "docs", text, inside),
                               (tmp_path / "docs", tmp_path / "docs", "is the"),
                               (text, tmp_path / "docs", f"holds the training corpus {text}")):
        assert pretrain("--corpus", str(corpus), "--eval-corpus", str(held), "--out", str(tmp_path / "run"),
                        "--steps", "1", *TINY, *FAST) == 2
        assert f"--eval-corpus {held} {said}" in error_line(capsys) and not (tmp_path / "run").exists()
    with pytest.warns(DataWarning, match="is the training corpus: held-out scores would be on trained text \\(this "
                      "run was started so\\)"):  # a run started so before the check still resumes
        corpora(PretrainJob(corpus=str(text), eval_corpus=str(text), resume=True))
    for name in ("rotten-tomatoes", "imdb"):
        trained, held = corpora(PretrainJob(corpus="rotten-tomatoes", eval_corpus=name))
        assert (trained.split, held.split, held.name) == ("train", "dev", name)


def test_runs_of_other_seeds_score_the_same_held_out_text_and_masks(corpus, tmp_path, monkeypatch):
    """The held-out batches were drawn with seed + 1: two seeds scored different rows (89 of 256
    shared) with different masks, so their held-out losses did not compare."""
    from bertkit import pretraining

    drawn, data = [], pretraining._data
    monkeypatch.setattr(pretraining, "_data", lambda *a, **k: drawn.append(data(*a, **k)) or drawn[-1])
    for seed in ("0", "3"):
        same = ["--tokenizer", str(tmp_path / "0")] if seed == "3" else []  # (WordPiece training varies)
        assert pretrain("--corpus", str(corpus), "--out", str(tmp_path / seed), "--steps", "1", "--seed", seed,
                        *same, *TINY, *FAST) == 0
    (_, first), (_, second) = drawn
    assert len(first) == len(second) == 2
    for a, b in zip(first, second):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
