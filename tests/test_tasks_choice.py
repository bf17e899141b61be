"""Multiple choice end to end on real text: Rotten Tomatoes sentences cut in two, the first half the
context, the choices its real second half and word-shuffled copies of it (3 or 4 choices, so
batches mix choice counts). A model with all-MiniLM-L6-v2's lower layers learns to pick the real
ending; the saved model runs in transformers' BertForMultipleChoice to the same logits; the
readers take every layout (JSON lists, numbered columns, SWAG) and refuse bad rows in one line."""

import csv
import json
import random

import pytest
import torch
import transformers

import bertkit
from bertkit.cli import main
from bertkit.errors import BertkitError
from bertkit.tasks import ChoiceExample, Columns, FinetuneSettings, choose, embed, evaluate, finetune, load_examples
from bertkit.tasks.choice import ChoiceObjective, collate_choices, encode_choices
from tasks_support import FAST_BF16, minilm_lower_layers

pytestmark = pytest.mark.filterwarnings("ignore::bertkit.data.DataWarning")  # truncation counts, expected here


def shuffled_endings(split: str, n: int, seed: int = 0) -> list[ChoiceExample]:
    rng = random.Random(seed)
    out = []
    for i, record in enumerate(load_examples("classification", "rotten-tomatoes", split)):
        words = record.text.split()
        if len(words) < 8:
            continue
        context, ending = words[:len(words) // 2], words[len(words) // 2:]
        choices = [" ".join(ending)]
        while len(choices) < (3 if i % 3 == 0 else 4):
            shuffled = ending[:]
            rng.shuffle(shuffled)
            if " ".join(shuffled) not in choices:
                choices.append(" ".join(shuffled))
        right = rng.randrange(len(choices))
        choices[0], choices[right] = choices[right], choices[0]
        out.append(ChoiceExample(" ".join(context), tuple(choices), right))
        if len(out) == n:
            break
    return out


@pytest.fixture(scope="module")
def trained(minilm_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("choice")
    dev = shuffled_endings("dev", 120, seed=1)
    torch.manual_seed(0)
    untrained = evaluate(minilm_lower_layers(minilm_dir, "multiple-choice"), "multiple-choice", dev, progress=False)
    metrics = finetune("multiple-choice", minilm_lower_layers(minilm_dir, "multiple-choice"),
                       shuffled_endings("train", 160), dev, out,
                       FinetuneSettings(epochs=1, lr=5e-4, batch_size=16, max_length=64, progress=False,
                                        bf16=FAST_BF16))
    return out, dev, untrained, metrics


def test_multiple_choice_learns_to_pick_the_real_ending(trained, tmp_path):
    out, dev, untrained, metrics = trained
    assert {len(e.choices) for e in dev} == {3, 4}
    chance = sum(1 / len(e.choices) for e in dev) / len(dev)  # ~0.28
    assert metrics["accuracy"] >= chance + 0.4 and metrics["accuracy"] >= untrained["accuracy"] + 0.3, (untrained, metrics)
    predictions = choose(out, [e.text for e in dev], [list(e.choices) for e in dev], bf16=FAST_BF16)  # as it scored
    assert metrics["accuracy"] == pytest.approx(sum(p["choice"] == e.label for p, e in zip(predictions, dev)) / len(dev))
    for p, e in zip(predictions, dev):
        assert len(p["scores"]) == len(e.choices) and p["answer"] == e.choices[p["choice"]]
        assert sum(p["scores"]) == pytest.approx(1.0, abs=1e-5)
    assert json.loads((out / "task.json").read_text())["task"] == "multiple-choice"
    evaluate(out, None, dev[:12], predictions=tmp_path / "p.jsonl", progress=False)  # each context's choice, gold
    scored = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert [(r["text"], r["choices"], r["choice"], r["gold"]) for r in scored] == [
        (e.text, list(e.choices), p["choice"], e.label) for e, p in zip(dev, predictions[:12])]


def test_a_fine_tuned_model_runs_in_transformers_to_the_same_choice_logits(trained):
    out, dev, _, _ = trained
    ours = bertkit.from_pretrained(out).eval()
    ref = transformers.BertForMultipleChoice.from_pretrained(out).eval()
    examples = [e for e in dev if len(e.choices) == 4][:3]
    batch = collate_choices(encode_choices(examples, ours.tokenizer, 64)[0], ours.tokenizer.pad_token_id)
    with torch.no_grad():
        mine = ours(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).logits
        theirs = ref(**{k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}).logits
    assert mine.shape == (3, 4) and (mine - theirs).abs().max().item() <= 1e-4


def test_a_missing_choice_gets_no_probability_and_no_loss(tokenizer):
    torch.manual_seed(0)
    model = bertkit.build("mini-bert", head="multiple-choice", vocab_size=tokenizer.vocab_size)
    examples = [ChoiceExample("a context", ("one", "two"), 1), ChoiceExample("another one", ("x", "y z", "w"), 2)]
    features, _ = encode_choices(examples, tokenizer, 32)
    for f, e in zip(features, examples):
        f["label"] = e.label
    batch = collate_choices(features, tokenizer.pad_token_id)
    assert batch["input_ids"].shape[:2] == (2, 3) and batch["choice_mask"].tolist() == [[True, True, False]] + [[True] * 3]
    step = ChoiceObjective(model.eval())(batch)
    logits = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).logits
    expected = (torch.nn.functional.cross_entropy(logits[0, :2][None], torch.tensor([1]))
                + torch.nn.functional.cross_entropy(logits[1][None], torch.tensor([2]))) / 2
    assert step.loss.item() == pytest.approx(expected.item(), rel=1e-5)


def test_choice_files_in_every_layout(tmp_path):
    rows = [{"text": "The cat", "choices": ["sat down.", "flew away."], "label": 0},
            {"text": "It rained", "choices": ["all day.", "fish.", "upwards."], "label": "2"}]
    jsonl = tmp_path / "data.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    expected = [ChoiceExample("The cat", ("sat down.", "flew away."), 0),
                ChoiceExample("It rained", ("all day.", "fish.", "upwards."), 2)]
    assert load_examples("multiple-choice", jsonl) == expected

    numbered = tmp_path / "numbered.csv"
    with open(numbered, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["text", "choice0", "choice1", "choice2", "label"])
        w.writerow(["The cat", "sat down.", "flew away.", "", 0])  # fewer choices: an empty cell
        w.writerow(["It rained", "all day.", "fish.", "upwards.", 2])
    assert load_examples("multiple-choice", numbered) == expected

    swag = tmp_path / "swag.csv"  # SWAG's own columns: every ending continues sent2
    with open(swag, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["video-id", "sent1", "sent2", "ending0", "ending1", "ending2", "ending3", "label"])
        w.writerow(["v1", "She opens the door.", "She", "walks in.", "flies.", "melts.", "sings backwards.", 0])
    assert load_examples("multiple-choice", swag) == [
        ChoiceExample("She opens the door.", ("She walks in.", "She flies.", "She melts.", "She sings backwards."), 0)]

    hellaswag = tmp_path / "hellaswag.jsonl"  # HellaSwag's rows as `datasets` writes them: ctx, endings, "label"
    hellaswag.write_text("".join(json.dumps({"ind": i, "activity_label": "x", "ctx_a": r["text"], "ctx_b": "",
                                             "ctx": r["text"], "endings": r["choices"], "label": str(r["label"])})
                                 + "\n" for i, r in enumerate(rows)))
    assert load_examples("multiple-choice", hellaswag) == expected

    renamed = tmp_path / "renamed.jsonl"
    renamed.write_text(json.dumps({"q": "The cat", "options": ["sat down.", "flew away."], "answer": 0}) + "\n")
    assert load_examples("multiple-choice", renamed, columns=Columns("q", None, "answer", "options")) == expected[:1]


@pytest.mark.parametrize("row, message", [
    ({"text": "x", "label": 0}, r"line 1: no choices: a column 'choices'"),
    ({"text": "x", "choices": ["a", "b"], "label": 2}, r"line 1: label 2 .* not the index of one of its 2 choices"),
    ({"text": "x", "choices": ["a"], "label": 0}, r"line 1: 1 choice\(s\); multiple choice needs at least two"),
    ({"text": "x", "choices": "a b", "label": 0}, r"line 1: column 'choices' must be a list of strings"),
    ({"text": "x", "choices": ["a", "b"]}, r"line 1: no column 'label'"),
    ({"text": " ", "choices": ["a", "b"], "label": 0}, r"line 1: empty context in column 'text'"),
    ({"ctx": " ", "endings": ["a", "b"], "label": 0}, r"line 1: empty context in column 'ctx'"),  # said 'text'
    ({"text": "x", "choice0": "a", "choice1": "", "choice2": "c", "label": 2},
     r"line 1: column 'choice1' is empty but a later choice is not"),
    ({"text": "x", "choices": ["a", " ", "c"], "label": 0}, r"line 1: choice 1 in column 'choices' is empty"),
    ({"text": "x", "choices": ["a", "b"], "label": "b"}, r"line 1: label 'b' .* it is choice 1's text, and the label "
                                                          r"is the right choice's index"),
    ({"text": "x", "choices": ["a", "b"], "label": True}, r"line 1: label true .* not the index"),  # said True
    ({"text": "x", "choices": ["a", "b"], "label": None}, r"line 1: empty label in column 'label'; a multiple-choice"),
    ({"text": "x", "choices": ["a", "b"], "label": " "}, r"line 1: empty label in column 'label'"),
    ({"ctx": "x", "choices": ["a", "b"], "label": 0}, r"line 1: no column 'text' \(columns: ctx, choices, label; "
                                                      r"--text-column names another\)"),
])
def test_bad_choice_rows_are_one_error_naming_the_line(tmp_path, row, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(BertkitError, match=f"bad.jsonl, {message}"):
        load_examples("multiple-choice", path)


def test_predict_choose_from_arguments_and_json_lines(trained, tmp_path, capsys):
    out, dev, _, _ = trained
    e = dev[0]
    assert main(["predict", "choose", "--model", str(out), e.text, *sum((["--choice", c] for c in e.choices), [])]) == 0
    line = json.loads(capsys.readouterr().out)
    assert line["choices"] == list(e.choices) and line["answer"] == e.choices[line["choice"]]
    inputs = tmp_path / "in.jsonl"
    inputs.write_text("\n".join(json.dumps({"text": x.text, "choices": list(x.choices)}) + "\n" for x in dev[:5]))
    assert main(["predict", "choose", "--model", str(out), "--input", str(inputs)]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["line"] for x in lines] == [1, 3, 5, 7, 9]  # an empty line between inputs
    inputs.write_text(inputs.read_text() + '\n{"text": "no choices here"}\n')
    assert main(["predict", "choose", "--model", str(out), "--input", str(inputs)]) == 2
    assert capsys.readouterr().err.strip().endswith("in.jsonl, line 11: the input has no choices (--choice, repeated, "
                                                    'or a "choices" list)')
    assert [x["choice"] for x in lines] == [p["choice"] for p in choose(out, [x.text for x in dev[:5]],
                                                                        [list(x.choices) for x in dev[:5]])]
    # each layout finetune reads, as JSON lines too: numbered columns, SWAG's and HellaSwag's rows were
    # "the object needs 'text'" or "no choices" (data-format tester)
    a, b, c = dev[:3]
    inputs.write_text(json.dumps({"id": "x", "sent1": a.text, "sent2": "", **{f"ending{k}": t for k, t in
                                                                            enumerate(a.choices)}}) + "\n"
                      + json.dumps({"ctx": b.text, "endings": list(b.choices)}) + "\n"
                      + json.dumps({"text": c.text, **{f"choice{k}": t for k, t in enumerate(c.choices)}}) + "\n")
    assert main(["predict", "choose", "--model", str(out), "--input", str(inputs)]) == 0
    read = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [(x["text"], x["choices"], x["choice"]) for x in read] == [(x["text"], x["choices"], x["choice"])
                                                                     for x in lines[:3]]
    assert read[0]["id"] == "x"
    assert main(["predict", "choose", "--model", str(out), "a context", "--choice", "only one"]) == 2
    with pytest.raises(BertkitError, match="context 2: choice 0 is empty"):
        choose(out, ["a context", "another"], [["yes", "no"], ["", "no"]])
    assert capsys.readouterr().err.strip().endswith("context 1: choices must be a list of at least two strings")


def test_attention_maps_of_a_multiple_choice_model_come_from_its_encoder(trained, tmp_path, capsys):
    out, _, _, _ = trained
    assert main(["visualize", "attention", "--model", str(out), "--text", "the film is good",
                 "--out", str(tmp_path / "maps")]) == 0
    assert (tmp_path / "maps" / "attention.html").exists()


def test_embeddings_of_a_model_with_a_head_come_from_its_encoder(trained):
    """embed runs the encoder alone: a multiple-choice model (whose forward takes (B, C, T)) gives
    the vectors its bare encoder gives."""
    out, dev, _, _ = trained
    texts = [e.text for e in dev[:20]]
    headed = embed(bertkit.from_pretrained(out), texts)
    assert torch.equal(headed, embed(bertkit.from_pretrained(out, head=None), texts))
