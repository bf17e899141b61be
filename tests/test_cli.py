"""The `bertkit` command: models table, demo, info, embed and fill-mask."""

import json
import os
import subprocess
import sys

import pytest
import torch
import transformers

import bertkit
from bertkit.cli import main
from test_hf_parity import hf_model, tiny_hf_config


def test_models_table_lists_every_preset_with_exact_counts(capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    for name in bertkit.list_models():
        assert name in out
    assert "109,482,240" in out and "2,957,568" in out and "~3.2M" in out


def test_demo_embeds_with_the_real_minilm(capsys):
    assert main(["demo", "--minilm"]) == 0
    out = capsys.readouterr().out
    assert "22,713,216 parameters" in out and "paraphrase pair [0]-[1]" in out


def test_embed_writes_json_lines(minilm_dir, capsys, tmp_path):
    texts = tmp_path / "texts.txt"
    texts.write_text("first line\nsecond line\n")
    assert main(["embed", "--model", str(minilm_dir), "--input", str(texts)]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["text"] for r in records] == ["first line", "second line"]
    v = torch.tensor(records[0]["embedding"])
    assert v.shape == (384,) and abs(v.norm().item() - 1) < 1e-4


@pytest.fixture
def mlm_dir(tmp_path, minilm_dir):
    """A tiny random masked-LM with the MiniLM vocabulary and tokenizer."""
    model = bertkit.from_pretrained(minilm_dir)
    tok = model.tokenizer
    ref = hf_model("BertForMaskedLM", tiny_hf_config(vocab_size=tok.vocab_size, max_position_embeddings=64))
    ref.save_pretrained(tmp_path / "mlm")
    mlm = bertkit.from_pretrained(tmp_path / "mlm")
    mlm.tokenizer = tok
    mlm.save_pretrained(tmp_path / "mlm")
    return tmp_path / "mlm"


def test_fill_mask_table_and_json(mlm_dir, capsys):
    assert main(["predict", "fill-mask", "--model", str(mlm_dir), "--top-k", "3", "Paris is the [MASK] of France."]) == 0
    table = capsys.readouterr().out
    assert "rank" in table and "score" in table
    assert main(["predict", "fill-mask", "--model", str(mlm_dir), "--json", "a [MASK] b [MASK]"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(records) == 2 and len(records[0]["predictions"]) == 5
    scores = [p["score"] for p in records[0]["predictions"]]
    assert scores == sorted(scores, reverse=True)


def test_fill_mask_records_name_their_input_line(mlm_dir, tmp_path, capsys):
    """Empty lines of --input are skipped, and a text gives a record per mask: the records could
    not be matched to lines. Each now starts with its text's line, the same text twice included."""
    given = tmp_path / "in.txt"
    given.write_text("a [MASK] b [MASK]\n\na [MASK] b [MASK]\nthe [MASK]\n\n\nthe [MASK]\nthe [MASK]\n")
    assert main(["predict", "fill-mask", "--model", str(mlm_dir), "--json", "--input", str(given)]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["line"] for r in records] == [1, 1, 3, 3, 4, 7, 8]
    assert all(given.read_text().splitlines()[r["line"] - 1] == r["text"] for r in records)
    assert main(["predict", "fill-mask", "--model", str(mlm_dir), "--input", str(given)]) == 0
    assert "the [MASK]  (line 7, mask at token 3)" in capsys.readouterr().out
    given.write_text('{"id": "x1", "text": "a [MASK] b [MASK]"}\n\n{"text": "the [MASK]"}\n')  # and a JSON id
    assert main(["predict", "fill-mask", "--model", str(mlm_dir), "--json", "--input", str(given)]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r.get("id"), r["line"]) for r in records] == [("x1", 1), ("x1", 1), (None, 3)]
    given.write_text("\n\n\na [MASK] b\n\nno mask here\n")  # an error names the line too (it was "text 2 of 2")
    assert main(["predict", "fill-mask", "--model", str(mlm_dir), "--input", str(given)]) == 2
    assert capsys.readouterr().err.strip().endswith("in.txt, line 6: no [MASK] in 'no mask here'")


def test_fill_mask_takes_a_precision_as_the_other_predict_modes_do(mlm_dir, capsys):
    def scores(*precision):
        assert main(["predict", "fill-mask", "--model", str(mlm_dir), "--json", "--top-k", "1000", *precision,
                     "Paris is the [MASK] of France."]) == 0
        record = json.loads(capsys.readouterr().out)
        return {p["id"]: p["score"] for p in record["predictions"]}

    fp32, bf16 = scores(), scores("--precision", "bf16")  # rounded in bf16: the same to two digits, not equal
    assert fp32 == scores("--precision", "fp32") and fp32 != bf16
    assert max(abs(bf16[i] / fp32[i] - 1) for i in fp32.keys() & bf16.keys()) < 0.05
    assert main(["predict", "fill-mask", "--model", str(mlm_dir), "--precision", "fp16", "a [MASK]"]) == 2
    assert "unknown precision 'fp16'; choose auto, fp32 or bf16 (float16 is not offered: training in it needs loss " \
           "scaling" in capsys.readouterr().err
    for command in (["pretrain", "--out", str(mlm_dir.parent / "never")],
                    ["finetune", "--task", "classification", "--model", str(mlm_dir), "--train", "x.csv", "--eval",
                     "x.csv", "--out", str(mlm_dir.parent / "never")]):
        assert main([*command, "--precision", "half"]) == 2
        assert "(float16 is not offered" in capsys.readouterr().err and not (mlm_dir.parent / "never").exists()


def test_fill_mask_gives_the_token_text_transformers_pipeline_gives(tmp_path, reviews, capsys):
    # A byte-level BPE vocabulary's entries ("Ġgood") are not text: token_str is the decoded
    # text, as in transformers' fill-mask pipeline, and the table shows it.
    from bertkit.data import TokenizerSettings, train_tokenizer

    tok = train_tokenizer(reviews, TokenizerSettings.for_family("roberta", vocab_size=600))
    model = bertkit.build("roberta-base", head="mlm", vocab_size=tok.vocab_size, num_layers=1, hidden_size=32,
                          num_heads=4, intermediate_size=48, max_positions=64)
    model.tokenizer = tok
    model.save_pretrained(tmp_path / "m")
    text = "The film was <mask> good."
    assert main(["predict", "fill-mask", "--model", str(tmp_path / "m"), "--json", "--top-k", "8", text]) == 0
    ours = [json.loads(line) for line in capsys.readouterr().out.splitlines()][0]["predictions"]
    theirs = transformers.pipeline("fill-mask", model=str(tmp_path / "m"), top_k=8)(text)
    assert [(p["id"], p["token_str"], p["sequence"]) for p in ours] == [
        (p["token"], p["token_str"], p["sequence"]) for p in theirs]
    assert [p["score"] for p in ours] == pytest.approx([p["score"] for p in theirs], rel=1e-5)  # 6 digits, not decimals
    two = "A <mask> film, <mask> good."  # each mask's sequence fills it alone, as the pipeline's
    assert main(["predict", "fill-mask", "--model", str(tmp_path / "m"), "--json", two]) == 0
    filled = [[p["sequence"] for p in json.loads(line)["predictions"]] for line in capsys.readouterr().out.splitlines()]
    assert filled == [[p["sequence"] for p in mask] for mask in transformers.pipeline("fill-mask", model=str(tmp_path / "m"))(two)]
    assert any(p["token"].startswith("Ġ") for p in ours)
    assert main(["predict", "fill-mask", "--model", str(tmp_path / "m"), "--top-k", "8", text]) == 0
    table = capsys.readouterr().out
    assert "Ġ" not in table and ours[0]["token_str"].strip() in table


def test_fill_mask_targets_and_padding_proposals_as_transformers_pipeline(tmp_path, reviews, capsys):
    # the pipeline's targets (a vocabulary entry, a word after a space, a word of several tokens:
    # its first), and a proposal of the pad token in a text of several masks: the pipeline drops
    # padding from the filled sequence, bertkit wrote "<pad>" into it
    from bertkit.data import TokenizerSettings, train_tokenizer
    from bertkit.tasks import fill_mask

    tok = train_tokenizer(reviews, TokenizerSettings.for_family("roberta", vocab_size=600))
    torch.manual_seed(0)
    model = bertkit.build("roberta-base", head="mlm", vocab_size=tok.vocab_size, num_layers=1, hidden_size=32,
                          num_heads=4, intermediate_size=48, max_positions=64).eval()
    with torch.no_grad():
        model.head.bias[tok.pad_token_id] = 6.0
    model.tokenizer = tok
    model.save_pretrained(tmp_path / "m")
    pipe = transformers.pipeline("fill-mask", model=str(tmp_path / "m"), top_k=6)
    two = "The <mask> was <mask>."
    ours = fill_mask(tmp_path / "m", [two], top_k=6)
    assert any(p["id"] == tok.pad_token_id for r in ours for p in r["predictions"])
    theirs = pipe(two)
    assert [[(p["id"], p["sequence"]) for p in r["predictions"]] for r in ours] == [
        [(p["token"], p["sequence"]) for p in mask] for mask in theirs]
    assert [p["score"] for r in ours for p in r["predictions"]] == pytest.approx(
        [p["score"] for mask in theirs for p in mask], rel=1e-6)  # full floats from Python
    words = ["Ġthe", " film", "good", "extraordinarily", "Ġthe"]
    with pytest.warns(UserWarning, match="'extraordinarily' is not in the vocabulary; its first token"):
        ours = fill_mask(model, ["A <mask> film."], top_k=10, targets=words)[0]["predictions"]
    theirs = pipe("A <mask> film.", targets=words, top_k=10)
    assert len(ours) == len({p["token"] for p in theirs}) < 10  # top_k capped at the distinct targets
    assert sorted((p["id"], p["sequence"]) for p in ours) == sorted((p["token"], p["sequence"]) for p in theirs)
    assert sorted(p["score"] for p in ours) == pytest.approx(sorted(p["score"] for p in theirs), rel=1e-6)
    assert main(["predict", "fill-mask", "--model", str(tmp_path / "m"), "--json", "--targets", "Ġthe, film",
                 "A <mask> film."]) == 0
    listed = json.loads(capsys.readouterr().out)["predictions"]
    assert {p["token"] for p in listed} == {"Ġthe", "Ġfilm"}
    assert main(["predict", "fill-mask", "--model", str(tmp_path / "m"), "--targets", "the,,film", "A <mask>."]) == 2
    assert "--targets: an empty word" in capsys.readouterr().err
    with pytest.raises(bertkit.BertkitError, match="none of the targets"):
        fill_mask(model, ["A <mask> film."], targets=[""])
    assert main(["predict", "fill-mask", "--model", str(tmp_path / "m"), "A <mask> film."]) == 0
    position = fill_mask(model, ["A <mask> film."])[0]["position"]
    assert f"(mask at token {position + 1})" in capsys.readouterr().out  # counted from 1, as the errors count


def test_fill_mask_answers_do_not_depend_on_the_tokenizers_padding_side(mlm_dir, tmp_path, capsys):
    # a left-padding tokenizer shifted a short text's positions inside the batch: another answer,
    # and a sequence cut from the padded row
    import shutil

    left = tmp_path / "left"
    shutil.copytree(mlm_dir, left)
    config = json.loads((left / "tokenizer_config.json").read_text())
    (left / "tokenizer_config.json").write_text(json.dumps({**config, "padding_side": "left"}))
    texts = ["paris is the [MASK] of france and a very big city with many people", "a [MASK] day"]
    answers = []
    for folder in (mlm_dir, left):
        assert main(["predict", "fill-mask", "--model", str(folder), "--json", *texts]) == 0
        answers.append([json.loads(line) for line in capsys.readouterr().out.splitlines()])
    assert answers[0] == answers[1] and answers[0][1]["position"] == 2
    assert answers[0][1]["predictions"][0]["sequence"].startswith("a ")


def test_fill_mask_uses_the_mlm_head_of_a_file_that_names_no_architecture(mlm_dir, tmp_path, capsys):
    # as DeBERTa-v3's released configs: no "architectures", the MLM weights in the file; the
    # pipeline loads them, and fill-mask said "has no masked-LM head (head: None)"
    import shutil

    folder = tmp_path / "bare"
    shutil.copytree(mlm_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    del config["architectures"]
    (folder / "config.json").write_text(json.dumps(config))
    text = "a [MASK] film"
    assert main(["predict", "fill-mask", "--model", str(folder), "--json", text]) == 0
    captured = capsys.readouterr()
    ours = json.loads(captured.out)["predictions"]
    theirs = transformers.pipeline("fill-mask", model=str(folder))(text)
    assert [p["id"] for p in ours] == [p["token"] for p in theirs]
    assert "head='mlm'" not in captured.err  # the load's advice is followed, not printed


def test_fill_mask_refuses_text_without_a_mask_and_models_without_a_head(mlm_dir, minilm_dir, capsys):
    assert main(["predict", "fill-mask", "--model", str(mlm_dir), "no mask here"]) == 2
    assert "no [MASK]" in capsys.readouterr().err
    long = "the [MASK] was " + "good " * 80  # 64 positions: the mask is in, the end is cut (it was silent)
    assert main(["predict", "fill-mask", "--model", str(mlm_dir), "--json", long, "a [MASK] film"]) == 0
    assert "1 of 2 texts were longer than 64 tokens and were truncated" in capsys.readouterr().err
    assert main(["predict", "fill-mask", "--model", str(mlm_dir), "good " * 80 + "[MASK]"]) == 2
    assert "its [MASK] at token 82 of 83 lies past the model's limit of 64 tokens" in capsys.readouterr().err
    assert main(["predict", "fill-mask", "--model", str(mlm_dir), "a [MASK] " + "good " * 80 + "[MASK]"]) == 2
    assert "its [MASK] at token 84 of 85 lies past" in capsys.readouterr().err  # the first kept, the second not
    assert main(["predict", "fill-mask", "--model", str(minilm_dir), "a [MASK]"]) == 2
    assert "no masked-LM head" in capsys.readouterr().err
    bare = mlm_dir.parent / "weights-only"  # the folder named, and a tokenizer given instead
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        (bare / name).write_bytes((mlm_dir / name).read_bytes())
    assert main(["predict", "fill-mask", "--model", str(bare), "a [MASK] film"]) == 2
    assert f"{bare}: holds no tokenizer files; give one with --tokenizer" in capsys.readouterr().err
    assert main(["predict", "fill-mask", "--model", str(bare), "--tokenizer", str(mlm_dir), "--json", "a [MASK]"]) == 0
    from bertkit.tasks import fill_mask
    with pytest.raises(bertkit.BertkitError,
                       match="weights-only: holds no tokenizer files; give one with --tokenizer \\(tokenizer= in Python\\)"):
        fill_mask(bare, ["a [MASK]"])
    assert fill_mask(bare, ["a [MASK]"], tokenizer=mlm_dir) == fill_mask(mlm_dir, ["a [MASK]"])
    assert main(["predict", "fill-mask", "--model", str(mlm_dir), "--json", "a [MASK]"]) == 0
    with_tokenizer, given = capsys.readouterr().out.splitlines()
    assert with_tokenizer == given
    for name in ("tokenizer_config.json", "special_tokens_map.json"):  # a mask token the vocabulary lacks
        config = json.loads((mlm_dir / name).read_text())
        (mlm_dir / name).write_text(json.dumps({**config, "mask_token": "<mask>"}))
    assert main(["predict", "fill-mask", "--model", str(mlm_dir), "a [MASK] film"]) == 2
    assert "the mask token '<mask>' has id 30522, outside the model's vocabulary of 30522" in capsys.readouterr().err


def test_an_unknown_set_key_lists_the_loss_settings_too(tmp_path, capsys):
    assert main(["pretrain", "--objective", "rtd", "--model", "electra-small", "--set", "bogus=1",
                 "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "--set: unknown key 'bogus'; known: accumulation," in err and "loss settings: temperature," in err
    assert "rtd_weight" in err and len(err.strip().splitlines()) == 1


def test_progress_into_a_log_file_redraws_every_30_seconds_not_every_step(monkeypatch, capsys):
    monkeypatch.delenv("TQDM_MININTERVAL", raising=False)  # (tqdm reads it when it is first imported)
    monkeypatch.delenv("TQDM_MAXINTERVAL", raising=False)  # (its monitor thread redrew every ~10 s)
    assert main(["models"]) == 0  # stderr here is no terminal
    assert os.environ["TQDM_MININTERVAL"] == os.environ["TQDM_MAXINTERVAL"] == "30"
    monkeypatch.setenv("TQDM_MININTERVAL", "5")  # a user's own setting stays
    assert main(["models"]) == 0 and os.environ["TQDM_MININTERVAL"] == "5"


def test_a_warning_during_a_progress_bar_gets_a_line_of_its_own():
    import io

    from tqdm import tqdm

    from bertkit.cli import _one_line_warning

    screen = io.StringIO()
    bar = tqdm(total=3, file=screen, mininterval=0)
    bar.update(1)
    _one_line_warning("2 texts were truncated", UserWarning, "x.py", 1, file=screen)
    bar.close()
    before = screen.getvalue().split("bertkit: warning: 2 texts were truncated\n")[0]
    assert before.endswith("\r") and before.split("\r")[-2].strip() == ""  # the bar's line was cleared first


def test_ctrl_c_while_the_commands_load_is_one_line(monkeypatch, capsys):
    """Building the parser imports torch and every command (seconds): Ctrl-C then was a
    twenty-line traceback."""
    import bertkit.cli

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(bertkit.cli, "parser", interrupted)
    assert main(["models"]) == 130
    assert capsys.readouterr().err == "bertkit: interrupted\n"


def test_sigterm_stops_a_command_as_ctrl_c_does(monkeypatch, capsys):
    """`kill` (or a scheduler ending the job) gets the same one line as Ctrl-C, and so the same
    saving of what Ctrl-C keeps, with the exit a shell gives a SIGTERM (143; it was Ctrl-C's 130);
    the handler before main is put back after it."""
    import os
    import signal

    import bertkit.cli

    monkeypatch.setattr(bertkit.cli, "cmd_models", lambda args: os.kill(os.getpid(), signal.SIGTERM))
    before = signal.getsignal(signal.SIGTERM)
    assert main(["models"]) == 143
    assert capsys.readouterr().err == "bertkit: interrupted\n"
    assert signal.getsignal(signal.SIGTERM) is before
    monkeypatch.setattr(bertkit.cli, "cmd_models", lambda args: (_ for _ in ()).throw(KeyboardInterrupt))
    assert main(["models"]) == 130  # a Ctrl-C after it in the same process


def test_a_second_ctrl_c_while_the_program_ends_is_ignored():
    """Run as the program (no argv given), an interrupted command ignores further Ctrl-C and
    SIGTERM while it prints what was kept and Python shuts down: a second Ctrl-C 10-30 ms after
    the first printed a traceback from an atexit hook. Called as a function, main leaves them be."""
    code = ("import signal, sys, bertkit.cli as c\n"
            "c.cmd_models = lambda args: (_ for _ in ()).throw(KeyboardInterrupt)\n"
            "ignored = lambda: [signal.getsignal(s) is signal.SIG_IGN for s in (signal.SIGINT, signal.SIGTERM)]\n"
            "print(c.main(['models']), *ignored())\n"  # a function call first: handlers left be
            "sys.argv = ['bertkit', 'models']\n"
            "print(c.main(), *ignored())\n"  # then as the program
            "print(c.main(['models']), *ignored())\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.stdout.split() == ["130", "False", "False", "130", "True", "True", "130", "True", "True"], run.stderr


def test_running_out_of_memory_is_one_line(monkeypatch, capsys):
    import bertkit.cli

    monkeypatch.setattr(bertkit.cli, "cmd_models", lambda args: torch.empty(2**50, dtype=torch.uint8))
    assert main(["models"]) == 2
    err = capsys.readouterr().err
    assert err == ("bertkit: error: out of memory (an allocation of 1,073,741,824.0 MiB failed); use a smaller "
                   "--batch-size, --max-length or model (in training, --accumulation keeps a step's batch size)\n")
    from bertkit.cli import out_of_memory  # safetensors mapping a checkpoint says it in its own words
    assert out_of_memory(RuntimeError("unable to mmap 90868376 bytes from file <model.safetensors>: Cannot allocate "
                                      "memory (12)")).startswith("out of memory; use a smaller --batch-size")
    assert out_of_memory(OSError(2, "No such file or directory")) is None
    monkeypatch.setattr(bertkit.cli, "cmd_models", lambda args: torch.zeros(2) + torch.zeros(3))
    with pytest.raises(RuntimeError, match="must match the size"):  # any other error is a bug to see
        main(["models"])


def test_a_mistyped_option_is_named_by_its_command_with_the_nearest_option(capsys):
    """argparse left unknown options to the top parser: its usage, 'bertkit [-h] COMMAND ...',
    said nothing of the command's own options."""
    with pytest.raises(SystemExit) as e:
        main(["predict", "embed", "--model", "m", "--query", "q", "--topk", "2", "text"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: bertkit predict embed ")
    assert err.splitlines()[-1] == ("bertkit predict embed: error: unrecognized arguments: --topk "
                                    "(did you mean --top-k?)")
    with pytest.raises(SystemExit):
        main(["models", "--zzz"])
    assert capsys.readouterr().err.splitlines()[-1] == "bertkit models: error: unrecognized arguments: --zzz"
    with pytest.raises(SystemExit):  # before any command: the option is the mistake, not the missing command
        main(["--verison"])
    assert capsys.readouterr().err.splitlines()[-1] == ("bertkit: error: unrecognized arguments: --verison "
                                                        "(did you mean --version?)")
    with pytest.raises(SystemExit):
        main([])
    assert capsys.readouterr().err.splitlines()[-1] == "bertkit: error: the following arguments are required: COMMAND"


def test_the_commands_load_without_matplotlib_and_say_their_version():
    """matplotlib is needed to draw, not to start: `bertkit models` died on its import
    (viz/compare.py imported it at the top) where it was missing."""
    import bertkit

    code = ("import sys; sys.modules['matplotlib'] = None\n"  # (an import of it then fails)
            "from bertkit.cli import main\n"
            "sys.exit(main(['models']))\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0 and "mini-bert" in run.stdout, run.stderr
    run = subprocess.run([sys.executable, "-m", "bertkit", "--version"], capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout == f"bertkit {bertkit.__version__}\n"


def test_console_script_help_explains_itself():
    run = subprocess.run([sys.executable, "-m", "bertkit.cli", "--help"], capture_output=True, text=True)
    assert run.returncode == 0
    for command in ("models", "demo", "info", "embed", "predict"):
        assert command in run.stdout


def test_bench_records_say_ratio_above_one_means_better(tmp_path):
    from bertkit import bench

    record = bench.inference("mini-bert", [5, 9, 3], "fp32", 1, "tiny")
    assert record.unit == "tokens/s" and record.max_abs_diff <= 1e-4
    assert abs(record.ratio - record.ours / record.reference) <= 1e-9  # throughput: ours / theirs
    step = bench.mlm_training_step("mini-bert", 4, 16, "fp32", 1, "tiny step")
    assert step.max_abs_diff <= 1e-4  # both sides compute the same loss
    assert main(["bench", "--repeats", "0"]) == 2
    assert main(["bench", "--quick", "--json", str(tmp_path)]) == 2  # a folder: refused before any timing
    assert main(["bench", "--quick", "--only", "deberta"]) == 2  # not in the quick set: one line, exit 2


def test_bench_ceiling_is_the_reference_time_over_the_real_tokens_flops_at_peak(monkeypatch):
    """ceiling = transformers' seconds / (FLOPs of the real tokens, each sequence its own length,
    at the measured peak); None for a family whose FLOPs encoder_flops does not count."""
    from bertkit import bench

    asked = []
    monkeypatch.setattr(bench, "matmul_peak", lambda tokens, *a, **k: asked.append(tokens) or 1e9)
    lengths = [5, 9, 3]
    record = bench.inference("mini-bert", lengths, "fp32", 1, "tiny")
    c = bertkit.build("mini-bert").config
    L, H, I = c.num_layers, c.hidden_size, c.intermediate_size
    flops = sum(L * (2 * n * (4 * H * H + 2 * H * I) + 4 * n * n * H) for n in lengths)
    reference_seconds = sum(lengths) / record.reference
    assert asked == [sum(lengths)]  # the peak at the token count bertkit's projections see
    assert record.ceiling == pytest.approx(reference_seconds * 1e9 / flops, rel=1e-9)
    deberta = bertkit.config.get_preset("deberta-v3-base").config
    assert bench.inference_ceiling(deberta, lengths, reference_seconds, "fp32") is None


def test_bench_flop_utilization_times_the_peak_in_turn_with_both_models(monkeypatch):
    """Each side's median FLOP/s over the peak kernel's median, all three timed in one
    alternation; the note gives the best peak run too."""
    from bertkit import bench

    real, rounds = bench.alternate, []

    def alternate(fns, repeats, device=bench.CPU):
        times = real(fns, repeats, device)
        if len(fns) == 3:  # ours, transformers, the peak kernel
            rounds.append(times)
        return times

    monkeypatch.setattr(bench, "alternate", alternate)
    B, T = 2, 16
    record = bench.flop_utilization("mini-bert", B, T, "fp32", 3, "mfu")
    (ours, ref, peak_runs), = rounds
    assert len(ours) == len(ref) == len(peak_runs) == 3
    c = bertkit.build("mini-bert").config
    L, H, I = c.num_layers, c.hidden_size, c.intermediate_size
    model_flops = L * (2 * B * T * (4 * H * H + 2 * H * I) + 4 * B * T * T * H)
    layer_flops = 2 * B * T * (4 * H * H + 2 * H * I)
    median = bench.statistics.median
    peak, best = layer_flops / median(peak_runs), layer_flops / min(peak_runs)
    assert record.ours == pytest.approx(100 * model_flops / median(ours) / peak)
    assert record.reference == pytest.approx(100 * model_flops / median(ref) / peak)
    assert f"{best / 1e9:.0f} GFLOP/s" in record.note
    assert f"ours {100 * model_flops / median(ours) / best:.0f}%" in record.note


def test_bench_training_step_as_trained_keeps_dropout_on_both_sides(monkeypatch):
    """dropout=True times both sides with their configured dropout (each drawing its own masks),
    after checking the loss with dropout off; by default every dropout stays off."""
    from bertkit import bench
    from bertkit.layers import dropout as bertkit_dropout

    seen = {"bertkit": [], "transformers": []}
    ours, theirs = bertkit_dropout.dropout, torch.nn.functional.dropout
    monkeypatch.setattr(bertkit_dropout, "dropout", lambda x, p, training=True: seen["bertkit"].append(
        p * training) or ours(x, p, training))
    monkeypatch.setattr(torch.nn.functional, "dropout", lambda x, p=0.5, training=True, inplace=False: seen[
        "transformers"].append(p * training) or theirs(x, p, training, inplace))
    for on in (False, True):
        seen["bertkit"].clear(), seen["transformers"].clear()
        record = bench.mlm_training_step("mini-bert", 4, 16, "fp32", 1, "tiny step", dropout=on)
        assert record.max_abs_diff <= 1e-4
        assert (max(seen["bertkit"]) > 0) == on and (max(seen["transformers"]) > 0) == on


def test_bench_dtype_picks_rows(capsys):
    from bertkit import bench

    records = bench.run(True, 1, None, progress=lambda line: None, only="inference", dtype="fp32")
    assert [(r.name, r.dtype, r.device, r.machine) for r in records] == [
        ("mini-bert inference, 32 seqs, lengths in [8, 64], padded", "fp32", "cpu", bench.machine())]
    assert main(["bench", "--quick", "--only", "memory", "--dtype", "bf16"]) == 2
    assert "--only 'memory' and --dtype 'bf16' match no workload" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse: not a choice
        main(["bench", "--dtype", "fp16"])


def test_bench_device_is_checked_and_cuda_timings_wait_for_the_gpu(capsys, monkeypatch):
    from bertkit import bench

    assert main(["bench", "--quick", "--device", "tpu9"]) == 2
    assert "unknown device 'tpu9'" in capsys.readouterr().err
    assert main(["bench", "--quick", "--device", "meta"]) == 2
    assert "bench runs on cpu or cuda" in capsys.readouterr().err
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["bench", "--quick", "--device", "cuda"]) == 2
    assert "torch sees no CUDA device" in capsys.readouterr().err
    events = []  # a CUDA timing brackets the work with synchronizations, so queued kernels count
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: events.append("sync"))
    bench._seconds(lambda: events.append("work"), torch.device("cuda"))
    assert events == ["sync", "work", "sync"]
    events.clear()
    bench._seconds(lambda: events.append("work"), torch.device("cpu"))
    assert events == ["work"]


def test_bench_says_whether_bf16_is_emulated(monkeypatch):
    from bertkit import bench, pretraining

    for native in (True, False):
        monkeypatch.setattr(pretraining, "native_bf16", lambda device, native=native: native)
        assert (bench.EMULATED_BF16 in bench.machine()) != native
        assert ("bf16 in hardware" in bench.machine()) == native


def test_bench_keeps_a_thread_count_chosen_with_omp_num_threads_and_reports_it(monkeypatch):
    import os

    from bertkit import bench

    before = torch.get_num_threads()
    cores = len(os.sched_getaffinity(0))
    try:
        torch.set_num_threads(1)
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        bench.use_cores()
        assert torch.get_num_threads() == 1
        assert ("cores (1 torch thread)" in bench.machine()) == (cores != 1)
        monkeypatch.delenv("OMP_NUM_THREADS")
        bench.use_cores()
        assert torch.get_num_threads() == cores and "torch threads" not in bench.machine()
    finally:
        torch.set_num_threads(before)


def test_quick_bench_skips_bf16_rows_only_where_bf16_is_emulated(monkeypatch):
    from bertkit import bench, pretraining

    fake_timing(monkeypatch)  # which rows run, not how fast

    def dtypes(native, **kw):
        monkeypatch.setattr(pretraining, "native_bf16", lambda device: native)
        lines = []
        records = bench.run(True, 1, None, progress=lines.append, only="inference", **kw)
        return [r.dtype for r in records], any("bf16 rows skipped" in line for line in lines)

    assert dtypes(False) == (["fp32"], True)
    assert dtypes(False, dtype="bf16") == (["bf16"], False)  # asked for: timed, emulated or not
    assert dtypes(True) == (["fp32", "bf16"], False)


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("bertkit: error: "), err
    return err[0]


def fake_timing(monkeypatch, seconds=lambda: 1.0, peak=1e9):
    """The bench's clock and matmul peak replaced: every timed call takes `seconds()` (the calls
    still run once each as warm-up), so a test checks the bookkeeping, never a timing."""
    from bertkit import bench

    monkeypatch.setattr(bench, "_seconds", lambda fn, device=bench.CPU: seconds())
    monkeypatch.setattr(bench, "matmul_peak", lambda *a, **k: peak)


QUICK_INFERENCE = "mini-bert inference, 32 seqs, lengths in [8, 64], padded"


def test_bench_refuses_a_row_whose_outputs_disagree(tmp_path, capsys, monkeypatch):
    """bertkit returning noise fast is no win: each row checks both sides' outputs (hidden states
    on real tokens, or the loss) against TOLERANCE before timing, and refuses in one line naming
    the row, the difference and the tolerance."""
    from bertkit import bench
    from bertkit.errors import BertkitError

    real_pair = bench.pair

    def scrambled(*a, **k):  # the same work on bertkit's side, wrong weights
        ours, reference = real_pair(*a, **k)
        with torch.no_grad():
            for p in ours.parameters():
                p.copy_(torch.randn_like(p))
        return ours, reference

    monkeypatch.setattr(bench, "pair", scrambled)
    monkeypatch.setattr(bench, "_seconds", lambda fn, device=None: pytest.fail("a disagreeing row was timed"))
    out = tmp_path / "bench.json"
    assert main(["bench", "--quick", "--only", "inference", "--dtype", "fp32", "--json", str(out)]) == 2
    line = one_error_line(capsys)
    assert f"{QUICK_INFERENCE} [fp32]: bertkit's hidden states and transformers' differ by" in line
    assert "beyond the tolerance" in line and not out.exists()
    for dtype in ("fp32", "bf16"):
        with pytest.raises(BertkitError, match=rf"tiny step \[{dtype}\]: bertkit's loss .* beyond the tolerance"):
            bench.mlm_training_step("mini-bert", 2, 8, dtype, 1, "tiny step")
    assert bench.TOLERANCE["hidden states", "fp32"] <= 1e-4 and bench.TOLERANCE["loss", "fp32"] <= 1e-4


def test_bench_alternates_the_sides_abba():
    """Every other round runs the sides in reverse, so neither always goes first."""
    from bertkit import bench

    calls = []
    bench.alternate([lambda: calls.append("a"), lambda: calls.append("b")], 4)
    assert "".join(calls) == "ab" + "abbaabba"  # the warm-up, then the rounds


def test_bench_records_keep_their_spread_and_load_and_warn_under_the_table(tmp_path, capsys, monkeypatch):
    """Each record keeps each side's range over the repeats, the repeat count and the load
    average at the row's end; a wide range, a load above the cores and a ratio past its ceiling
    each put a warning line under the table."""
    from bertkit import bench

    # rounds: ours 1 s, reference 2 s; reference 2, ours 2; ours 1, reference 2
    seconds = iter([1.0, 2.0, 2.0, 2.0, 1.0, 2.0])
    fake_timing(monkeypatch, seconds=lambda: next(seconds), peak=1.0)  # a peak that puts the ceiling near 0
    monkeypatch.setattr(os, "getloadavg", lambda: (64.0, 1.0, 1.0))
    out = tmp_path / "bench.json"
    assert main(["bench", "--quick", "--only", "inference", "--dtype", "fp32", "--repeats", "3",
                 "--json", str(out)]) == 0
    record, = json.loads(out.read_text())
    tokens = record["ours"]  # the median run took 1 s
    assert record["repeats"] == 3 and record["load_average"] == 64.0
    assert record["ours_range"] == pytest.approx([tokens / 2, tokens])
    assert record["reference_range"] == pytest.approx([tokens / 2, tokens / 2])
    assert record["ratio"] == pytest.approx(2.0) and record["ceiling"] < 1
    stdout = capsys.readouterr().out
    warning, = [line for line in stdout.splitlines() if line.startswith("warning:")]
    assert warning.startswith(f"warning: {QUICK_INFERENCE} [fp32]: bertkit's 3 runs ranged")
    assert f"load average 64.0 on {os.cpu_count()} cores" in warning and "above its ceiling" in warning
    lines = stdout.splitlines()
    assert lines.index(warning) > max(i for i, line in enumerate(lines) if line.startswith(record["name"]))
    assert record["warnings"] and all(w in warning for w in record["warnings"])
    steady = bench.Record("x", "fp32", 100.0, 50.0, "tokens/s", 2.0, 0.0, ceiling=3.0, repeats=5,
                          ours_range=[95.0, 105.0], reference_range=[49.0, 51.0], load_average=0.5)
    assert bench.row_warnings(steady, cores=2) == []


def test_bench_json_keeps_the_rows_measured_before_a_failure(tmp_path, capsys, monkeypatch):
    """--json is rewritten (atomically) after each row: a failure or Ctrl-C in a later row keeps
    the records already measured, and the exit is still one line, non-zero."""
    from bertkit import bench
    from bertkit.errors import BertkitError

    fake_timing(monkeypatch)
    out = tmp_path / "runs" / "bench.json"
    for stop, code, said in [(BertkitError("memory run for transformers failed: (simulated)"), 2, "bertkit: error: "),
                             (KeyboardInterrupt(), 130, "bertkit: interrupted")]:
        def failing(*a, stop=stop, **k):
            raise stop
        monkeypatch.setattr(bench, "mlm_training_step", failing)
        assert main(["bench", "--quick", "--dtype", "fp32", "--repeats", "1", "--json", str(out)]) == code
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(said) and f"the 1 record measured before is in {out}" in err[0]
        assert [r["name"] for r in json.loads(out.read_text())] == [QUICK_INFERENCE]
        assert [p.name for p in out.parent.iterdir()] == ["bench.json"]  # no temporary file left
        out.unlink()


def test_bench_json_tries_its_folder_before_timing(capsys, monkeypatch):
    """Root passes os.access everywhere, /proc and read-only mounts included: --json's folder
    is tried by creating and removing a file there, before any timing."""
    from bertkit import bench

    monkeypatch.setattr(os, "access", lambda *a, **k: True)  # what root is told
    monkeypatch.setattr(bench, "inference", lambda *a, **k: pytest.fail("timed before trying --json's folder"))
    assert main(["bench", "--quick", "--only", "inference", "--dtype", "fp32", "--json", "/proc/bench.json"]) == 2
    assert "--json /proc/bench.json: cannot write in /proc" in one_error_line(capsys)


def test_bench_only_takes_a_name_as_the_workload_list_shows_it():
    from bertkit import bench

    shown = "mini-bert inference, 32 seqs, lengths in [8, 64], padded"
    assert bench.selected(shown, f"={shown} [fp32]", "fp32") and not bench.selected(shown, f"={shown} [fp32]", "bf16")
    assert bench.selected(shown, f"={shown}", "bf16") and not bench.selected(shown + ", compiled", f"={shown}", "fp32")


def test_bench_on_cuda_leaves_out_the_prepacked_rows_which_time_nothing_new_there(capsys, monkeypatch):
    # prepack() packs weights for oneDNN, a CPU library: on CUDA those rows repeated the plain ones
    from bertkit import bench

    on_cpu = {(w.name, w.dtype) for w in bench.workloads(False, 1)}
    on_cuda = {(w.name, w.dtype) for w in bench.workloads(False, 1, torch.device("cuda"))}
    assert on_cuda == {(n, d) for n, d in on_cpu if "prepacked" not in n} and on_cuda < on_cpu
    from bertkit import pretraining

    monkeypatch.setattr(pretraining, "pick_device", lambda device: torch.device("cuda"))
    assert main(["bench", "--only", "prepacked", "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert "match" in err and "prepacked" not in err.split("the workloads are:")[1]


def test_bench_only_takes_an_exact_name_and_refuses_an_empty_one(capsys, monkeypatch):
    """--only =NAME picks the row named exactly NAME, whose name begins its variants' names;
    --only TEXT still picks every row containing TEXT; an empty --only (which would start the
    whole 22-minute run) is refused."""
    from bertkit import bench

    ran = []

    def fake(label_at):
        def run(*a, **k):
            ran.append(a[label_at])
            return bench.Record(a[label_at], "fp32", 1.0, 1.0, "tokens/s", 1.0, 0.0)
        return run

    for workload, label_at in (("inference", 4), ("mlm_training_step", 5), ("flop_utilization", 5),
                               ("activation_memory", 3)):
        monkeypatch.setattr(bench, workload, fake(label_at))
    name = "bert-base inference, 32 seqs, lengths in [16, 256]"
    bench.run(False, 1, None, progress=lambda line: None, only="=" + name, dtype="fp32")
    assert ran == [name]
    ran.clear()
    bench.run(False, 1, None, progress=lambda line: None, only=name, dtype="fp32")
    assert ran == [name, name + ", prepacked", name + ", compiled"]
    ran.clear()
    for empty in ("", "=", "  "):
        assert main(["bench", "--only", empty]) == 2
        assert "names no workload: give part of a name, or =NAME" in one_error_line(capsys)
    assert ran == []


def test_bench_loads_the_reference_without_progress_bars(capfd):
    """transformers' "Loading weights" bars stay out of the bench's stderr; the switch, global
    to the process, is put back."""
    from transformers.utils import logging

    from bertkit import bench

    was_on = logging.is_progress_bar_enabled()
    logging.enable_progress_bar()  # on, as in a user's process (an environment variable may turn them off)
    try:
        bench.pair("mini-bert", None, torch.float32)
        assert "Loading weights" not in capfd.readouterr().err
        assert logging.is_progress_bar_enabled()
    finally:
        if not was_on:
            logging.disable_progress_bar()


def file_backed(tensors: dict[str, torch.Tensor]) -> list[str]:
    """The names of the tensors whose memory lies in a mapped file (/proc/self/maps: a mapping
    with an inode), not in memory of the process's own."""
    files = []
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split()
            if fields[4] != "0":
                low, high = (int(x, 16) for x in fields[0].split("-"))
                files.append((low, high))
    return [name for name, t in tensors.items()
            if any(low <= t.untyped_storage().data_ptr() < high for low, high in files)]


def test_bench_memory_baseline_already_holds_each_sides_weights(capfd, monkeypatch):
    """transformers loads weights memory-mapped from the safetensors file, paged in only when
    the pass reads them: the memory side makes every weight resident before it reads the
    baseline, so the weights do not count as activations. Checked at the moment the baseline is
    read, for both sides, in this process (the pass on a tiny model takes well under a second)."""
    import bertkit.model
    from bertkit import bench

    loaded = []
    real_build, real_load = bertkit.model.build, transformers.BertForMaskedLM.from_pretrained
    monkeypatch.setattr(bertkit.model, "build", lambda *a, **k: loaded.append(real_build(*a, **k)) or loaded[-1])
    monkeypatch.setattr(transformers.BertForMaskedLM, "from_pretrained",
                        lambda *a, **k: loaded.append(real_load(*a, **k)) or loaded[-1])
    at_baseline, real_reset = [], bench._memory_reset

    def reset(device):
        model = loaded[-1]  # the side's model: bertkit's, or transformers' loaded from it
        at_baseline.append((type(model).__name__, file_backed(
            {**dict(model.named_parameters()), **dict(model.named_buffers())})))
        return real_reset(device)

    monkeypatch.setattr(bench, "_memory_reset", reset)
    for side in ("transformers", "bertkit"):
        bench._memory_side(side, "mini-bert", 2, 16)
    assert at_baseline == [("BertForMaskedLM", []), ("Model", [])]
    assert "Loading weights" not in capfd.readouterr().err


@pytest.mark.slow  # two subprocesses, each importing torch and transformers: pytest -m slow
def test_bench_memory_runs_each_side_in_its_own_process():
    from bertkit import bench

    plain, checkpointed = bench.activation_memory("mini-bert", 8, 64, "tiny memory")
    for r in (plain, checkpointed):
        assert r.unit == "MiB activations" and r.ours > 0 and r.reference > 0 and r.max_abs_diff is None
        assert abs(r.ratio - r.reference / r.ours) <= 1e-9  # memory: theirs / ours, > 1 = we use less
    assert plain.reference == checkpointed.reference


@pytest.mark.parametrize("name,head", [("bert-base", "mlm"), ("bert-base", "pretraining"), ("roberta-base", "mlm"),
                                       ("deberta-v3-base", "mlm"), ("modernbert-base", "mlm")])
def test_fill_mask_in_batches_gives_each_texts_own_dense_predictions(name, head, tokenizer):
    """fill_mask batches texts by length and projects only the masks: per text, the same top-k
    as the full (B, T, V) logits of that text run alone."""
    from bertkit.tasks import fill_mask

    torch.manual_seed(0)
    model = bertkit.build(name, head=head, vocab_size=tokenizer.vocab_size, pad_token_id=tokenizer.pad_token_id,
                          num_layers=2, hidden_size=64, num_heads=4, intermediate_size=96).eval()
    model.tokenizer = tokenizer
    texts = ["a [MASK] film", "the [MASK] was long and the [MASK] was dull", "[MASK]",
             "one more sentence with a [MASK] in the middle of it, and then some more words", "so [MASK]"]
    got = fill_mask(model, texts, top_k=4, batch_size=2)
    want = []
    for text in texts:
        batch = tokenizer([text])
        with torch.no_grad():
            probs = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).logits[0].softmax(-1)
        for pos in (batch["input_ids"][0] == tokenizer.mask_token_id).nonzero().flatten().tolist():
            top = probs[pos].topk(4)
            want.append((text, pos, top.indices.tolist(), top.values.tolist()))
    assert [(r["text"], r["position"], [p["id"] for p in r["predictions"]]) for r in got] == [w[:3] for w in want]
    for r, w in zip(got, want):
        assert [p["score"] for p in r["predictions"]] == pytest.approx(w[3], abs=1e-5)
    with pytest.raises(bertkit.BertkitError, match="text 2 of 2: no \\[MASK\\]"):
        fill_mask(model, ["a [MASK]", "none here"])
    model.tokenizer = None
    with pytest.raises(bertkit.BertkitError,
                       match="the model: holds no tokenizer files; give one with --tokenizer \\(tokenizer= in Python\\)"):
        fill_mask(model, ["a [MASK]"])


def test_fill_mask_lists_only_tokens_the_tokenizer_has(tokenizer):
    """A model vocabulary padded past the tokenizer's (a multiple of 64, an override): the rows no
    text can name are never listed, and the listed scores stay the full softmax's."""
    from bertkit.tasks import fill_mask

    torch.manual_seed(0)
    V = tokenizer.vocab_size
    model = bertkit.build("bert-base", head="mlm", vocab_size=V + 500, num_layers=1, hidden_size=32, num_heads=4,
                          intermediate_size=48).eval()
    model.tokenizer = tokenizer
    with torch.no_grad():
        model.head.bias[V:] = 8.0  # the padded rows would win every mask
        model.head.bias[1000:1005] = 12.0  # five known tokens with scores worth comparing
    [got] = fill_mask(model, ["a [MASK] film"], top_k=5)
    assert all(p["id"] < V and p["token"] is not None for p in got["predictions"])
    batch = tokenizer(["a [MASK] film"])
    with torch.no_grad():
        probs = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).logits[0].softmax(-1)
    pos = got["position"]
    assert probs[pos, V:].sum() > 0.5
    assert [p["score"] for p in got["predictions"]] == pytest.approx(probs[pos, :V].topk(5).values.tolist(), abs=2e-6)
    long_text = "word " * 400
    with pytest.raises(bertkit.BertkitError) as e:
        fill_mask(model, [long_text])
    assert len(str(e.value)) < 200  # the text is shortened in the message


def test_the_package_lists_its_public_names_and_says_what_its_classes_are():
    import bertkit

    assert set(bertkit.__all__) <= set(dir(bertkit)) and "importlib" not in dir(bertkit)
    assert "bertkit.from_pretrained" in bertkit.Model.__doc__  # help(bertkit.Model) is not nn.Module's
    assert "bertkit.load_tokenizer" in bertkit.Tokenizer.__doc__
    from importlib import resources

    assert resources.files("bertkit").joinpath("py.typed").is_file()  # type checkers read the annotations


def test_names_transformers_users_reach_for(minilm_dir):
    import warnings

    import transformers

    model = bertkit.from_pretrained(minilm_dir, dtype="bfloat16")  # a dtype by name, as transformers takes it
    assert model.dtype == torch.bfloat16 and model.device == torch.device("cpu")
    with pytest.raises(bertkit.BertkitError, match="dtype must be float32, float64, float16 or bfloat16"):
        bertkit.from_pretrained(minilm_dir, dtype="int8")
    ours, theirs = model.tokenizer, transformers.AutoTokenizer.from_pretrained(minilm_dir)
    batch = ours(["A short text.", "Another, longer one here."])["input_ids"]
    assert ours.batch_decode(batch) == theirs.batch_decode(batch.tolist())  # specials and padding kept, as there
    assert ours.batch_decode(batch, skip_special_tokens=True) == theirs.batch_decode(batch.tolist(), skip_special_tokens=True)
    assert ours.convert_ids_to_tokens(batch[0]) == theirs.convert_ids_to_tokens(batch[0].tolist())
    assert len(ours) == len(theirs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bertkit.from_pretrained(minilm_dir, head="classification", num_labels=2)
    assert any(issubclass(w.category, bertkit.FreshHeadWarning) for w in caught)  # filterable by its public name


def test_a_text_value_starting_with_a_dash_is_told_how_to_give_it(capsys):
    # argparse's bare "expected one argument" for --targets -foo; an option left without its
    # value (--targets --json) is only that
    with pytest.raises(SystemExit):
        main(["predict", "fill-mask", "--model", "m", "--targets", "-foo", "a [MASK]"])
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        "argument --targets: expected one argument (--targets=-foo gives a value that starts with '-')")
    with pytest.raises(SystemExit):
        main(["predict", "fill-mask", "--model", "m", "--targets", "--json", "a [MASK]"])
    assert capsys.readouterr().err.splitlines()[-1].endswith("argument --targets: expected one argument")


def test_escape_sequences_from_a_vocabulary_or_labels_do_not_reach_the_terminal(capsys):
    # a token or label holding "erase the line, hide what follows" rewrote what the user saw
    from bertkit.cli import print_fill_mask
    from bertkit.tasks.base import label_index

    sneaky = "\x1b[2K\rPWN\x1b[8m"
    print_fill_mask([{"text": "a [MASK]", "position": 2, "predictions": [
        {"token": sneaky, "token_str": sneaky, "id": 5, "score": 0.5}]}])
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\\x1b[2K\\rPWN\\x1b[8m" in out and "0.5000" in out
    with pytest.raises(bertkit.BertkitError) as refused:
        label_index(("a", "b" + sneaky), ["zzz"], "dev.csv")
    assert "\x1b" not in str(refused.value) and "never seen in training: 'zzz'" in str(refused.value)


def test_fill_mask_proposes_tokens_added_to_the_tokenizer(minilm_dir):
    # once vocab_size left added tokens out, fill_mask listed only the base vocabulary: the likeliest was dropped
    from bertkit.tasks import fill_mask

    tok = bertkit.load_tokenizer(minilm_dir)
    tok.backend.add_tokens(["brandnewword"])
    added = tok.convert_tokens_to_ids("brandnewword")
    model = bertkit.build("bert-base", head="mlm", vocab_size=len(tok), num_layers=1, hidden_size=32, num_heads=2,
                          intermediate_size=64)
    model.tokenizer = tok
    with torch.no_grad():
        model.head.bias[added] = 50.0  # the added word, far ahead of every other
    top = fill_mask(model, ["the movie was [MASK] ."], top_k=3)[0]["predictions"]
    assert top[0]["id"] == added and top[0]["token"] == "brandnewword" and top[0]["score"] > 0.99


def test_label_names_in_a_carried_head_warning_do_not_reach_the_terminal(minilm_dir):
    from bertkit.tasks.finetune import make_task, model_for

    model = bertkit.build("bert-base", head="classification", num_labels=2, num_layers=1, hidden_size=32,
                          num_heads=2, intermediate_size=64, label_names=("a\x1b[2K\rX", "b"))
    with pytest.warns(Warning, match="carry over in order") as caught:
        model_for(make_task("classification"), model, ("x", "y"), tokenizer=minilm_dir)
    assert not any("\x1b" in str(w.message) for w in caught)
