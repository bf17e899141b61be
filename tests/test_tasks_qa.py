"""QA post-processing with logits set by hand: exact character spans of the original context
across windows (answers straddling a window edge included), n-best, maximum answer length,
duplicates from overlapping windows, null answers (the smallest [CLS] score over windows against
a threshold), and offsets from all three tokenizer kinds; token-classification word alignment for
the same kinds; scores equal to the official SQuAD v2 evaluation over every question of a file."""

import collections
import json
import re
import string
import unicodedata
import warnings

import numpy as np
import pytest

from bertkit.data import DataWarning, builtin
from bertkit.data.trainers import TokenizerSettings, train_tokenizer
from bertkit.errors import BertkitError
from bertkit.tasks import Answer, QAExample, TaggedSentence, load_examples
from bertkit.tasks.qa import Decoding, QuestionAnswering, Windowing, answer_tokens, best_answers, windows
from bertkit.tasks.tagging import encode_sentences

SETTING = Windowing(max_length=40, doc_stride=10, max_query_length=8)
CONTEXT = (" ".join(f"filler{i}" for i in range(30)) + " In 1998 the crew visited Zürich-Oerlikon, (Switzerland) "
           "and then “São Paulo” for 3½ weeks. " + " ".join(f"more{i}" for i in range(30)))


def flat_logits(features, value=-10.0):
    return [np.full(len(f["input_ids"]), value) for f in features], [np.full(len(f["input_ids"]), value)
                                                                       for f in features]


def peak(features, starts, ends, example_offsets, first, last, score=5.0):
    """Put start/end logits on context tokens `first`..`last` (indices into the whole context) in
    every window that holds both."""
    for f, s, e in zip(features, starts, ends):
        lo = int(np.searchsorted(example_offsets[:, 0], f["offsets"][0, 0]))  # the window's first context token
        if lo <= first and last < lo + len(f["offsets"]):
            s[f["context_start"] + first - lo] = score
            e[f["context_start"] + last - lo] = score


def context_tokens(tokenizer, text):
    return np.asarray(tokenizer.encode_offsets([text])[0][1]).reshape(-1, 2)


@pytest.mark.parametrize("text", ["Zürich-Oerlikon, (Switzerland)", "“São Paulo”", "3½ weeks", "1998"])
def test_post_processing_returns_the_exact_characters_of_the_context(tokenizer, text):
    start = CONTEXT.index(text)
    example = QAExample("q", "Where did they go?", CONTEXT)
    features, _, _ = windows([example], tokenizer, SETTING)
    offsets = context_tokens(tokenizer, CONTEXT)
    first, last = answer_tokens(offsets, start, start + len(text))
    assert first >= 0
    starts, ends = flat_logits(features)
    peak(features, starts, ends, offsets, first, last)
    [result] = best_answers([example], features, starts, ends, Decoding(max_answer_length=30))
    assert len(features) > 2
    assert CONTEXT[result["start"]:result["end"]] == result["answer"]
    assert result["answer"] == CONTEXT[offsets[first, 0]:offsets[last, 1]]
    assert text.strip("“”") in result["answer"]


def test_random_spans_map_back_exactly(tokenizer):
    example = QAExample("q", "What?", CONTEXT)
    features, _, _ = windows([example], tokenizer, SETTING)
    offsets = context_tokens(tokenizer, CONTEXT)
    rng = np.random.default_rng(0)
    for _ in range(25):
        first = int(rng.integers(0, len(offsets) - 5))
        last = first + int(rng.integers(0, 5))
        starts, ends = flat_logits(features)
        peak(features, starts, ends, offsets, first, last)
        [result] = best_answers([example], features, starts, ends)
        assert (result["start"], result["end"]) == (offsets[first, 0], offsets[last, 1])


def test_an_answer_straddling_a_window_edge_is_found_whole_in_the_overlapping_window(tokenizer):
    example = QAExample("q", "What?", CONTEXT)
    features, _, _ = windows([example], tokenizer, SETTING)
    offsets = context_tokens(tokenizer, CONTEXT)
    edge = len(features[0]["offsets"])  # the first context token outside window 0
    first, last = edge - 1, edge + 1
    gold = CONTEXT[offsets[first, 0]:offsets[last, 1]]
    starts, ends = flat_logits(features)
    peak(features, starts, ends, offsets, first, last, score=5.0)  # only window 1 holds all of it
    # window 0 sees the start only; its best partial span (start .. its last token) scores 8 + 1 = 9 < 10
    starts[0][features[0]["context_start"] + first] = 8.0
    ends[0][features[0]["context_start"] + edge - 1] = 1.0
    [result] = best_answers([example], features, starts, ends)
    assert result["answer"] == gold and CONTEXT[result["start"]:result["end"]] == gold
    # training windows agree: window 0 points at [CLS], window 1 at the answer
    trained, lost, _ = windows([QAExample("q", "What?", CONTEXT, (Answer(gold, int(offsets[first, 0])),))],
                            tokenizer, SETTING)
    assert lost == 0 and trained[0]["start_positions"] == 0 and trained[1]["start_positions"] > 0


def test_max_answer_length_and_start_after_end_are_excluded(tokenizer):
    example = QAExample("q", "What?", CONTEXT)
    features, _, _ = windows([example], tokenizer, SETTING)
    offsets = context_tokens(tokenizer, CONTEXT)
    starts, ends = flat_logits(features)
    cs = features[0]["context_start"]
    starts[0][cs + 2], ends[0][cs + 3] = 3.0, 3.0    # a valid, lower-scoring span
    starts[0][cs + 5], ends[0][cs + 17] = 9.0, 9.0   # 13 tokens: too long for 10
    starts[0][cs + 25], ends[0][cs + 24] = 9.0, 9.0  # end before start
    [result] = best_answers([example], features, starts, ends, Decoding(max_answer_length=10))
    assert (result["start"], result["end"]) == (offsets[2, 0], offsets[3, 1])
    [result] = best_answers([example], features, starts, ends, Decoding(max_answer_length=13))
    assert (result["start"], result["end"]) == (offsets[5, 0], offsets[17, 1])


def test_n_best_alternatives_are_ranked_and_deduplicated(tokenizer):
    example = QAExample("q", "What?", CONTEXT)
    features, _, _ = windows([example], tokenizer, SETTING)
    offsets = context_tokens(tokenizer, CONTEXT)
    starts, ends = flat_logits(features)
    edge = len(features[0]["offsets"])
    peak(features, starts, ends, offsets, edge - 3, edge - 2, score=4.0)  # in windows 0 and 1: one candidate
    [result] = best_answers([example], features, starts, ends, top_k=4)
    spans = [(result["start"], result["end"])] + [(a["start"], a["end"]) for a in result["alternatives"]]
    assert spans[0] == (offsets[edge - 3, 0], offsets[edge - 2, 1])
    assert len(set(spans)) == len(spans) == 4
    scores = [result["score"]] + [a["score"] for a in result["alternatives"]]
    assert scores == sorted(scores, reverse=True) and 0 < sum(scores) <= 1


def run_qa_best(features, starts, ends, n_best=20, max_answer_length=30, v2=False):
    """The best span and its probability as transformers' run_qa post-processing
    (examples/pytorch/question-answering/utils_qa.py) computes them: each window's n-best
    start and end positions over the whole window, kept where both lie in the context, every
    window's candidates together (a span two windows propose counts twice), softmax over the n-best.
    v2: the smallest [CLS] score joins the candidates before the n-best cut (added back if cut);
    returns then also the null answer's probability."""
    candidates = []
    null = min(s[0] + e[0] for s, e in zip(starts, ends))
    for f, s_logits, e_logits in zip(features, starts, ends):
        cs, offsets = f["context_start"], f["offsets"]
        for s in np.argsort(s_logits)[-1:-n_best - 1:-1]:
            for e in np.argsort(e_logits)[-1:-n_best - 1:-1]:
                if not (cs <= s < cs + len(offsets) and cs <= e < cs + len(offsets)):
                    continue
                if e < s or e - s + 1 > max_answer_length:
                    continue
                candidates.append(((int(offsets[s - cs, 0]), int(offsets[e - cs, 1])), s_logits[s] + e_logits[e]))
    candidates = sorted(candidates + [(None, null)] * v2, key=lambda c: -c[1])[:n_best]
    if v2 and all(c[0] is not None for c in candidates):
        candidates.append((None, null))
    scores = np.array([c[1] for c in candidates])
    probs = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum()
    best = next(i for i, c in enumerate(candidates) if c[0] is not None)
    if v2:
        return candidates[best][0], float(probs[best]), float(probs[[c[0] is None for c in candidates]][0])
    return candidates[best][0], float(probs[best])


def test_a_span_several_windows_propose_shares_its_probability_as_in_run_qa(tokenizer):
    example = QAExample("q", "What?", CONTEXT)
    features, _, _ = windows([example], tokenizer, SETTING)
    assert len(features) >= 3
    offsets = context_tokens(tokenizer, CONTEXT)
    rng = np.random.default_rng(0)
    starts = [rng.normal(size=len(f["input_ids"])) for f in features]  # no ties: run_qa's order is argsort's
    ends = [rng.normal(size=len(f["input_ids"])) for f in features]
    edge = len(features[0]["offsets"])
    peak(features, starts, ends, offsets, edge - 3, edge - 2, score=4.0)  # the best span, in windows 0 and 1
    [result] = best_answers([example], features, starts, ends, top_k=3)
    span, probability = run_qa_best(features, starts, ends)
    assert (result["start"], result["end"]) == span == (offsets[edge - 3, 0], offsets[edge - 2, 1])
    assert result["score"] == pytest.approx(probability, abs=1e-6)
    assert (result["start"], result["end"]) not in [(a["start"], a["end"]) for a in result["alternatives"]]


def test_the_null_answer_competes_for_the_n_best_as_in_run_qa(tokenizer):
    """run_qa puts the null answer among the candidates before cutting them to the n-best (so a
    strong null leaves room for 19 spans, not 20) and adds it back after when cut."""
    example = QAExample("q", "What?", CONTEXT)
    features, _, _ = windows([example], tokenizer, SETTING)
    rng = np.random.default_rng(1)
    for null in (3.0, -30.0):  # among the n-best; below every span
        starts = [rng.normal(size=len(f["input_ids"])) for f in features]
        ends = [rng.normal(size=len(f["input_ids"])) for f in features]
        for s, e in zip(starts, ends):
            s[0] = e[0] = null
        [result] = best_answers([example], features, starts, ends, Decoding(null_answers=True, null_threshold=1e9),
                                top_k=100)
        span, probability, null_probability = run_qa_best(features, starts, ends, v2=True)
        assert (result["start"], result["end"]) == span
        assert result["score"] == pytest.approx(probability, abs=1e-6)
        [listed_null] = [a for a in result["alternatives"] if a["start"] is None]
        assert listed_null["score"] == pytest.approx(null_probability, abs=1e-6)
        # the alternatives run by probability, the null answer at its own rank (it was always last)
        scores = [a["score"] for a in result["alternatives"]]
        assert scores == sorted(scores, reverse=True)


def test_a_long_question_beside_a_short_context_still_gets_a_span(tokenizer):
    """When every window's n-best starts or ends lie on the question (a long question, a short
    context), a v1 model answers with the context's best span, as transformers' pipeline does,
    not with an empty answer it was never trained to give."""
    context = "Paris is the capital of France."
    example = QAExample("q", " ".join(["which"] * 30) + "?", context)
    features, _, _ = windows([example], tokenizer, Windowing(max_length=64))
    [f] = features
    starts, ends = (np.zeros(len(f["input_ids"])) for _ in range(2))
    starts[:f["context_start"]] = ends[:f["context_start"]] = 9.0  # the question's tokens fill the n-best
    offsets = f["offsets"]
    starts[f["context_start"]] = ends[f["context_start"] + len(offsets) - 2] = 1.0
    [result] = best_answers([example], features, [starts], [ends])
    assert result["answer"] == context[offsets[0, 0]:offsets[-2, 1]] != ""
    assert 0 < result["score"] < 1


def test_a_questions_windows_do_not_depend_on_the_other_questions(tokenizer):
    context = " ".join(f"w{i}" for i in range(150))
    short = QAExample("a", "What?", context)
    long = QAExample("b", "What is the word that comes right after the other word in this long list here?", context)
    alone, _, _ = windows([short], tokenizer, Windowing(max_length=64))
    together, _, _ = windows([short, long], tokenizer, Windowing(max_length=64))
    mine = [f for f in together if f["example"] == 0]
    assert len(mine) == len(alone)
    for a, b in zip(alone, mine):
        assert np.array_equal(a["input_ids"], b["input_ids"]) and np.array_equal(a["offsets"], b["offsets"])


def test_leading_white_space_of_a_question_is_dropped_as_run_qa_drops_it(trained_tokenizer):
    context = "The crew visited Zurich in 1998."
    padded, _, _ = windows([QAExample("a", "   When?", context)], trained_tokenizer, Windowing(64, 8, 16))
    plain_, _, _ = windows([QAExample("a", "When?", context)], trained_tokenizer, Windowing(64, 8, 16))
    assert np.array_equal(padded[0]["input_ids"], plain_[0]["input_ids"])


def test_a_context_of_characters_the_tokenizer_drops_is_an_error(tokenizer):
    with pytest.raises(BertkitError, match="question 1 \\(id 'z'\\): its context holds no token"):
        windows([QAExample("z", "Who?", "\u200b\u200b\ufeff")], tokenizer, Windowing(max_length=64))


def test_qa_rows_read_from_json_lines_in_a_json_file_and_from_a_json_array(tmp_path):
    """datasets' to_json writes JSON Lines into a .json file; a JSON array of rows reads too."""
    rows = [{"id": "1", "question": "Who?", "context": "Ann went home.", "answers": {"text": ["Ann"],
                                                                                   "answer_start": [0]}},
            {"id": "2", "question": "Where?", "context": "Ann went home.", "answers": {"text": [], "answer_start": []}}]
    lines, array = tmp_path / "lines.json", tmp_path / "array.json"
    lines.write_text("".join(json.dumps(r) + "\n" for r in rows))
    array.write_text(json.dumps(rows))
    for path in (lines, array):
        examples = load_examples("qa", path)
        assert [(e.id, e.gold_texts, e.is_impossible) for e in examples] == [("1", ["Ann"], False), ("2", [], True)]
    (tmp_path / "qa.csv").write_text("question,context\nWho?,Ann\n")
    with pytest.raises(BertkitError, match="qa.csv: QA data is SQuAD JSON, or rows .* not .csv"):
        load_examples("qa", tmp_path / "qa.csv")
    (tmp_path / "other.json").write_text(json.dumps({"version": 1}))
    with pytest.raises(BertkitError, match="not SQuAD JSON \\(expected an object with a 'data' list\\), nor rows"):
        load_examples("qa", tmp_path / "other.json")
    (tmp_path / "bad.json").write_text('{"data": [}')
    with pytest.raises(BertkitError, match="bad.json: not valid JSON \\(line 1"):
        load_examples("qa", tmp_path / "bad.json")


def test_null_answers_compare_the_smallest_cls_score_with_the_best_span(tokenizer):
    example = QAExample("q", "What?", CONTEXT)
    features, _, _ = windows([example], tokenizer, SETTING)
    offsets = context_tokens(tokenizer, CONTEXT)
    starts, ends = flat_logits(features)
    peak(features, starts, ends, offsets, 3, 4, score=5.0)  # best span scores 10
    for s, e in zip(starts, ends):
        s[0], e[0] = 15.0, 15.0                             # [CLS] scores 30 ...
    starts[-1][0], ends[-1][0] = 2.0, 2.0                   # ... except in the last window: 4
    v2 = Decoding(null_answers=True)
    assert best_answers([example], features, starts, ends, v2)[0]["answer"] != ""  # min(30, 4) < 10
    starts[-1][0], ends[-1][0] = 6.0, 6.0                   # null 12 > 10
    [result] = best_answers([example], features, starts, ends, v2)
    assert result["answer"] == "" and result["start"] is None
    assert best_answers([example], features, starts, ends, Decoding(null_answers=True, null_threshold=3.0))[0]["answer"]
    assert best_answers([example], features, starts, ends)[0]["answer"]  # v1.1 never answers nothing


@pytest.fixture(scope="module", params=["wordpiece", "bpe", "unigram"])
def trained_tokenizer(request):
    texts = [r.text for r in builtin("rotten-tomatoes").train[:3000]]
    return train_tokenizer(texts, TokenizerSettings(kind=request.param, vocab_size=1500))


def test_spans_map_back_for_every_tokenizer_kind(trained_tokenizer):
    context = "The film, shot in 1998, is “a must-see” for fans of São Paulo's cinema."
    for text in ("1998", "“a must-see”", "São Paulo's cinema", "must-see"):
        start = context.index(text)
        example = QAExample("q", "What?", context, (Answer(text, start),))
        features, lost, _ = windows([example], trained_tokenizer, Windowing(64, 8, 8))
        assert lost == 0
        f = features[0]
        s, e = f["start_positions"], f["end_positions"]
        starts, ends = flat_logits(features)
        starts[0][s], ends[0][e] = 5.0, 5.0
        [result] = best_answers([example], features, starts, ends)
        assert result["answer"] == context[result["start"]:result["end"]]
        assert result["answer"] == text


def test_first_subwords_for_every_tokenizer_kind(trained_tokenizer):
    words = ("Unbelievably", "São", "Paulo's", "cinema", ",", "1998", "!")
    features, _ = encode_sentences([TaggedSentence(words)], trained_tokenizer, 64)
    first = features[0]["first"]
    assert (first > 0).all() and (np.diff(first) > 0).all()  # every word has its own, increasing first token
    ids = features[0]["input_ids"]
    for w, (a, b) in enumerate(zip(first, list(first[1:]) + [len(ids) - 1])):
        assert plain(trained_tokenizer.decode(ids[a:b].tolist())) == plain(words[w])


def plain(text):
    """Lowercase, accents and spaces dropped (what an uncased WordPiece decodes to)."""
    return "".join(c for c in unicodedata.normalize("NFKD", text.lower()) if not unicodedata.combining(c) and c != " ")


# ---- scoring against the official SQuAD v2 evaluation -------------------------------------------
def official_normalize(s):
    """evaluate-v2.0.py's normalize_answer, written out as the official script has it."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(re.compile(r"\b(a|an|the)\b", re.UNICODE), " ", s)
    return " ".join(s.split())


def official_f1(a_gold, a_pred):
    gold_toks = official_normalize(a_gold).split() if a_gold else []
    pred_toks = official_normalize(a_pred).split() if a_pred else []
    common = collections.Counter(gold_toks) & collections.Counter(pred_toks)
    num_same = sum(common.values())
    if len(gold_toks) == 0 or len(pred_toks) == 0:
        return int(gold_toks == pred_toks)
    if num_same == 0:
        return 0
    precision, recall = num_same / len(pred_toks), num_same / len(gold_toks)
    return 2 * precision * recall / (precision + recall)


def official_scores(dataset, preds):
    """evaluate-v2.0.py's get_raw_scores and total: every question of the file, scored against
    all its gold texts (never answer_start); no non-blank gold text means unanswerable ("")."""
    em, f1 = [], []
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                gold = [a["text"] for a in qa["answers"] if official_normalize(a["text"])] or [""]
                pred = preds[qa["id"]]
                em.append(max(int(official_normalize(a) == official_normalize(pred)) for a in gold))
                f1.append(max(official_f1(a, pred) for a in gold))
    return {"exact_match": sum(em) / len(em), "f1": sum(f1) / len(f1)}


SQUAD_EVAL = [{"title": "t", "paragraphs": [{
    "context": "The Eiffel Tower was built in 1889 by Gustave Eiffel. It is in Paris.",
    "qas": [
        {"id": "q1", "question": "When?", "answers": [{"text": "1889", "answer_start": 30},
                                                      {"text": "in 1889", "answer_start": 27}]},
        {"id": "q2", "question": "Who?", "answers": [{"text": "Gustave Eiffel", "answer_start": 41}]},  # start off
        {"id": "q3", "question": "Color?", "answers": [], "is_impossible": True,
         "plausible_answers": [{"text": "Paris", "answer_start": 60}]},
        {"id": "q4", "question": "Where?", "answers": [{"text": "Lyon", "answer_start": 5}]},  # not in the context
        {"id": "q5", "question": "Where exactly?", "answers": [{"text": "Lyon", "answer_start": 5},
                                                               {"text": "Paris", "answer_start": 63}]},
        {"id": "q6", "question": "Blank?", "answers": [{"text": "  ", "answer_start": 3}]},  # blank: unanswerable
    ]}]}]


def squad_eval_examples(tmp_path):
    """SQUAD_EVAL written as a SQuAD v2 file and read back (its repaired answers warned about)."""
    path = tmp_path / "dev.json"
    path.write_text(json.dumps({"version": "v2.0", "data": SQUAD_EVAL}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        return load_examples("qa", path)


@pytest.mark.parametrize("preds", [
    {"q1": "1889", "q2": "Gustave Eiffel", "q3": "", "q4": "Lyon", "q5": "Lyon", "q6": ""},
    {"q1": "built in 1889", "q2": "Eiffel", "q3": "Paris", "q4": "Paris", "q5": "in Paris", "q6": "Tower"},
    {"q1": "", "q2": "", "q3": "", "q4": "", "q5": "", "q6": ""},
])
def test_squad_scores_equal_the_official_evaluation_on_every_question(tmp_path, preds):
    examples = squad_eval_examples(tmp_path)
    assert [e.id for e in examples] == list(preds)  # no question leaves the denominator
    predictions = [{"answer": preds[e.id]} for e in examples]
    scores = QuestionAnswering().score(examples, predictions, ("start", "end"))
    assert scores == pytest.approx(official_scores(SQUAD_EVAL, preds))


def test_evaluation_predicts_and_scores_every_question_of_a_file(tmp_path, tokenizer):
    """Questions kept for evaluation only (no usable span) sit in the same batches as the others."""
    import bertkit
    import torch

    examples = squad_eval_examples(tmp_path)
    torch.manual_seed(0)
    model = bertkit.build("bert-base", head="qa", num_layers=1, hidden_size=32, num_heads=4, intermediate_size=64,
                          max_positions=128)
    model.tokenizer = tokenizer
    task = QuestionAnswering(Windowing(doc_stride=8, max_query_length=8), Decoding(null_answers=True))
    predictions = task.predict(model, examples, batch_size=8, max_length=32)  # several windows each
    preds = {e.id: p["answer"] for e, p in zip(examples, predictions)}
    assert task.score(examples, predictions, ("start", "end")) == pytest.approx(official_scores(SQUAD_EVAL, preds))


def test_a_short_window_without_a_stride_overlaps_half_its_context(tokenizer):
    """transformers' pipeline halves the stride of a short window; with run_qa's 128 a 128-token
    window beside a 64-token question would hold no context at all. The room is the one beside the
    example's own question, as run_qa budgets each window by its own question."""
    example = QAExample("0", "Where?", " ".join(f"word{i}" for i in range(300)))
    features, _, _ = windows([example], tokenizer, Windowing(max_length=128))
    question = len(tokenizer.encode_plain(["Where?"])[0])
    room = 128 - tokenizer.frame.specials(True) - question
    assert len(features) > 1 and Windowing(max_length=128).stride(tokenizer.frame.specials(True), question) == room // 2
    first, second = (f["offsets"] for f in features[:2])
    shared = sum(1 for span in second.tolist() if span in first.tolist())
    assert shared == room // 2
    assert Windowing(max_length=384).stride(3) == 128  # run_qa's where the window is long enough
    short, _, _ = windows([example], tokenizer, Windowing(max_length=24, doc_stride=4))  # too short for a 64-token
    assert len(short) > 1 and all(len(f["input_ids"]) <= 24 for f in short)  # question, not for this one
