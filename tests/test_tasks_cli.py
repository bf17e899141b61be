"""`bertkit finetune`, `bertkit evaluate` and `bertkit predict classify|tag|answer|embed` end to
end on tiny models and real review text: the run directory and metrics.json contract, evaluate
reproducing the dev scores, JSON-lines prediction from arguments and from --input files (plain
lines and JSON objects), cosine search, and one-line errors for bad input."""

import csv
import json
import re
from pathlib import Path

import pytest
import torch

import bertkit
from bertkit.cli import main
from bertkit.files import output_dir
from bertkit.tasks import load_examples
from tasks_support import review_questions, tagged_sentences

TINY = dict(num_layers=2, hidden_size=32, num_heads=4, intermediate_size=64, max_positions=128)


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory, tokenizer):
    """A tiny bare encoder with the MiniLM tokenizer, saved as a pre-trained checkpoint."""
    torch.manual_seed(0)
    model = bertkit.build("bert-base", **TINY)
    model.tokenizer = tokenizer
    path = tmp_path_factory.mktemp("encoder")
    model.save_pretrained(path)
    return path


def write_csv(path, examples, columns=("text", "label")):
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        for e in examples:
            writer.writerow([e.text, e.label])
    return path


@pytest.fixture(scope="module")
def sentiment_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sentiment")
    train = load_examples("classification", "rotten-tomatoes", "train")[::40]
    dev = load_examples("classification", "rotten-tomatoes", "dev")[::10]
    return write_csv(folder / "train.csv", train), write_csv(folder / "dev.csv", dev)


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_error(err: str) -> str:
    """The error line of a failed command: exactly one, and the last thing it printed."""
    errors = [line for line in err.splitlines() if line.startswith("bertkit: error:")]
    assert len(errors) == 1 and err.strip().splitlines()[-1] == errors[0], err
    return errors[0]


def json_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


FAST = ("--epochs", "2", "--batch-size", "16", "--max-length", "48", "--lr", "1e-3", "--no-progress",
        "--precision", "fp32")


@pytest.fixture(scope="module")
def classifier(encoder_dir, sentiment_files, tmp_path_factory):
    train, dev = sentiment_files
    out = tmp_path_factory.mktemp("runs") / "rt"
    assert main(["finetune", "--task", "classification", "--model", str(encoder_dir), "--train", str(train),
                 "--eval", str(dev), "--out", str(out), *FAST]) == 0
    return out


def test_finetune_ends_with_a_next_command_that_runs_for_every_task(capsys, classifier, tmp_path):
    import shlex

    from bertkit.cli import parser
    from bertkit.tasks.commands import NEXT_STEP
    from bertkit.tasks.readers import TASKS

    assert set(NEXT_STEP) == set(TASKS)
    for task, step in NEXT_STEP.items():  # each hint is a command the parser takes as it stands
        args = parser().parse_args(shlex.split(step.format(out=shlex.quote(str(tmp_path / "a run")))))
        assert args.model == str(tmp_path / "a run"), task
    code, out, _ = run(capsys, *shlex.split(NEXT_STEP["classification"].format(out=classifier)))
    assert code == 0 and json_lines(out)[0]["text"] == "a text"


def test_finetune_writes_the_run_directory_and_flat_metrics(classifier, sentiment_files):
    metrics = json.loads((classifier / "metrics.json").read_text())
    dev_rows = sum(1 for _ in open(sentiment_files[1], encoding="utf-8")) - 1
    assert metrics["eval_examples"] == dev_rows
    for key in ("accuracy", "f1", "mcc"):
        assert isinstance(metrics[key], float)
    assert 0.0 <= metrics["accuracy"] <= 1.0 and 0.0 <= metrics["f1"] <= 1.0 and -1.0 <= metrics["mcc"] <= 1.0
    for name in ("config.json", "model.safetensors", "tokenizer.json", "task.json", "metrics.jsonl", "loss_curve.png"):
        assert (classifier / name).exists(), name
    assert json.loads((classifier / "config.json").read_text())["id2label"] == {"0": "negative", "1": "positive"}


def test_a_finished_run_is_not_overwritten(capsys, classifier, encoder_dir, sentiment_files):
    before = (classifier / "metrics.json").read_bytes()
    code, _, err = run(capsys, "finetune", "--task", "classification", "--model", encoder_dir, "--train",
                       sentiment_files[0], "--eval", sentiment_files[1], "--out", classifier, *FAST)
    assert code == 2 and "already holds metrics.json, task.json, config.json, model.safetensors" in one_error(err)
    assert (classifier / "metrics.json").read_bytes() == before


def test_an_out_that_would_lose_a_model_or_is_no_folder_is_refused_before_training(capsys, encoder_dir, sentiment_files,
                                                                                  tmp_path):
    """--out the pre-trained model itself would overwrite it with the fine-tuned one; a file or a
    path under a file would fail only after training. Each is one line, and nothing is written."""
    data = ("--train", sentiment_files[0], "--eval", sentiment_files[1], *FAST)
    before = (encoder_dir / "model.safetensors").read_bytes()
    code, _, err = run(capsys, "finetune", "--task", "classification", "--model", encoder_dir, "--out", encoder_dir, *data)
    assert code == 2 and "already holds config.json, model.safetensors, tokenizer.json" in one_error(err)
    assert (encoder_dir / "model.safetensors").read_bytes() == before
    mine = tmp_path / "my-tokenizer"  # a user's tokenizer folder: saving the model's would replace it
    mine.mkdir()
    (mine / "vocab.txt").write_text("[PAD]\nmine\n")
    code, _, err = run(capsys, "finetune", "--task", "classification", "--model", encoder_dir, "--out", mine, *data)
    assert code == 2 and "already holds vocab.txt, which this run would overwrite" in one_error(err)
    assert (mine / "vocab.txt").read_text() == "[PAD]\nmine\n"
    # files named as a run's logs that are not a run's (an unfinished run's are rewritten) were replaced
    (mine / "vocab.txt").unlink()
    for name in ("metrics.jsonl", "loss_curve.png"):
        (mine / name).write_text("my own notes\n")
    code, _, err = run(capsys, "finetune", "--task", "classification", "--model", encoder_dir, "--out", mine, *data)
    assert code == 2 and "already holds metrics.jsonl, loss_curve.png, which this run would" in one_error(err)
    assert (mine / "metrics.jsonl").read_text() == (mine / "loss_curve.png").read_text() == "my own notes\n"
    # a run's log whose first line a kill or a full disk cut off is the unfinished run's: the rerun may write
    for name, log in (("cut", '{"step": 1, "split": "tr'), ("notes", "my own notes")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.jsonl").write_text(log)
    assert output_dir(tmp_path / "cut", run_logs=True) == tmp_path / "cut"
    with pytest.raises(bertkit.BertkitError, match="already holds metrics.jsonl, which this run"):
        output_dir(tmp_path / "notes", run_logs=True)
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    for out, problem in ((notes, "a file, not a folder"), (notes / "run", f"{notes} is a file")):
        code, _, err = run(capsys, "finetune", "--task", "classification", "--model", encoder_dir, "--out", out, *data)
        assert code == 2 and f"--out {out}: {problem}" in one_error(err)
    assert notes.read_text() == "mine"
    kept = tmp_path / "shared"  # other files in the folder are left alone
    kept.mkdir()
    (kept / "readme.txt").write_text("mine")
    code, _, _ = run(capsys, "finetune", "--task", "classification", "--model", encoder_dir, "--out", kept, *data)
    assert code == 0 and (kept / "readme.txt").read_text() == "mine" and (kept / "metrics.json").exists()


def test_evaluate_reproduces_the_dev_scores(capsys, classifier, sentiment_files, tmp_path):
    code, out, err = run(capsys, "evaluate", "--model", classifier, "--data", sentiment_files[1],
                         "--out", tmp_path / "m.json")
    assert code == 0 and "predicting" in err  # a progress bar on stderr
    # into a log (stderr is no terminal here) the finished bar stays, drawn at its end: erased, the
    # file kept its last redraw, 0% for work that ended within the 30 s between redraws
    assert re.search(r"predicting: 100%\|[^\r\n]*\| (\d+)/\1 ", err.split("\r")[-1]), err
    scores, saved = json.loads(out), json.loads((classifier / "metrics.json").read_text())
    for key in ("accuracy", "f1", "mcc", "eval_examples"):
        assert scores[key] == pytest.approx(saved[key], abs=1e-9), key
    assert json.loads((tmp_path / "m.json").read_text()) == scores
    for _ in range(2):  # its folder is made; a second run replaces the file
        code, out, err = run(capsys, "evaluate", "--model", classifier, "--data", sentiment_files[1],
                             "--out", tmp_path / "new" / "m.json", "--no-progress")
        assert code == 0 and json.loads((tmp_path / "new" / "m.json").read_text()) == json.loads(out)
    code, out, err = run(capsys, "evaluate", "--model", classifier, "--data", sentiment_files[1], "--out", tmp_path)
    assert code == 2 and f"--out {tmp_path}: a folder; give a file name" in one_error(err)
    assert "predicting" not in err  # refused before the work, not after it
    before = (classifier / "metrics.json").read_text()
    code, out, err = run(capsys, "evaluate", "--model", classifier, "--data", sentiment_files[1],
                         "--out", classifier / "metrics.json")
    assert code == 2 and "that is the model folder's own metrics.json; give another file name" in one_error(err)
    assert (classifier / "metrics.json").read_text() == before  # the run's dev scores are kept
    code, out, err = run(capsys, "evaluate", "--model", classifier, "--data", sentiment_files[1],
                         "--out", classifier / "loss_curve.png")  # and its plot
    assert code == 2 and "that is the model folder's own loss_curve.png" in one_error(err)
    data = tmp_path / "dev.csv"  # the data, named again as --out (another spelling of its path)
    data.write_bytes(Path(sentiment_files[1]).read_bytes())
    code, out, err = run(capsys, "evaluate", "--model", classifier, "--data", data, "--out", tmp_path / "." / "dev.csv")
    assert code == 2 and "that is the file this command reads" in one_error(err)
    for flag in ("--out", "--predictions"):  # through a folder not made yet: the data once it is (re-check tester)
        code, out, err = run(capsys, "evaluate", "--model", classifier, "--data", data, flag, tmp_path / "unmade" / ".."
                             / "dev.csv")
        assert code == 2 and f"{flag} " in err and "that is the file this command reads" in one_error(err)
    assert data.read_bytes() == Path(sentiment_files[1]).read_bytes() and not (tmp_path / "unmade").exists()


def test_a_model_without_a_task_head_is_told_to_be_fine_tuned(capsys, encoder_dir, sentiment_files):
    for argv in (("predict", "classify", "--model", encoder_dir, "a text"),
                 ("evaluate", "--model", encoder_dir, "--data", sentiment_files[1])):
        code, _, err = run(capsys, *argv)
        assert code == 2 and "the model has no head, not a fine-tuned task's; fine-tune it first" in one_error(err)
        assert "--task embedding" in err


@pytest.mark.parametrize("change, words", [
    ({"task": "sentiment"}, "task.json: task 'sentiment' is not one of"),
    ({"settings": {"batch_size": "many"}}, "task.json settings: batch_size = 'many' is not a valid int"),
    ({"settings": [1]}, "task.json: settings must be an object"),
    ({"max_length": "64"}, "task.json: max_length must be a positive whole number"),
])
def test_a_hand_edited_task_json_is_one_line_naming_the_key(capsys, classifier, sentiment_files, tmp_path, change,
                                                            words):
    import shutil

    model = shutil.copytree(classifier, tmp_path / "model")
    saved = json.loads((model / "task.json").read_text())
    (model / "task.json").write_text(json.dumps({**saved, **change}))
    code, _, err = run(capsys, "evaluate", "--model", model, "--data", sentiment_files[1])
    assert code == 2 and words in one_error(err)


def test_evaluate_names_unseen_labels_before_predicting(capsys, classifier, tmp_path):
    data = write_csv(tmp_path / "dev.csv", [type(e)(e.text, None, "neutral") for e in
                                            load_examples("classification", "rotten-tomatoes", "dev")[:3]])
    code, _, err = run(capsys, "evaluate", "--model", classifier, "--data", data)
    assert code == 2 and f"{data}: 1 label(s) never seen in training: 'neutral'" in one_error(err)
    assert "predicting" not in err
    code, _, err = run(capsys, "evaluate", "--model", classifier, "--data", data, "--device", "cuda:99")
    assert code == 2 and "device cuda:99 asked for, but torch sees" in one_error(err)


def test_evaluate_limit_scores_a_sample(capsys, classifier, sentiment_files):
    code, out, err = run(capsys, "evaluate", "--model", classifier, "--data", sentiment_files[1], "--limit", "7",
                         "--no-progress")
    assert code == 0 and json.loads(out)["eval_examples"] == 7 and "predicting" not in err


def test_predict_classify_from_arguments_and_files_agree(capsys, classifier, tmp_path):
    texts = ["A warm, funny and wise film.", "Dull, lifeless and far too long.", "It is a movie."]
    code, out, _ = run(capsys, "predict", "classify", "--model", classifier, *texts)
    assert code == 0
    from_args = json_lines(out)
    assert [r["text"] for r in from_args] == texts
    for r in from_args:
        assert r["label"] in ("negative", "positive")
        assert set(r["scores"]) == {"negative", "positive"}
        assert r["score"] == pytest.approx(max(r["scores"].values()), abs=1e-6)
    # --top-k keeps the k most probable classes, most probable first
    code, out, _ = run(capsys, "predict", "classify", "--model", classifier, "--top-k", "1", *texts)
    for full, top in zip(from_args, json_lines(out)):
        best = max(full["scores"], key=full["scores"].get)
        assert code == 0 and top["scores"] == {best: full["scores"][best]} and top["label"] == best
    code, _, err = run(capsys, "predict", "classify", "--model", classifier, "--top-k", "0", texts[0])
    assert code == 2 and "--top-k must be at least 1, got 0" in err
    lines = tmp_path / "in.txt"
    lines.write_text(f"{texts[0]}\n\n{json.dumps({'text': texts[1]})}\n{texts[2]}\n", encoding="utf-8")
    code, out, err = run(capsys, "predict", "classify", "--model", classifier, "--input", lines)
    assert code == 0 and "skipped 1 empty line" in err
    assert [(r["label"], round(r["score"], 4)) for r in json_lines(out)] == \
        [(r["label"], round(r["score"], 4)) for r in from_args]
    # each record says its line: with the empty line skipped, record 2 is line 3 (none from arguments)
    assert [r["line"] for r in json_lines(out)] == [1, 3, 4] and not any("line" in r for r in from_args)
    lines.write_text(f"{json.dumps({'id': 7, 'text': texts[0]})}\n{json.dumps({'text': texts[1], 'id': 'b'})}\n"
                     f"{texts[2]}\n")  # a JSON line's own id heads its record, to match results by
    code, out, _ = run(capsys, "predict", "classify", "--model", classifier, "--input", lines)
    assert code == 0 and [list(r)[:2] for r in json_lines(out)] == [["id", "line"], ["id", "line"], ["line", "text"]]
    assert [r.get("id") for r in json_lines(out)] == [7, "b", None]
    table = tmp_path / "test.csv"  # the file evaluate reads: its text column, not its lines
    write_csv(table, [type("Row", (), {"text": t, "label": "positive"})() for t in texts])
    table.write_text(table.read_text().replace(texts[1], texts[1].replace(", ", ",\n")))  # a quoted newline
    code, out, _ = run(capsys, "predict", "classify", "--model", classifier, "--input", table)
    assert code == 0 and [r["text"] for r in json_lines(out)] == [texts[0], texts[1].replace(", ", ",\n"), texts[2]]
    holed = tmp_path / "holed.csv"  # a row without text was skipped, so the predictions no longer followed the rows
    holed.write_text("text,label\nA fine film.,positive\n,negative\n")
    code, _, err = run(capsys, "predict", "classify", "--model", classifier, "--input", holed)
    assert code == 2 and one_error(err).endswith("holed.csv, line 3: column 'text' is empty; each row gets a "
                                                 "prediction, in the file's order, so each needs a text (drop the "
                                                 "row or give it one)")
    # a table whose columns have other names: the error names the option, which predict takes too
    renamed = tmp_path / "renamed.csv"
    renamed.write_text(table.read_text().replace("text,label", "review,sentiment", 1))
    code, _, err = run(capsys, "predict", "classify", "--model", classifier, "--input", renamed)
    assert code == 2 and one_error(err).endswith("no column 'text' (columns: review, sentiment); --text-column NAME "
                                                 "names yours")
    code, out, _ = run(capsys, "predict", "classify", "--model", classifier, "--input", renamed, "--text-column", "review")
    assert code == 0 and [r["text"] for r in json_lines(out)] == [texts[0], texts[1].replace(", ", ",\n"), texts[2]]
    # and JSON lines with other keys, as input lines rather than a data file
    keyed = tmp_path / "keyed.jsonl"
    keyed.write_text("".join(json.dumps({"review": t}) + "\n" for t in texts))
    code, _, err = run(capsys, "predict", "classify", "--model", classifier, "--input", keyed)
    assert code == 2 and one_error(err).endswith("line 1: the object needs 'text' (--text-column names another key)")
    code, out, _ = run(capsys, "predict", "classify", "--model", classifier, "--input", keyed, "--text-column", "review")
    assert code == 0 and [(r["text"], r["label"]) for r in json_lines(out)] == [(r["text"], r["label"]) for r in from_args]
    code, _, err = run(capsys, "predict", "classify", "--model", classifier, "--input", keyed, "--text-column", "body")
    assert code == 2 and one_error(err).endswith("line 1: the object needs 'body'")


def test_standard_input_is_read_as_utf8_files_are(capsys, classifier, monkeypatch):
    # Standard input's bytes get a file's treatment: a byte-order mark dropped, other encodings
    # one line naming the line, whatever the locale.
    import io
    import types

    def stdin(data: bytes):
        monkeypatch.setattr("sys.stdin", types.SimpleNamespace(buffer=io.BytesIO(data)))

    stdin("\ufeffa fine film\nthe second\n".encode("utf-8"))
    code, out, _ = run(capsys, "predict", "classify", "--model", classifier, "--input", "-")
    assert code == 0 and [r["text"] for r in json_lines(out)] == ["a fine film", "the second"]
    stdin("fine\ncaf\u00e9\n".encode("latin-1"))
    code, _, err = run(capsys, "predict", "classify", "--model", classifier, "--input", "-")
    assert code == 2 and "standard input, line 2: not UTF-8 text at byte 4 of the line (byte 9 from the start)" \
        in one_error(err)
    code, _, err = run(capsys, "evaluate", "--model", classifier, "--data", "-")  # predict reads it; evaluate does not
    assert code == 2 and "not standard input ('-'); save it to a file" in one_error(err)


def test_predict_classify_bad_input_is_one_line(capsys, classifier, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('plain text\n{"text": "ok"}\n{"text": \n', encoding="utf-8")
    code, _, err = run(capsys, "predict", "classify", "--model", classifier, "--input", bad)
    assert code == 2 and f"{bad}, line 3: not valid JSON" in one_error(err)
    code, _, err = run(capsys, "predict", "classify", "--model", classifier)
    assert code == 2 and "no input given" in err
    braces = tmp_path / "braces.txt"  # plain text may start with a brace; an object opens with {"
    braces.write_text('{braces in a review} great film\n{"text": "a JSON line"}\n', encoding="utf-8")
    code, out, _ = run(capsys, "predict", "classify", "--model", classifier, "--input", braces)
    assert code == 0 and [r["text"] for r in json_lines(out)] == ["{braces in a review} great film", "a JSON line"]
    for line, words in (('{"text": ["a", "b"]}', "'text' must be a string"),
                        ('{"text": "a", "text_pair": 5}', "'text_pair' must be a string, got 5")):
        bad.write_text(line + "\n", encoding="utf-8")  # a list was classified as one text; a number crashed
        code, _, err = run(capsys, "predict", "classify", "--model", classifier, "--input", bad)
        assert code == 2 and f"{bad}, line 1: {words}" in one_error(err)
    for texts, words in (("great film", "texts must be a list of strings (one text: [text]), got str"),
                         (["fine", 3], "texts: item 2 is not a string but int")):
        with pytest.raises(bertkit.BertkitError, match=re.escape(words)):  # a bare string was one text per character
            bertkit.tasks.classify(classifier, texts)
    code, _, err = run(capsys, "predict", "classify", "--model", classifier, "--input", tmp_path / "missing.txt")
    assert code == 2 and "no such file" in err
    code, _, err = run(capsys, "predict", "tag", "--model", classifier, "some words")
    assert code == 2 and "token-classification needs a 'token-classification' head" in err


def test_finetune_bad_data_is_one_line(capsys, encoder_dir, sentiment_files, tmp_path):
    train, dev = sentiment_files
    base = ("finetune", "--task", "classification", "--model", encoder_dir, "--train", train, *FAST)
    code, _, err = run(capsys, *base, "--eval", dev, "--out", tmp_path / "a", "--label-column", "stars")
    assert code == 2 and "train.csv: no column 'stars'" in one_error(err)
    from bertkit.tasks import TextExample
    unseen = write_csv(tmp_path / "unseen.csv", [TextExample("An ordinary film.", None, "neutral")] * 3)
    code, _, err = run(capsys, *base, "--eval", unseen, "--out", tmp_path / "b")
    assert code == 2 and "neutral" in one_error(err)
    code, _, err = run(capsys, *base, "--eval", dev, "--out", tmp_path / "c", "--set", "warmup=lots")
    assert code == 2 and "warmup" in one_error(err)
    # a setting given by its flag is named as the flag
    for flag, words in (("--epochs=-1", "--epochs must be a positive number, got -1.0"),
                        ("--weight-decay=-0.5", "--weight-decay must be a finite number >= 0, got -0.5"),
                        ("--lr=inf", "--lr must be a finite positive number, got inf"),  # every weight came out NaN
                        ("--seed=-1", "--seed must be a whole number in [0, 2**63), got -1"),  # a NumPy traceback
                        ("--clip-norm=nan", "--clip-norm must be positive (or None: no clipping), got nan"),
                        ("--doc-stride=5", "--doc-stride is a setting of the qa task, not of classification"),
                        ("--eval-batch-size=0", "--eval-batch-size must be at least 1, got 0")):
        code, _, err = run(capsys, *base, "--eval", dev, "--out", tmp_path / "d", flag)
        assert code == 2 and one_error(err) == f"bertkit: error: {words}", flag
    code, _, err = run(capsys, *base, "--eval", dev, "--out", tmp_path / "d", "--set", "epochs=-1")
    assert code == 2 and one_error(err) == "bertkit: error: epochs must be a positive number, got -1.0"
    code, _, err = run(capsys, *base, "--eval", dev, "--out", tmp_path / "d", "--truncation", "middle")
    assert code == 2 and "unknown truncation 'middle'" in one_error(err)
    assert not (tmp_path / "a" / "metrics.json").exists()


def test_tagging_and_qa_through_the_command_line(capsys, encoder_dir, tmp_path):
    conll = tmp_path / "train.conll"
    with open(conll, "w", encoding="utf-8") as f:
        for s in tagged_sentences("train", 120):
            f.write("".join(f"{w} {t}\n" for w, t in zip(s.words, s.tags)) + "\n")
    out = tmp_path / "pos"
    code, printed, _ = run(capsys, "finetune", "--task", "token-classification", "--model", encoder_dir,
                           "--train", conll, "--eval", conll, "--out", out, *FAST)
    assert code == 0 and 0.0 <= json.loads(printed)["accuracy"] <= 1.0
    code, printed, _ = run(capsys, "evaluate", "--model", out, "--data", conll, "--predictions", tmp_path / "p.jsonl")
    scored = json_lines((tmp_path / "p.jsonl").read_text())  # each sentence's words, predicted tags and gold ones
    assert code == 0 and [(r["tokens"], r["gold"]) for r in scored] == [(list(s.words), list(s.tags))
                                                                        for s in tagged_sentences("train", 120)]
    pairs = [(p, g) for r in scored for p, g in zip(r["tags"], r["gold"])]  # (the sentences fit: no None)
    assert json.loads(printed)["accuracy"] == pytest.approx(sum(p == g for p, g in pairs) / len(pairs), abs=1e-12)
    code, printed, _ = run(capsys, "predict", "tag", "--model", out, "The film is long, but it is good.")
    result = json_lines(printed)[0]
    assert code == 0 and result["tokens"][:3] == ["The", "film", "is"] and len(result["tags"]) == len(result["tokens"])
    words = tmp_path / "words.jsonl"
    words.write_text(json.dumps({"tokens": ["a", "b", "c"]}) + "\n")
    code, printed, _ = run(capsys, "predict", "tag", "--model", out, "--input", words)
    assert code == 0 and json_lines(printed)[0]["tokens"] == ["a", "b", "c"]
    code, printed, _ = run(capsys, "predict", "tag", "--model", out, "--input", conll)  # its sentences, not lines
    assert code == 0 and [r["tokens"] for r in json_lines(printed)] == [list(s.words)
                                                                       for s in tagged_sentences("train", 120)]
    assert not any("line" in r for r in json_lines(printed))  # a data file's sentences span lines
    # the word/TAG file evaluate reads: its words (its tags were read as words, '/' and all)
    dev = tagged_sentences("dev", 3)
    slashed = tmp_path / "dev.txt"
    slashed.write_text("\n\n".join(" ".join(f"{w}/{t}" for w, t in zip(s.words, s.tags)) for s in dev) + "\n")
    code, printed, err = run(capsys, "predict", "tag", "--model", out, "--input", slashed)
    assert code == 0 and [r["tokens"] for r in json_lines(printed)] == [list(s.words) for s in dev]
    assert [r["line"] for r in json_lines(printed)] == [1, 3, 5]  # each sentence's line, the empty ones between
    assert "dev.txt holds word/TAG lines: tagging their words" in err
    # ... but slashed text whose last parts are not the model's tags stays text (they were dropped)
    slashed.write_text("and/or\n1/2/2020\nhttp://a.com/b\n")
    code, printed, err = run(capsys, "predict", "tag", "--model", out, "--input", slashed)
    assert code == 0 and [r["text"] for r in json_lines(printed)] == ["and/or", "1/2/2020", "http://a.com/b"]
    assert "word/TAG" not in err
    for line, words_said in (({"tokens": "a b"}, "line 2: 'tokens' must be a list of strings"),
                             ({"words": ["a"]}, "line 2: the object needs 'text' or 'tokens'")):
        words.write_text(json.dumps({"text": "fine"}) + "\n" + json.dumps(line) + "\n")
        code, _, err = run(capsys, "predict", "tag", "--model", out, "--input", words)
        assert code == 2 and words_said in err and len(err.strip().splitlines()) == 1
    words.write_text(json.dumps({"sentence": "The film is long."}) + "\n")  # --text-column, as the other modes take
    code, printed, _ = run(capsys, "predict", "tag", "--model", out, "--input", words, "--text-column", "sentence")
    assert code == 0 and json_lines(printed)[0]["tokens"] == ["The", "film", "is", "long", "."]

    questions = review_questions("train", 40)
    squad = {"version": "v1.1", "data": [{"title": "reviews", "paragraphs": [
        {"context": q.context, "qas": [{"id": q.id, "question": q.question,
                                        "answers": [{"text": a.text, "answer_start": a.start} for a in q.answers]}]}
        for q in questions]}]}
    (tmp_path / "qa.json").write_text(json.dumps(squad))
    out = tmp_path / "qa"
    code, _, err = run(capsys, "finetune", "--task", "qa", "--model", encoder_dir, "--train", tmp_path / "qa.json",
                       "--eval", tmp_path / "qa.json", "--out", out, "--max-length", "128", "--doc-stride", "1000")
    assert code == 2 and one_error(err).startswith("bertkit: error: --doc-stride must be at least 0 and below "), err
    code, printed, _ = run(capsys, "finetune", "--task", "qa", "--model", encoder_dir, "--train", tmp_path / "qa.json",
                           "--eval", tmp_path / "qa.json", "--out", out, "--epochs", "1", "--batch-size", "16",
                           "--max-length", "128", "--doc-stride", "32", "--no-progress", "--precision", "fp32")
    metrics = json.loads(printed)
    assert code == 0 and 0.0 <= metrics["exact_match"] <= 1.0 and 0.0 <= metrics["f1"] <= 1.0
    code, _, _ = run(capsys, "evaluate", "--model", out, "--data", tmp_path / "qa.json", "--predictions",
                     tmp_path / "qa.jsonl")  # SQuAD's ids, the answers predict gives and the gold texts
    scored = json_lines((tmp_path / "qa.jsonl").read_text())
    assert code == 0 and [(r["id"], r["gold"]) for r in scored] == [(q.id, [a.text for a in q.answers])
                                                                    for q in questions]
    code, printed, _ = run(capsys, "predict", "answer", "--model", out, "--input", tmp_path / "qa.json")
    assert [r["answer"] for r in scored] == [r["answer"] for r in json_lines(printed)]
    context = questions[0].context
    code, printed, _ = run(capsys, "predict", "answer", "--model", out, "--context", context, "--top-k", "2",
                           questions[0].question)
    result = json_lines(printed)[0]
    assert code == 0 and context[result["start"]:result["end"]] == result["answer"]
    code, _, err = run(capsys, "predict", "answer", "--model", out, "Who?")
    assert code == 2 and "no context" in err
    asked = tmp_path / "questions.txt"
    asked.write_text(f"\n{questions[0].question}\n\n{json.dumps({'question': questions[1].question})}\n")
    code, printed, _ = run(capsys, "predict", "answer", "--model", out, "--context", context, "--input", asked)
    assert code == 0 and [r["line"] for r in json_lines(printed)] == [2, 4]
    for flag, value in (("--max-answer-length", "0"), ("--n-best", "0")):  # evaluate takes the QA settings too
        code, _, err = run(capsys, "evaluate", "--model", out, "--data", tmp_path / "qa.json", flag, value)
        assert code == 2 and one_error(err).startswith(f"bertkit: error: {flag} must be at least 1, got 0"), err
    code, printed, _ = run(capsys, "evaluate", "--model", out, "--data", tmp_path / "qa.json", "--no-progress",
                           "--null-answers", "--null-threshold=-1e9")  # "no answer" wins everywhere: nothing right
    assert code == 0 and json.loads(printed)["exact_match"] == json.loads(printed)["f1"] == 0.0
    # named as given, not as in Python (a stride past the window: "a doc stride of 1000 must")
    for flag, value in (("--max-answer-length", "0"), ("--doc-stride", "-1"), ("--doc-stride", "1000")):
        code, _, err = run(capsys, "predict", "answer", "--model", out, "--context", context, flag, value, "Who?")
        assert code == 2 and one_error(err).startswith(f"bertkit: error: {flag} must be "), err
    code, printed, _ = run(capsys, "predict", "answer", "--model", out, "--input", tmp_path / "qa.json")  # SQuAD's
    assert code == 0 and [r["id"] for r in json_lines(printed)] == [q.id for q in questions]  # ids, for its script
    asked.write_text(f"{json.dumps({'question': 'Who?', 'context': context})}\n\nWhen?\n")  # (it was "question 2")
    code, _, err = run(capsys, "predict", "answer", "--model", out, "--input", asked)
    assert code == 2 and one_error(err).endswith("questions.txt, line 3: the question has no context (--context, "
                                                 '--context-file, or a "context" field)')


def test_embed_and_cosine_search(capsys, minilm_dir, tmp_path, monkeypatch):
    corpus = ["A man is playing a guitar.", "The stock market crashed on Monday.", "A dog runs in the park."]
    (tmp_path / "corpus.txt").write_text("\n".join(corpus) + "\n")
    code, out, _ = run(capsys, "predict", "embed", "--model", minilm_dir, "--input", tmp_path / "corpus.txt",
                       "--query", "Someone strums an instrument.", "--query", "Share prices fell.", "--top-k", "2")
    assert code == 0
    hits = json_lines(out)
    assert [h["results"][0]["text"] for h in hits] == [corpus[0], corpus[1]]
    assert all(len(h["results"]) == 2 and h["results"][0]["score"] >= h["results"][1]["score"] for h in hits)
    vectors = {}
    for pooling in ("mean", "cls"):
        code, out, _ = run(capsys, "embed", "--model", minilm_dir, "--pooling", pooling, corpus[0])
        vectors[pooling] = torch.tensor(json_lines(out)[0]["embedding"])
        assert code == 0 and vectors[pooling].norm().item() == pytest.approx(1.0, abs=1e-4)
    assert (vectors["mean"] - vectors["cls"]).abs().max() > 1e-2
    for native in (True, False):  # bf16 asked for where it is only emulated: said (it ran 5-12x slower, silently)
        monkeypatch.setattr("bertkit.pretraining.native_bf16", lambda device: native)
        code, out, err = run(capsys, "embed", "--model", minilm_dir, "--precision", "bf16", corpus[0])
        bf16 = torch.tensor(json_lines(out)[0]["embedding"])
        assert code == 0 and 0.999 <= bf16 @ vectors["mean"] and not torch.equal(bf16, vectors["mean"])
        warned = "bertkit: warning: bf16 on this CPU (no AVX512-BF16 or AMX) is emulated: several times slower"
        assert (warned in err) != native, err


def test_a_second_torchrun_process_prints_only_its_errors_and_names_itself(capsys, monkeypatch):
    import signal

    import bertkit.cli

    # and keeps SIGTERM's default: blocked in a collective, a Python handler would wait for
    # torchrun's SIGKILL (30 s), while the first process turns it into an interrupt that saves
    seen, models = [], bertkit.cli.cmd_models
    monkeypatch.setattr(bertkit.cli, "cmd_models", lambda args: seen.append(signal.getsignal(signal.SIGTERM)) or
                        models(args))
    before, printed = signal.getsignal(signal.SIGTERM), []
    for rank in ("0", "1"):
        monkeypatch.setenv("RANK", rank)
        assert main(["models"]) == 0
        printed.append(capsys.readouterr())
    assert seen == [bertkit.cli._terminated, before] and signal.getsignal(signal.SIGTERM) == before
    assert "mini-bert" in printed[0].out and printed[1] == ("", "")  # the first process prints the results
    assert main(["finetune", "--task", "classification", "--model", "no/such/dir", "--train", "x.csv",
                 "--eval", "y.csv", "--out", "/nonexistent/out"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("bertkit: error (process 1): ") and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_finetune_under_torchrun_saves_once_and_says_it_once(encoder_dir, sentiment_files, tmp_path):
    import os
    import shutil
    import subprocess
    import sys

    train, dev = sentiment_files
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    done = subprocess.run([torchrun, "--standalone", "--nproc_per_node=2", "-m", "bertkit", "finetune", "--task",
                           "classification", "--model", str(encoder_dir), "--train", str(train), "--eval", str(dev),
                           "--out", str(tmp_path / "out"), "--steps", "2", *FAST[2:]],
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.count("fine-tuning ") == 1 and done.stderr.count("best model, metrics.json") == 1
    assert done.stdout.count('"accuracy"') == 1
    assert json.loads((tmp_path / "out" / "metrics.json").read_text())["steps"] == 2
    assert not list((tmp_path / "out").glob(".saving-*"))


@pytest.mark.slow
def test_finetune_keeps_its_best_model_when_another_torchrun_process_dies(encoder_dir, sentiment_files, tmp_path):
    """Process 1 dies after step 3 (as a kill -9 or the OOM killer would end it); process 0's next
    collective fails, and it saves the best model evaluated so far and says so in one line,
    instead of a gloo traceback and nothing saved."""
    import os
    import shutil
    import subprocess
    import sys

    train, dev = sentiment_files
    script = tmp_path / "run.py"
    script.write_text(f'''
import os, sys
from bertkit.cli import main
from bertkit.train import Trainer
step = Trainer.train_step
def dying(self):
    if os.environ["RANK"] == "1" and self.step == 3:
        os._exit(1)
    return step(self)
Trainer.train_step = dying
sys.exit(main({["finetune", "--task", "classification", "--model", str(encoder_dir), "--train", str(train),
                "--eval", str(dev), "--out", str(tmp_path / "out"), "--steps", "8", "--eval-every", "1",
                *FAST[2:]]!r}))
''')
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    done = subprocess.run([torchrun, "--standalone", "--nproc_per_node=2", str(script)],
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=180)
    assert done.returncode != 0
    # process 0 learns it from its next collective, or from torchrun's SIGTERM, whichever comes first
    said = [line for line in done.stderr.splitlines() if line.startswith(("bertkit: error", "bertkit: interrupted"))]
    assert len(said) == 1 and ("another process of this torchrun run stopped at step 3" in said[0]
                               or "interrupted at step 3" in said[0]), done.stderr[-3000:]
    assert "the best model so far (step " in said[0]
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["interrupted"] and metrics["best_step"] <= 3
    assert bertkit.from_pretrained(tmp_path / "out").config.num_labels == 2


def test_the_next_step_hint_reads_back_in_the_shell():
    """A folder starting with '-' was printed as is, which the pasted command read as an option."""
    import shlex

    from bertkit.tasks.commands import next_steps

    for out, model in (("runs/imdb", "runs/imdb"), ("-dash out", "./-dash out"), ("it's here", "it's here")):
        words = shlex.split(next_steps("classification", Path(out)).removeprefix("next: ").split(";")[0])
        assert words[words.index("--model") + 1] == model


def test_evaluate_and_predict_read_the_columns_fine_tuning_was_given(capsys, encoder_dir, sentiment_files, tmp_path):
    """A model fine-tuned with --text-column review --label-column sentiment was evaluated with
    "no column 'text'" until the flags were given again (data-format tester): task.json keeps
    them, and a flag still names another."""
    renamed = []
    for path in sentiment_files:
        renamed.append(tmp_path / path.name)
        renamed[-1].write_text(path.read_text().replace("text,label", "review,sentiment", 1))
    out = tmp_path / "run"
    code, printed, _ = run(capsys, "finetune", "--task", "classification", "--model", encoder_dir, "--train",
                           renamed[0], "--eval", renamed[1], "--out", out, "--text-column", "review", "--label-column",
                           "sentiment", *FAST, "--epochs", "1")
    assert code == 0 and json.loads((out / "task.json").read_text())["columns"] == {"text": "review",
                                                                                   "label": "sentiment"}
    code, scored, err = run(capsys, "evaluate", "--model", out, "--data", renamed[1], "--predictions",
                            tmp_path / "p.jsonl")
    assert code == 0, err
    assert json.loads(scored)["accuracy"] == json.loads(printed)["accuracy"]  # the best model's dev score
    each = json_lines((tmp_path / "p.jsonl").read_text())  # the texts, predictions and gold labels
    assert len(each) == json.loads(scored)["eval_examples"] and all(set(r) >= {"text", "label", "gold"} for r in each)
    assert json.loads(scored)["accuracy"] == pytest.approx(sum(r["label"] == r["gold"] for r in each) / len(each))
    code, _, err = run(capsys, "evaluate", "--model", out, "--data", renamed[1], "--predictions", renamed[1])
    assert code == 2 and "--predictions" in err and "that is the file this command reads" in err
    code, predicted, err = run(capsys, "predict", "classify", "--model", out, "--input", renamed[1])
    assert code == 0 and len(json_lines(predicted)) == json.loads(scored)["eval_examples"], err
    keyed = tmp_path / "keyed.jsonl"
    keyed.write_text(json.dumps({"review": "A fine film."}) + "\n")  # JSON input lines' keys too
    code, predicted, err = run(capsys, "predict", "classify", "--model", out, "--input", keyed)
    assert code == 0 and json_lines(predicted)[0]["text"] == "A fine film.", err
    keyed.write_text(json.dumps({"review": ""}) + "\n")  # named by its own key (it said 'text')
    code, _, err = run(capsys, "predict", "classify", "--model", out, "--input", keyed)
    assert code == 2 and one_error(err).endswith("keyed.jsonl, line 1: the object's 'review' is empty")
    code, _, err = run(capsys, "evaluate", "--model", out, "--data", sentiment_files[1])  # the default names: said
    assert code == 2 and "no column 'review' (columns: text, label); --text-column NAME names yours" in err
    code, _, err = run(capsys, "evaluate", "--model", out, "--data", sentiment_files[1], "--text-column", "text",
                       "--label-column", "label")
    assert code == 0, err
    (out / "task.json").write_text(json.dumps({**json.loads((out / "task.json").read_text()), "columns": ["review"]}))
    code, _, err = run(capsys, "evaluate", "--model", out, "--data", renamed[1])
    assert code == 2 and one_error(err).endswith('task.json: columns must map text, text_pair, label, choices, '
                                                 'negative to column names, got ["review"]')


def test_finetune_reads_a_config_file_under_its_flags(capsys, encoder_dir, sentiment_files, tmp_path, monkeypatch):
    """defaults < --config's file < flags: the file's keys are named like the flags (what to
    train, on what, column names) or are FinetuneSettings fields, typed as the file writes them;
    what finetune needs may come from either."""
    train, dev = sentiment_files
    for path in (train, dev):  # renamed columns, named in the file
        (tmp_path / path.name).write_text(path.read_text().replace("text,label", "review,label", 1))
    monkeypatch.chdir(tmp_path)  # the file's relative paths are read from here, as flags' are
    config = tmp_path / "ft.toml"
    config.write_text(f'task = "classification"\nmodel = "{encoder_dir}"\ntrain = "{train.name}"\n'
                      f'eval = "{dev.name}"\nout = "run"\ntext_column = "review"\nepochs = 1\nlr = 1e-3\n'
                      'batch_size = 16\nmax_length = 48\ntime_budget = "10m"\nprogress = false\nbf16 = false\n'
                      'device = "cpu"\n')
    code, _, err = run(capsys, "finetune", "--config", config, "--lr", "2e-3", "--set", "seed=3")
    assert code == 0, err
    task = json.loads((tmp_path / "run" / "task.json").read_text())
    assert task["task"] == "classification" and task["columns"] == {"text": "review"}
    keys = ("epochs", "lr", "batch_size", "max_length", "time_budget", "bf16", "seed")
    assert {k: task["settings"][k] for k in keys} == {"epochs": 1.0, "lr": 2e-3, "batch_size": 16, "max_length": 48, "time_budget": 600.0, "bf16": False,
            "seed": 3}
    config.write_text(config.read_text().replace('"10m"', '"none"'))  # (TOML has no null)
    code, printed, err = run(capsys, "finetune", "--config", config, "--out", "run2", "--train", dev.name,
                             "--eval-limit", "20")  # flags also name what the file names
    assert code == 0, err
    assert json.loads((tmp_path / "run2" / "task.json").read_text())["settings"]["time_budget"] is None
    assert json.loads(printed)["train_examples"] == len(load_examples("classification", dev))
    assert json.loads(printed)["eval_examples"] == 20

    def refused(text, *flags):
        config.write_text(text)
        code, _, err = run(capsys, "finetune", "--config", config, *flags)
        assert code == 2
        return one_error(err)

    needs = "finetune needs --train, --eval, --out (as flags, or as keys of a --config file)"
    assert refused('task = "qa"\n', "--model", encoder_dir).endswith(needs)
    assert refused("lrr = 1e-3\n").startswith(f"bertkit: error: {config}: unknown key 'lrr' (did you mean lr?)")
    assert refused('epochs = "2"\n').endswith('epochs = "2" is not a valid float or none (expected float, not text '
                                              'in quotes)')  # as the file writes it
    assert refused("batch_size = true\n").endswith("batch_size = true is not a valid int (expected an integer)")
    assert refused('train = ""\n').endswith("train = '' is an empty path; give a file or folder, or leave the key out")
    assert refused("model = 3\n").endswith("model = 3 is not text (a name or a path, in quotes)")
    assert 'task = "ner" is not a task; choose classification' in refused('task = "ner"\n')
    assert refused('precision = "bf16"\nbf16 = false\n').endswith("give precision or bf16, not both")
    assert refused('precision = "fp16"\n').endswith('precision = "fp16": choose auto, fp32 or bf16')
    base = f'task = "classification"\nmodel = "{encoder_dir}"\ntrain = "{train.name}"\neval = "{dev.name}"\nout = "x"\n'
    assert refused(base + "lr = -1.0\n").endswith(f"{config}: lr must be a finite positive number, got -1.0")
    assert refused(base + 'device = "tpu"\n').endswith(f"{config}: unknown device 'tpu' (use auto, cpu, cuda, cuda:1, "
                                                      "...)")  # before any model or data is read
    assert refused(base + 'device = "tpu"\n', "--set", "device=tpu").endswith("--set: unknown device 'tpu' (use auto, "
                                                                             "cpu, cuda, cuda:1, ...)")
    assert not (tmp_path / "x").exists()
    json_config = tmp_path / "ft.json"
    json_config.write_text('{"task": "classification", "task": "qa"}')  # json.loads keeps the last one
    code, _, err = run(capsys, "finetune", "--config", json_config)
    assert code == 2 and one_error(err).endswith(f"{json_config}: key 'task' given twice")
    assert refused('time_budget = "ten"\n').endswith("time_budget: 'ten' is not a duration (use e.g. 600, 90s, 10m, "
                                                     "1h30m)")
    config.write_text("# lr = 1e-3\n")
    code, _, err = run(capsys, "finetune", "--config", config)
    assert code == 2 and err.startswith(f"bertkit: warning: {config} holds no settings: the defaults apply, and "
                                        "the flags given\n")
    assert one_error(err).endswith("finetune needs --task, --model, --train, --eval, --out (as flags, or as keys "
                                   "of a --config file)")
