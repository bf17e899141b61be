"""Fine-tuning metrics: hand-checked cases, and the same numbers as scikit-learn / scipy / seqeval
called directly on random data; SQuAD normalization, exact match and F1 by hand."""

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr
from seqeval.metrics import accuracy_score as seqeval_accuracy
from seqeval.metrics import f1_score as seqeval_f1
from seqeval.metrics import precision_score as seqeval_precision
from seqeval.metrics import recall_score as seqeval_recall
from seqeval.scheme import BILOU, IOBES
from sklearn.metrics import f1_score, matthews_corrcoef, precision_recall_fscore_support

from bertkit.errors import BertkitError
from bertkit.tasks import metrics
from bertkit.tasks.metrics import (classification_scores, exact_match, is_bio, multi_label_scores, normalize_answer,
                                   regression_scores, squad_scores, tagging_scores, token_f1)


# ---- classification ---------------------------------------------------------------------------
def test_binary_scores_by_hand():
    # TP = 2 (rows 0, 4), TN = 1 (row 2), FP = 1 (row 3), FN = 1 (row 1)
    s = classification_scores([1, 1, 0, 0, 1], [1, 0, 0, 1, 1], num_labels=2)
    assert s["accuracy"] == pytest.approx(3 / 5)
    assert s["f1"] == pytest.approx(2 / 3)  # precision 2/3, recall 2/3
    assert s["mcc"] == pytest.approx((2 * 1 - 1 * 1) / np.sqrt(3 * 3 * 2 * 2))


def test_multiclass_f1_is_macro_by_hand():
    # class 0: F1 1; class 1: never right, F1 0; class 2: precision 1/2, recall 1/2, F1 1/2
    s = classification_scores([0, 1, 2, 2], [0, 2, 2, 1], num_labels=3)
    assert s["accuracy"] == pytest.approx(0.5)
    assert s["f1"] == pytest.approx((1 + 0 + 0.5) / 3)


@pytest.mark.parametrize("num_labels", [2, 5])
def test_classification_scores_equal_sklearn(num_labels):
    rng = np.random.default_rng(num_labels)
    gold = rng.integers(0, num_labels, 300).tolist()
    pred = [g if rng.random() < 0.6 else int(rng.integers(0, num_labels)) for g in gold]
    s = classification_scores(gold, pred, num_labels)
    average = "binary" if num_labels == 2 else "macro"
    assert s["accuracy"] == pytest.approx(np.mean(np.array(gold) == np.array(pred)))
    assert s["f1"] == pytest.approx(f1_score(gold, pred, average=average))
    assert s["mcc"] == pytest.approx(matthews_corrcoef(gold, pred))
    assert all(0 <= s[k] <= 1 for k in ("accuracy", "f1"))


def test_one_class_in_gold_and_predictions_gives_no_library_advice(recwarn):
    # scikit-learn told the command-line user to pass its `labels` parameter
    s = classification_scores([1, 1, 1], [1, 1, 1], num_labels=2)
    assert s == {"accuracy": 1.0, "f1": 1.0, "mcc": 0.0} and not [str(w.message) for w in recwarn]


def test_macro_f1_runs_over_the_classes_present_like_sklearn():
    # a 3-class model on an evaluation set without class 2: perfect predictions score 1
    assert classification_scores([0, 1, 0, 1], [0, 1, 0, 1], num_labels=3)["f1"] == 1.0
    rng = np.random.default_rng(7)
    gold = rng.integers(0, 3, 200).tolist()             # classes 0-2 of 6; 4 only predicted
    pred = [g if rng.random() < 0.7 else int(rng.choice([0, 1, 2, 4])) for g in gold]
    s = classification_scores(gold, pred, num_labels=6)
    assert s["f1"] == pytest.approx(f1_score(gold, pred, average="macro"))  # scikit-learn's (and evaluate's) default
    assert s["mcc"] == pytest.approx(matthews_corrcoef(gold, pred))


# ---- regression -------------------------------------------------------------------------------
def test_multi_label_scores_are_exact_sets_and_every_label_decision():
    from sklearn.metrics import accuracy_score

    gold = [0, 2, 1, 1]
    predicted = [[0], [0, 2], [], [1]]  # right, one label too many, none, right
    want = np.eye(3, dtype=int)[gold]
    got = np.array([[i in p for i in range(3)] for p in predicted], dtype=int)
    s = multi_label_scores(gold, predicted, 3)
    assert s["accuracy"] == accuracy_score(want, got) == 0.5  # scikit-learn's subset accuracy
    assert s["f1"] == pytest.approx(f1_score(want, got, average="micro"))
    assert s["mcc"] == pytest.approx(matthews_corrcoef(want.ravel(), got.ravel()))


def test_regression_scores_by_hand_and_against_scipy():
    s = regression_scores([1.0, 2.0, 3.0], [2.0, 4.0, 6.0])
    assert s["pearson"] == pytest.approx(1.0)
    assert s["spearman"] == pytest.approx(1.0)
    assert s["mse"] == pytest.approx((1 + 4 + 9) / 3)
    # ranks (1, 2, 3) vs (1, 3, 2): 1 - 6 * 2 / (3 * 8)
    assert regression_scores([1.0, 2.0, 3.0], [1.0, 3.0, 2.0])["spearman"] == pytest.approx(0.5)
    rng = np.random.default_rng(0)
    gold = rng.normal(size=200)
    pred = gold + rng.normal(size=200)
    s = regression_scores(gold.tolist(), pred.tolist())
    assert s["pearson"] == pytest.approx(pearsonr(gold, pred)[0])
    assert s["spearman"] == pytest.approx(spearmanr(gold, pred)[0])


def test_correlation_of_a_constant_prediction_is_zero_not_nan():
    assert regression_scores([1.0, 2.0, 3.0], [0.5, 0.5, 0.5]) == {"pearson": 0.0, "spearman": 0.0,
                                                                   "mse": pytest.approx((0.25 + 2.25 + 6.25) / 3)}


# ---- token classification ---------------------------------------------------------------------
def test_entity_scores_by_hand():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "B-ORG"]]
    pred = [["B-PER", "I-PER", "O", "O"], ["O", "B-LOC"]]  # one entity right, one missed, one wrong type
    s = tagging_scores(gold, pred, bio=True)
    assert s["precision"] == pytest.approx(1 / 2)
    assert s["recall"] == pytest.approx(1 / 3)
    assert s["f1"] == pytest.approx(2 * (1 / 2) * (1 / 3) / (1 / 2 + 1 / 3))
    assert s["accuracy"] == pytest.approx(4 / 6)


def test_a_partial_span_is_not_an_entity():
    s = tagging_scores([["B-PER", "I-PER", "I-PER"]], [["B-PER", "I-PER", "O"]], bio=True)
    assert s["f1"] == 0.0 and s["accuracy"] == pytest.approx(2 / 3)


def random_bio(rng, n):
    types = ["PER", "LOC", "ORG"]
    out = []
    for _ in range(n):
        sentence = []
        for _ in range(int(rng.integers(1, 12))):
            r = rng.random()
            sentence.append("O" if r < 0.5 else f"{'B' if r < 0.8 else 'I'}-{types[int(rng.integers(3))]}")
        out.append(sentence)
    return out


def test_entity_scores_equal_seqeval():
    rng = np.random.default_rng(1)
    gold = random_bio(rng, 200)
    pred = [[t if rng.random() < 0.7 else "O" for t in s] for s in gold]
    s = tagging_scores(gold, pred, bio=True)
    assert s["precision"] == pytest.approx(seqeval_precision(gold, pred))
    assert s["recall"] == pytest.approx(seqeval_recall(gold, pred))
    assert s["f1"] == pytest.approx(seqeval_f1(gold, pred))


def test_a_word_without_a_prediction_is_outside_every_entity_for_accuracy_too():
    """Entity scores read a missing prediction (a word cut off, or one that makes no token) as
    "O"; accuracy counted it wrong, so a model that tagged every word it saw right scored < 1."""
    gold = [["B-PER", "I-PER", "O", "O"], ["O", "B-LOC"]]
    pred = [["B-PER", "I-PER", "O", None], ["O", None]]
    s = tagging_scores(gold, pred, bio=True)
    filled = [[t or "O" for t in x] for x in pred]
    assert s["accuracy"] == pytest.approx(seqeval_accuracy(gold, filled)) == pytest.approx(5 / 6)
    assert (s["precision"], s["recall"], s["f1"]) == pytest.approx(
        (seqeval_precision(gold, filled), seqeval_recall(gold, filled), seqeval_f1(gold, filled)))


def test_plain_tags_macro_scores_equal_sklearn_and_missing_predictions_count_wrong():
    gold = [["DT", "NN", "VBZ"], ["NN", "."]]
    pred = [["DT", "NNP", "NN"], [None, "."]]  # NNP: a tag only ever predicted, wrongly
    s = tagging_scores(gold, pred, bio=False)
    assert s["accuracy"] == pytest.approx(2 / 5)
    flat_gold = [t for x in gold for t in x]
    flat_pred = [t or "none" for x in pred for t in x]
    # the macro mean runs over the gold and predicted tags, not over a missing prediction
    p, r, f, _ = precision_recall_fscore_support(flat_gold, flat_pred, labels=[".", "DT", "NN", "NNP", "VBZ"],
                                                 average="macro", zero_division=0)
    assert (s["precision"], s["recall"], s["f1"]) == pytest.approx((p, r, f))
    # with a prediction for every word, it is scikit-learn's default macro mean
    full = [["DT", "NNP", "NN"], ["VBZ", "."]]
    s = tagging_scores(gold, full, bio=False)
    p, r, f, _ = precision_recall_fscore_support(flat_gold, [t for x in full for t in x], average="macro",
                                                 zero_division=0)
    assert (s["precision"], s["recall"], s["f1"]) == pytest.approx((p, r, f))


def test_tag_scheme_detection():
    assert is_bio(["O", "B-PER", "I-PER", "B-LOC"])
    assert is_bio(["S-PER", "E-LOC", "O"])
    assert not is_bio(["DT", "NN", "B-PER"])  # part-of-speech tags are plain classes
    assert not is_bio(["O"])
    assert metrics.tag_scheme(["O", "B-PER", "I-PER"]) == metrics.tag_scheme(["I-PER", "O"]) == "BIO"
    assert metrics.tag_scheme(["S-PER", "B-LOC", "E-LOC", "O"]) == "IOBES"
    assert metrics.tag_scheme(["U-PER", "B-LOC", "L-LOC"]) == "BILOU"
    with pytest.raises(BertkitError, match="IOBES.*BILOU"):
        metrics.tag_scheme(["S-PER", "U-LOC"])
    with pytest.raises(BertkitError, match="one scheme"):
        tagging_scores([["S-PER", "O"]], [["U-PER", "O"]], bio=True)


def random_spans(rng, n: int, scheme: str) -> list[list[str]]:
    """Sentences in IOBES or BILOU: single-word entities S-/U-, longer ones B- I-* E-/L-."""
    single, last = {"IOBES": ("S", "E"), "BILOU": ("U", "L")}[scheme]
    out = []
    for _ in range(n):
        sentence = []
        while len(sentence) < 12:
            if rng.random() < 0.5:
                sentence.append("O")
                continue
            kind, length = rng.choice(["PER", "LOC"]), int(rng.integers(1, 4))
            if length == 1:
                sentence.append(f"{single}-{kind}")
            else:
                sentence += [f"B-{kind}"] + [f"I-{kind}"] * (length - 2) + [f"{last}-{kind}"]
        out.append(sentence)
    return out


def test_bilou_is_scored_by_seqeval_strict_mode():
    # U-PER U-PER are two entities; B-PER without L-PER is none: 2 of 2 predicted right, 2 of 3 found
    s = tagging_scores([["U-PER", "U-PER", "O", "B-LOC", "L-LOC"]], [["U-PER", "B-PER", "O", "B-LOC", "L-LOC"]],
                       bio=True)
    reference = seqeval_f1([["U-PER", "U-PER", "O", "B-LOC", "L-LOC"]], [["U-PER", "B-PER", "O", "B-LOC", "L-LOC"]],
                           mode="strict", scheme=BILOU)
    assert s["f1"] == pytest.approx(reference) == pytest.approx(0.8)


@pytest.mark.parametrize("scheme, reference", [("IOBES", IOBES), ("BILOU", BILOU)])
def test_iobes_and_bilou_scores_equal_seqeval_strict(scheme, reference):
    rng = np.random.default_rng(3)
    gold = random_spans(rng, 150, scheme)
    tags = sorted({t for sentence in gold for t in sentence})
    pred = [[t if rng.random() < 0.8 else str(rng.choice(tags)) for t in sentence] for sentence in gold]
    s = tagging_scores(gold, pred, bio=True)
    mode = {"mode": "strict", "scheme": reference}
    assert s["precision"] == pytest.approx(seqeval_precision(gold, pred, **mode))
    assert s["recall"] == pytest.approx(seqeval_recall(gold, pred, **mode))
    assert s["f1"] == pytest.approx(seqeval_f1(gold, pred, **mode))


# ---- SQuAD ------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, normalized", [
    ("The Quick, brown fox!", "quick brown fox"),
    ("an apple a day", "apple day"),
    ("  A   theater  ", "theater"),         # articles are whole words only
    ("Hello-world's \"best\"", "helloworlds best"),
    ("The", ""),
])
def test_squad_normalization(text, normalized):
    assert normalize_answer(text) == normalized


def test_exact_match_and_f1_by_hand():
    assert exact_match("the Eiffel Tower", ["Eiffel Tower."]) == 1.0
    assert exact_match("Eiffel", ["Eiffel Tower"]) == 0.0
    # prediction tokens eiffel tower in paris, gold eiffel tower: precision 1/2, recall 1 -> 2/3
    assert token_f1("Eiffel Tower in Paris", ["the Eiffel Tower"]) == pytest.approx(2 / 3)
    # the best gold answer counts
    assert token_f1("Paris", ["the Eiffel Tower", "Paris, France"]) == pytest.approx(2 * 1 * 0.5 / 1.5)
    assert token_f1("tower tower", ["tower"]) == pytest.approx(2 * 0.5 * 1 / 1.5)  # counts, not sets


def test_unanswerable_questions_score_only_the_empty_answer():
    assert exact_match("", []) == 1.0 and token_f1("", []) == 1.0
    assert exact_match("something", []) == 0.0 and token_f1("something", []) == 0.0
    assert exact_match("", ["Paris"]) == 0.0 and token_f1("", ["Paris"]) == 0.0
    s = squad_scores(["Paris", "", "the tower", "x"], [["Paris"], [], ["Eiffel tower"], ["y"]])
    assert s["exact_match"] == pytest.approx(2 / 4)
    assert s["f1"] == pytest.approx((1 + 1 + 2 * 0.5 / 1.5 + 0) / 4)


def test_entities_are_read_by_the_scheme_of_the_models_labels_not_of_one_sentence():
    from bertkit.tasks.metrics import entity_spans

    iobes = ("O", "B-PER", "I-PER", "E-PER", "S-PER", "B-LOC", "I-LOC", "E-LOC", "S-LOC")
    # strict IOBES whether or not the sentence holds an E- or S- tag: an unclosed B- I- is no entity
    assert entity_spans(["B-PER", "I-PER", "O", "B-LOC"], iobes) == []
    assert entity_spans(["B-PER", "I-PER", "O", "B-LOC", "S-LOC"], iobes) == [("LOC", 4, 5)]
    assert entity_spans(["B-PER", "E-PER", "O", "S-LOC"], iobes) == [("PER", 0, 2), ("LOC", 3, 4)]
    bio = ("O", "B-PER", "I-PER")
    assert entity_spans(["B-PER", "I-PER", None, "I-PER"], bio) == [("PER", 0, 2), ("PER", 3, 4)]  # conlleval
