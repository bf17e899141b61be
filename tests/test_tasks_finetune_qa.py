"""Extractive QA learns on a QA set built from real text (tests/tasks_support.py): questions on
IMDB review excerpts whose answers are spans of the review (the year mentioned, the reviewer's
score out of ten), a third of the year questions unanswerable (SQuAD v2 form), written as SQuAD
JSON and read back. The model is all-MiniLM-L6-v2's embeddings and first two layers with a new
span head; contexts are longer than one window, so answers are found across windows."""

import json

import pytest

import bertkit
from bertkit.tasks import FinetuneSettings, answer, evaluate, finetune, load_examples
from bertkit.tasks.metrics import squad_scores
from tasks_support import FAST_BF16, minilm_lower_layers, review_questions

pytestmark = pytest.mark.filterwarnings("ignore::bertkit.data.DataWarning")  # truncation counts, expected here

WINDOWS = dict(max_length=64, doc_stride=16, max_query_length=16)


def write_squad(path, examples):
    data = [{"title": e.id, "paragraphs": [{"context": e.context, "qas": [{
        "id": e.id, "question": e.question, "is_impossible": e.is_impossible,
        "answers": [{"text": a.text, "answer_start": a.start} for a in e.answers]}]}]} for e in examples]
    path.write_text(json.dumps({"version": "v2.0", "data": data}))
    return path


@pytest.mark.slow  # a learning run of over a minute: pytest -m slow
def test_extractive_qa_learns_with_windows_and_null_answers(minilm_dir, tmp_path):
    train_file = write_squad(tmp_path / "train.json", review_questions("train", 300, unanswerable=0.3))
    dev_file = write_squad(tmp_path / "dev.json", review_questions("dev", 100, unanswerable=0.3))
    dev = load_examples("qa", dev_file)
    impossible = sum(e.is_impossible for e in dev)
    assert 20 <= impossible <= 40

    tokenizer = bertkit.load_tokenizer(minilm_dir)
    budget = WINDOWS["max_length"] - 3 - max(len(ids) for ids in tokenizer.encode_plain([e.question for e in dev]))
    late = [e for e in dev if e.answers and len(tokenizer.encode_plain([e.context[:e.answers[0].end]])[0]) > budget]
    assert len(late) >= 10  # many answers lie beyond the first window

    untrained = evaluate(minilm_lower_layers(minilm_dir, "qa"), "qa", dev, **WINDOWS)
    metrics = finetune("qa", minilm_lower_layers(minilm_dir, "qa"), train_file, dev_file, tmp_path / "run",
                       FinetuneSettings(epochs=2, lr=5e-4, batch_size=32, bf16=FAST_BF16, progress=False, **WINDOWS))
    assert metrics["exact_match"] >= 0.8 and metrics["f1"] >= 0.8, metrics
    assert untrained["exact_match"] <= 0.4  # at most the unanswerable share, by always answering nothing

    saved = json.loads((tmp_path / "run" / "task.json").read_text())
    assert saved["null_answers"] is True and saved["max_length"] == 64
    results = answer(tmp_path / "run", [e.question for e in dev], [e.context for e in dev], bf16=FAST_BF16)
    for r, e in zip(results, dev):
        if r["answer"]:
            assert e.context[r["start"]:r["end"]] == r["answer"]
        else:
            assert r["start"] is None and r["end"] is None
    assert sum((r["answer"] == "") == e.is_impossible for r, e in zip(results, dev)) >= 0.9 * len(dev)
    gold = [[] if e.is_impossible else [a.text for a in e.answers] for e in dev]
    assert squad_scores([r["answer"] for r in results], gold) == pytest.approx(
        {k: metrics[k] for k in ("exact_match", "f1")})
    late_right = [r["answer"] == e.answers[0].text for r, e in zip(results, dev) if e in late]
    assert sum(late_right) >= 0.6 * len(late)  # answers found in later windows, exactly


def test_unanswerable_questions_scored_with_a_model_that_always_answers_are_said(minilm_dir, tmp_path):
    """A SQuAD v2 file evaluated with a model fine-tuned on v1: every unanswerable question
    scored 0, without a word."""
    import warnings

    from bertkit.data import DataWarning

    v1 = [e for e in review_questions("train", 40) if not e.is_impossible][:8]
    v2 = review_questions("dev", 30, unanswerable=0.3)
    finetune("qa", minilm_lower_layers(minilm_dir, "qa"), write_squad(tmp_path / "v1.json", v1),
             write_squad(tmp_path / "v1dev.json", v1), tmp_path / "run",
             FinetuneSettings(steps=1, batch_size=8, progress=False, **WINDOWS))
    impossible = sum(e.is_impossible for e in v2)
    with pytest.warns(DataWarning, match=rf"v2.json: {impossible} of the 30 questions have no answer \(SQuAD v2\), "
                                         r"but the model was fine-tuned to answer every question"):
        scores = evaluate(tmp_path / "run", "qa", write_squad(tmp_path / "v2.json", v2), progress=False)
    assert scores["exact_match"] <= 1 - impossible / 30
    with warnings.catch_warnings(record=True) as said:  # allowed to answer nothing: nothing to say
        warnings.simplefilter("always")
        evaluate(tmp_path / "run", "qa", tmp_path / "v2.json", progress=False, null_answers=True)
    assert not [w for w in said if "have no answer" in str(w.message)]
