"""The field's standard scores, computed with the libraries everyone compares against:
scikit-learn (accuracy, F1, Matthews correlation), scipy (Pearson, Spearman), seqeval
(entity-level precision/recall/F1, CoNLL-2000 `conlleval` rules), and the official SQuAD
normalization for exact match and token F1 (written out below from its definition).

Every score is a fraction (accuracy 0.886, not 88.6). Correlations (MCC, Pearson, Spearman) lie
in [-1, 1]; a correlation with a constant side is undefined and reported as 0.0 (JSON has no NaN).
"""

from __future__ import annotations

import collections
import math
import re
import string
import warnings

import numpy as np

from ..errors import BertkitError


# ---- sequence classification and regression ----------------------------------------------------
def classification_scores(gold: list[int], predicted: list[int], num_labels: int) -> dict[str, float]:
    """accuracy; f1: binary F1 of class 1 (the positive class: index 1 in the label order) when
    there are two classes, the unweighted mean over classes (macro) otherwise; mcc: Matthews
    correlation (multi-class form, Gorodkin 2004).

    The macro mean runs over the classes that occur in the gold labels or the predictions
    (scikit-learn's default, and so Hugging Face `evaluate`'s): a class of the model that the
    evaluation set lacks and that is never predicted has no defined F1, and counting it as 0
    would mark perfect predictions down (3 classes, 2 of them present: 0.667 instead of 1)."""
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

    if not gold:
        return {"accuracy": 0.0, "f1": 0.0, "mcc": 0.0}
    with warnings.catch_warnings():  # one class in gold and predictions: advice to scikit-learn's callers
        warnings.simplefilter("ignore", UserWarning)
        if num_labels == 2:
            f1 = f1_score(gold, predicted, average="binary", pos_label=1, zero_division=0)
        else:
            f1 = f1_score(gold, predicted, average="macro", zero_division=0)
        mcc = _correlation(matthews_corrcoef(gold, predicted))  # 0.0 with one class, as the docstring says
    return {"accuracy": float(accuracy_score(gold, predicted)), "f1": float(f1), "mcc": mcc}


def multi_label_scores(gold: list[int] | list[list[int]], predicted: list[list[int]],
                       num_labels: int) -> dict[str, float]:
    """A multi-label classifier (problem_type multi_label_classification) scored against each
    example's gold label set (a list of indices; a plain index is a set of one, [] none):
    accuracy, the fraction whose predicted label set (probability over 0.5) is exactly the gold
    one (scikit-learn's subset accuracy, as its training loss's accuracy counts); f1 and mcc over
    every (example, label) decision (micro F1, and the correlation of the flattened 0/1 matrices).
    Its most probable label alone would score a model that also names two wrong labels as right."""
    from sklearn.metrics import f1_score, matthews_corrcoef

    if not gold:
        return {"accuracy": 0.0, "f1": 0.0, "mcc": 0.0}
    want = np.zeros((len(gold), num_labels), dtype=np.int64)  # (N, C)
    for row, labels in enumerate(gold):
        want[row, labels] = 1
    got = np.zeros_like(want)
    for row, chosen in enumerate(predicted):
        got[row, chosen] = 1
    return {"accuracy": float((want == got).all(-1).mean()),
            "f1": float(f1_score(want, got, average="micro", zero_division=0)),
            "mcc": _correlation(matthews_corrcoef(want.ravel(), got.ravel()))}


def _correlation(value) -> float:
    value = float(value)
    return 0.0 if math.isnan(value) else value


def regression_scores(gold: list[float], predicted: list[float]) -> dict[str, float]:
    """Pearson and Spearman correlation (GLUE's STS-B scores) and the mean squared error."""
    from scipy.stats import pearsonr, spearmanr

    gold_a, pred_a = np.asarray(gold, dtype=np.float64), np.asarray(predicted, dtype=np.float64)
    mse = float(np.mean((gold_a - pred_a) ** 2)) if len(gold_a) else 0.0
    if len(gold_a) < 2 or gold_a.std() == 0 or pred_a.std() == 0:
        return {"pearson": 0.0, "spearman": 0.0, "mse": mse}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {"pearson": _correlation(pearsonr(gold_a, pred_a)[0]),
                "spearman": _correlation(spearmanr(gold_a, pred_a)[0]), "mse": mse}


# ---- token classification ---------------------------------------------------------------------
BIO = re.compile(r"[BIESLU]-.+")


def is_bio(tags) -> bool:
    """Whether tags follow an entity scheme (O, B-X, I-X, and E-/S-/L-/U- variants) rather than
    plain per-token classes such as part-of-speech tags."""
    tags = set(tags)
    return any(t != "O" for t in tags) and all(t == "O" or BIO.fullmatch(t) for t in tags)


SCHEMES = {"IOBES": set("BIES"), "BILOU": set("BILU")}  # the prefixes each strict scheme allows


def tag_scheme(tags) -> str:
    """The entity scheme the tags' prefixes show: "BIO" for plain B-/I- (IOB1 or IOB2),
    "IOBES" when S-/E- occur, "BILOU" when U-/L- occur. IOBES and BILOU are the same idea under
    two alphabets, so a mix of them has no consistent reading and is an error."""
    prefixes = {t[0] for t in tags if t != "O"}
    marks = {name: sorted(prefixes & (allowed - set("BI"))) for name, allowed in SCHEMES.items()}
    if marks["IOBES"] and marks["BILOU"]:
        raise BertkitError(f"the tags mix the IOBES scheme ({', '.join(p + '-' for p in marks['IOBES'])}) with "
                           f"BILOU ({', '.join(p + '-' for p in marks['BILOU'])}); use one scheme")
    return next((name for name, found in marks.items() if found), "BIO")


def entity_spans(tags: list[str | None], labels: tuple[str, ...]) -> list[tuple[str, int, int]]:
    """The entities in one sentence's tags as (type, first word, end word), read as the scores
    read them: BIO by the conlleval rules, IOBES / BILOU strictly, the scheme that of the model's
    `labels` (not of the tags one sentence happens to hold); a word without a tag is O."""
    filled = [t if t is not None else "O" for t in tags]
    scheme = tag_scheme(list(labels))
    if scheme == "BIO":
        from seqeval.metrics.sequence_labeling import get_entities

        return [(kind, start, end + 1) for kind, start, end in get_entities(filled)]  # seqeval's end is inclusive
    from seqeval.scheme import BILOU, IOBES, Entities

    found = Entities([filled], {"IOBES": IOBES, "BILOU": BILOU}[scheme]).entities[0]
    return [(e.tag, e.start, e.end) for e in found]


def _entity_scores(gold: list[list[str]], predicted: list[list[str]]) -> dict[str, float]:
    """seqeval's entity precision / recall / F1. Plain BIO keeps seqeval's default mode (the
    CoNLL-2000 `conlleval` rules that papers report: an I- after O starts an entity, so IOB1
    works too). IOBES / BILOU need strict mode with their scheme: the default mode does not know
    U-/L- (it reads U-PER U-PER as one entity), so it would score other entities than there are."""
    from seqeval.metrics import f1_score, precision_score, recall_score
    from seqeval.scheme import BILOU, IOBES

    scheme = tag_scheme([t for sentence in gold + predicted for t in sentence])
    mode = {} if scheme == "BIO" else {"mode": "strict", "scheme": {"IOBES": IOBES, "BILOU": BILOU}[scheme]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # seqeval warns on an undefined score, then gives 0
        return {"precision": float(precision_score(gold, predicted, zero_division=0, **mode)),
                "recall": float(recall_score(gold, predicted, zero_division=0, **mode)),
                "f1": float(f1_score(gold, predicted, zero_division=0, **mode))}


def tagging_scores(gold: list[list[str]], predicted: list[list[str | None]], bio: bool) -> dict[str, float]:
    """Entity schemes (bio=True): seqeval's entity-level precision, recall and F1 (an entity
    counts only with its exact span and type; the scheme, BIO / IOBES / BILOU, read from the tag
    prefixes) plus per-word accuracy. Plain tags: per-word accuracy, with precision / recall / F1
    as unweighted means over the tags in the gold data or the predictions (scikit-learn's macro
    default: a tag only ever predicted, wrongly, counts with precision 0). A word without a
    prediction (None: cut off by the length limit, or a word that makes no token) is outside any
    entity, "O", for every entity score and accuracy alike; with plain tags, where nothing is
    outside, it counts as wrong."""
    flat_gold = [t for sentence in gold for t in sentence]
    flat_pred = [t for sentence in predicted for t in sentence]
    if len(flat_gold) != len(flat_pred):
        raise ValueError("gold and predicted tags differ in length")
    if not flat_gold:
        return {"accuracy": 0.0, "precision": 0.0, "recall": 0.0, "f1": 0.0}
    if bio:
        filled = [[p if p is not None else "O" for p in sentence] for sentence in predicted]
        accuracy = sum(g == p for g, p in zip(flat_gold, (t for s in filled for t in s))) / len(flat_gold)
        return {"accuracy": accuracy, **_entity_scores([list(s) for s in gold], filled)}
    accuracy = sum(g == p for g, p in zip(flat_gold, flat_pred)) / len(flat_gold)
    from sklearn.metrics import precision_recall_fscore_support

    tags = sorted(set(flat_gold) | {t for t in flat_pred if t is not None})
    filled = [p if p is not None else "\0none" for p in flat_pred]
    p, r, f, _ = precision_recall_fscore_support(flat_gold, filled, labels=tags, average="macro", zero_division=0)
    return {"accuracy": accuracy, "precision": float(p), "recall": float(r), "f1": float(f)}


# ---- SQuAD ------------------------------------------------------------------------------------
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD's answer normalization (Rajpurkar et al., 2016, sec. 6; the official evaluation
    script): lowercase, drop ASCII punctuation, drop the articles a / an / the, and collapse
    whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _golds(gold: list[str]) -> list[str]:
    """Gold answers that survive normalization; none (SQuAD v2's unanswerable) means [""]."""
    return [g for g in gold if normalize_answer(g)] or [""]


def exact_match(prediction: str, gold: list[str]) -> float:
    """1.0 when the normalized prediction equals any normalized gold answer. An unanswerable
    question (SQuAD v2) has the gold answer "", matched only by the empty prediction."""
    return float(any(normalize_answer(prediction) == normalize_answer(g) for g in _golds(gold)))


def _token_f1(prediction: str, gold: str) -> float:
    pred_tokens, gold_tokens = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred_tokens or not gold_tokens:  # one of them is "no answer": right only if both are
        return float(pred_tokens == gold_tokens)
    common = collections.Counter(pred_tokens) & collections.Counter(gold_tokens)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(pred_tokens), overlap / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, gold: list[str]) -> float:
    """The best bag-of-tokens F1 between the normalized prediction and any gold answer."""
    return max(_token_f1(prediction, g) for g in _golds(gold))


def squad_scores(predictions: list[str], gold: list[list[str]]) -> dict[str, float]:
    """Mean exact match and F1 over questions, as fractions; gold [] = unanswerable."""
    if not predictions:
        return {"exact_match": 0.0, "f1": 0.0}
    em = [exact_match(p, g) for p, g in zip(predictions, gold, strict=True)]
    f1 = [token_f1(p, g) for p, g in zip(predictions, gold, strict=True)]
    return {"exact_match": sum(em) / len(em), "f1": sum(f1) / len(f1)}
