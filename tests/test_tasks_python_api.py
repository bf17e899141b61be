"""The Python task API takes what a file would give and refuses the rest in one line: labels given
as Python ints, bools and floats read as the same labels in a JSON file, examples of another task's
class, bad counts and settings; an encoder given as a Model gets a fresh head as its directory does;
the functions return full-precision scores (the command line rounds what it prints); the Python
defaults are the command line's. Tiny models (2 layers, 32 wide) keep each test fast."""

import inspect
import json
import warnings

import pytest
import torch

import bertkit
from bertkit.cli import main, parser
from bertkit.data import DataWarning
from bertkit.errors import BertkitError
from bertkit.tasks import (ChoiceExample, FinetuneSettings, QAExample, TaggedSentence, TextExample, answer, choose,
                           classify, embed, evaluate, fill_mask, finetune, load_examples, make_task, search, tag)
from bertkit.tasks.embedding import SentenceSettings, similarity
from bertkit.tasks.finetune import model_for
from test_tasks_finetune_api import tiny

pytestmark = pytest.mark.filterwarnings("ignore::bertkit.data.DataWarning")



def quiet(**kw):
    return FinetuneSettings(**{**dict(batch_size=4, max_length=16, progress=False, steps=1), **kw})


def error_of(call) -> str:
    with pytest.raises(BertkitError) as e:
        call()
    return str(e.value)


# ---- 1. labels given as Python values ---------------------------------------------------------
def test_python_int_bool_and_float_labels_read_as_the_same_labels_in_a_json_file(tmp_path):
    values = [1, 0, True, False, 2.0, "3", " 4.0 "]
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps({"text": f"text {i}", "label": v}) + "\n" for i, v in enumerate(values)))
    given = [TextExample(f"text {i}", label=v) for i, v in enumerate(values)]
    for task in ("classification", "regression"):
        if task == "regression":  # (a file's "3" is a number there too)
            values = [v for v in values if not isinstance(v, str)]
            path.write_text("".join(json.dumps({"text": f"t{i}", "label": v}) + "\n" for i, v in enumerate(values)))
            given = [TextExample(f"t{i}", label=v) for i, v in enumerate(values)]
        assert [e.label for e in load_examples(task, given)] == [e.label for e in load_examples(task, path)]
    tags = [[1, 0], [True, 2.0]]
    path = tmp_path / "tags.jsonl"
    path.write_text("".join(json.dumps({"tokens": ["a", "b"], "tags": t}) + "\n" for t in tags))
    assert load_examples("token-classification", [TaggedSentence(("a", "b"), tuple(t)) for t in tags]) == \
        load_examples("token-classification", path)
    path = tmp_path / "choices.jsonl"
    path.write_text(json.dumps({"text": "c", "choices": ["x", "y"], "label": 1.0}) + "\n")
    assert load_examples("multiple-choice", [ChoiceExample("c", ["x", "y"], 1.0)]) == \
        load_examples("multiple-choice", path)
    assert "example 2: label {'a'} is a set" in error_of(
        lambda: load_examples("classification", [TextExample("a", label="x"), TextExample("b", label={"a"})]))
    assert "example 1: 2 words but 1 tags" in error_of(
        lambda: load_examples("token-classification", [TaggedSentence(("a", "b"), (0,))]))


def test_finetune_and_evaluate_take_integer_labels_as_their_names(tokenizer, tmp_path):
    texts = ["a good film", "a great film", "a bad film", "an awful film"]
    ints = [TextExample(t, label=int(k < 2)) for k, t in enumerate(texts)]
    names = [TextExample(t, label=str(int(k < 2))) for k, t in enumerate(texts)]
    finetune("classification", tiny("classification", tokenizer), ints, ints, tmp_path / "run", quiet())
    assert bertkit.from_pretrained(tmp_path / "run").config.label_names == ("0", "1")
    assert evaluate(tmp_path / "run", None, ints) == evaluate(tmp_path / "run", None, names)


# ---- 2. an encoder given as a Model --------------------------------------------------------------
def test_a_model_without_a_head_gets_the_fresh_head_its_directory_would(tokenizer, tmp_path):
    encoder = tiny(None, tokenizer)
    encoder.save_pretrained(tmp_path / "encoder")
    job = make_task("classification")
    torch.manual_seed(0)
    from_model, labels = model_for(job, encoder, ("neg", "pos"))
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # neither path warns about the new head
        from_dir, _ = model_for(job, str(tmp_path / "encoder"), ("neg", "pos"))
    assert encoder.head_kind is None and from_model.head_kind == "classification" and labels == ("neg", "pos")
    assert from_model.config.label_names == from_dir.config.label_names
    theirs = from_dir.state_dict()
    assert all(torch.equal(v, theirs[k]) for k, v in from_model.state_dict().items())
    assert from_model.state_dict().keys() == theirs.keys()


# ---- 3-5. texts, batch sizes and top_k ---------------------------------------------------------------
def test_fill_mask_refuses_a_bare_string_and_non_strings_as_the_other_helpers_do(tokenizer):
    mlm = tiny("mlm", tokenizer)
    for texts in ("A [MASK] film.", [None]):
        assert error_of(lambda: fill_mask(mlm, texts)) == error_of(lambda: classify(mlm, texts))
    assert "texts must be a list of strings (one text: [text])" in error_of(lambda: fill_mask(mlm, "A [MASK]."))


@pytest.mark.parametrize("size", [0, -1])
def test_every_prediction_helper_refuses_a_batch_size_below_one_alike(tokenizer, size):
    models = {head: tiny(head, tokenizer) for head in ("classification", "token-classification", "qa",
                                                        "multiple-choice", "mlm")}
    calls = [lambda: classify(models["classification"], ["x"], batch_size=size),
             lambda: tag(models["token-classification"], ["x"], batch_size=size),
             lambda: answer(models["qa"], ["Who?"], ["x y"], batch_size=size),
             lambda: choose(models["multiple-choice"], ["x"], [["a", "b"]], batch_size=size),
             lambda: fill_mask(models["mlm"], ["a [MASK]"], batch_size=size),
             lambda: search(models["mlm"], ["x"], ["y"], batch_size=size)]
    expected = error_of(lambda: embed(models["mlm"], ["x"], batch_size=size))
    assert expected == f"batch size must be at least 1, got {size}"
    assert [error_of(call) for call in calls] == [expected] * len(calls)


@pytest.mark.parametrize("top_k", [0, -2])
def test_answer_refuses_top_k_below_one_as_search_and_fill_mask_do(tokenizer, top_k):
    qa, mlm = tiny("qa", tokenizer), tiny("mlm", tokenizer)
    said = error_of(lambda: answer(qa, ["Who?"], ["John lives in Paris."], top_k=top_k))
    assert said == error_of(lambda: search(mlm, ["x"], ["y"], top_k=top_k)) == \
        error_of(lambda: fill_mask(mlm, ["a [MASK]"], top_k=top_k)) == f"top_k must be at least 1, got {top_k}"


# ---- 6. examples of another kind, settings of another type --------------------------------------------
WRONG = {"classification": QAExample("1", "q?", "c"), "regression": ChoiceExample("c", ("a", "b")),
         "token-classification": TextExample("a text"), "qa": TextExample("good", label="LABEL_0"),
         "multiple-choice": TextExample("a text"), "embedding": TaggedSentence(("a",), ("O",))}
EXPECTED = {"classification": "TextExample", "regression": "TextExample", "token-classification": "TaggedSentence",
            "qa": "QAExample", "multiple-choice": "ChoiceExample", "embedding": "TextExample"}


@pytest.mark.parametrize("task", list(WRONG))
def test_examples_of_another_task_are_one_error_naming_the_class_it_takes(task, tmp_path):
    wrong = WRONG[task]
    expected = f"{task} takes {EXPECTED[task]} examples; example 1 is a {type(wrong).__name__}"
    assert error_of(lambda: evaluate(tmp_path, task, [wrong])) == expected
    assert error_of(lambda: finetune(task, "bert-base", [wrong], [wrong], tmp_path / "out", quiet())) == expected


def test_finetune_refuses_a_dict_for_settings_or_examples(tmp_path):
    train = [TextExample("a", label="x"), TextExample("b", label="y")]
    assert "settings must be a FinetuneSettings" in error_of(
        lambda: finetune("classification", "bert-base", train, train, tmp_path / "a", {"steps": 2}))
    rows = [{"text": "a", "label": "x"}]
    assert error_of(lambda: finetune("classification", "bert-base", rows, rows, tmp_path / "b", quiet())) == \
        "classification takes TextExample examples; example 1 is a dict"


# ---- 7. full-precision scores, rounded only where the command line prints -------------------------
def test_search_returns_the_similarity_unrounded(tokenizer):
    model = tiny(None, tokenizer)
    queries, corpus = ["a good film", "rain"], ["a great movie", "the weather", "a dull plot"]
    hits = search(model, queries, corpus, top_k=3)
    expected = similarity(embed(model, queries), embed(model, corpus), "cosine")
    assert [[h["score"] for h in row] for row in hits] == \
        [[expected[q, h["index"]].item() for h in row] for q, row in enumerate(hits)]


def test_tag_and_answer_return_full_floats_and_the_command_line_prints_them_rounded(tokenizer, tmp_path, capsys):
    tiny("token-classification", tokenizer, num_labels=3).save_pretrained(tmp_path / "tagger")
    [tagged] = tag(tmp_path / "tagger", ["A dull and lifeless plot."])
    assert any(s != round(s, 6) for s in tagged["scores"])
    assert main(["predict", "tag", "--model", str(tmp_path / "tagger"), "A dull and lifeless plot."]) == 0
    [line] = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert line == {**tagged, "scores": [round(s, 6) for s in tagged["scores"]]}

    tiny("qa", tokenizer).save_pretrained(tmp_path / "qa")
    context = "The Eiffel Tower in Paris opened in 1889 and is 330 metres tall."
    [found] = answer(tmp_path / "qa", ["When did it open?"], [context], top_k=3)
    scores = [found["score"]] + [a["score"] for a in found["alternatives"]]
    assert any(s != round(s, 6) for s in scores)
    assert main(["predict", "answer", "--model", str(tmp_path / "qa"), "--context", context, "--top-k", "3",
                 "When did it open?"]) == 0
    [line] = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [line["score"]] + [a["score"] for a in line["alternatives"]] == [round(s, 6) for s in scores]
    assert {**line, "score": 0, "alternatives": None} == {**found, "score": 0, "alternatives": None}


# ---- 8. the Python defaults are the command line's -------------------------------------------------------
@pytest.mark.parametrize("argv, function", [
    (["embed"], embed), (["predict", "embed"], embed), (["predict", "embed", "--query", "q"], search),
    (["predict", "classify"], classify), (["predict", "tag"], tag), (["predict", "answer"], answer),
    (["predict", "choose"], choose), (["predict", "fill-mask"], fill_mask)])
def test_python_defaults_are_the_command_lines(argv, function):
    args = parser().parse_args(argv + ["--model", "m", "text"])
    defaults = inspect.signature(function).parameters
    for name in ("batch_size", "top_k"):
        if name in defaults and hasattr(args, name):
            assert getattr(args, name) == defaults[name].default, name
    helps = {a.dest: a.help for a in parser()._subparsers._group_actions[0].choices[argv[0]]._actions}
    if argv[0] == "predict":
        predict = parser()._subparsers._group_actions[0].choices["predict"]
        helps = {a.dest: a.help for a in predict._subparsers._group_actions[0].choices[argv[1]]._actions}
    assert f"({args.batch_size};" in helps["batch_size"]  # what --help says is what it does


# ---- 9. settings checked on construction -------------------------------------------------------------
@pytest.mark.parametrize("given, said", [
    ({"bf16": "no"}, "FinetuneSettings: bf16 must be true or false, got 'no'"),
    ({"max_length": "16"}, "FinetuneSettings: max_length must be an integer, got '16'"),
    ({"lr": "1e-4"}, "FinetuneSettings: lr must be a number, got '1e-4'"),
    ({"schedule": "cosin"}, "unknown schedule 'cosin'; choose one of linear, cosine, constant"),
    ({"warmup": 5.0}, "warmup is a fraction of training in [0, 1), got 5.0"),
    ({"warmup": -0.1}, "warmup is a fraction of training in [0, 1), got -0.1"),
    ({"time_budget": 0}, "time_budget must be a positive number of seconds, got 0"),
    ({"max_length": 4}, "max_length must be at least 8, got 4"),
    *[({"null_threshold": x}, f"null_threshold must be a finite number, got {x}")  # nan went into task.json
      for x in (float("nan"), float("inf"), -float("inf"))],
    ({"pooling": "max"}, "unknown pooling 'max'; choose one of mean, cls")])
def test_finetune_settings_refuse_bad_values_on_construction(given, said):
    assert error_of(lambda: FinetuneSettings(**given)).startswith(said)


def test_sentence_settings_and_embed_refuse_wrong_types(tokenizer):
    assert error_of(lambda: SentenceSettings("64", "mean")) == \
        "SentenceSettings: max_length must be an integer, got '64'"
    model = tiny(None, tokenizer)
    assert error_of(lambda: embed(model, ["a"], normalize="no")) == "normalize must be True, False or None, got 'no'"
    assert error_of(lambda: embed(model, ["a"], max_length="16")) == "max length must be a whole number, got '16'"


# ---- 10. predictions stream a window at a time ----------------------------------------------------
def counting_forwards(model) -> list:
    """A list that gets one entry per forward of the model (of its encoder, for embed)."""
    calls = []
    model.backbone.register_forward_hook(lambda *_: calls.append(1))
    return calls


STREAMED = {  # helper: (its head, its call on `n` inputs)
    "classify": ("classification", lambda m, n, **kw: classify(m, [f"text {'x ' * (i % 7)}{i}" for i in range(n)],
                                                               **kw)),
    "tag": ("token-classification", lambda m, n, **kw: tag(m, [f"{'a ' * (i % 5)}word {i}" for i in range(n)], **kw)),
    "answer": ("qa", lambda m, n, **kw: answer(m, [f"Who is {i}?" for i in range(n)],
                                               [f"{'Ann met ' * (i % 4)}Bob number {i}." for i in range(n)], **kw)),
    "choose": ("multiple-choice", lambda m, n, **kw: choose(m, [f"pick {i}" for i in range(n)],
                                                            [["yes", f"no {'x ' * (i % 3)}"] for i in range(n)], **kw)),
    "embed": (None, lambda m, n, **kw: embed(m, [f"{'a ' * (i % 6)}text {i}" for i in range(n)], **kw)),
    "fill_mask": ("mlm", lambda m, n, **kw: fill_mask(m, [f"{'a ' * (i % 6)}[MASK] {i}" for i in range(n)], **kw))}


@pytest.mark.parametrize("helper", list(STREAMED))
def test_stream_yields_the_first_results_before_later_windows_run_and_in_input_order(tokenizer, helper):
    """stream=True gives each window's results as it is done (the CLI writes them at once); they
    are what one window over every input gives, in the inputs' order."""
    head, call = STREAMED[helper]
    model = tiny(head, tokenizer)
    whole = call(model, 40, batch_size=64)  # one window: batches sorted by length over all 40
    calls = counting_forwards(model)
    results = call(model, 40, batch_size=2, stream=True)
    first = next(iter(results))
    ran = len(calls)
    rest = list(results)
    assert 0 < ran < len(calls)  # the first result came before the later windows ran
    got = [first, *rest]
    assert len(got) == 40
    if helper == "embed":
        torch.testing.assert_close(torch.stack(got), whole, atol=1e-5, rtol=1e-4)
        return
    for mine, expected in zip(got, whole):  # the same input, and its numbers (batches of other lengths)
        if helper == "fill_mask":  # (near ties of a random model may swap ids: the text, the mask, the scores)
            assert [p["score"] for p in mine.pop("predictions")] == pytest.approx(
                [p["score"] for p in expected.pop("predictions")], abs=1e-6)
        assert {k: v for k, v in mine.items() if "score" not in k} == \
            {k: v for k, v in expected.items() if "score" not in k}
        assert mine.get("score") == pytest.approx(expected.get("score"), abs=1e-5)


def test_a_streamed_truncation_warning_counts_every_window_once_and_only_its_own(tokenizer):
    model = tiny("classification", tokenizer)
    texts = [("a long text " * 10 if i % 4 == 0 else "short") for i in range(40)]
    with pytest.warns(DataWarning) as caught:
        list(classify(model, texts, batch_size=2, max_length=16, stream=True))
    assert [str(w.message) for w in caught] == ["10 of 40 texts were longer than 16 tokens and were truncated"]
    with pytest.warns(DataWarning) as caught:  # another call while a stream waits between windows
        waiting = classify(model, texts, batch_size=2, max_length=16, stream=True)
        next(waiting)
        classify(model, ["a long text " * 20] * 5, max_length=16)
        list(waiting)
    assert [str(w.message) for w in caught] == ["5 of 5 texts were longer than 16 tokens and were truncated",
                                                "10 of 40 texts were longer than 16 tokens and were truncated"]
    model.train()  # two streams ending out of order give the model its training mode back
    first, second = (classify(model, texts, batch_size=2, stream=True) for _ in range(2))
    next(first), next(second)
    assert model.training  # (eval mode for each window's work alone)
    list(first), list(second)
    assert model.training


def test_a_streamed_answer_checks_every_input_at_the_call_and_numbers_it_in_the_whole(tokenizer):
    model = tiny("qa", tokenizer)
    contexts = [f"Ann met Bob number {i}." for i in range(40)]
    contexts[35] = "\u200b\u200b"  # no token at all, in the fifth window of 8 batches of 4
    for stream in (False, True):
        assert error_of(lambda: answer(model, [f"Who is {i}?" for i in range(40)], contexts, batch_size=4,
                                       stream=stream)).startswith("question 36: its context holds no token")
        assert "doc_stride must be at least 0 and below" in error_of(lambda: answer(
            model, ["q"] * 3, ["c d e"] * 3, doc_stride=100, max_length=32, stream=stream))


def test_an_interrupted_predict_keeps_the_lines_of_the_windows_done(tokenizer, tmp_path, capsys, monkeypatch):
    """Ctrl-C in the third window: the first two windows' lines are out, whole, as a full run
    writes them; a `| head` gets its lines the same way."""
    tiny("classification", tokenizer).save_pretrained(tmp_path / "clf")
    (tmp_path / "in.txt").write_text("".join(f"text number {'x ' * (i % 5)}{i}\n" for i in range(60)))
    argv = ["predict", "classify", "--model", str(tmp_path / "clf"), "--input", str(tmp_path / "in.txt"),
            "--batch-size", "2"]
    assert main(argv) == 0
    full = capsys.readouterr().out.splitlines()
    forward, calls = bertkit.Model.forward, []

    def interrupted(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2 * 8 + 1:  # windows of 8 batches of 2 inputs
            raise KeyboardInterrupt
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(bertkit.Model, "forward", interrupted)
    assert main(argv) == 130
    assert capsys.readouterr().out.splitlines() == full[:32]


def test_warnings_from_the_python_api_name_the_callers_line(tokenizer, tmp_path):
    """Not a line inside bertkit or contextlib.py (a streamed warning is said from a context
    manager's exit): the warning's file is the code that called bertkit."""
    tiny(None, tokenizer).save_pretrained(tmp_path / "encoder")
    (tmp_path / "rows.csv").write_text("text,label\na,x\n,y\nb,y\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        classify(tiny("classification", tokenizer), ["word " * 200], max_length=16)
        bertkit.from_pretrained(tmp_path / "encoder", head="classification")  # a fresh head
        load_examples("classification", tmp_path / "rows.csv")  # an empty row skipped
        embed(tiny(None, tokenizer), ["word " * 200], max_length=16)  # (under torch.no_grad's wrapper)
    assert [w.category.__name__ for w in caught] == ["DataWarning", "FreshHeadWarning", "DataWarning", "DataWarning"]
    assert [w.filename for w in caught] == [__file__] * 4
