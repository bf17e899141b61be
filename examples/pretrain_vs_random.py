"""Does pre-training help? The Mini-BERT pre-trained by `bertkit pretrain` on IMDB train text
against the same architecture from random initialization, both fine-tuned the same way on IMDB
sentiment (the fixed train split, early stopping on dev) and scored on the test split, for three
seeds. Prints the table, writes OUT/summary.json and OUT/pretrain_vs_random.png.

    python examples/pretrain_vs_random.py [--pretrained runs/mini-40m] [--budget 40m] [--out runs/pretrain-vs-random]
                                          [--truncation head|tail|head+tail] [--train-limit N]

The random side is built from the pre-trained checkpoint's own config (same widths, vocabulary,
dropout), a new initialization per seed. Without an existing --pretrained run it first pre-trains
one: `bertkit pretrain` for --budget (default 40m) with dropout off (in short budgets the extra
steps it buys win; see the README). About 20 minutes on 2 CPU cores with bf16 after pre-training
(about 30 in fp32 on an AVX2-only CPU). --train-limit fine-tunes on a seeded sample of that many
train reviews instead of all 19,870 (one sample per seed, the same for both sides): pre-training
matters most where labels are few.
"""

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

import torch

import bertkit
from bertkit.pretraining import native_bf16, pick_device
from bertkit.tasks import FinetuneSettings, evaluate, finetune

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--pretrained", default="runs/mini-40m")
p.add_argument("--budget", default="40m", help="pre-training time when --pretrained does not exist yet")
p.add_argument("--out", help="default runs/pretrain-vs-random, with -tail or -head-tail for those truncations "
                              "and -N for --train-limit N")
p.add_argument("--seeds", default="0,1,2")
p.add_argument("--epochs", type=float, default=2)
p.add_argument("--lr", type=float, default=5e-4)
p.add_argument("--truncation", default="head", help="the part of a review over 64 tokens kept: head, tail, head+tail")
p.add_argument("--train-limit", type=int, help="fine-tune on a seeded sample of this many train reviews")
args = p.parse_args()

suffix = ("" if args.truncation == "head" else "-" + args.truncation.replace("+", "-")) \
    + (f"-{args.train_limit}" if args.train_limit else "")
pretrained, out = Path(args.pretrained), Path(args.out or f"runs/pretrain-vs-random{suffix}")
if not (pretrained / "metrics.json").exists():
    subprocess.run([sys.executable, "-m", "bertkit", "pretrain", "--out", str(pretrained), "--time-budget", args.budget,
                    "--override", "hidden_dropout=0", "--override", "attention_dropout=0"], check=True)
config = bertkit.from_pretrained(pretrained).config
results = {"pretrained": [], "random": []}
for seed in [int(s) for s in args.seeds.split(",")]:
    settings = FinetuneSettings(epochs=args.epochs, lr=args.lr, batch_size=32, max_length=64, patience=2, seed=seed,
                                bf16=native_bf16(pick_device("auto")), progress=False, truncation=args.truncation,
                                train_limit=args.train_limit)
    for name in ("pretrained", "random"):
        run = out / f"{name}-seed{seed}"
        if not (run / "metrics.json").exists():
            torch.manual_seed(seed)
            model = str(pretrained) if name == "pretrained" else bertkit.build(config, head="classification", num_labels=2)
            finetune("classification", model, "imdb", "imdb", run, settings, tokenizer=pretrained)
        test = evaluate(run, None, "imdb", "test")
        dev = json.loads((run / "metrics.json").read_text())
        results[name].append({"seed": seed, "test_accuracy": test["accuracy"], "dev_accuracy": dev["accuracy"],
                              "test_examples": test["eval_examples"]})
        print(f"{name:10s} seed {seed}: test accuracy {test['accuracy']:.4f} (dev {dev['accuracy']:.4f})", flush=True)

summary = {}
for name, runs in results.items():
    accs = [r["test_accuracy"] for r in runs]
    summary[name] = {"mean": statistics.mean(accs), "stdev": statistics.stdev(accs) if len(accs) > 1 else 0.0,
                     "min": min(accs), "max": max(accs), "runs": runs}
summary["gain_points"] = 100 * (summary["pretrained"]["mean"] - summary["random"]["mean"])
(out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
print(f"\n{'':12s}{'mean':>8s}{'stdev':>8s}{'min':>8s}{'max':>8s}   (IMDB test accuracy, %)")
for name in ("pretrained", "random"):
    s = summary[name]
    print(f"{name:12s}" + "".join(f"{100 * s[k]:8.2f}" for k in ("mean", "stdev", "min", "max")))
print(f"pre-training gains {summary['gain_points']:.2f} points")

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

fig, ax = plt.subplots(figsize=(5, 3.6), dpi=130)
for x, name in enumerate(("random", "pretrained")):
    accs = [100 * r["test_accuracy"] for r in results[name]]
    ax.bar(x, statistics.mean(accs), color=("#bbbbbb", "#4c72b0")[x], width=0.6)
    ax.scatter([x] * len(accs), accs, color="black", zorder=3, s=14, label="one seed" if x else None)
ax.set_xticks([0, 1], ["random init", "pre-trained (bertkit pretrain)"])
low = min(100 * r["test_accuracy"] for rs in results.values() for r in rs)
ax.set_ylim(max(0, low - 10), 100)
ax.set_ylabel("IMDB test accuracy (%)")
labels = f"{args.train_limit:,} labels" if args.train_limit else "all 19,870 labels"
ax.set_title(f"Mini-BERT fine-tuned on IMDB ({labels}): {summary['gain_points']:+.1f} points from pre-training",
             fontsize=9)
ax.legend(loc="upper left", fontsize=8)
fig.tight_layout()
fig.savefig(out / "pretrain_vs_random.png")
print(f"wrote {out / 'summary.json'} and {out / 'pretrain_vs_random.png'}")
