"""The fine-tuning API on tiny models (fast): the Trainer's on_eval hook, early stopping, the best
checkpoint at the root of the run in Hugging Face format (transformers loads it and gives the
same logits), metrics.json / task.json, evaluate() reproducing the dev scores, and the
prediction helpers' plain-dict output. Whether fine-tuning *learns* is checked on real data in
test_tasks_finetune_*.py."""

import json
import warnings

import numpy as np
import pytest
import torch

import bertkit
from bertkit.data import DataWarning
from bertkit.errors import BertkitError
from bertkit.tasks import (Answer, FinetuneSettings, QAExample, TaggedSentence, answer, classify, evaluate, finetune,
                           load_examples, tag)
from bertkit.tasks.classification import ClassificationObjective
from bertkit.tasks.qa import SpanObjective
from bertkit.tasks.tagging import TaggingObjective
from bertkit.train import Trainer, TrainSettings

pytestmark = pytest.mark.filterwarnings("ignore::bertkit.data.DataWarning")  # truncation counts, expected here

TINY = dict(num_layers=2, hidden_size=32, num_heads=4, intermediate_size=64, max_positions=128)


def tiny(head, tokenizer, num_labels=2, seed=0):
    torch.manual_seed(seed)
    model = bertkit.build("bert-base", head=head, num_labels=num_labels, **TINY)
    model.tokenizer = tokenizer
    return model


@pytest.fixture(scope="module")
def sentiment():
    train = load_examples("classification", "rotten-tomatoes", "train")[::50]  # both classes, real text
    dev = load_examples("classification", "rotten-tomatoes", "dev")[::20]
    return train, dev


def quiet(**kw):
    base = dict(batch_size=16, max_length=32, progress=False)
    return FinetuneSettings(**{**base, **kw})


# ---- heads and objectives ---------------------------------------------------------------------
def test_each_task_head_and_objective_shapes(tokenizer):
    batch = tokenizer(["a good film", "a bad one, really"], max_length=16)
    B, T = batch["input_ids"].shape
    cls = tiny("classification", tokenizer, num_labels=3)
    assert cls(batch["input_ids"], batch["attention_mask"]).logits.shape == (B, 3)
    step = ClassificationObjective(cls)({**batch, "label": torch.tensor([0, 2])})
    assert step.loss.ndim == 0 and set(step.metrics) == {"loss", "accuracy"}
    reg = tiny("classification", tokenizer, num_labels=1).eval()  # no dropout: the loss is comparable
    step = ClassificationObjective(reg)({**batch, "label": torch.tensor([0.5, -1.0])})
    out = reg(batch["input_ids"], batch["attention_mask"]).logits.squeeze(-1)
    assert step.loss.item() == pytest.approx(((out - torch.tensor([0.5, -1.0])) ** 2).mean().item(), rel=1e-4)
    tagger = tiny("token-classification", tokenizer, num_labels=5)
    assert tagger(batch["input_ids"], batch["attention_mask"]).logits.shape == (B, T, 5)
    labels = torch.full((B, T), -100)
    labels[:, 1] = torch.tensor([1, 4])
    tagger.eval()
    step = TaggingObjective(tagger)({**batch, "labels": labels})
    logits = tagger(batch["input_ids"], batch["attention_mask"]).logits[:, 1]  # only position 1 has a label
    assert step.loss.item() == pytest.approx(torch.nn.functional.cross_entropy(logits, torch.tensor([1, 4])).item(),
                                             rel=1e-4)
    qa = tiny("qa", tokenizer)
    out = qa(batch["input_ids"], batch["attention_mask"])
    assert out.start_logits.shape == out.end_logits.shape == (B, T)
    step = SpanObjective(qa)({**batch, "start_positions": torch.tensor([1, 0]), "end_positions": torch.tensor([2, 0])})
    assert set(step.metrics) == {"loss", "span_accuracy"}
    with pytest.raises(BertkitError, match="needs a qa head"):
        SpanObjective(cls)


@pytest.mark.parametrize("kind", ["token-classification", "classification"])
def test_accumulated_micro_batches_give_the_gradient_of_the_whole_batch(tokenizer, tmp_path, kind):
    """Tagging: the halves label 4 and 32 words; classification: 3 and 5 rows (a last, partial batch)."""
    import copy

    reviews = [e.text for e in load_examples("classification", "rotten-tomatoes", "dev")[:8]]
    whole = tokenizer(reviews, max_length=24)
    if kind == "token-classification":
        whole["labels"] = torch.full_like(whole["input_ids"], -100)
        whole["labels"][:4, 1] = 1
        whole["labels"][4:, 1:9] = 2
        cut = 4
    else:
        whole["label"] = torch.tensor([0, 1, 1, 0, 1, 0, 0, 1])
        cut = 3
    halves = [{k: v[:cut] for k, v in whole.items()}, {k: v[cut:] for k, v in whole.items()}]
    model = tiny(kind, tokenizer, num_labels=3).eval()  # no dropout
    objective = (TaggingObjective if kind == "token-classification" else ClassificationObjective)(model)
    grads = []
    for data, accumulation in ((lambda i: whole, 1), (lambda i: halves[i % 2], 2)):
        run = copy.deepcopy(objective)
        settings = TrainSettings(steps=1, lr=0.0, clip_norm=None, accumulation=accumulation, progress=False)
        trainer = Trainer(run, data, settings, tmp_path / f"run{accumulation}")
        run.eval()
        trainer.train_step()
        grads.append([p.grad for p in run.parameters() if p.grad is not None])
    for one, two in zip(*grads):
        assert (one - two).abs().max() <= 1e-4 * one.abs().max() + 1e-8


def test_finetune_accumulates_and_clips_as_told(tokenizer, sentiment, tmp_path):
    train, dev = sentiment
    metrics = finetune("classification", tiny("classification", tokenizer), train[::3][:40], dev[:8], tmp_path,
                       quiet(epochs=1, batch_size=4, accumulation=3, clip_norm=None))
    assert metrics["steps"] == 4  # 40 rows in steps of 12: ceil(10 micro-batches / 3) optimizer steps make the epoch
    metrics = finetune("classification", tiny("classification", tokenizer), train[::3][:40], dev[:8], tmp_path / "3",
                       quiet(epochs=3, batch_size=4, accumulation=3))
    assert metrics["steps"] == 12  # each epoch whole steps, its last a short one, as transformers' Trainer counts


def test_a_fine_tune_stopped_by_a_non_finite_loss_keeps_its_best_model(tokenizer, sentiment, tmp_path, monkeypatch):
    """A loss that turns nan after an evaluation stops the run with its best model saved, as Ctrl-C
    does (it was lost: fine-tuning writes no checkpoints); before any evaluation, nothing is."""
    train, dev = sentiment
    forward, calls = ClassificationObjective.forward, []

    def poisoned(self, batch, totals=None):
        step = forward(self, batch, totals)
        calls.append(len(calls))
        if len(calls) > poison_after:
            step.loss = step.loss * float("nan")
        return step

    monkeypatch.setattr(ClassificationObjective, "forward", poisoned)
    poison_after = 3
    with pytest.raises(BertkitError, match=r"^loss is nan at step 4; stopping \(.*\); the best model so far \(step 2, "
                                           r"accuracy .*\) is saved in"):
        finetune("classification", tiny("classification", tokenizer), train, dev[:8], tmp_path / "run",
                 quiet(steps=6, eval_every=2))
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert saved["interrupted"] and saved["best_step"] == 2 and (tmp_path / "run" / "task.json").exists()
    assert classify(tmp_path / "run", ["a fine film"])[0]["label"] in ("positive", "negative")
    calls.clear()
    poison_after = 0
    with pytest.raises(BertkitError, match=r"^loss is nan at step 1, before the first evaluation; stopping \(no model "
                                           r"was saved; before any update"):
        finetune("classification", tiny("classification", tokenizer), train, dev[:8], tmp_path / "early",
                 quiet(steps=6, eval_every=2))
    assert not (tmp_path / "early" / "model.safetensors").exists()


def test_accumulated_micro_batches_are_the_larger_batch_cut_up(tokenizer, sentiment, tmp_path):
    """batch_size B with accumulation k holds in each step the rows batch_size k x B does (the
    same run, as in transformers), an epoch's last short step included; fine-tuning both ways
    without dropout gives the same weights."""
    from bertkit.tasks.base import TrainBatches

    features = [{"input_ids": np.arange(1 + i % 17), "token_type_ids": np.zeros(1 + i % 17, dtype=np.int64),
                 "label": i} for i in range(103)]
    for window, processes in ((50, 1), (1, 1), (50, 2), (50, 3)):  # 103 = 8 x 12 + 7
        # under torchrun each micro-batch needs a row per process: 3 x 3 > 7, so the last step
        # joins the one before it, where one batch of 12 needs only 3 rows of the 7
        big = TrainBatches(features, 12, 0, seed=3, window=window,
                           min_rows=processes * 3 if processes > 2 else processes)
        cut = TrainBatches(features, 4, 0, seed=3, window=window, min_rows=processes, accumulation=3)
        assert cut.per_epoch == 3 * big.per_epoch == 3 * (8 if processes == 3 else 9)
        for step in range(2 * big.per_epoch):  # two epochs
            micro = [cut(3 * step + m)["label"] for m in range(3)]
            assert sorted(torch.cat(micro).tolist()) == sorted(big(step)["label"].tolist())
            assert min(len(m) for m in micro) >= processes
    with pytest.raises(BertkitError, match="2 training example\\(s\\) cannot fill the 3 micro-batches"):
        TrainBatches(features[:2], 4, 0, accumulation=3)
    train, dev = sentiment
    weights = []
    for batch_size, accumulation in ((12, 1), (4, 3)):
        torch.manual_seed(0)
        model = bertkit.build("bert-base", head="classification", num_labels=2, hidden_dropout=0.0,
                              attention_dropout=0.0, **TINY)
        model.tokenizer = tokenizer
        finetune("classification", model, train[::3][:40], dev[:8], tmp_path / str(accumulation),
                 quiet(epochs=2, batch_size=batch_size, accumulation=accumulation, lr=1e-3, eval_every=100))
        weights.append(bertkit.from_pretrained(tmp_path / str(accumulation)).state_dict())
    assert weights[0].keys() == weights[1].keys()
    assert max((weights[0][k] - weights[1][k]).abs().max().item() for k in weights[0]) < 1e-5
    with pytest.raises(BertkitError, match="accumulation must be at least 1"):
        FinetuneSettings(accumulation=0)
    with pytest.raises(BertkitError, match="clip_norm must be positive"):
        FinetuneSettings(clip_norm=0)


def reference_pair(cls_name, tmp_path, **config):
    """A tiny transformers BERT with head `cls_name` and no dropout, and bertkit's load of it."""
    import transformers

    torch.manual_seed(0)
    theirs = getattr(transformers, cls_name)(transformers.BertConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **config)).train()
    theirs.save_pretrained(tmp_path)
    return theirs, bertkit.from_pretrained(tmp_path).train()


def padded_batch(lengths=(10, 7, 4)):
    g = torch.Generator().manual_seed(3)
    T = max(lengths)
    mask = (torch.arange(T)[None] < torch.tensor(lengths)[:, None]).long()
    ids = torch.randint(3, 99, (len(lengths), T), generator=g).masked_fill(mask == 0, 0)
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}


@pytest.mark.parametrize("problem_type, label", [
    ("single_label_classification", torch.tensor([2, 0, 1])),
    ("multi_label_classification", torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0], [0.0, 1.0, 0.0]])),
    ("regression", torch.tensor([[0.5, -1.0, 2.0], [0.0, 0.1, 0.2], [3.0, 1.0, -2.0]])),
    (None, torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0], [0.0, 0.0, 0.0]])),  # float targets: multi-label
])
def test_the_classification_loss_follows_problem_type_as_transformers(problem_type, label, tmp_path):
    theirs, ours = reference_pair("BertForSequenceClassification", tmp_path, num_labels=3, problem_type=problem_type)
    batch = padded_batch()
    expected = theirs(**batch, labels=label).loss
    got = ClassificationObjective(ours)({**batch, "label": label}).loss
    assert got.item() == pytest.approx(expected.item(), rel=1e-5)


def test_the_span_loss_leaves_padding_out_on_either_path(tmp_path):
    """transformers' QA softmax also runs over pad positions; bertkit's covers the real tokens
    only, so it is transformers' cross-entropy with the pads' logits removed, and the same on the
    packed and the padded path. With no padding it is transformers' loss itself."""
    theirs, ours = reference_pair("BertForQuestionAnswering", tmp_path)
    batch = padded_batch()
    starts, ends = torch.tensor([1, 2, 0]), torch.tensor([3, 6, 2])
    out = theirs(**batch)
    pad = batch["attention_mask"] == 0
    expected = sum(torch.nn.functional.cross_entropy(logits.masked_fill(pad, float("-inf")), gold)
                   for logits, gold in ((out.start_logits, starts), (out.end_logits, ends))) / 2
    for unpad in (True, False):
        ours.backbone.unpad = unpad
        got = SpanObjective(ours)({**batch, "start_positions": starts, "end_positions": ends}).loss
        assert got.item() == pytest.approx(expected.item(), rel=1e-5), unpad
    full = {k: v[:1] for k, v in batch.items()}  # the one row without padding
    expected = theirs(**full, start_positions=starts[:1], end_positions=ends[:1]).loss
    got = SpanObjective(ours)({**full, "start_positions": starts[:1], "end_positions": ends[:1]}).loss
    assert got.item() == pytest.approx(expected.item(), rel=1e-5)
    # positions past the width (an answer a window cut off) are left out and negative ones clamped
    # to 0, as transformers does, also given as (B, 1)
    two = {k: v[:1].repeat(2, 1) for k, v in batch.items()}
    T = two["input_ids"].shape[1]
    starts, ends = torch.tensor([T + 5, 1]), torch.tensor([-3, T])
    expected = theirs(**two, start_positions=starts, end_positions=ends).loss
    for shape in ((2,), (2, 1)):
        got = SpanObjective(ours)({**two, "start_positions": starts.view(shape), "end_positions": ends.view(shape)}).loss
        assert got.item() == pytest.approx(expected.item(), rel=1e-5)
    # a position at or past a row's own length is left out whether the batch pads past it or not
    wider = {k: torch.nn.functional.pad(v, (0, 3)) for k, v in two.items()}
    got = SpanObjective(ours)({**wider, "start_positions": starts.clamp(max=T), "end_positions": ends}).loss
    assert got.item() == pytest.approx(expected.item(), rel=1e-5)


@pytest.mark.parametrize("cls_name", ["BertForMaskedLM", "BertForTokenClassification"])
def test_token_losses_match_transformers_and_refuse_labels_on_padding(cls_name, tmp_path):
    # A label on padding would be scored on the fast path's undefined (zero) pad positions: a
    # loss that differs from the padded path's and transformers'. Labels elsewhere match.
    from bertkit.objectives import MaskedLM

    theirs, ours = reference_pair(cls_name, tmp_path)
    objective = MaskedLM(ours) if cls_name == "BertForMaskedLM" else TaggingObjective(ours)
    batch = padded_batch()
    real = batch["attention_mask"] == 1
    labels = torch.where(real & (torch.arange(real.shape[1]) % 3 == 1), batch["input_ids"] % 2, -100)
    got = objective({**batch, "labels": labels}).metrics["loss" if cls_name != "BertForMaskedLM" else "mlm_loss"]
    assert got.item() == pytest.approx(theirs(**batch, labels=labels).loss.item(), rel=1e-5)
    labels[~real.all(1).nonzero()[0], -1] = 1
    with pytest.raises(BertkitError, match=r"labels: row \d, position \d+ is labelled but is padding"):
        objective({**batch, "labels": labels})


# ---- the Trainer hook -------------------------------------------------------------------------
def test_on_eval_hook_adds_scores_to_the_log_and_stops_training(tokenizer, tmp_path):
    model = tiny("classification", tokenizer)
    batch = {**tokenizer(["good", "bad"], max_length=8), "label": torch.tensor([1, 0])}
    calls = []

    def on_eval(step, metrics):
        calls.append(step)
        metrics["custom"] = float(step)
        return step >= 4

    trainer = Trainer(ClassificationObjective(model), lambda i: batch,
                      TrainSettings(steps=10, eval_every=2, save_every=100, progress=False, lr=1e-3), tmp_path,
                      on_eval=on_eval)
    final = trainer.fit()
    assert calls == [2, 4] and trainer.step == 4  # stopped at the second evaluation, not evaluated twice
    evals = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()
             if json.loads(line)["split"] == "eval"]
    assert [(r["step"], r["custom"]) for r in evals] == [(2, 2.0), (4, 4.0)]
    assert final["custom"] == 4.0 and json.loads((tmp_path / "metrics.json").read_text())["custom"] == 4.0


# ---- finetune ---------------------------------------------------------------------------------
def test_early_stopping_counts_evaluations_without_improvement(tokenizer, sentiment, tmp_path):
    train, dev = sentiment
    model = tiny("classification", tokenizer)
    metrics = finetune("classification", model, train, dev, tmp_path,
                       quiet(steps=40, eval_every=2, patience=2, lr=1e-12, warmup=0.0))
    # a learning rate of 1e-12 changes nothing: the first evaluation stays best, two more end it
    assert metrics["best_step"] == 2 and metrics["steps"] == 6
    evals = [r for r in map(json.loads, (tmp_path / "metrics.jsonl").read_text().splitlines()) if r["split"] == "eval"]
    assert [r["step"] for r in evals] == [2, 4, 6] and all("accuracy" in r for r in evals)


def interrupt_at_step_4(monkeypatch) -> None:
    """Ctrl-C once the dev evaluation at step 4 (the second, with eval_every=2) is done."""
    from bertkit.tasks.finetune import EarlyStopping

    evaluate_dev = EarlyStopping.__call__

    def interrupted_after_two(self, step, metrics):
        evaluate_dev(self, step, metrics)
        if step >= 4:
            raise KeyboardInterrupt

    monkeypatch.setattr(EarlyStopping, "__call__", interrupted_after_two)


def test_ctrl_c_keeps_the_best_model_so_far(tokenizer, sentiment, tmp_path, monkeypatch):
    """Interrupted after its second evaluation, a run still leaves the best model, metrics.json
    (marked interrupted) and task.json, and says so; interrupted before any, it keeps nothing."""
    from bertkit.tasks.finetune import EarlyStopping

    interrupt_at_step_4(monkeypatch)
    train, dev = sentiment
    with pytest.raises(KeyboardInterrupt, match=r"at step 4; the best model so far \(step [24], accuracy [0-9.]+\)"):
        finetune("classification", tiny("classification", tokenizer), train, dev, tmp_path, quiet(steps=40, eval_every=2))
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["interrupted"] and metrics["best_step"] in (2, 4) and (tmp_path / "task.json").exists()
    assert (tmp_path / "loss_curve.png").exists()  # drawn though the run did not reach its end
    assert classify(tmp_path, ["a fine film"])[0]["label"] in ("negative", "positive")

    monkeypatch.setattr(EarlyStopping, "__call__", lambda self, step, metrics: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt, match="before the first evaluation: no model was saved"):
        finetune("classification", tiny("classification", tokenizer), train, dev, tmp_path / "none",
                 quiet(steps=40, eval_every=2))
    assert not (tmp_path / "none" / "config.json").exists()


def test_a_full_disk_when_saving_the_fine_tuned_model_is_one_line(tokenizer, sentiment, tmp_path, monkeypatch):
    import safetensors.torch
    from safetensors import SafetensorError

    def full(state, path, *args, **kwargs):  # the one model a fine-tuning run writes: the best
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(safetensors.torch, "save_file", full)
    train, dev = sentiment
    with pytest.raises(bertkit.BertkitError, match=r"could not write the fine-tuned model in .*: Error while "
                                                   r"serializing: I/O error: No space left on device"):
        finetune("classification", tiny("classification", tokenizer), train, dev, tmp_path, quiet(steps=2))


def test_an_interrupt_while_the_best_model_is_saved_leaves_no_finished_looking_run(
        tokenizer, sentiment, tmp_path, monkeypatch):
    # The run's end wrote the last step's model and metrics.json first, so a Ctrl-C during the
    # best model's save left a folder that evaluate and predict took for the finished run.
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    save = bertkit.Model.save_pretrained
    monkeypatch.setattr(bertkit.Model, "save_pretrained", interrupted)
    train, dev = sentiment
    with pytest.raises(KeyboardInterrupt, match=r"^at step 2, while the best model \(step \d\) was being saved: "
                                                r"it was not saved in "):
        finetune("classification", tiny("classification", tokenizer), train, dev, tmp_path, quiet(steps=2))
    assert not any((tmp_path / name).exists() for name in ("metrics.json", "task.json", "model.safetensors",
                                                           "config.json", "checkpoints"))
    # A second Ctrl-C, during the save the first one started, said only 'interrupted'.
    interrupt_at_step_4(monkeypatch)
    with pytest.raises(KeyboardInterrupt, match=r"^at step 4, then again while the best model \(step [24]\) was being "
                                                r"saved: it was not saved in "):
        finetune("classification", tiny("classification", tokenizer), train, dev, tmp_path / "twice",
                 quiet(steps=40, eval_every=2))
    assert not (tmp_path / "twice" / "config.json").exists()
    # Ctrl-C just after the weights landed, before task.json and metrics.json: not "not saved"
    monkeypatch.setattr(bertkit.Model, "save_pretrained", lambda self, path: save(self, path) or interrupted())
    with pytest.raises(KeyboardInterrupt, match=r"was being saved: .*landed holds its weights but not its task.json "
                                                r"and metrics.json: delete the folder before running again$"):
        finetune("classification", tiny("classification", tokenizer), train, dev, tmp_path / "landed",
                 quiet(steps=40, eval_every=2))
    assert (tmp_path / "landed" / "config.json").exists() and not (tmp_path / "landed" / "metrics.json").exists()


def test_a_pre_training_run_or_checkpoints_folder_is_never_fine_tuned_into(tokenizer, sentiment, tmp_path, capsys):
    from bertkit.cli import main

    train, dev = sentiment
    run = tmp_path / "run"  # an interrupted pre-training run: its log, settings and checkpoints
    (run / "checkpoints" / "step-00000010").mkdir(parents=True)
    (run / "job.json").write_text("{}")
    for name in ("job.json", "checkpoints"):
        with pytest.raises(BertkitError, match=f"already holds .*{name}"):
            finetune("classification", tiny("classification", tokenizer), train, dev, run, quiet(steps=2))
        (run / "job.json").unlink(missing_ok=True)
    assert (run / "checkpoints" / "step-00000010").is_dir()
    assert main(["finetune", "--task", "classification", "--model", "mini-bert", "--train", "x.csv", "--eval", "x.csv",
                 "--out", str(run)]) == 2  # refused before the data is read
    assert "already holds checkpoints" in capsys.readouterr().err


def test_epochs_and_a_time_budget_stop_at_whichever_ends_first(tokenizer, sentiment, tmp_path):
    import math

    train, dev = sentiment
    per_epoch = math.ceil(len(train) / 16)
    metrics = finetune("classification", tiny("classification", tokenizer), train, dev, tmp_path / "a",
                       quiet(epochs=1, time_budget=600.0, patience=None))
    assert metrics["steps"] == per_epoch  # the epoch ended first; the budget did not stretch it
    metrics = finetune("classification", tiny("classification", tokenizer), train, dev, tmp_path / "b",
                       quiet(time_budget=0.5, patience=None))
    log = [json.loads(line) for line in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert max(r["elapsed"] for r in log if r["split"] == "train") >= 0.5  # no epochs given: the budget decides
    for bad in (float("nan"), float("inf"), 0.0):
        with pytest.raises(BertkitError, match="epochs must be a positive number"):
            quiet(epochs=bad)


def test_the_best_checkpoint_is_kept_at_the_root_in_hf_format(tokenizer, sentiment, tmp_path):
    import transformers

    train, dev = sentiment
    metrics = finetune("classification", tiny("classification", tokenizer), train, dev, tmp_path,
                       quiet(steps=24, eval_every=2, patience=None, lr=3e-3))
    evals = [r for r in map(json.loads, (tmp_path / "metrics.jsonl").read_text().splitlines()) if r["split"] == "eval"]
    best = max(evals, key=lambda r: r["accuracy"])  # the first of the best
    assert metrics["best_step"] == best["step"] and metrics["accuracy"] == best["accuracy"]
    on_disk = json.loads((tmp_path / "metrics.json").read_text())
    assert on_disk == metrics
    assert set(on_disk) >= {"accuracy", "f1", "mcc", "eval_examples"} and on_disk["eval_examples"] == len(dev)
    assert all(0 <= on_disk[k] <= 1 for k in ("accuracy", "f1"))
    task = json.loads((tmp_path / "task.json").read_text())
    assert task["task"] == "classification" and task["labels"] == ["negative", "positive"]
    assert not (tmp_path / "checkpoints").exists()  # only the best model is kept

    again = evaluate(tmp_path, None, dev)  # the root model reproduces the best dev scores
    assert again == {k: on_disk[k] for k in again}

    ours = bertkit.from_pretrained(tmp_path)
    assert ours.config.labels == ("negative", "positive")
    reference = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path).eval()
    assert reference.config.id2label == {0: "negative", 1: "positive"}
    assert reference.config.problem_type == "single_label_classification"  # its loss is the one trained
    batch = ours.tokenizer([e.text for e in dev[:4]], max_length=32)
    with torch.no_grad():
        expected = reference(**batch).logits
        got = ours(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).logits
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)

    predictions = classify(tmp_path, [e.text for e in dev])
    assert set(predictions[0]) == {"text", "label", "score", "scores"}
    json.dumps(predictions)  # plain data, printable as JSON lines
    right = np.mean([p["label"] == e.label for p, e in zip(predictions, dev)])
    assert right == pytest.approx(on_disk["accuracy"])
    assert all(abs(sum(p["scores"].values()) - 1) < 1e-5 and p["score"] == max(p["scores"].values())
               for p in predictions)


def test_a_new_head_for_fine_tuning_is_not_warned_about(minilm_dir, tmp_path):
    """The encoder alone gets a new head: what fine-tuning starts from, so no warning. A 2-label
    classifier re-headed for 3 other labels loses a head with named labels: one warning says so
    (transformers warns of the newly initialized weights too), and the head fits the labels."""
    from bertkit.tasks.finetune import make_task, model_for

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model, _ = model_for(make_task("classification"), minilm_dir, ("neg", "pos"))
    model.save_pretrained(tmp_path)
    # MiniLM's sentence-transformers modules (mean pooling ...) do not describe a classifier: a folder
    # keeping them was loaded by sentence-transformers as an embedder, its classifier dropped
    assert not [p.name for p in tmp_path.iterdir() if p.name in (
        "modules.json", "1_Pooling", "sentence_bert_config.json", "config_sentence_transformers.json")]
    embedder, _ = model_for(make_task("embedding"), minilm_dir, ())
    assert "modules.json" in embedder.companion_files  # fine-tuned for embeddings, they still apply
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model, labels = model_for(make_task("classification"), tmp_path, ("a", "b", "c"))
    assert [str(w.message) for w in caught] == ["the model's head was trained on 2 labels (neg, pos); the data has 3 "
                                                "(a, b, c), not all among them: the head starts fresh"]
    assert model.head.classifier.out_features == 3 and model.config.labels == labels == ("a", "b", "c")
    # a tagger from this sequence classifier: its labels are another head's, which is left out (said)
    with pytest.warns(DataWarning, match="holds a fine-tuned classification head of 2 labels \\(neg, pos\\); fine-"
                      "tuning for token-classification starts a fresh head on its encoder instead") as caught:
        model, labels = model_for(make_task("token-classification"), tmp_path, ("B-X", "O", "neg"))
    assert len(caught) == 1
    assert model.head_kind == "token-classification" and labels == ("B-X", "O", "neg")


def test_a_preset_needs_a_tokenizer_and_a_directory_must_exist(sentiment, tmp_path, minilm_dir):
    train, dev = sentiment
    with pytest.raises(BertkitError, match="no tokenizer"):
        finetune("classification", "mini-bert", train, dev, tmp_path, quiet(steps=1))
    with pytest.raises(BertkitError, match="neither a preset"):
        finetune("classification", tmp_path / "nothing", train, dev, tmp_path, quiet(steps=1))
    with pytest.raises(BertkitError, match="cannot follow 'mse' for regression; choose one of pearson, spearman"):
        finetune("regression", minilm_dir, load_examples("regression", "rotten-tomatoes", "dev")[:4],
                 load_examples("regression", "rotten-tomatoes", "dev")[:4], tmp_path, quiet(steps=1, metric="mse"))


def test_regression_and_pair_inputs_run_through_finetune(tokenizer, sentiment, tmp_path):
    train, dev = sentiment
    pairs = [type(e)(e.text, "second part", float(e.label == "positive")) for e in train]
    dev_pairs = [type(e)(e.text, "second part", float(e.label == "positive")) for e in dev]
    metrics = finetune("regression", tiny("classification", tokenizer, num_labels=1), pairs, dev_pairs,
                       tmp_path, quiet(steps=4))
    assert set(metrics) >= {"pearson", "spearman", "mse", "eval_examples"}
    [prediction] = classify(tmp_path, ["a film"], ["second part"])
    assert set(prediction) == {"text", "text_pair", "value"} and isinstance(prediction["value"], float)
    assert json.loads((tmp_path / "config.json").read_text())["problem_type"] == "regression"


def test_a_task_that_does_not_fit_the_models_outputs_says_what_the_model_is(tokenizer, tmp_path):
    example = type(load_examples("regression", "rotten-tomatoes", "dev")[0])
    classifier = tiny("classification", tokenizer, num_labels=3)
    classifier.save_pretrained(tmp_path / "classifier")
    with pytest.raises(BertkitError, match=r"the model is a classifier of 3 labels \(LABEL_0, LABEL_1, LABEL_2\), "
                                           "not a regression model: give the task classification"):
        evaluate(tmp_path / "classifier", "regression", [example("a", None, 1.0)])
    tiny("classification", tokenizer, num_labels=1).save_pretrained(tmp_path / "regression")
    with pytest.raises(BertkitError, match="the model is a regression model .* not a classification model: give "
                                           "the task regression"):
        evaluate(tmp_path / "regression", "classification", [example("a", None, "pos")])


@pytest.mark.parametrize("problem_type", ["multi_label_classification", "regression"])
def test_a_multi_label_or_multi_output_regression_checkpoint_predicts_as_transformers_reads_it(
        problem_type, tokenizer, tmp_path, monkeypatch):
    """transformers' problem_type says how a classifier's outputs are read: a sigmoid per label
    (several labels may hold) or real values. classify follows it, checked against transformers'
    logits; evaluating several regression outputs against one number per row is refused."""
    import transformers

    model = tiny("classification", tokenizer, num_labels=3)
    model.config = model.config.replace(label_names=("toxic", "obscene", "insult"), problem_type=problem_type)
    model.save_pretrained(tmp_path)
    texts = [e.text for e in load_examples("classification", "rotten-tomatoes", "dev")[:6]]
    reference = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path).eval()
    assert reference.config.problem_type == problem_type
    with torch.no_grad():
        logits = reference(**bertkit.load_tokenizer(tmp_path)(texts, max_length=32)).logits
    predictions = classify(tmp_path, texts, max_length=32)
    if problem_type == "regression":
        got = torch.tensor([list(p["values"].values()) for p in predictions])
        torch.testing.assert_close(got, logits, atol=1e-5, rtol=1e-4)
        from bertkit.tasks.classification import Regression

        monkeypatch.setattr(Regression, "predict", lambda *a, **k: pytest.fail("predicted before refusing"))
        with pytest.raises(BertkitError, match="has 3 outputs; bertkit scores one number per example"):
            evaluate(tmp_path, None, [type(load_examples("regression", "rotten-tomatoes", "dev")[0])("a", None, 1.0)])
        return
    got = torch.tensor([[p["scores"][n] for n in ("toxic", "obscene", "insult")] for p in predictions])
    torch.testing.assert_close(got, torch.sigmoid(logits), atol=1e-5, rtol=1e-4)
    for p in predictions:
        assert p["labels"] == [n for n, v in p["scores"].items() if v > 0.5]
        assert p["score"] == max(p["scores"].values())
    # evaluated on one gold label each, the predicted label sets are scored, not the top label
    # alone (which counted a text given two more wrong labels as right)
    from bertkit.tasks.metrics import multi_label_scores

    example = type(load_examples("classification", "rotten-tomatoes", "dev")[0])
    gold = ["toxic", "insult", "insult", "obscene", "toxic", "insult"]
    scores = evaluate(tmp_path, None, [example(t, None, g) for t, g in zip(texts, gold)], max_length=32)
    index = {"toxic": 0, "obscene": 1, "insult": 2}
    expected = multi_label_scores([index[g] for g in gold], [[index[n] for n in p["labels"]] for p in predictions], 3)
    assert {k: scores[k] for k in expected} == pytest.approx(expected)


@pytest.mark.parametrize("layout", ["config.json, sentence-transformers 4", "config.json, older", "settings file"])
def test_a_cross_encoder_scores_with_the_activation_it_names_and_keeps_it_when_saved(tokenizer, tmp_path, layout):
    # save_pretrained dropped the activation, so CrossEncoder scored the saved copy with its default
    from sentence_transformers import CrossEncoder

    model = tiny("classification", tokenizer, num_labels=1)
    model.save_pretrained(tmp_path / "ce")
    config = json.loads((tmp_path / "ce" / "config.json").read_text())
    tanh = "torch.nn.modules.activation.Tanh"  # not CrossEncoder's default (a sigmoid for one output)
    if layout == "config.json, sentence-transformers 4":
        config["sentence_transformers"] = {"activation_fn": tanh, "version": "4.0.0"}
    elif layout == "config.json, older":
        config["sbert_ce_default_activation_function"] = tanh
    (tmp_path / "ce" / "config.json").write_text(json.dumps(config))
    if layout == "settings file":  # sentence-transformers 6 writes it in config_sentence_transformers.json
        import torch.nn

        CrossEncoder(str(tmp_path / "ce"), device="cpu", activation_fn=torch.nn.Tanh()).save(str(tmp_path / "ce"))
        assert json.loads((tmp_path / "ce" / "config_sentence_transformers.json").read_text())["activation_fn"] == tanh
    pairs = [("a fine film", "it was good"), ("dull", "a great movie indeed")]
    expected = CrossEncoder(str(tmp_path / "ce"), device="cpu").predict(pairs)
    got = classify(tmp_path / "ce", [a for a, _ in pairs], [b for _, b in pairs])
    assert [p["score"] for p in got] == pytest.approx(expected.tolist(), abs=1e-5)
    assert [p["score"] for p in got] == pytest.approx([np.tanh(p["value"]) for p in got])
    bertkit.from_pretrained(tmp_path / "ce").save_pretrained(tmp_path / "copy")
    again = CrossEncoder(str(tmp_path / "copy"), device="cpu").predict(pairs)
    assert again.tolist() == pytest.approx(expected.tolist(), abs=1e-5)
    if layout != "settings file":  # sentence-transformers 6 reads its settings file first, a stale key after it
        (tmp_path / "ce" / "config_sentence_transformers.json").write_text(json.dumps(
            {"activation_fn": "torch.nn.modules.linear.Identity", "model_type": "CrossEncoder"}))
        expected = CrossEncoder(str(tmp_path / "ce"), device="cpu").predict(pairs)
        got = classify(tmp_path / "ce", [a for a, _ in pairs], [b for _, b in pairs])
        assert [p["score"] for p in got] == pytest.approx(expected.tolist(), abs=1e-5)


def test_a_cross_encoder_is_evaluated_on_its_activated_score_as_sentence_transformers_evaluates_it(tokenizer,
                                                                                                  tmp_path):
    from sentence_transformers import CrossEncoder
    from sentence_transformers.cross_encoder.evaluation import CrossEncoderCorrelationEvaluator

    texts = [e.text for e in load_examples("classification", "rotten-tomatoes", "dev")[:16]]
    pairs, gold = list(zip(texts[::2], texts[1::2])), [i / 7 for i in (3, 0, 7, 1, 5, 2, 6, 4)]
    model = tiny("classification", tokenizer, num_labels=1)
    model.save_pretrained(tmp_path)
    raw = np.array([p["value"] for p in classify(tmp_path, [a for a, _ in pairs], [b for _, b in pairs])])
    with torch.no_grad():  # spread the outputs over the sigmoid's bend, where it changes Pearson's r
        scale, head = 3.0 / (raw.max() - raw.min()), model.head.classifier
        head.weight.mul_(scale)
        head.bias.copy_(scale * (head.bias - raw.mean()))
    model.save_pretrained(tmp_path)
    CrossEncoder(str(tmp_path), device="cpu").save(str(tmp_path))  # its default activation, a sigmoid
    reference = CrossEncoderCorrelationEvaluator([list(p) for p in pairs], gold, write_csv=False)
    expected = reference(CrossEncoder(str(tmp_path), device="cpu"))
    example = type(load_examples("regression", "rotten-tomatoes", "dev")[0])
    scores = evaluate(tmp_path, "regression", [example(a, b, g) for (a, b), g in zip(pairs, gold)])
    assert scores["pearson"] == pytest.approx(expected["pearson"], abs=1e-4)
    assert scores["spearman"] == pytest.approx(expected["spearman"], abs=1e-4)
    raw = [p["value"] for p in classify(tmp_path, [a for a, _ in pairs], [b for _, b in pairs])]
    assert abs(np.corrcoef(raw, gold)[0, 1] - expected["pearson"]) > 1e-3  # the raw outputs' r is another


def test_a_checkpoint_fine_tuned_elsewhere_is_read_whole_as_transformers_pipelines_read_it(minilm_dir, tmp_path):
    """No task.json: classify and tag read up to the model's maximum (512 tokens here), in fp32,
    so a long text scores as transformers' pipeline scores it (truncation=True)."""
    import transformers

    names = {0: "neg", 1: "neu", 2: "pos"}
    for kind in ("SequenceClassification", "TokenClassification"):
        made = getattr(transformers, f"AutoModelFor{kind}").from_pretrained(minilm_dir, num_labels=3, id2label=names)
        made.save_pretrained(tmp_path / kind)
        transformers.AutoTokenizer.from_pretrained(minilm_dir).save_pretrained(tmp_path / kind)
    long = " ".join(f"word{i % 37} is here" for i in range(200))  # about 700 tokens
    pipe = transformers.pipeline("text-classification", model=str(tmp_path / "SequenceClassification"), top_k=None)
    expected = {r["label"]: r["score"] for r in pipe([long], truncation=True)[0]}
    [got] = classify(tmp_path / "SequenceClassification", [long])
    assert got["scores"] == pytest.approx(expected, abs=1e-5)
    [tagged] = tag(tmp_path / "TokenClassification", [" ".join(long.split()[:300])])  # ~420 tokens: all read
    assert len(tagged["tags"]) == 300 and None not in tagged["tags"]


def test_tag_groups_entities_as_transformers_pipeline_does_with_first_strategy(minilm_dir, tmp_path):
    import transformers

    names = dict(enumerate(["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]))
    torch.manual_seed(3)
    made = transformers.AutoModelForTokenClassification.from_pretrained(minilm_dir, num_labels=5, id2label=names)
    made.save_pretrained(tmp_path)
    transformers.AutoTokenizer.from_pretrained(minilm_dir).save_pretrained(tmp_path)
    text = "John Smith lives in New York and works for the Acme company in Boston since last spring"
    pipe = transformers.pipeline("token-classification", model=str(tmp_path), aggregation_strategy="first")
    expected = [(e["entity_group"], e["start"], e["end"], e["score"]) for e in pipe(text)]
    [result] = tag(tmp_path, [text])
    got = [(e["entity"], e["start"], e["end"], e["score"]) for e in result["entities"]]
    assert len(expected) >= 2 and [g[:3] for g in got] == [e[:3] for e in expected]
    assert [g[3] for g in got] == pytest.approx([e[3] for e in expected], abs=1e-5)
    assert all(text[e["start"]:e["end"]] == e["text"] for e in result["entities"])


def test_predictions_run_in_fp32_unless_asked_while_evaluate_reproduces_the_run(tokenizer, sentiment, tmp_path,
                                                                                monkeypatch):
    train, dev = sentiment
    scored = [type(e)(e.text, None, float(e.label == "positive")) for e in train]
    metrics = finetune("regression", tiny("classification", tokenizer, num_labels=1), scored, scored[:20], tmp_path,
                       quiet(steps=2, bf16=True))
    emulated = "the model was fine-tuned in bf16, which this cpu device only emulates"
    for native in (True, False):  # reproducing a bf16 run where bf16 is emulated (5-12x slower) is said
        monkeypatch.setattr("bertkit.pretraining.native_bf16", lambda device: native)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            assert evaluate(tmp_path, None, scored[:20])["pearson"] == pytest.approx(metrics["pearson"], abs=1e-9)
            evaluate(tmp_path, None, scored[:4], bf16=False)  # fp32 asked for: nothing to say
        said = [str(w.message) for w in seen if "bf16" in str(w.message)]
        assert len(said) == (0 if native else 1) and all(s.startswith(emulated) for s in said), said
    texts = [e.text for e in dev[:8]]
    fp32 = classify(tmp_path, texts, bf16=False)
    assert classify(tmp_path, texts) == fp32  # not task.json's bf16: its values are rounded to bf16's 8 bits
    assert classify(tmp_path, texts, bf16=True) != fp32


def test_training_weights_held_in_bf16_is_warned_of(tokenizer, sentiment, tmp_path):
    """A model loaded with dtype=torch.bfloat16 trains its bf16 weights in place, most updates
    rounding away: said, and fp32 weights (under autocast or not) train without a word."""
    train, dev = sentiment
    both = train[:8] + train[-8:]  # (grouped by label)
    for dtype, bf16 in ((torch.bfloat16, False), (torch.float16, False), (torch.float32, True), (torch.float32, False)):
        model = tiny("classification", tokenizer).to(dtype)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            finetune("classification", model, both, both, tmp_path / f"{dtype}-{bf16}", quiet(steps=1, bf16=bf16))
        said = [str(w.message) for w in seen if "trained weights" in str(w.message)]
        kind = str(dtype).removeprefix("torch.")
        assert len(said) == (dtype != torch.float32), said
        assert all(s.startswith(f"the model's trained weights are {kind}: AdamW's updates smaller") for s in said)
        assert all(w.filename == __file__ for w in seen if "trained weights" in str(w.message))


def test_a_classifier_without_label_names_scores_data_labelled_by_index(tokenizer, tmp_path):
    """transformers names unnamed classes LABEL_0, LABEL_1, ...; data labelled 0 and 1 means them."""
    import transformers

    tiny("classification", tokenizer).save_pretrained(tmp_path)
    assert transformers.AutoConfig.from_pretrained(tmp_path).id2label == {0: "LABEL_0", 1: "LABEL_1"}
    examples = load_examples("classification", "rotten-tomatoes", "dev")[:8]
    by_index = [type(e)(e.text, None, str(["negative", "positive"].index(e.label))) for e in examples]
    predicted = [p["label"] for p in classify(tmp_path, [e.text for e in examples], max_length=32)]
    expected = sum(p == f"LABEL_{e.label}" for p, e in zip(predicted, by_index)) / len(by_index)
    assert evaluate(tmp_path, None, by_index, max_length=32)["accuracy"] == pytest.approx(expected)


def test_a_head_trained_on_other_label_names_carries_over_with_a_warning(tokenizer, tmp_path):
    """Fine-tuning a classifier again on data whose labels have other names takes its outputs
    over in order: said, since class 0 becomes whatever sorts first in the new data."""
    dev = load_examples("classification", "rotten-tomatoes", "dev")
    examples = dev[:8] + dev[-8:]  # (the split is grouped by label)
    by_index = [type(e)(e.text, None, str(["negative", "positive"].index(e.label))) for e in examples]
    finetune("classification", tiny("classification", tokenizer), by_index, by_index, tmp_path / "a", quiet(steps=1))
    with pytest.warns(DataWarning, match=r"the model's head was trained on other labels; its outputs carry over in "
                                         r"order \(0 -> negative, 1 -> positive\)"):
        finetune("classification", str(tmp_path / "a"), examples, examples, tmp_path / "b", quiet(steps=1))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", "the model's head", DataWarning)  # the same names again: nothing to say
        finetune("classification", str(tmp_path / "b"), examples, examples, tmp_path / "c", quiet(steps=1))


def test_data_with_some_of_a_trained_heads_labels_keeps_the_head_and_other_labels_are_told(tokenizer, tmp_path):
    """A tagger trained on B-PER, I-PER, B-LOC, O, fine-tuned on sentences with only O and B-PER,
    went on with a fresh head of two outputs, silently: it could no longer tag a location."""
    full = [TaggedSentence(("Ann", "Lee", "in", "Oslo"), ("B-PER", "I-PER", "O", "B-LOC"))] * 8
    some = [TaggedSentence(("Ann", "left"), ("B-PER", "O"))] * 8
    finetune("token-classification", tiny("token-classification", tokenizer, num_labels=4), full, full,
             tmp_path / "a", quiet(steps=1))
    trained = bertkit.from_pretrained(tmp_path / "a")
    with warnings.catch_warnings():
        warnings.filterwarnings("error", "the model's head", DataWarning)
        finetune("token-classification", str(tmp_path / "a"), some, some, tmp_path / "b", quiet(steps=1, lr=1e-12))
    kept = bertkit.from_pretrained(tmp_path / "b")
    assert kept.config.label_names == trained.config.label_names
    assert set(kept.config.label_names) == {"B-LOC", "B-PER", "I-PER", "O"}
    assert torch.allclose(kept.head.classifier.weight, trained.head.classifier.weight, atol=1e-6)
    other = [TaggedSentence(("Ann", "left"), ("B-ORG", "O"))] * 8
    with pytest.warns(DataWarning, match=r"the model's head was trained on 4 labels \(.*\); the data has 2 "
                                         r"\(.*B-ORG.*\), not all among them: the head starts fresh"):
        finetune("token-classification", str(tmp_path / "a"), other, other, tmp_path / "c", quiet(steps=1))


def test_tag_and_answer_helpers_return_plain_spans(tokenizer, tmp_path):
    sentences = [TaggedSentence(("The", "film", "runs", "95", "minutes", "."), ("DT", "NN", "VBZ", "CD", "NNS", "."))] * 8
    finetune("token-classification", tiny("token-classification", tokenizer, num_labels=6), sentences, sentences,
             tmp_path / "tagger", quiet(steps=2))
    text = "The film, well-known in the U.S., runs 95 minutes."
    [result] = tag(tmp_path / "tagger", [text])
    assert result["text"] == text  # so output lines can be matched to input lines
    assert len(result["tokens"]) == len(result["tags"]) == len(result["offsets"])
    assert all(text[s:e] == w for w, (s, e) in zip(result["tokens"], result["offsets"]))
    assert set(result["tags"]) <= {"DT", "NN", "VBZ", "CD", "NNS", "."}
    [words] = tag(tmp_path / "tagger", [["A", "short", "one"]])
    assert words["tokens"] == ["A", "short", "one"] and "offsets" not in words and "text" not in words

    context = "The Eiffel Tower, in Paris, opened in 1889 and is 330 metres tall. " * 6
    qas = [QAExample(str(i), "When did it open?", context, (Answer("1889", context.index("1889")),)) for i in range(8)]
    finetune("qa", tiny("qa", tokenizer), qas, qas, tmp_path / "qa", quiet(steps=2, max_length=48, doc_stride=8,
                                                                           max_query_length=8))
    results = answer(tmp_path / "qa", ["When did it open?", "How tall is it?"], [context, context[:70]], top_k=3)
    for r, c in zip(results, [context, context[:70]]):
        assert set(r) == {"question", "answer", "start", "end", "score", "alternatives"}
        assert c[r["start"]:r["end"]] == r["answer"] and r["answer"] == r["answer"].strip()
        assert len(r["alternatives"]) == 2 and all(a["score"] <= r["score"] for a in r["alternatives"])
    json.dumps(results)
    tokens = tokenizer.encode_plain
    for r in answer(tmp_path / "qa", ["When did it open?"], [context], top_k=5, max_answer_length=1):
        assert all(len(tokens([a["answer"]])[0]) == 1 for a in [r, *r["alternatives"]])  # one token each
    for question, ctx, which in (("  ", context, "question 1 is empty"), ("When?", "", "context 1 is empty")):
        with pytest.raises(BertkitError, match=which):
            answer(tmp_path / "qa", [question], [ctx])


def test_truncation_during_finetuning_is_a_counted_warning(tokenizer, sentiment, tmp_path):
    train, dev = sentiment
    long = [type(e)(e.text + " and more" * 20, None, e.label) for e in train]
    with pytest.warns(DataWarning, match=rf"{len(long)} of {len(long)} texts were longer than 16 tokens"):
        finetune("classification", tiny("classification", tokenizer), long, dev, tmp_path, quiet(steps=1, max_length=16))


def test_evaluate_scores_a_tag_the_model_never_saw_as_wrong_with_a_warning(tokenizer, tmp_path):
    """A test split's rare tag that training lacked can only be predicted wrong: evaluate scores it
    so (as seqeval and scikit-learn do) and names it, where it refused to score anything; gold tags
    by number (datasets' ner_tags) against a model whose classes are LABEL_0, ... are those classes
    (they were compared as strings: every word wrong)."""
    from sklearn.metrics import accuracy_score

    model = tiny("token-classification", tokenizer, num_labels=3)
    model.save_pretrained(tmp_path / "tagger")
    assert bertkit.from_pretrained(tmp_path / "tagger").config.labels == ("LABEL_0", "LABEL_1", "LABEL_2")
    sentences = [TaggedSentence(("the", "film", "was", "long"), ("0", "1", "2", "1")),
                 TaggedSentence(("oh", "wow"), ("2", "XYZ"))]
    with pytest.warns(DataWarning, match="gold.jsonl: 1 word.s. carry a tag the model never saw in training, scored "
                                         "as wrong: 'XYZ'"):
        scores = evaluate(tmp_path / "tagger", "token-classification", sentences_file(tmp_path, sentences))
    predicted = [t for p in tag(tmp_path / "tagger", [list(s.words) for s in sentences]) for t in p["tags"]]
    gold = [f"LABEL_{t}" if t.isdigit() else t for s in sentences for t in s.tags]
    assert scores["accuracy"] == pytest.approx(accuracy_score(gold, predicted)) and scores["accuracy"] > 0
    with pytest.raises(BertkitError, match="never seen in training: 'XYZ'"):  # fine-tuning still refuses it
        finetune("token-classification", tmp_path / "tagger", sentences[:1], sentences, tmp_path / "run",
                 quiet(steps=1))


def sentences_file(tmp_path, sentences):
    path = tmp_path / "gold.jsonl"
    path.write_text("".join(json.dumps({"tokens": list(s.words), "tags": list(s.tags)}) + "\n" for s in sentences))
    return path


@pytest.mark.parametrize("grouping", [True, False])
def test_length_grouping_can_be_turned_off_for_transformers_random_batches(tokenizer, sentiment, tmp_path,
                                                                           monkeypatch, grouping):
    """Batches of similar lengths pad less but mix examples otherwise than transformers' Trainer
    (random batches by default); length_grouping=False (--no-length-grouping) draws them at random."""
    import importlib

    from bertkit.tasks.base import TrainBatches, feature_length

    ft = importlib.import_module("bertkit.tasks.finetune")  # (the package's `finetune` is the function)

    made = []

    class Watched(TrainBatches):
        def __post_init__(self):
            super().__post_init__()
            made.append(self)

    monkeypatch.setattr(ft, "TrainBatches", Watched)
    train, dev = sentiment
    finetune("classification", tiny("classification", tokenizer), train, dev[:8], tmp_path / "run",
             quiet(steps=1, length_grouping=grouping))
    batches = made[0]._plan(0)
    spread = np.mean([np.ptp([feature_length(made[0].features[i]) for i in b]) for b in batches])
    assert (spread < 3) == grouping, spread  # lengths within a batch: close together only when grouped


def test_evaluate_loads_the_model_once_and_reads_task_json_once(minilm_dir, tmp_path, monkeypatch):
    """A folder without task.json is loaded once (its head names the task); one with it has the
    file read once for the task, the columns and the settings."""
    import importlib

    import transformers

    import bertkit.interop.hf as hf
    ft = importlib.import_module("bertkit.tasks.finetune")  # (bertkit.tasks.finetune is also the function)

    names = {0: "negative", 1: "positive"}
    transformers.AutoModelForSequenceClassification.from_pretrained(minilm_dir, num_labels=2,
                                                                    id2label=names).save_pretrained(tmp_path)
    transformers.AutoTokenizer.from_pretrained(minilm_dir).save_pretrained(tmp_path)
    examples = load_examples("classification", "rotten-tomatoes", "dev")[:4]
    loads, reads = [], []
    loader, reader = hf.from_pretrained, ft.read_json
    monkeypatch.setattr(hf, "from_pretrained", lambda *a, **k: loads.append(a) or loader(*a, **k))
    monkeypatch.setattr(ft, "read_json", lambda path: reads.append(path) or reader(path))
    without = evaluate(tmp_path, None, examples)
    assert len(loads) == 1 and reads == [] and without["eval_examples"] == 4
    (tmp_path / "task.json").write_text(json.dumps({"task": "classification", "columns": {"text": "review"}}))
    loads.clear()
    assert evaluate(tmp_path, None, examples)["accuracy"] == without["accuracy"]
    assert len(loads) == 1 and [p.name for p in reads] == ["task.json"]


def test_fine_tuning_a_folder_of_another_tasks_head_says_the_head_is_left_out(minilm_dir, tokenizer, sentiment,
                                                                              tmp_path):
    """A tagger's folder fine-tuned for classification drops its trained head (and its tags), even
    where its classifier has the shape the new head needs (2 tags, 2 classes): said, as other label
    changes are; a pre-trained encoder's MLM head is left out without a word."""
    import transformers

    train, dev = sentiment
    tags = {0: "O", 1: "B-PER"}
    for kind, said in (("TokenClassification", True), ("MaskedLM", False)):
        made = getattr(transformers, f"AutoModelFor{kind}").from_pretrained(
            minilm_dir, **({"num_labels": 2, "id2label": tags} if said else {}))
        made.save_pretrained(tmp_path / kind)
        transformers.AutoTokenizer.from_pretrained(minilm_dir).save_pretrained(tmp_path / kind)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            finetune("classification", tmp_path / kind, train, dev[:4], tmp_path / f"out-{kind}",
                     quiet(steps=1, lr=1e-12))
        told = [str(w.message) for w in caught if "head" in str(w.message)]
        assert told == ([f"{tmp_path / kind} holds a fine-tuned token-classification head of 2 labels (O, B-PER); "
                         "fine-tuning for classification starts a fresh head on its encoder instead"]
                        if said else [])
        tuned = bertkit.from_pretrained(tmp_path / f"out-{kind}")
        assert tuned.config.labels == ("negative", "positive")
        if said:  # the tagger's classifier (same shape) was carried over
            assert not torch.allclose(tuned.head.classifier.weight, made.classifier.weight, atol=1e-3)
