"""Classification inputs and labels beyond one text and one class name, on tiny models (fast):
an empty text_pair read as no pair (as transformers' tokenizer and pipeline read it), multi-label
gold labels as JSON lists (read, trained with transformers' BCE loss, scored against the gold
sets as scikit-learn scores them), a multi-label model staying multi-label when fine-tuned
again, and JSON true / false labels."""

import json

import numpy as np
import pytest
import torch

import bertkit
from bertkit.cli import main
from bertkit.errors import BertkitError
from bertkit.tasks import FinetuneSettings, TextExample, classify, evaluate, finetune, load_examples

pytestmark = pytest.mark.filterwarnings("ignore::bertkit.data.DataWarning")

TINY = dict(num_layers=2, hidden_size=32, num_heads=4, intermediate_size=64, max_positions=128)


def tiny(tokenizer, num_labels=3, label_names=(), problem_type=None, seed=0):
    torch.manual_seed(seed)
    model = bertkit.build("bert-base", head="classification", num_labels=num_labels, **TINY)
    model.config = model.config.replace(label_names=tuple(label_names), problem_type=problem_type)
    model.tokenizer = tokenizer
    return model


def quiet(**kw):
    return FinetuneSettings(**{**dict(batch_size=4, max_length=32, progress=False), **kw})


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# ---- an empty text_pair ---------------------------------------------------------------------------
def test_an_empty_text_pair_is_no_pair_per_row_as_transformers_pipeline_reads_it(tokenizer, tmp_path, capsys):
    import transformers

    tiny(tokenizer, label_names=("neg", "neu", "pos")).save_pretrained(tmp_path)
    pipe = transformers.pipeline("text-classification", model=str(tmp_path), device="cpu")
    texts, pairs = ["one two three", "four five", "six seven"], ["", None, "eight nine"]
    expected = [pipe({"text": t, "text_pair": p or ""}, top_k=None) for t, p in zip(texts, pairs)]
    got = classify(tmp_path, texts, pairs)
    assert [set(r) for r in got] == [{"text", "label", "score", "scores"}] * 2 + [
        {"text", "text_pair", "label", "score", "scores"}]
    for ours, theirs in zip(got, expected):
        assert ours["scores"] == pytest.approx({x["label"]: x["score"] for x in theirs}, abs=1e-6)
    # the command reads a file mixing pairs and single texts (an empty cell) the same way
    data = tmp_path / "mixed.csv"
    data.write_text("text,text_pair\none two three,\nsix seven,eight nine\n")
    assert main(["predict", "classify", "--model", str(tmp_path), "--input", str(data)]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r.get("text_pair") for r in lines] == [None, "eight nine"]
    for line, ours in zip(lines, (got[0], got[2])):
        assert line["scores"] == pytest.approx(ours["scores"], abs=1e-6)


# ---- multi-label data -----------------------------------------------------------------------------
def test_label_lists_are_read_from_jsonl_json_arrays_and_csv_cells(tmp_path):
    rows = [{"text": "a", "label": ["sports", "politics"]}, {"text": "b", "label": []},
            {"text": "c", "label": "sports"}, {"text": "d", "label": [True, 1]}]
    jsonl = write_jsonl(tmp_path / "d.jsonl", rows)
    (tmp_path / "d.json").write_text(json.dumps(rows))
    (tmp_path / "d.csv").write_text('text,label\na,"[""sports"", ""politics""]"\nb,[]\nc,sports\nd,"[true, 1]"\n')
    expected = [("politics", "sports"), (), "sports", ("1", "true")]
    for path in (jsonl, tmp_path / "d.json", tmp_path / "d.csv"):
        assert [e.label for e in load_examples("classification", path)] == expected
    (tmp_path / "bad.csv").write_text('text,label\na,sports\nb,"[sports, politics]"\n')
    with pytest.raises(BertkitError, match=r"bad.csv, line 3: label '\[sports, politics\]' in column 'label' looks "
                                           r"like a list but is not JSON"):
        load_examples("classification", tmp_path / "bad.csv")
    (tmp_path / "bad.csv").write_text('text,label\na,sports\nb,"[""sports"", ""tech"""\n')  # its end lost: was a class
    with pytest.raises(BertkitError, match=r"""bad.csv, line 3: label '\["sports", "tech"' in column 'label' looks """):
        load_examples("classification", tmp_path / "bad.csv")
    (tmp_path / "names.csv").write_text("text,label\na,[x]-like\nb,[neutral\n")  # names that open a bracket stay names
    assert [e.label for e in load_examples("classification", tmp_path / "names.csv")] == ["[x]-like", "[neutral"]


def multi_label_data():
    words = ["goal match team", "vote law party", "team vote match law", "quiet evening", "party goal"]
    sets = [["sports"], ["politics"], ["sports", "politics"], [], "sports"]  # a plain label: a set of one
    return [TextExample(w, None, tuple(sorted(s)) if isinstance(s, list) else s) for w, s in zip(words, sets)] * 2


def test_label_lists_train_with_transformers_multi_label_loss_on_multi_hot_targets(tokenizer, tmp_path):
    import transformers

    from bertkit.tasks.base import collate
    from bertkit.tasks.classification import ClassificationObjective
    from bertkit.tasks.finetune import make_task, model_for

    examples = multi_label_data()
    job = make_task("classification")
    model, labels = model_for(job, tiny(tokenizer, num_labels=2), job.labels_of(examples))
    assert labels == ("politics", "sports") and model.config.problem_type == "multi_label_classification"
    batch = collate(job.features(examples[:5], model.tokenizer, labels, 32, "train"), tokenizer.pad_token_id)
    assert batch["label"].tolist() == [[0, 1], [1, 0], [1, 1], [0, 0], [0, 1]]
    model.save_pretrained(tmp_path)
    theirs = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path).eval()
    assert theirs.config.problem_type == "multi_label_classification"
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    expected = theirs(**inputs, labels=batch["label"].float()).loss
    got = ClassificationObjective(model.eval())(batch).loss
    assert got.item() == pytest.approx(expected.item(), rel=1e-5)


def test_label_lists_fine_tune_a_multi_label_model_scored_against_the_gold_sets_as_scikit_learn(tokenizer, tmp_path):
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

    examples = multi_label_data()
    finetune("classification", tiny(tokenizer, num_labels=2), examples, examples, tmp_path, quiet(steps=2))
    assert json.loads((tmp_path / "config.json").read_text())["problem_type"] == "multi_label_classification"
    predictions = classify(tmp_path, [e.text for e in examples])
    assert all("labels" in p for p in predictions)
    names = ("politics", "sports")
    gold = np.array([[n in (e.label if isinstance(e.label, tuple) else (e.label,)) for n in names] for e in examples])
    got = np.array([[n in p["labels"] for n in names] for p in predictions])
    scores = evaluate(tmp_path, None, examples, predictions=tmp_path / "p.jsonl")
    assert scores["accuracy"] == pytest.approx(accuracy_score(gold, got))
    each = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]  # sets as lists
    assert [(r["labels"], r["gold"]) for r in each] == [(p["labels"], list(e.label) if isinstance(e.label, tuple)
                                                         else [e.label]) for p, e in zip(predictions, examples)]
    assert scores["f1"] == pytest.approx(f1_score(gold, got, average="micro", zero_division=0))
    assert scores["mcc"] == pytest.approx(matthews_corrcoef(gold.ravel(), got.ravel()))


def test_label_lists_cannot_be_scored_on_a_single_label_model_and_are_refused_before_predicting(
        tokenizer, tmp_path, monkeypatch):
    from bertkit.tasks.classification import SequenceClassification

    tiny(tokenizer, num_labels=2, label_names=("politics", "sports"),
         problem_type="single_label_classification").save_pretrained(tmp_path)
    monkeypatch.setattr(SequenceClassification, "predict", lambda *a, **k: pytest.fail("predicted before refusing"))
    with pytest.raises(BertkitError, match="example 1 gives a label list .multi-label. but the model is single-label"):
        evaluate(tmp_path, None, multi_label_data())


def test_a_single_label_head_with_the_same_names_is_kept_and_trained_multi_label(tokenizer, tmp_path):
    single = tiny(tokenizer, num_labels=2, label_names=("politics", "sports"),
                  problem_type="single_label_classification")
    single.save_pretrained(tmp_path / "single")
    examples = multi_label_data()
    finetune("classification", str(tmp_path / "single"), examples, examples, tmp_path / "multi",
             quiet(steps=1, lr=1e-12))
    again = bertkit.from_pretrained(tmp_path / "multi")
    assert again.config.problem_type == "multi_label_classification"
    assert torch.allclose(again.head.classifier.weight, single.head.classifier.weight, atol=1e-6)


def test_fine_tuning_a_multi_label_model_again_on_plain_labels_keeps_it_multi_label(tokenizer, tmp_path):
    multi = tiny(tokenizer, num_labels=2, label_names=("politics", "sports"), problem_type="multi_label_classification")
    examples = [TextExample("goal match", None, "sports"), TextExample("vote law", None, "politics")] * 4
    finetune("classification", multi, examples, examples, tmp_path, quiet(steps=1))
    assert json.loads((tmp_path / "config.json").read_text())["problem_type"] == "multi_label_classification"
    assert all("labels" in p for p in classify(tmp_path, ["goal match"]))


def test_label_lists_of_one_name_train_a_one_output_multi_label_model(tokenizer, tmp_path):
    # each label is a yes / no of its own: one name with [] rows is a problem (transformers trains
    # it with num_labels=1); it was refused as "at least two classes", and a one-output model read
    # as regression; a file of nothing but [] names no label
    examples = [TextExample("goal match", None, ("sports",)), TextExample("vote law", None, ())] * 4
    finetune("classification", tiny(tokenizer, num_labels=1), examples, examples, tmp_path, quiet(steps=1))
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["problem_type"] == "multi_label_classification" and config["id2label"] == {"0": "sports"}
    [prediction] = classify(tmp_path, ["goal match"])
    assert set(prediction["scores"]) == {"sports"} and "labels" in prediction
    assert set(evaluate(tmp_path, None, examples)) >= {"accuracy", "f1", "mcc"}
    with pytest.raises(BertkitError, match=r"label lists name no label \(every one is \[\]\)"):
        finetune("classification", tiny(tokenizer, num_labels=1), [TextExample("a", None, ())] * 4,
                 examples, tmp_path / "none", quiet(steps=1))


# ---- JSON booleans --------------------------------------------------------------------------------
def test_json_true_and_false_labels_are_the_names_true_and_false(tmp_path):
    path = write_jsonl(tmp_path / "bool.jsonl", [{"text": "a", "label": True}, {"text": "b", "label": False}])
    assert [e.label for e in load_examples("classification", path)] == ["true", "false"]
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"text": "a", "label": {"x": 1}}])
    with pytest.raises(BertkitError, match=r'line 1: label \{"x": 1\} in column \'label\' is not a string, integer '
                                           r"or true / false"):
        load_examples("classification", bad)
