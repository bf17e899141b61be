"""Token classification learns on real text: Rotten Tomatoes sentences tagged by a fixed rule
(tests/tasks_support.py), written in the OANC `word/TAG` format and as a CoNLL file, read back by
the readers, and used to fine-tune the embeddings and first two layers of all-MiniLM-L6-v2.
Scores are recomputed from the tag() helper's output with scikit-learn and seqeval."""

from collections import Counter

import pytest
from seqeval.metrics import f1_score as seqeval_f1
from sklearn.metrics import accuracy_score

from bertkit.tasks import FinetuneSettings, finetune, load_examples, tag
from tasks_support import FAST_BF16, minilm_lower_layers, tagged_sentences

pytestmark = pytest.mark.filterwarnings("ignore::bertkit.data.DataWarning")  # truncation counts, expected here


def settings(**kw):
    return FinetuneSettings(**{**dict(epochs=2, lr=5e-4, batch_size=16, max_length=48, bf16=FAST_BF16, progress=False),
                               **kw})


def write_tagged(path, sentences):
    path.write_text("".join(" ".join(f"{w}/{t}" for w, t in zip(s.words, s.tags)) + "\n" for s in sentences))
    return path


def write_conll(path, sentences):
    path.write_text("-DOCSTART- O\n\n" + "".join(
        "".join(f"{w} {t}\n" for w, t in zip(s.words, s.tags)) + "\n" for s in sentences))
    return path


@pytest.mark.slow  # a learning run of half a minute: pytest -m slow
def test_part_of_speech_style_tagging_learns_from_word_slash_tag_files(minilm_dir, tmp_path):
    train_file = write_tagged(tmp_path / "train.txt", tagged_sentences("train", 300))
    dev_file = write_tagged(tmp_path / "dev.txt", tagged_sentences("dev", 100))
    train, dev = load_examples("token-classification", train_file), load_examples("token-classification", dev_file)
    labels = sorted({t for s in train for t in s.tags})
    metrics = finetune("token-classification", minilm_lower_layers(minilm_dir, "token-classification", len(labels)),
                       train_file, dev_file, tmp_path / "run", settings())
    majority = Counter(t for s in dev for t in s.tags).most_common(1)[0][1] / sum(len(s.tags) for s in dev)
    assert metrics["accuracy"] >= 0.9 and metrics["accuracy"] >= majority + 0.25, (majority, metrics)

    predictions = tag(tmp_path / "run", [list(s.words) for s in dev], bf16=FAST_BF16)  # as it trained and scored
    gold = [t for s in dev for t in s.tags]
    assert metrics["accuracy"] == pytest.approx(accuracy_score(gold, [t for p in predictions for t in p["tags"]]))


def test_bio_chunk_tagging_learns_from_conll_files(minilm_dir, tmp_path):
    train_file = write_conll(tmp_path / "train.conll", tagged_sentences("train", 300, bio=True))
    dev_file = write_conll(tmp_path / "dev.conll", tagged_sentences("dev", 100, bio=True))
    labels = sorted({t for s in load_examples("token-classification", train_file) for t in s.tags})
    metrics = finetune("token-classification", minilm_lower_layers(minilm_dir, "token-classification", len(labels)),
                       train_file, dev_file, tmp_path / "run", settings())
    assert metrics["f1"] >= 0.8 and metrics["precision"] >= 0.75 and metrics["recall"] >= 0.75, metrics

    dev = load_examples("token-classification", dev_file)
    predictions = tag(tmp_path / "run", [list(s.words) for s in dev], bf16=FAST_BF16)  # as it trained and scored
    assert metrics["f1"] == pytest.approx(seqeval_f1([list(s.tags) for s in dev], [p["tags"] for p in predictions]))
