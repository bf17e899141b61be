"""Pre-train mini-bert for the same wall-clock budget with bertkit and with transformers.

Issue 7's acceptance benchmark: bertkit must reach a lower held-out masked-LM loss than
transformers' BertForMaskedLM when both train the same model on the same data, batches and
schedule for the same number of training seconds. Everything but the implementation is shared:

- weights: bertkit builds and seeds mini-bert (vocabulary = the tokenizer's), saves it in Hugging
  Face format (OUT/initial) and transformers loads that with attn_implementation="sdpa", its
  fastest CPU path. Before training, both must give the same fp32 loss on the first batch
  (within 1e-4, dropout off), or the script stops;
- data: `PretrainingData.batch_at(i)` on the built-in imdb train split, an uncased WordPiece of
  mini-bert's 8,192 tokens trained on it (cached, the one `bertkit pretrain` uses), packed rows,
  BERT's dynamic 15% 80/10/10 masks; step i trains on batch i on both sides;
- optimization: one TrainSettings object: AdamW (lr, betas, eps, weight decay 0.01 on matrices
  only, none on biases and LayerNorm gains), linear warm-up over 6% of training then linear decay,
  driven by training seconds / budget (Cramming, Geiping & Goldstein 2023), gradient clipping at
  norm 1, bf16 autocast (or not) on both sides;
- the clock: training seconds, i.e. building the batch, forward, backward, clipping and the
  optimizer step; evaluation, logging and saving are excluded on both sides (bertkit's Trainer
  keeps its clock that way, and the reference loop below copies it);
- evaluation: the same fixed held-out batches (imdb dev split, masks fixed) every N optimizer
  steps on both sides (the Trainer's rule; N defaults to about 20 evaluations on the faster
  side) and at the end; scores are means over batches of the per-batch mean loss and accuracy
  over masked tokens.

bertkit trains through its own Trainer (`bertkit.train.Trainer.fit`, what `bertkit pretrain`
runs); transformers through the plain, idiomatic loop written out in `train_reference` below
(`model(input_ids, attention_mask, token_type_ids, labels=labels).loss`, backward, clip, step).
Before either timed run, each side trains a few throwaway steps on a copy of the model, so
oneDNN's one-time setup is paid by neither budget; the sides then run one after the other in
this process (bertkit first unless --reference-first).

Output in OUT (default runs/bench-pretrain; the bertkit/, transformers/ and initial/ folders in
it are replaced on every run):
    initial/                       the shared starting weights and tokenizer
    bertkit/                       the Trainer's run directory (model, tokenizer, metrics.jsonl)
    transformers/                  the reference model and its metrics.jsonl (same records)
    pretrain_vs_transformers.png   held-out MLM loss against training seconds (and steps)
and a table on stdout; --json PATH writes `bertkit bench --json` records (ratio > 1 means bertkit
is better: reference / ours for a loss, ours / reference for accuracy, steps and tokens/s).

    .venv/bin/python benchmarks/pretrain_vs_transformers.py                 # 2 x 300 s
    .venv/bin/python benchmarks/pretrain_vs_transformers.py --budget 30     # a quick look
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")  # a first run tokenizes the corpus on every core

import torch  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

import bertkit  # noqa: E402
from bertkit.bench import Record, machine  # noqa: E402
from bertkit.data import PipelineSettings, open_corpus, pretraining_data  # noqa: E402
from bertkit.objectives import MaskedLM  # noqa: E402
from bertkit.pretraining import native_bf16, trained_tokenizer  # noqa: E402
from bertkit.schedules import lr_factor  # noqa: E402
from bertkit.train import Trainer, TrainSettings, param_groups  # noqa: E402

PRESET = "mini-bert"
PARITY_TOLERANCE = 1e-4
WARMUP_STEPS = 6      # throwaway steps per side before the timed runs
EVALUATIONS = 20      # the default evaluation interval aims at this many on the faster side


def say(*parts) -> None:
    print(*parts, file=sys.stderr, flush=True)


# ---- the reference: a plain transformers training loop ------------------------------------------
def load_reference(directory: Path):
    import transformers

    model = transformers.BertForMaskedLM.from_pretrained(directory, attn_implementation="sdpa")
    return model.train()


def reference_optimizer(model, s: TrainSettings) -> torch.optim.AdamW:
    """AdamW with the usual transformers grouping: no weight decay on biases and LayerNorm weights."""
    no_decay = ("bias", "LayerNorm.weight")
    params = list(model.named_parameters())  # tied weights (decoder = word embeddings) listed once
    groups = [
        {"params": [p for n, p in params if not any(k in n for k in no_decay)], "weight_decay": s.weight_decay},
        {"params": [p for n, p in params if any(k in n for k in no_decay)], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=s.lr, betas=s.betas, eps=s.eps)


def evaluate_reference(model, batches: list[dict], bf16: bool) -> dict[str, float]:
    model.eval()
    loss = accuracy = 0.0
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        for b in batches:
            out = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                        token_type_ids=b["token_type_ids"], labels=b["labels"])
            masked = b["labels"] != -100  # (B, T)
            loss += float(out.loss)
            accuracy += float((out.logits[masked].argmax(-1) == b["labels"][masked]).float().mean())
    model.train()
    loss, accuracy = loss / len(batches), accuracy / len(batches)
    return {"loss": loss, "mlm_loss": loss, "mlm_accuracy": accuracy, "perplexity": math.exp(min(loss, 50.0))}


def train_reference(model, batch_at, s: TrainSettings, eval_batches: list[dict], out: Path) -> dict:
    """Train until s.steps or s.time_budget training seconds; metrics.jsonl records as the Trainer's."""
    out.mkdir(parents=True, exist_ok=True)
    optimizer = reference_optimizer(model, s)
    torch.manual_seed(s.seed)  # dropout, as the Trainer seeds it
    model.train()
    step, elapsed, tokens = 0, 0.0, 0

    def done() -> bool:
        return (s.steps is not None and step >= s.steps) or (s.time_budget is not None and elapsed >= s.time_budget)

    def evaluate() -> dict:
        metrics = evaluate_reference(model, eval_batches, s.bf16)
        log.write(json.dumps({"step": step, "split": "eval", "elapsed": round(elapsed, 3), **metrics}) + "\n")
        return metrics

    bar = tqdm(total=s.steps if s.time_budget is None else None, disable=not s.progress, unit="step",
               dynamic_ncols=True)
    with open(out / "metrics.jsonl", "w") as log:
        while not done():
            progress = elapsed / s.time_budget if s.time_budget is not None else step / s.steps
            lr = s.lr * lr_factor(progress, s.warmup, s.schedule)
            for group in optimizer.param_groups:
                group["lr"] = lr
            start = time.perf_counter()
            batch = batch_at(step)
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=s.bf16):
                loss = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                             token_type_ids=batch["token_type_ids"], labels=batch["labels"]).loss
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), s.clip_norm)
            optimizer.step()
            record = {"loss": loss.item(), "grad_norm": grad_norm.item()}
            tokens += int(batch["attention_mask"].sum())
            seconds = time.perf_counter() - start
            elapsed += seconds
            step += 1
            log.write(json.dumps({"step": step, "split": "train", "lr": lr, "tokens": tokens,
                                  "elapsed": round(elapsed, 3), **record}) + "\n")
            bar.set_postfix(loss=f"{record['loss']:.3f}", tok_s=f"{tokens / elapsed:,.0f}")
            bar.update(1)
            if step % s.eval_every == 0 and not done():
                evaluate()
        bar.close()
        final = evaluate()
    return {"step": step, "elapsed": elapsed, "tokens": tokens, **final}


# ---- bertkit: its own Trainer --------------------------------------------------------------------
def train_ours(model, batch_at, s: TrainSettings, eval_batches: list[dict], out: Path) -> dict:
    trainer = Trainer(MaskedLM(model), batch_at, s, out, eval_batches)
    final = trainer.fit()
    return {"step": trainer.step, "elapsed": trainer.elapsed, "tokens": trainer.tokens, **final}


SIDES = {"bertkit": train_ours, "transformers": train_reference}


# ---- setup ---------------------------------------------------------------------------------------
def data_and_tokenizer(args):
    train_corpus, dev_corpus = open_corpus("imdb"), open_corpus("imdb", split="dev")
    vocab = bertkit.build(PRESET).config.vocab_size
    tokenizer = trained_tokenizer(train_corpus, "bert", vocab, args.cache_dir)
    settings = PipelineSettings(objective="mlm", family="bert", max_length=args.max_length,
                                batch_size=args.batch_size, seed=args.seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # what the builder repaired is in summary(), printed below
        data = pretraining_data(train_corpus, tokenizer, settings, cache_dir=args.cache_dir)
        # held-out batches with their own seed, as `bertkit pretrain` builds them; masks fixed
        held = pretraining_data(dev_corpus, tokenizer, dataclasses.replace(settings, seed=args.seed + 1),
                                cache_dir=args.cache_dir)
    eval_batches = [held.batch_at(i) for i in range(min(args.eval_batches, len(held)))]
    say(f"training data (imdb train): {data.summary()}; {len(data)} batches per epoch")
    say(f"held-out data (imdb dev): {len(eval_batches)} batches of {args.batch_size} x {args.max_length}")
    return tokenizer, data, eval_batches


def initial_models(tokenizer, args, out: Path):
    """(ours, reference) with identical weights: bertkit's, saved to `out` and loaded by transformers."""
    limit = bertkit.build(PRESET).config.max_positions
    torch.manual_seed(args.seed)
    ours = bertkit.build(PRESET, head="mlm", vocab_size=len(tokenizer),
                         max_positions=max(limit, args.max_length))
    ours.tokenizer = tokenizer  # so each run directory is a usable checkpoint
    shutil.rmtree(out, ignore_errors=True)
    ours.save_pretrained(out)
    return ours, load_reference(out)


def check_parity(ours, reference, batch: dict) -> float:
    ours.eval(), reference.eval()
    with torch.no_grad():
        a = MaskedLM(ours)(batch).loss.item()
        b = reference(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                      token_type_ids=batch["token_type_ids"], labels=batch["labels"]).loss.item()
    ours.train(), reference.train()
    if not abs(a - b) <= PARITY_TOLERANCE:
        raise SystemExit(f"the two models differ before training: fp32 loss on batch 0 is {a:.6f} (bertkit) vs "
                         f"{b:.6f} (transformers); the comparison would not be between equal models")
    return abs(a - b)


def check_groups(ours, reference, weight_decay: float) -> None:
    """The reference's name-based AdamW groups hold the same parameters as bertkit's rank-based ones."""
    count = [sum(p.numel() for p in g["params"]) for g in param_groups(MaskedLM(ours), weight_decay)]
    ref = [sum(p.numel() for p in g["params"]) for g in reference_optimizer(reference, TrainSettings()).param_groups]
    if count != ref:
        raise SystemExit(f"AdamW groups differ: bertkit decays/does not decay {count} parameters, transformers {ref}")


def warm_up(ours, reference, batch_at, s: TrainSettings, eval_batches: list[dict]) -> dict[str, float]:
    """A few throwaway steps per side (copies of the models), so neither timed run pays oneDNN's
    one-time setup for the other; returns each side's median seconds per step after the first two."""
    rates = {}
    quick = dataclasses.replace(s, steps=WARMUP_STEPS, time_budget=None, progress=False, save_every=10**9)
    with tempfile.TemporaryDirectory() as tmp:
        for name, model in (("bertkit", ours), ("transformers", reference)):
            SIDES[name](copy.deepcopy(model), batch_at, quick, eval_batches[:2], Path(tmp) / name)
            clock = [r["elapsed"] for r in read_log(Path(tmp) / name) if r["split"] == "train"]
            rates[name] = statistics.median(b - a for a, b in zip(clock[1:], clock[2:]))
    return rates


# ---- results -------------------------------------------------------------------------------------
def read_log(directory: Path) -> list[dict]:
    return [json.loads(line) for line in (directory / "metrics.jsonl").read_text().splitlines()]


def equal_step_losses(logs: dict[str, list[dict]]) -> tuple[int, dict[str, float]] | None:
    """The held-out loss of both sides at the last evaluation step both reached."""
    evals = {name: {r["step"]: r["mlm_loss"] for r in log if r["split"] == "eval"} for name, log in logs.items()}
    common = set.intersection(*(set(e) for e in evals.values()))
    if not common:
        return None
    step = max(common)
    return step, {name: e[step] for name, e in evals.items()}


def plot(logs: dict[str, list[dict]], png: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"bertkit": "tab:blue", "transformers": "tab:orange"}
    fig, (by_time, by_step) = plt.subplots(1, 2, figsize=(12, 4.8), dpi=130, gridspec_kw={"width_ratios": [2, 1]})
    low, high = math.inf, -math.inf
    for name, log in logs.items():
        train = [r for r in log if r["split"] == "train"]
        evals = [r for r in log if r["split"] == "eval"]
        window = max(1, len(train) // 40)
        smooth = [statistics.fmean(r["loss"] for r in train[max(0, i - window + 1):i + 1]) for i in range(len(train))]
        by_time.plot([r["elapsed"] for r in train], smooth, color=colors[name], alpha=0.25, lw=1,
                     label=f"{name}: training loss" + (f" (mean of {window} steps)" if window > 1 else ""))
        t, loss = [r["elapsed"] for r in evals], [r["mlm_loss"] for r in evals]
        by_time.plot(t, loss, "o-", color=colors[name], lw=2, ms=4, label=f"{name}: held-out MLM loss")
        by_time.annotate(f"{loss[-1]:.3f}", (t[-1], loss[-1]), textcoords="offset points", xytext=(6, 0),
                         va="center", color=colors[name], fontsize=9, fontweight="bold")
        by_step.plot([r["step"] for r in evals], loss, "o-", color=colors[name], lw=1.5, ms=3, label=name)
        low = min(low, *loss, *smooth[len(smooth) // 10:])
        high = max(high, *loss)
    margin = 0.05 * (high - low) + 0.02
    for ax in (by_time, by_step):
        ax.set_ylim(low - margin, high + margin)
        ax.grid(alpha=0.3)
    by_time.set_xlabel("training seconds (evaluation excluded)")
    by_time.set_ylabel("masked-LM loss (nats)")
    by_time.legend(fontsize=8)
    by_step.set_xlabel("optimizer step")
    by_step.set_title("held-out MLM loss per step", fontsize=9)
    by_step.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)


def records(results: dict[str, dict], dtype: str, label: str, parity: float) -> list[Record]:
    ours, ref = results["bertkit"], results["transformers"]
    rate = {name: r["tokens"] / r["elapsed"] for name, r in results.items()}
    return [
        Record(f"{label}: final held-out MLM loss", dtype, ours["mlm_loss"], ref["mlm_loss"], "nats",
               ref["mlm_loss"] / ours["mlm_loss"], parity,
               note="ratio = transformers / bertkit; max_abs_diff is of the fp32 loss on batch 0 before training"),
        Record(f"{label}: final held-out MLM accuracy", dtype, ours["mlm_accuracy"], ref["mlm_accuracy"], "fraction",
               ours["mlm_accuracy"] / ref["mlm_accuracy"], None),
        Record(f"{label}: optimizer steps", dtype, ours["step"], ref["step"], "steps", ours["step"] / ref["step"],
               None),
        Record(f"{label}: training throughput", dtype, rate["bertkit"], rate["transformers"], "tokens/s",
               rate["bertkit"] / rate["transformers"], None, note="real (non-pad) tokens per training second"),
    ]


def print_table(rows: list[Record], equal: tuple[int, dict[str, float]] | None, results: dict[str, dict]) -> None:
    names = ["held-out MLM loss (final)", "held-out MLM accuracy (final)", "optimizer steps", "tokens/s (training)"]
    print(f"\n{'':<34}{'bertkit':>12}{'transformers':>14}{'ratio':>8}")
    for name, r in zip(names, rows):
        fmt = "{:>12.4f}{:>14.4f}" if r.unit in ("nats", "fraction") else "{:>12,.0f}{:>14,.0f}"
        print(f"{name:<34}" + fmt.format(r.ours, r.reference) + f"{r.ratio:>8.3f}")
    print(f"{'training seconds':<34}{results['bertkit']['elapsed']:>12.1f}{results['transformers']['elapsed']:>14.1f}")
    if equal is not None:
        step, loss = equal
        print(f"{f'held-out MLM loss at step {step}':<34}{loss['bertkit']:>12.4f}{loss['transformers']:>14.4f}"
              f"{loss['transformers'] / loss['bertkit']:>8.3f}")
    print("\nratio > 1 means bertkit is better (loss: transformers / bertkit; the others: bertkit / transformers). "
          "At equal steps the two have seen the same batches, but not the same learning rates (the schedule "
          "follows training seconds).")


# ---- main ----------------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--budget", type=float, default=300.0, help="training seconds per side")
    parser.add_argument("--batch-size", type=int, default=64, help="sequences per optimizer step")
    parser.add_argument("--max-length", type=int, default=64,
                        help="tokens per sequence (mini-bert has 64 positions; longer widens its position table)")
    parser.add_argument("--lr", type=float, default=TrainSettings.lr, help="peak learning rate")
    parser.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None,
                        help="bf16 autocast on both sides (default: on where the CPU has native bf16 matmuls, "
                             "AVX512-BF16 or AMX, as `bertkit pretrain` decides)")
    parser.add_argument("--eval-every", type=int, default=None,
                        help=f"optimizer steps between held-out evaluations (default: about {EVALUATIONS} "
                             "evaluations on the faster side, from the warm-up speed)")
    parser.add_argument("--eval-batches", type=int, default=16, help="held-out batches")
    parser.add_argument("--seed", type=int, default=0, help="initial weights, data order, masks, dropout")
    parser.add_argument("--reference-first", action="store_true", help="train transformers first")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                        help="torch threads (default: every usable core)")
    parser.add_argument("--out", default="runs/bench-pretrain", help="output folder")
    parser.add_argument("--json", metavar="PATH", help="write `bertkit bench --json` records here")
    parser.add_argument("--cache-dir", default=None, help="token and tokenizer cache (default: BERTKIT_CACHE or "
                                                          "~/.cache/bertkit)")
    args = parser.parse_args()
    if args.budget <= 0 or args.batch_size < 1 or args.max_length < 8 or args.eval_batches < 1:
        parser.error("--budget must be positive, --batch-size and --eval-batches at least 1, --max-length at least 8")
    try:
        import transformers
    except ImportError:
        parser.error("the reference side needs transformers: pip install 'bertkit[dev]'")
    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(args.threads)
    bf16 = native_bf16(torch.device("cpu")) if args.bf16 is None else args.bf16
    dtype = "bf16" if bf16 else "fp32"
    host = machine() + (f", torch on {args.threads} of them" if args.threads != len(os.sched_getaffinity(0)) else "")
    say(host)

    out = Path(args.out)
    tokenizer, data, eval_batches = data_and_tokenizer(args)
    ours, reference = initial_models(tokenizer, args, out / "initial")
    parity = check_parity(ours, reference, data.batch_at(0))
    say(f"same weights: fp32 loss on batch 0 differs by {parity:.1e} (<= {PARITY_TOLERANCE:g}); "
        f"{ours.num_parameters():,} parameters")
    settings = TrainSettings(steps=None, time_budget=args.budget, lr=args.lr, bf16=bf16, seed=args.seed,
                             save_every=10**9)
    check_groups(ours, reference, settings.weight_decay)

    say(f"warm-up: {WARMUP_STEPS} throwaway steps per side ...")
    seconds = warm_up(ours, reference, data.batch_at, settings, eval_batches)
    say("warm-up speed: " + ", ".join(f"{n} {s * 1e3:.0f} ms/step" for n, s in seconds.items()))
    eval_every = args.eval_every or max(1, round(args.budget / min(seconds.values()) / EVALUATIONS))
    settings = dataclasses.replace(settings, eval_every=eval_every)

    order = ["transformers", "bertkit"] if args.reference_first else ["bertkit", "transformers"]
    models = {"bertkit": ours, "transformers": reference}
    results = {}
    for name in order:
        say(f"\n{name}: {args.budget:.0f} s of training, {dtype}, B={args.batch_size}, T={args.max_length}, "
            f"lr {args.lr:g}, held-out evaluation every {eval_every} steps")
        shutil.rmtree(out / name, ignore_errors=True)
        results[name] = SIDES[name](models[name], data.batch_at, settings, eval_batches, out / name)
    reference.save_pretrained(out / "transformers")

    logs = {name: read_log(out / name) for name in ("bertkit", "transformers")}
    label = f"{PRESET} MLM pre-training on imdb, {args.budget:.0f} s, B={args.batch_size} T={args.max_length}"
    rows = records(results, dtype, label, parity)
    png = out / "pretrain_vs_transformers.png"
    plot(logs, png, f"{PRESET} masked-LM pre-training on imdb: {args.budget:.0f} training seconds per side, "
                    f"B={args.batch_size}, T={args.max_length}, lr {args.lr:g}, {dtype}\n{host}")
    print_table(rows, equal_step_losses(logs), results)
    print(f"\nplot: {png}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([dataclasses.asdict(r) for r in rows], f, indent=2)


if __name__ == "__main__":
    main()
