"""Sequence classification (one text, a pair) and regression learn on real movie reviews: a tiny
model (2 layers, width 64) with the MiniLM vocabulary, trained from scratch for one epoch on the
built-in Rotten Tomatoes sentences, scored on the held-out dev split. The scores are recomputed
with scikit-learn / scipy from the prediction helpers' output."""

import pytest
import torch
from scipy.stats import pearsonr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

import bertkit
from bertkit.tasks import FinetuneSettings, TextExample, classify, evaluate, finetune, load_examples

pytestmark = pytest.mark.filterwarnings("ignore::bertkit.data.DataWarning")  # truncation counts, expected here

WIDTH = 64


def tiny(tokenizer, num_labels, label_names=()):
    torch.manual_seed(0)
    model = bertkit.build("bert-base", head="classification", num_labels=num_labels, label_names=label_names,
                          num_layers=2, hidden_size=WIDTH, num_heads=4, intermediate_size=2 * WIDTH, max_positions=128)
    model.tokenizer = tokenizer
    return model


def settings(**kw):
    return FinetuneSettings(**{**dict(epochs=1, lr=2e-3, batch_size=32, max_length=48, progress=False), **kw})


def test_sentiment_classification_learns(tokenizer, tmp_path):
    train = load_examples("classification", "rotten-tomatoes", "train")  # 6,912 sentences
    dev = load_examples("classification", "rotten-tomatoes", "dev")[::4]
    untrained = evaluate(tiny(tokenizer, 2, ("negative", "positive")), "classification", dev)
    metrics = finetune("classification", tiny(tokenizer, 2), train, dev, tmp_path, settings())
    assert metrics["accuracy"] >= 0.68 and metrics["accuracy"] >= untrained["accuracy"] + 0.1, (untrained, metrics)
    assert metrics["mcc"] >= 0.35

    predictions = classify(tmp_path, [e.text for e in dev])
    gold = [int(e.label == "positive") for e in dev]
    guess = [int(p["label"] == "positive") for p in predictions]
    assert metrics["accuracy"] == pytest.approx(accuracy_score(gold, guess))
    assert metrics["f1"] == pytest.approx(f1_score(gold, guess))
    assert metrics["mcc"] == pytest.approx(matthews_corrcoef(gold, guess))


def sentence_order(split, n):
    """Each review sentence cut in two halves, given in order or swapped (ALBERT's sentence-order
    prediction on real text): only the pair's layout tells them apart."""
    out = []
    for i, record in enumerate(load_examples("classification", "rotten-tomatoes", split)):
        words = record.text.split()
        if len(words) >= 6:
            a, b = " ".join(words[:len(words) // 2]), " ".join(words[len(words) // 2:])
            out.append(TextExample(a, b, "in order") if i % 2 else TextExample(b, a, "swapped"))
    return out[:n]


def test_sentence_pair_classification_learns(tokenizer, tmp_path):
    train, dev = sentence_order("train", 3000), sentence_order("dev", 200)
    metrics = finetune("classification", tiny(tokenizer, 2), train, dev, tmp_path, settings(max_length=96))
    assert metrics["accuracy"] >= 0.85, metrics
    assert bertkit.from_pretrained(tmp_path).config.labels == ("in order", "swapped")


@pytest.mark.slow  # a learning run of over a minute: pytest -m slow
def test_regression_learns(tokenizer, tmp_path):
    train = load_examples("regression", "rotten-tomatoes", "train")  # sentiment as 0.0 / 1.0
    dev = load_examples("regression", "rotten-tomatoes", "dev")[::4]
    metrics = finetune("regression", tiny(tokenizer, 1), train, dev, tmp_path, settings())
    assert metrics["pearson"] >= 0.45 and metrics["spearman"] >= 0.45, metrics
    values = [p["value"] for p in classify(tmp_path, [e.text for e in dev])]
    assert metrics["pearson"] == pytest.approx(pearsonr([e.label for e in dev], values)[0], abs=1e-6)


def verdict_at_the_end(split, n):
    """A real review sentence (longer than the window) followed by a verdict word that alone
    decides the label: only a window that keeps the end of the text can see it."""
    out = []
    for i, record in enumerate(load_examples("classification", "rotten-tomatoes", split)):
        if len(record.text.split()) >= 20:
            out.append(TextExample(f"{record.text} verdict : {'excellent' if i % 2 else 'dreadful'}",
                                   label="up" if i % 2 else "down"))
    return out[:n]


def test_tail_truncation_reads_the_end_and_prediction_keeps_the_setting(tokenizer, tmp_path):
    train, dev = verdict_at_the_end("train", 1000), verdict_at_the_end("dev", 200)
    assert all(len(tokenizer.encode(e.text)) > 24 for e in dev)  # the verdict lies past the first 24 tokens
    head = finetune("classification", tiny(tokenizer, 2), train, dev, tmp_path / "head", settings(max_length=24))
    for truncation in ("tail", "head+tail"):
        kept = finetune("classification", tiny(tokenizer, 2), train, dev, tmp_path / truncation,
                        settings(max_length=24, truncation=truncation))
        assert kept["accuracy"] >= 0.95 and kept["accuracy"] >= head["accuracy"] + 0.25, (truncation, head, kept)
        predictions = classify(tmp_path / truncation, [e.text for e in dev])  # the saved setting, not the default
        assert sum(p["label"] == e.label for p, e in zip(predictions, dev)) / len(dev) == pytest.approx(kept["accuracy"])


def test_prediction_over_several_batches_runs_on_prepacked_weights_and_drops_them(tokenizer, monkeypatch, capsys):
    """classify() over more than one batch prepacks the weights for the run (tasks.base.serving),
    with the numbers of an unpacked run, and drops the copies afterwards; one batch packs nothing.
    progress=True shows a bar over the inputs."""
    from torch import nn

    from bertkit.layers import dense as D

    model = tiny(tokenizer, 3).eval()
    texts = ["a quiet, moving film", "dull and far too long", "it is fine", "the best thing this year",
             "i walked out", "ok"]
    seen, call = [], D._onednn
    monkeypatch.setattr(D, "_onednn", lambda x, w, *rest: seen.append(w.is_mkldnn) or call(x, w, *rest))
    one = classify(model, texts, batch_size=len(texts), bf16=False)
    assert seen and not any(seen)
    seen.clear()
    assert "predicting" not in capsys.readouterr().err
    several = classify(model, texts, batch_size=2, bf16=False, progress=True)
    assert seen and all(seen)
    err = capsys.readouterr().err
    assert "predicting" in err and "6/6 " in err  # a bar over the six inputs, on stderr, to the end
    assert not any(D.packed(m) for m in model.modules() if type(m) is nn.Linear)
    for a, b in zip(one, several):
        assert a["label"] == b["label"] and a["scores"] == pytest.approx(b["scores"], abs=1e-5)
