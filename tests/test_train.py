"""The training loop and the pre-training objectives, on real text (movie reviews tokenized with
the real MiniLM vocabulary) and tiny models."""

import json
import math
import re
import shutil
import warnings

import numpy as np
import pytest
import torch

import bertkit
from bertkit.objectives import Distillation, MaskedLM, ReplacedTokenDetection
from bertkit.objectives.rtd import corrupt
from bertkit.train import Trainer, TrainSettings, lr_factor, param_groups

TINY = dict(num_layers=2, hidden_size=32, num_heads=4, intermediate_size=64, max_positions=64)


def batches_from(texts, tokenizer, B=8, T=32, pairs=False):
    """Fixed real-text batches; `masked(i)` re-masks batch i % n with a seed of i (dynamic masking)."""
    out = []
    for i in range(0, len(texts), B):
        chunk = texts[i:i + B]
        if pairs:  # sentence-order pairs: halves of one review, swapped in odd rows
            halves = [(t[: len(t) // 2], t[len(t) // 2:]) for t in chunk]
            a = [h[1] if j % 2 else h[0] for j, h in enumerate(halves)]
            b = [h[0] if j % 2 else h[1] for j, h in enumerate(halves)]
            enc = tokenizer(a, b, max_length=T)
            enc["pair_labels"] = torch.tensor([j % 2 for j in range(len(chunk))])
        else:
            enc = tokenizer(chunk, max_length=T)
        out.append(enc)
    special = torch.tensor(sorted({tokenizer.backend.token_to_id(t) for t in ("[CLS]", "[SEP]", "[PAD]")}))

    def masked(i):
        batch = dict(out[i % len(out)])
        g = torch.Generator().manual_seed(i)
        ids = batch["input_ids"]
        chosen = (torch.rand(ids.shape, generator=g) < 0.15) & ~torch.isin(ids, special)
        chosen[:, 1] |= ~torch.isin(ids[:, 1], special)  # at least one prediction per row
        batch["labels"] = ids.masked_fill(~chosen, -100)
        batch["input_ids"] = ids.masked_fill(chosen, tokenizer.mask_token_id)
        return batch

    return masked, len(out)


def interrupted_at(batch_at, step, accumulation=2):
    """batch_at that raises KeyboardInterrupt (Ctrl-C) when training reaches optimizer step
    `step` (0-based: micro-batch i belongs to step i // accumulation)."""
    def data(i):
        if i // accumulation == step:
            raise KeyboardInterrupt
        return batch_at(i)
    return data


def settings(**kw):
    base = dict(steps=40, lr=3e-3, warmup=0.1, eval_every=1000, save_every=1000, progress=False)
    return TrainSettings(**{**base, **kw})


def train_curve(objective, batch_at, tmp_path, **kw):
    held_out = [batch_at(10_000 + i) for i in range(2)]  # other masks of the same texts
    trainer = Trainer(objective, batch_at, settings(**kw), tmp_path / "run", eval_batches=held_out)
    trainer.fit()
    losses = [r["loss"] for r in map(json.loads, (tmp_path / "run" / "metrics.jsonl").read_text().splitlines())
              if r["split"] == "train"]
    return losses, trainer


def assert_learns(losses):
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < first - 0.5, (first, last)  # nats: far beyond step-to-step noise


def test_schedules_warm_up_then_decay():
    assert lr_factor(0.0, 0.1, "linear") == 0.0
    assert lr_factor(0.05, 0.1, "linear") == pytest.approx(0.5)
    assert lr_factor(0.1, 0.1, "cosine") == pytest.approx(1.0)
    assert lr_factor(0.55, 0.1, "linear") == pytest.approx(0.5)
    assert lr_factor(0.55, 0.1, "cosine") == pytest.approx(0.5)
    assert lr_factor(1.0, 0.1, "linear") == pytest.approx(0.0, abs=1e-12)
    assert lr_factor(0.7, 0.1, "constant") == 1.0
    with pytest.raises(bertkit.BertkitError, match="schedule"):
        lr_factor(0.5, 0.1, "exponential")


@pytest.mark.parametrize("steps, warmup, schedule", [(10, 0.06, "linear"), (25, 0.1, "cosine"), (3, 0.1, "linear"),
                                                    (100, 0.1, "linear"), (7, 0.0, "cosine")])
def test_the_learning_rate_of_every_step_is_transformers_schedulers(reviews, tokenizer, tmp_path, steps, warmup,
                                                                    schedule):
    from transformers import get_scheduler

    batch_at, _ = batches_from(reviews, tokenizer)
    model = bertkit.build("bert-base", head="mlm", vocab_size=tokenizer.vocab_size, **TINY)
    run = settings(steps=steps, warmup=warmup, schedule=schedule, lr=1.0, clip_norm=None)
    Trainer(MaskedLM(model), batch_at, run, tmp_path / "run").fit()
    logged = [r["lr"] for r in map(json.loads, (tmp_path / "run" / "metrics.jsonl").read_text().splitlines())
              if r["split"] == "train"]
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    # transformers' Trainer warms up over ceil(warmup * steps) steps (TrainingArguments.get_warmup_steps)
    reference = get_scheduler(schedule, optimizer, num_warmup_steps=math.ceil(warmup * steps), num_training_steps=steps)
    expected = []
    for _ in range(steps):
        expected.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        reference.step()
    assert logged == pytest.approx(expected, abs=1e-9)


def test_steps_with_a_time_budget_decay_by_whichever_is_further_along():
    from bertkit.schedules import scheduled_factor

    both = settings(steps=10, time_budget=3600.0, warmup=0.1)  # the steps end first: they set the pace
    assert [scheduled_factor(both, s, 0.0) for s in range(10)] == [lr_factor(s / 10, 0.1, "linear") for s in range(10)]
    assert scheduled_factor(both, 2, 3240.0) == pytest.approx(lr_factor(0.9, 0.1, "linear"))  # the budget runs out first


def test_no_weight_decay_on_biases_and_norms_and_tied_weights_once():
    model = bertkit.build("mini-bert", head="mlm", **TINY)
    decay, no_decay = param_groups(model, 0.01)
    assert no_decay["weight_decay"] == 0.0 and decay["weight_decay"] == 0.01
    ids = lambda ps: {id(p) for p in ps}  # noqa: E731
    assert ids(no_decay["params"]) == {id(p) for n, p in model.named_parameters() if n.endswith("bias") or ".norm" in n
                                       or "_norm." in n}
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))
    assert id(model.backbone.embeddings.word.weight) in ids(decay["params"])


@pytest.mark.parametrize("pair", [None, "nsp", "sop"])
def test_mlm_objectives_learn_on_real_text(pair, reviews, tokenizer, tmp_path):
    torch.manual_seed(0)
    family = "albert-base" if pair == "sop" else "bert-base"
    model = bertkit.build(family, head="mlm" if pair is None else "pretraining", vocab_size=tokenizer.vocab_size,
                          **({**TINY, "embedding_size": 16} if family == "albert-base" else TINY))
    batch_at, _ = batches_from(reviews, tokenizer, pairs=pair is not None)
    losses, trainer = train_curve(MaskedLM(model, pair), batch_at, tmp_path)
    assert_learns(losses)
    log = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    if pair:
        assert all(0.0 <= r[f"{pair}_accuracy"] <= 1.0 for r in log if r["split"] == "train")
    final = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert final["perplexity"] == pytest.approx(math.exp(final["mlm_loss"]), rel=1e-6)
    assert (tmp_path / "run" / "loss_curve.png").stat().st_size > 5000
    loaded = bertkit.from_pretrained(tmp_path / "run")  # the final model at the root of the run
    assert loaded.head_kind == model.head_kind
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values()))


def test_pair_objective_needs_a_pair_head():
    for name in ("roberta-base", "electra-small"):
        model = bertkit.build(name, head="mlm", **TINY)
        with pytest.raises(bertkit.BertkitError, match="sentence-pair head"):
            MaskedLM(model, "nsp")


def test_replaced_token_detection_learns_and_labels_exactly_the_changed_tokens(reviews, tokenizer, tmp_path):
    torch.manual_seed(0)
    gen, disc = bertkit.build_electra_pair(
        bertkit.PRESETS["electra-small"].config.replace(vocab_size=tokenizer.vocab_size, embedding_size=16, **TINY),
        bertkit.PRESETS["electra-small-generator"].config.replace(vocab_size=tokenizer.vocab_size, embedding_size=16,
                                                                  **{**TINY, "hidden_size": 16, "num_heads": 2}))
    batch_at, _ = batches_from(reviews, tokenizer)
    losses, trainer = train_curve(ReplacedTokenDetection(gen, disc), batch_at, tmp_path)
    assert_learns(losses)
    assert (tmp_path / "run" / "generator" / "config.json").exists()  # discriminator at the root
    assert bertkit.from_pretrained(tmp_path / "run").config.family == "electra"
    # the generator samples replacements: held-out scores of one model are the same at every evaluation,
    # and evaluating leaves the training random stream where it was
    state = torch.random.get_rng_state()
    assert trainer.evaluate() == trainer.evaluate()
    assert torch.equal(torch.random.get_rng_state(), state)

    batch = batch_at(0)
    labels, ids = batch["labels"], batch["input_ids"]
    masked = labels != -100
    g = torch.Generator().manual_seed(1)
    sampled = torch.where(torch.rand(int(masked.sum()), generator=g) < 0.5, labels[masked],
                          torch.randint(0, tokenizer.vocab_size, (int(masked.sum()),), generator=g))
    real = batch["attention_mask"].bool()
    corrupted, replaced = corrupt(ids, labels, sampled, real)
    original = torch.where(masked, labels, ids)
    assert torch.equal(corrupted[~masked], original[~masked])  # only masked positions change
    assert torch.equal(replaced, (corrupted != original) & real)
    assert torch.equal(replaced[masked], sampled != labels[masked])  # a sampled original counts as real
    assert 0 < int(replaced.sum()) < int(masked.sum())


@pytest.mark.slow  # 20-45 s of training; distillation's loss, gradients and CLI runs stay in the default suite
def test_distillation_learns_from_a_teacher(reviews, tokenizer, tmp_path):
    torch.manual_seed(0)
    teacher = bertkit.build("bert-base", head="mlm", vocab_size=tokenizer.vocab_size, **{**TINY, "num_layers": 4})
    student = bertkit.student_from_teacher(teacher, layers=(0, 2))
    batch_at, _ = batches_from(reviews, tokenizer)
    before = [p.clone() for p in teacher.parameters()]
    losses, _ = train_curve(Distillation(student, teacher), batch_at, tmp_path)
    assert_learns(losses)
    assert all(torch.equal(a, b) for a, b in zip(before, teacher.parameters()))  # the teacher is frozen


def uneven_batch(reviews, tokenizer, pairs=False):
    """Eight rows whose first four mask 1 token each and last four 8 each (plus pair labels)."""
    batch = tokenizer(reviews[:8], reviews[8:16], max_length=32) if pairs else tokenizer(reviews[:8], max_length=32)
    chosen = torch.zeros_like(batch["input_ids"], dtype=torch.bool)
    chosen[:4, 1] = True
    chosen[4:, 1:9] = True
    batch["labels"] = batch["input_ids"].masked_fill(~chosen, -100)
    batch["input_ids"] = batch["input_ids"].masked_fill(chosen, tokenizer.mask_token_id)
    if pairs:
        batch["pair_labels"] = torch.tensor([0, 1, 1, 0, 1, 0, 0, 1])
    return batch


@pytest.mark.parametrize("kind", ["mlm", "mlm+nsp", "rtd", "distill"])
def test_accumulated_micro_batches_give_the_gradient_of_the_whole_batch(reviews, tokenizer, tmp_path, monkeypatch,
                                                                         kind):
    import copy

    from bertkit.objectives import rtd

    monkeypatch.setattr(rtd, "sample_tokens", lambda logits: logits.argmax(-1))  # the same tokens either way
    torch.manual_seed(0)
    quiet = {**TINY, "hidden_dropout": 0.0, "attention_dropout": 0.0, "vocab_size": tokenizer.vocab_size}
    if kind == "rtd":
        generator, model = bertkit.build_electra_pair(
            bertkit.PRESETS["electra-small"].config.replace(embedding_size=16, **quiet),
            bertkit.PRESETS["electra-small-generator"].config.replace(embedding_size=16,
                                                                      **{**quiet, "hidden_size": 16, "num_heads": 2}))
        objective = ReplacedTokenDetection(generator, model)
    elif kind == "distill":
        teacher = bertkit.build("bert-base", head="mlm", **{**quiet, "num_layers": 4})
        objective = Distillation(bertkit.student_from_teacher(teacher, layers=(0, 2)), teacher)
    else:
        model = bertkit.build("bert-base", head="mlm" if kind == "mlm" else "pretraining", **quiet)
        objective = MaskedLM(model, None if kind == "mlm" else "nsp")
    whole = uneven_batch(reviews, tokenizer, pairs=kind == "mlm+nsp")
    halves = [{k: v[:4] for k, v in whole.items()}, {k: v[4:] for k, v in whole.items()}]
    grads, logged = [], []
    for data, accumulation in ((lambda i: whole, 1), (lambda i: halves[i % 2], 2)):
        run = copy.deepcopy(objective)
        trainer = Trainer(run, data, settings(steps=1, lr=0.0, clip_norm=None, accumulation=accumulation),
                          tmp_path / f"run{accumulation}")
        logged.append(trainer.train_step())
        grads.append([p.grad for p in run.parameters() if p.grad is not None])
    # the logged loss and each term (losses, accuracies) are the whole batch's too
    assert logged[1].keys() == logged[0].keys() and logged[1] == pytest.approx(logged[0], rel=1e-5, abs=1e-6)
    assert len(grads[0]) == len(grads[1]) > 0
    for one, two in zip(*grads):
        assert (one - two).abs().max() <= 1e-4 * one.abs().max() + 1e-8


def test_resumed_run_equals_an_uninterrupted_one_bit_for_bit(reviews, tokenizer, tmp_path):
    batch_at, _ = batches_from(reviews, tokenizer)

    def run(out, data, resume=False):
        torch.manual_seed(0)
        model = bertkit.build("bert-base", head="mlm", vocab_size=tokenizer.vocab_size,
                              **{**TINY, "hidden_dropout": 0.1, "attention_dropout": 0.1})  # RNG in play
        trainer = Trainer(MaskedLM(model), data, settings(steps=10, save_every=3, accumulation=2), out,
                          eval_batches=[batch_at(100)])
        if resume:
            assert trainer.resume()
            assert trainer.step == 6
        trainer.fit()
        return model

    (tmp_path / "full").mkdir()  # a run cut before its first checkpoint left its log: a fresh run starts its own
    (tmp_path / "full" / "metrics.jsonl").write_text('{"step": 1, "split": "train", "loss": 9.0}\n')
    full = run(tmp_path / "full", batch_at)
    log = [json.loads(line) for line in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if r["split"] == "train"] == list(range(1, 11))
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "cut", interrupted_at(batch_at, 7))  # dies in step 8; its newest checkpoint is step 6
    with open(tmp_path / "cut" / "metrics.jsonl", "a") as f:
        f.write('{"step": 8, "split": "tr')  # and a kill cut the log's last line short
    resumed = run(tmp_path / "cut", batch_at, resume=True)
    log = [json.loads(line) for line in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if r["split"] == "train"] == list(range(1, 11))
    for (name, a), b in zip(full.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), name
    assert len(list((tmp_path / "full" / "checkpoints").glob("step-*"))) == 2  # keep=2


def test_a_fresh_run_into_another_runs_folder_is_refused_and_leaves_it_whole(reviews, tokenizer, tmp_path):
    """fit() without resume() into a folder holding a run's checkpoints, a finished run or a model
    wrote over them (a second run's model and metrics beside the first one's checkpoints, which a
    later resume() then continued); `bertkit pretrain` refused it, as the README says."""
    batch_at, _ = batches_from(reviews, tokenizer)

    def trainer(out, steps=2, **more):
        model = bertkit.build("bert-base", head="mlm", vocab_size=tokenizer.vocab_size, **TINY)
        return Trainer(MaskedLM(model), batch_at, settings(steps=steps, save_every=1, **more), out)

    trainer(tmp_path / "run").fit()
    before = {p: p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file()}
    with pytest.raises(bertkit.BertkitError, match=r"run already holds a run \(its newest checkpoint: step-00000002\); "
                                           r"call resume\(\) before fit\(\) to continue it, or choose another out$"):
        trainer(tmp_path / "run", lr=5e-3).fit()
    shutil.rmtree(tmp_path / "run" / "checkpoints")  # a finished run whose checkpoints were cleared
    before = {p: b for p, b in before.items() if p.exists()}
    with pytest.raises(bertkit.BertkitError, match="run already holds metrics.json, config.json, model.safetensors, "):
        trainer(tmp_path / "run").fit()
    assert {p: p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file()} == before
    resumed = trainer(tmp_path / "resumed", steps=3)  # resumed: its own folder, as before
    trainer(tmp_path / "resumed", steps=2).fit()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # more steps: nothing to say
        assert resumed.resume() and resumed.fit() is not None and resumed.step == 3
    # other optimization settings than the run's: said, by name (pretrain --resume refuses them)
    with pytest.warns(UserWarning, match=r"step-00000003 with settings other than its run's: lr 0.003 -> 0.005, "
                                         r"clip_norm 1.0 -> None \(the run goes on with the new ones\)"):
        assert trainer(tmp_path / "resumed", steps=4, lr=5e-3, clip_norm=None).resume()


def checkpointing_trainer(reviews, tokenizer, out, steps):
    """Makes a tiny MLM Trainer into `out` that checkpoints every 2 steps: a fresh model at each
    call, as a resumed process builds one."""
    batch_at, _ = batches_from(reviews, tokenizer)

    def trainer():
        model = bertkit.build("bert-base", head="mlm", vocab_size=tokenizer.vocab_size, **TINY)
        return Trainer(MaskedLM(model), batch_at, settings(steps=steps, save_every=2), out)
    return trainer


def test_a_checkpoint_of_an_earlier_bertkit_still_resumes(reviews, tokenizer, tmp_path):
    # earlier trainer states held numpy's random state as an array, which weights_only refuses
    # unless allowed; nothing else beyond plain values is
    trainer = checkpointing_trainer(reviews, tokenizer, tmp_path, steps=2)
    trainer().fit()
    path = tmp_path / "checkpoints" / "step-00000002" / "trainer_state.pt"
    state = torch.load(path, weights_only=True)
    np.random.seed(7)
    earlier = np.random.get_state()
    torch.save({**state, "rng": {**state["rng"], "numpy": earlier}}, path)
    resumed = trainer()
    assert resumed.resume() and resumed.step == 2
    assert np.array_equal(np.random.get_state()[1], earlier[1])


class _RunsCode:
    """Unpickled, creates a file: what a tampered trainer_state.pt could do instead."""
    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return open, (self.path, "w")


@pytest.mark.parametrize("damage", ["truncated", "empty dict", "text", "code"])
def test_a_damaged_trainer_state_is_one_line_naming_the_checkpoint_before_it(reviews, tokenizer, tmp_path, damage):
    trainer = checkpointing_trainer(reviews, tokenizer, tmp_path, steps=4)
    trainer().fit()
    state = tmp_path / "checkpoints" / "step-00000004" / "trainer_state.pt"
    if damage == "truncated":
        state.write_bytes(state.read_bytes()[:1000])
    elif damage == "empty dict":
        torch.save({}, state)
    elif damage == "code":  # resuming a shared run folder must not run what it holds
        torch.save({**torch.load(state, weights_only=True), "extra": _RunsCode(tmp_path / "ran")}, state)
    else:
        state.write_text("not a checkpoint")
    with pytest.raises(bertkit.BertkitError, match=r"step-00000004/trainer_state.pt: (unreadable|not a trainer state|"
                                           r"refused to unpickle)\b.*"
                                           r"step-00000002 is the checkpoint before it: move step-00000004 out of "
                                           r"checkpoints/") as e:
        trainer().resume()
    assert "\n" not in str(e.value) and not (tmp_path / "ran").exists()
    # renamed inside checkpoints/ as the advice might be read, it is no longer a checkpoint to resume from
    (tmp_path / "checkpoints" / "step-00000004").rename(tmp_path / "checkpoints" / "step-00000004.bad")
    resumed = trainer()
    assert resumed.resume() and resumed.step == 2


def test_full_disk_errors_from_every_writer_are_one_line(tmp_path, monkeypatch):
    import shutil
    from collections import namedtuple

    from bertkit.files import writing

    with pytest.raises(bertkit.BertkitError, match=r"could not write the model in .*: No space left on device "
                                                   r"\(os error 28\)"):
        with writing("the model", tmp_path):  # how `tokenizers` reports it: a plain Exception
            raise Exception("No space left on device (os error 28)")
    with pytest.raises(ValueError):  # anything else is a bug to see, not a disk to blame
        with writing("the model", tmp_path):
            raise ValueError("a bug")
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10 * 2**30, 10 * 2**30 - 5 * 2**20, 5 * 2**20))
    with pytest.raises(bertkit.BertkitError, match=r"in .*: the file was cut short \(5.0 MiB free there; the disk "
                                                   r"is nearly full\)$"):
        with writing("a checkpoint", tmp_path):  # torch.save's words for it
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 14784 vs 14676")
    # with room left, a limit on file size (ulimit -f) cut it: torch says the same
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10 * 2**30, 0, 10 * 2**30))
    with pytest.raises(bertkit.BertkitError, match=r"the file was cut short \(10240.0 MiB free there, so a limit on "
                                                   r"file size \(ulimit -f; FAT32's 4 GiB\) or an I/O error stopped it\)"):
        with writing("a checkpoint", tmp_path):
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 14784 vs 14676")


def test_a_loss_curve_that_cannot_be_written_is_a_warning_after_the_model_is_saved(reviews, tokenizer, tmp_path,
                                                                                  monkeypatch):
    from bertkit.train import loop

    def full(log, png):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(loop, "plot_curves", full)
    batch_at, _ = batches_from(reviews, tokenizer)
    model = bertkit.build("bert-base", head="mlm", vocab_size=tokenizer.vocab_size, **TINY)
    with pytest.warns(UserWarning, match="could not write .*loss_curve.png: No space left on device"):
        Trainer(MaskedLM(model), batch_at, settings(steps=2), tmp_path).fit()
    assert (tmp_path / "metrics.json").exists() and (tmp_path / "model.safetensors").exists()


def test_nonfinite_loss_stops_with_a_clear_error_and_keeps_the_checkpoint(reviews, tokenizer, tmp_path, capsys):
    batch_at, _ = batches_from(reviews, tokenizer)
    model = bertkit.build("bert-base", head="mlm", vocab_size=tokenizer.vocab_size, **TINY)
    objective = MaskedLM(model)
    poisoned = lambda i: {**batch_at(i), "poison": torch.tensor(i >= 4)}  # noqa: E731
    forward = objective.forward

    def sometimes_nan(batch):
        step = forward({k: v for k, v in batch.items() if k != "poison"})
        if bool(batch["poison"]):
            step.loss = step.loss * float("nan")
        return step

    objective.forward = sometimes_nan
    trainer = Trainer(objective, poisoned, settings(steps=8, save_every=2), tmp_path / "run")
    with pytest.raises(bertkit.BertkitError,  # the 5th step (metrics.jsonl's step 5), after checkpoint 4
                       match="loss is nan at step 5; stopping \\(the last checkpoint, .*step-00000004, is intact"):
        trainer.fit()
    assert [p.name for p in sorted((tmp_path / "run" / "checkpoints").glob("step-*"))] == ["step-00000002",
                                                                                         "step-00000004"]
    early = Trainer(objective, poisoned, settings(steps=8, save_every=10), tmp_path / "early")
    with pytest.raises(bertkit.BertkitError, match="no checkpoint was written; the weights are still finite, so this "
                       "step's data may give it .* or lower the learning rate, or skip"):
        early.fit()
    # weights an update made non-finite: the learning rate is the suspect
    kept = {k: v.clone() for k, v in model.state_dict().items()}
    diverged = Trainer(objective, lambda i: {**batch_at(i), "poison": torch.tensor(False)},
                       settings(steps=8, save_every=10), tmp_path / "diverged")
    step = diverged.train_step

    def ruin_after_two():
        if diverged.step == 2:
            with torch.no_grad():
                next(model.parameters()).fill_(float("inf"))
        return step()

    diverged.train_step = ruin_after_two
    with pytest.raises(bertkit.BertkitError, match="at step 3; .*the weights are no longer finite: lower the learning"):
        diverged.fit()
    model.load_state_dict(kept)
    # before any update the learning rate cannot be why (a regression label of 1e30 squares to inf)
    first = Trainer(objective, lambda i: {**batch_at(i), "poison": torch.tensor(True)}, settings(steps=2),
                    tmp_path / "first")
    with pytest.raises(bertkit.BertkitError, match="at step 1; stopping .*before any update, so the data or the model"):
        first.fit()
    skipping = Trainer(objective, poisoned, settings(steps=8, skip_nonfinite=True), tmp_path / "skip")
    skipping.fit()
    assert skipping.step == 8
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert "step 5 skipped: its loss is not finite" in capsys.readouterr().err  # said once, at the first
    log = [json.loads(line) for line in (tmp_path / "skip" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if r.get("skipped")] == [5, 6, 7, 8]  # steps count from 1
    strict = json.loads((tmp_path / "skip" / "metrics.json").read_text(), parse_constant=pytest.fail)
    assert strict["skipped_steps"] == 4 and strict["step"] == 8
    # skipped steps leave the weights as they were: no checkpoint of them pushes out one of trained
    # weights (6, 8 and 10 pushed out 4); the run's last checkpoint is still written at its end
    rotating = Trainer(objective, poisoned, settings(steps=12, save_every=2, keep=2, skip_nonfinite=True),
                       tmp_path / "rotating")
    rotating.fit()
    assert [p.name for p in sorted((tmp_path / "rotating" / "checkpoints").glob("step-*"))] == ["step-00000004",
                                                                                              "step-00000012"]
    lost = Trainer(objective, poisoned, settings(steps=40, skip_nonfinite=True), tmp_path / "lost")
    with pytest.raises(bertkit.BertkitError, match="20 steps in a row had a non-finite loss \\(up to step 24\\)"):
        lost.fit()


@pytest.mark.filterwarnings("error")  # e.g. tqdm's warning when a bar overshoots its total
def test_time_budget_stops_and_schedules_by_elapsed_seconds(reviews, tokenizer, tmp_path, capsys):
    batch_at, _ = batches_from(reviews, tokenizer)
    model = bertkit.build("bert-base", head="mlm", vocab_size=tokenizer.vocab_size, **TINY)
    trainer = Trainer(MaskedLM(model), batch_at, settings(steps=None, time_budget=1.5, progress=True), tmp_path / "run")
    trainer.fit()
    assert 1.5 <= trainer.elapsed < 1.5 + 2.0 and trainer.step >= 2
    bar = capsys.readouterr().err.strip().split("\r")[-1]  # the progress bar's last state: seconds of the budget
    assert "/2 s of training" in bar and f"step={trainer.step}," in bar, bar
    saved = torch.load(sorted((tmp_path / "run" / "checkpoints").glob("step-*"))[-1] / "trainer_state.pt",
                       weights_only=True)  # plain values and tensors: nothing that could run code
    assert saved["elapsed"] == trainer.elapsed


def test_bad_settings_are_one_clear_error():
    with pytest.raises(bertkit.BertkitError, match="steps or a time budget"):
        TrainSettings(steps=None)
    with pytest.raises(bertkit.BertkitError, match="accumulation"):
        TrainSettings(accumulation=0)
    with pytest.raises(bertkit.BertkitError, match="warmup"):
        TrainSettings(warmup=1.5)


def _uneven_batches(i):
    """Full-length rows predicting 1 to 8 tokens each, so the processes' and the micro-batches'
    shares of the rows hold different numbers of predicted tokens: a mean of their means is not
    the global mean."""
    g = torch.Generator().manual_seed(i)
    ids = torch.randint(5, 120, (8, 16), generator=g)
    labels = torch.full_like(ids, -100)
    for row in range(8):
        where = torch.randperm(15, generator=g)[:1 + (row + i) % 8] + 1
        labels[row, where] = ids[row, where]
        ids[row, where] = 4
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}


def _train_tiny(out, world=1):
    torch.manual_seed(0)
    # no dropout: its masks depend on how rows are split over processes
    model = bertkit.build("bert-base", head="mlm", **{**TINY, "vocab_size": 120, "hidden_dropout": 0.0,
                                                      "attention_dropout": 0.0})
    trainer = Trainer(MaskedLM(model), _uneven_batches, settings(steps=4, lr=1e-3, accumulation=2), out,
                      eval_batches=[_uneven_batches(99)])
    trainer.fit()
    assert trainer.world == world
    return model


def _ddp_worker(rank, world, store, out):
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        _train_tiny(out, world)
    finally:
        dist.destroy_process_group()


def test_two_processes_match_one_with_the_same_global_batch(tmp_path):
    torch.multiprocessing.spawn(_ddp_worker, args=(2, str(tmp_path / "store"), str(tmp_path / "ddp")), nprocs=2)
    single = _train_tiny(tmp_path / "single")
    ddp = bertkit.from_pretrained(tmp_path / "ddp")
    for (name, a), b in zip(single.state_dict().items(), ddp.state_dict().values()):
        assert (a - b).abs().max().item() <= 1e-5, name
    ddp_logged, single_logged = ([r[k] for r in map(json.loads, (tmp_path / run / "metrics.jsonl").open())
                                  if r["split"] == "train" for k in ("loss", "mlm_loss", "mlm_accuracy")]
                                 for run in ("ddp", "single"))
    assert len(ddp_logged) == 3 * 4  # one writer
    # the logged training losses and accuracies are the whole steps', not means of the processes' means
    assert ddp_logged == pytest.approx(single_logged, rel=1e-5)
    assert json.loads((tmp_path / "ddp" / "metrics.json").read_text())["processes"] == 2


def test_no_process_of_one_seeds_run_draws_another_seeds_stream():
    from bertkit.train.loop import process_seed

    seeds = {(seed, rank): process_seed(seed, rank) for seed in range(-3, 40) for rank in range(8)}
    assert all(seeds[seed, 0] == seed for seed in range(-3, 40))  # a one-process run keeps its seed
    assert len(set(seeds.values())) == len(seeds)  # seed + rank gave (1, 0) the stream of (0, 1)


@pytest.mark.parametrize("case", ["deberta-emd", "roberta-bf16"])
def test_more_families_learn(case, reviews, tokenizer, tmp_path):
    torch.manual_seed(0)
    if case == "deberta-emd":
        from bertkit.models.deberta import DebertaConfig
        config = DebertaConfig(vocab_size=tokenizer.vocab_size, position_buckets=16, enhanced_mask_decoder=True,
                               **TINY)
        model = bertkit.build(config, head="mlm")
    else:
        model = bertkit.build("roberta-base", head="mlm", vocab_size=tokenizer.vocab_size, **TINY)
    batch_at, _ = batches_from(reviews, tokenizer)
    losses, _ = train_curve(MaskedLM(model), batch_at, tmp_path, bf16=case.endswith("bf16"))
    assert_learns(losses)


def test_objectives_by_name_and_the_models_they_fit(tmp_path):
    from bertkit.objectives import build_objective

    small = dict(TINY, vocab_size=200)
    assert build_objective("mlm+nsp", "bert-base", **small).pair == "nsp"
    assert build_objective("mlm+sop", "albert-base", **small).pair == "sop"
    rtd = build_objective("rtd", "electra-small", **small)
    assert rtd.generator.backbone.embeddings is rtd.discriminator.backbone.embeddings
    teacher = bertkit.build("bert-base", head="mlm", **{**small, "num_layers": 4})
    teacher.save_pretrained(tmp_path / "teacher")
    distill = build_objective("distill", "distilbert-base", teacher=str(tmp_path / "teacher"))
    assert distill.student.config.num_layers == 2 and distill.student.config.family == "distilbert"
    for name, preset, message in [("mlm+nsp", "roberta-base", "does not fit roberta-base"),
                                  ("mlm+nsp", "deberta-v3-base", "does not fit"),
                                  ("rtd", "bert-base", "ELECTRA pair"),
                                  ("distill", "bert-base", "DistilBERT student"),
                                  ("span", "bert-base", "unknown objective 'span'")]:
        with pytest.raises(bertkit.BertkitError, match=message):
            build_objective(name, preset, **small)
    with pytest.raises(bertkit.BertkitError, match="unknown model .bert-tiny-nonexistent.; known presets"):
        build_objective("mlm", "bert-tiny-nonexistent")


@pytest.mark.parametrize("bad, words", [
    (dict(clip_norm=-1.0), "clip norm must be positive"), (dict(clip_norm=0.0), "clip norm must be positive"),
    (dict(weight_decay=-0.1), "weight decay must be a finite number >= 0"), (dict(lr=-1e-3), "lr must be a finite"),
    (dict(lr=float("nan")), "lr must be a finite number >= 0"), (dict(lr=float("inf")), "lr must be a finite"),
    (dict(seed=-1), "seed must be a whole number in"), (dict(seed=2 ** 63), "seed must be a whole number in"),
    (dict(betas=(0.9, 1.0)), "betas must lie in"),
    *[(dict(betas=b), rf"betas must be two numbers \(Adam's beta1, beta2\), got {re.escape(repr(b))}$")
      for b in [(0.9,), (0.9, 0.98, 0.5), ("a", "b"), (True, 0.9)]],  # were errors deep in fit()
    (dict(eps=0.0), "eps be positive")])
def test_optimizer_settings_that_would_train_the_wrong_way_are_refused(bad, words):
    """A negative clip norm or weight decay does not fail in torch: it flips the update. Both
    trainers (torch and NumPy) refuse such settings on construction."""
    from bertkit import numpy_ref

    for settings_class in (TrainSettings, numpy_ref.TrainSettings):
        with pytest.raises(bertkit.BertkitError, match=words):
            settings_class(steps=10, **bad)
        settings_class(steps=10, clip_norm=None)  # no clipping stays possible
        assert hash(settings_class(steps=10, betas=[0.9, 0.99])) and settings_class(steps=10, betas=[0.9, 0.99]) \
            == settings_class(steps=10, betas=(0.9, 0.99))  # a list (JSON's) is taken as the tuple


def test_a_float64_model_trains_in_float64_and_unpredicted_targets_count_nowhere():
    """The loss is not rounded to fp32 on the way (only half-precision logits are widened), and a
    -100 target given to masked_lm_terms is out of the accuracy as it is out of the loss."""
    import torch.nn.functional as F

    from bertkit.objectives.mlm import masked_lm_terms

    model = bertkit.build("mini-bert", head="mlm", num_layers=1, hidden_size=16, num_heads=2, intermediate_size=16,
                          vocab_size=50, hidden_dropout=0.0, attention_dropout=0.0).double()
    ids = torch.randint(5, 50, (2, 9), generator=torch.Generator().manual_seed(0))
    labels = torch.full_like(ids, -100)
    labels[:, 2:5] = ids[:, 2:5]
    step = MaskedLM(model)({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels})
    logits = model(ids).logits
    expected = F.cross_entropy(logits.reshape(-1, 50), labels.reshape(-1))  # float64 throughout
    assert step.loss.dtype == torch.float64 and abs(step.loss.item() - expected.item()) < 1e-13
    right = torch.eye(4, dtype=torch.float64)  # each row predicts its own index
    assert masked_lm_terms(right, torch.tensor([0, 1, 2, 3]))[1].item() == 1.0
    loss, accuracy = masked_lm_terms(right, torch.tensor([-100, 1, 2, 3]))
    assert accuracy.item() == 1.0
    assert abs(loss.item() - F.cross_entropy(right[1:], torch.tensor([1, 2, 3])).item()) < 1e-15


def test_a_batch_without_what_the_objective_reads_is_one_error(reviews, tokenizer, tmp_path):
    batch_at, _ = batches_from(reviews, tokenizer)
    model = bertkit.build("bert-base", head="mlm", vocab_size=tokenizer.vocab_size, **TINY)
    unlabelled = {k: v for k, v in batch_at(0).items() if k != "labels"}
    with pytest.raises(bertkit.BertkitError, match="MaskedLM needs the batch key\\(s\\) 'labels': \\(B, T\\) target ids, "
                       ".*this batch has 'input_ids', 'attention_mask'"):
        MaskedLM(model)(unlabelled)
    with pytest.raises(bertkit.BertkitError, match="MaskedLM needs the batch key\\(s\\) 'labels'"):
        Trainer(MaskedLM(model), lambda i: unlabelled, settings(steps=1), tmp_path / "run").fit()
    with pytest.raises(bertkit.BertkitError, match="a batch is a dict of tensors by name, not Tensor"):
        MaskedLM(model)(batch_at(0)["input_ids"])
    assert torch.isfinite(MaskedLM(model)(batch_at(0)).loss)


def test_under_torchrun_cuda_is_each_process_s_own_gpu_and_bf16_needs_the_hardware(monkeypatch):
    """Without a GPU here, torch.cuda is stood in for: every torchrun process took cuda (GPU 0),
    and NCCL cannot run two processes on one GPU; a T4 (compute capability 7.5) emulates bf16,
    so precision auto picked a slower path than fp32."""
    from bertkit.pretraining import native_bf16, pick_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert pick_device("auto") == pick_device("cuda") == torch.device("cuda")  # no torchrun: as asked
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert pick_device("auto") == pick_device("cuda") == torch.device("cuda", 1)
    assert pick_device("cuda:0") == torch.device("cuda", 0) and pick_device("cpu") == torch.device("cpu")
    monkeypatch.setenv("LOCAL_RANK", "2")
    with pytest.raises(bertkit.BertkitError, match="device cuda:2 asked for, but torch sees 2 CUDA device"):
        pick_device("cuda")
    for capability, native in (((7, 5), False), ((8, 0), True), ((9, 0), True)):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None, c=capability: c)
        assert native_bf16(torch.device("cuda", 1)) is native, capability


def test_a_checkpoint_written_on_a_gpu_resumes_on_a_cpu(tmp_path, monkeypatch):
    """Its optimizer state was saved on CUDA: loading it without a GPU failed as 'unreadable'.
    (torch.save is told its storages are CUDA's, as it records them on a GPU machine.)"""
    import torch.serialization as serialization

    from bertkit.train import checkpoint

    model = bertkit.build("bert-base", head="mlm", vocab_size=50, **TINY)
    state = {"optimizer": {"state": {0: {"exp_avg": torch.ones(3)}}, "param_groups": []}, "step": 5,
             "elapsed": 1.0, "tokens": 10}
    with monkeypatch.context() as patch:
        patch.setattr(serialization, "location_tag", lambda storage: "cuda:0")
        path = checkpoint.save(tmp_path, 5, {"": model}, state, keep=2)
    loaded = checkpoint.load(path, {"": model})
    assert loaded["step"] == 5 and torch.equal(loaded["optimizer"]["state"][0]["exp_avg"], torch.ones(3))
    assert "cuda" not in loaded["rng"]  # a CPU run keeps no GPU's stream (and starts no CUDA for it)


def test_a_model_changed_after_the_trainer_was_built_is_refused_not_left_untrained(tokenizer, tmp_path):
    """The optimizer is built with the Trainer: a table resized afterwards was never trained."""
    model = bertkit.build("bert-base", head="mlm", num_layers=1, hidden_size=32, num_heads=2, intermediate_size=64,
                          vocab_size=len(tokenizer))
    trainer = Trainer(MaskedLM(model), lambda i: None, settings(steps=1), tmp_path / "run")
    model.resize_token_embeddings(len(tokenizer) + 8)
    with pytest.raises(bertkit.BertkitError, match=r"trainable parameter\(s\) \(.*word.weight.*\) are not in the "
                                                   r"optimizer: the model changed after the Trainer was built"):
        trainer.fit()
    assert not (tmp_path / "run").exists()  # refused before anything was written
    model.gradient_checkpointing_enable()  # transformers' way: a Trainer not asked for it keeps it on
    Trainer(MaskedLM(model), lambda i: None, settings(steps=1), tmp_path / "run")
    assert model.is_gradient_checkpointing


def test_an_objective_of_ones_own_needs_only_a_forward_returning_the_loss(reviews, tokenizer, tmp_path):
    """"An objective is a module that returns a loss" (the design): an Objective subclass whose
    forward returned a tensor failed with "'Tensor' object has no attribute 'loss'", and one
    without models() with a bare NotImplementedError; a plain module was refused with no word of
    what to do."""
    from torch import nn

    from bertkit.objectives import Objective

    batch_at, _ = batches_from(reviews, tokenizer)
    model = bertkit.build("bert-base", head="mlm", vocab_size=tokenizer.vocab_size, **TINY)

    class MeanLogit(Objective):  # a loss of one's own, over the masked positions' logits
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, batch, totals=None):
            logits = self.model(batch["input_ids"], batch["attention_mask"]).logits
            return torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten())

    objective = MeanLogit(model)
    assert objective.models() == {"": model}
    before = model.get_input_embeddings().weight.detach().clone()
    Trainer(objective, batch_at, settings(steps=2), tmp_path / "own").fit()
    log = [json.loads(line) for line in (tmp_path / "own" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if r["split"] == "train" and math.isfinite(r["loss"])] == [1, 2]
    assert not torch.equal(before, model.get_input_embeddings().weight)
    assert bertkit.from_pretrained(tmp_path / "own").head_kind == "mlm"  # what models() named, saved

    class MultiLabel(MeanLogit):  # labels of its own shape, (B, 3) floats, as transformers' multi-label ones
        def forward(self, batch, totals=None):
            scores = self.model(batch["input_ids"], batch["attention_mask"]).logits[:, 0, :3]
            return torch.nn.functional.binary_cross_entropy_with_logits(scores, batch["labels"])

    rows = len(batch_at(0)["input_ids"])
    multi = lambda i: {**batch_at(i), "labels": torch.rand(rows, 3)}  # noqa: E731  (refused as not (B, T))
    Trainer(MultiLabel(model), multi, settings(steps=1), tmp_path / "multi").fit()

    class Returns(MeanLogit):
        def __init__(self, model, give):
            super().__init__(model)
            self.give = give

        def forward(self, batch, totals=None):
            return self.give(super().forward(batch))

    class Two(MeanLogit):
        def __init__(self, model):
            super().__init__(model)
            self.other = bertkit.build("mini-bert", head="mlm", num_layers=1)

    class Plain(nn.Module):
        def forward(self, batch):
            return torch.zeros(())

    fit = lambda objective: Trainer(objective, batch_at, settings(steps=1), tmp_path / "x").fit()  # noqa: E731
    for call, said in [
            (lambda: fit(Returns(model, float)), r"^Returns.forward returned float: an objective returns its loss"),
            (lambda: fit(Returns(model, lambda loss: loss.expand(7))),
             r"^Returns.forward returned a loss of shape \(7,\): a loss is one number"),
            (lambda: fit(Returns(model, torch.Tensor.detach)), "^the loss does not require grad: no trainable"),
            (lambda: Two(model).models(), r"^Two holds 2 bertkit models as attributes: say which a run saves by "
                                          r'defining models\(\) -> \{"": model\}'),
            (lambda: fit(Plain()), "^Trainer takes an objective .*or a subclass of bertkit.objectives.Objective "
                                   r"whose forward\(batch\) returns the loss\), not Plain$")]:
        with pytest.raises(bertkit.BertkitError, match=said):
            call()


def test_a_batch_of_the_wrong_shapes_or_kinds_is_one_error_naming_the_key(reviews, tokenizer, tmp_path):
    """Each was torch's own error from deep inside a step (a size mismatch, 'list' has no .to,
    "Target 123 is out of bounds")."""
    batch_at, _ = batches_from(reviews, tokenizer)
    model = bertkit.build("bert-base", head="mlm", vocab_size=tokenizer.vocab_size, **TINY)
    good = batch_at(0)
    B, T = good["input_ids"].shape
    V = tokenizer.vocab_size
    for change, said in [
            ({"labels": good["labels"][:, :-2]}, rf"'labels' has shape \({B}, {T - 2}\), not input_ids' shape"),
            ({"attention_mask": good["attention_mask"][:-1]}, rf"'attention_mask' has shape \({B - 1}, {T}\), not"),
            ({"token_type_ids": good["input_ids"].tolist()}, "'token_type_ids' is a list, not a tensor"),
            ({"labels": good["labels"].masked_fill(good["labels"] != -100, V + 5)},
             f"'labels' holds {V + 5}, outside the vocabulary of {V}")]:
        trainer = Trainer(MaskedLM(model), lambda i: {**good, **change}, settings(steps=1), tmp_path / "run")
        with pytest.raises(bertkit.BertkitError, match=f"^batch key {said}"):
            trainer.fit()
        assert not (tmp_path / "run" / "metrics.json").exists()


def test_the_trainer_checks_each_batch_once_on_the_host(reviews, tokenizer, tmp_path):
    """The objective's own call checks a batch too; the trainer has checked it before it moves, where
    reading the values (the MLM labels' range) costs no device sync, so it says so instead of a second
    and a third check (once in _shard, once in _to_device, once in the call)."""
    batch_at, _ = batches_from(reviews, tokenizer)
    model = bertkit.build("bert-base", head="mlm", vocab_size=tokenizer.vocab_size, **TINY)
    seen = []

    class Counting(MaskedLM):
        def check_batch(self, batch):
            seen.append(batch["input_ids"].device.type)
            super().check_batch(batch)

    held_out = [batch_at(100 + i) for i in range(3)]
    Trainer(Counting(model), batch_at, settings(steps=2, accumulation=2), tmp_path / "run", held_out).fit()

    class OwnCall(MaskedLM):  # a subclass with a __call__ of its own (the trainer once passed it checked=True)
        def __call__(self, batch, totals=None):
            return super().__call__(batch, totals)

    Trainer(OwnCall(model), batch_at, settings(steps=1, accumulation=2), tmp_path / "own", held_out).fit()
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    evaluations = sum(record.get("split") == "eval" for record in logged)
    assert evaluations >= 1
    assert len(seen) == 2 * 2 + evaluations * len(held_out)  # steps x micro-batches, evaluations x batches


def test_a_model_built_with_its_tokenizer_saves_it_in_each_checkpoint_and_the_final_model(reviews, tokenizer,
                                                                                           minilm_dir, tmp_path):
    """A Trainer run of a model from build() had no tokenizer files, so the folder could not be
    fine-tuned or predicted with on its own; build(..., tokenizer=) and model.tokenizer = path
    carry one (a path given to the attribute was kept as a string and failed in the first save)."""
    batch_at, _ = batches_from(reviews, tokenizer)
    model = bertkit.build("bert-base", head="mlm", vocab_size=tokenizer.vocab_size, tokenizer=minilm_dir, **TINY)
    Trainer(MaskedLM(model), batch_at, settings(steps=2, save_every=1), tmp_path / "run").fit()
    folders = [tmp_path / "run", *sorted((tmp_path / "run" / "checkpoints").iterdir())]
    assert len(folders) >= 2
    for folder in folders:
        loaded = bertkit.from_pretrained(folder)
        assert loaded.tokenizer("a film")["input_ids"].tolist() == tokenizer("a film")["input_ids"].tolist()
    model.tokenizer = None
    model.tokenizer = minilm_dir  # a path: loaded now
    assert model.tokenizer.backend.get_vocab() == tokenizer.backend.get_vocab()
    with pytest.raises(bertkit.BertkitError, match="^tokenizer must be a bertkit Tokenizer or a path to its files, "
                                                   "not int$"):
        model.tokenizer = 3
    with pytest.raises(bertkit.BertkitError, match="^the tokenizer has 30522 tokens but the model's vocabulary "
                                                   "has 100"):
        bertkit.build("bert-base", head="mlm", tokenizer=minilm_dir, **{**TINY, "vocab_size": 100})


def test_bf16_asked_for_in_python_where_it_is_emulated_is_said_once(reviews, tokenizer, minilm_dir, tmp_path,
                                                                     monkeypatch):
    """Only the command line's --precision bf16 said that bf16 is emulated (several times slower
    than fp32); TrainSettings(bf16=True) and the helpers' bf16=True ran as slowly without a word.
    Said once per process, through whichever comes first (a command, then its Trainer: once)."""
    from bertkit.pretraining import EMULATION_TOLD
    from bertkit.tasks import embed, fill_mask

    batch_at, _ = batches_from(reviews, tokenizer)
    model = bertkit.build("bert-base", head="mlm", vocab_size=tokenizer.vocab_size, tokenizer=minilm_dir, **TINY)

    def said(call) -> list[str]:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            call()
        return [str(w.message) for w in seen if "emulated" in str(w.message)]

    for native in (True, False):
        monkeypatch.setattr("bertkit.pretraining.native_bf16", lambda device: native)
        for call in (lambda: Trainer(MaskedLM(model), batch_at, settings(steps=1, bf16=True), tmp_path / "run"),
                     lambda: embed(minilm_dir, ["a film"], bf16=True),
                     lambda: fill_mask(model, ["a [MASK] film"], bf16=True)):
            EMULATION_TOLD.clear()
            told = said(lambda: [call(), call()])
            assert told == ([] if native else ["bf16 on this CPU (no AVX512-BF16 or AMX) is emulated: several times "
                                               "slower than fp32 here; --precision auto (bf16=False in Python) picks "
                                               "fp32 on such hardware"]), told
            assert not said(lambda: Trainer(MaskedLM(model), batch_at, settings(steps=1), tmp_path / "run"))
    EMULATION_TOLD.clear()
    with warnings.catch_warnings(record=True) as seen:  # pointing at the caller's line, as bertkit's warnings do
        warnings.simplefilter("always")
        Trainer(MaskedLM(model), batch_at, settings(steps=1, bf16=True), tmp_path / "run")
    assert [w.filename for w in seen if "emulated" in str(w.message)] == [__file__]
