"""DeBERTa-v3-base inference, bertkit next to transformers, same weights, same batch, same process.

Method: build a seeded bertkit deberta-v3-base, save it in Hugging Face format, load that into
transformers' DebertaV2Model, check both give the same numbers on real tokens, then time them
alternately (ours, reference, ours, ...) after one warm-up each and report medians. The ratio is
reference / ours, so > 1 means bertkit is faster. Tokens/s counts real (non-pad) tokens.

    python benchmarks/deberta_inference.py [--quick] [--dtype fp32|bf16] [--repeats N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time

import torch
import transformers

import bertkit


def machine() -> str:
    cpu = platform.processor() or "cpu"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return (f"{cpu}, {len(os.sched_getaffinity(0))} cores, torch {torch.__version__}, "
            f"transformers {transformers.__version__}")


def batch(lengths: list[int], vocab: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    T = max(lengths)
    ids = torch.randint(1, vocab, (len(lengths), T), generator=g)
    mask = (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).long()
    return ids * mask, mask


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small batches, well under a minute on 2 cores")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--repeats", type=int, default=5, help="timed runs per side (median reported)")
    p.add_argument("--json", metavar="PATH", help="write the records as a JSON list")
    args = p.parse_args()
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    print(machine())

    torch.manual_seed(0)
    ours = bertkit.build("deberta-v3-base").eval()
    with tempfile.TemporaryDirectory() as tmp:
        ours.save_pretrained(tmp)
        reference = transformers.AutoModel.from_pretrained(tmp).eval()
    if args.dtype == "bf16":
        ours, reference = ours.to(torch.bfloat16), reference.to(torch.bfloat16)

    g = torch.Generator().manual_seed(1)
    n, hi = (4, 64) if args.quick else (16, 256)
    workloads = {
        f"deberta-v3-base {n} seqs, lengths in [16, {hi}]": torch.randint(16, hi + 1, (n,), generator=g).tolist(),
        f"deberta-v3-base {n // 2} x {hi} full length": [hi] * (n // 2),
    }
    records = []
    with torch.inference_mode():
        for name, lengths in workloads.items():
            ids, mask = batch(lengths, ours.config.vocab_size, seed=2)
            keep = mask.bool()
            a = ours(ids, mask).last_hidden_state
            b = reference(input_ids=ids, attention_mask=mask).last_hidden_state
            diff = (a[keep].float() - b[keep].float()).abs().max().item()
            times = {"ours": [], "reference": []}
            for _ in range(args.repeats):
                times["ours"].append(timed(lambda: ours(ids, mask)))
                times["reference"].append(timed(lambda: reference(input_ids=ids, attention_mask=mask)))
            o, r = statistics.median(times["ours"]), statistics.median(times["reference"])
            records.append({"name": name, "dtype": args.dtype, "ours": o, "reference": r, "unit": "s/batch",
                            "ratio": r / o, "max_abs_diff": diff, "tokens": int(mask.sum())})
    print(f"\n{'workload':46} {'dtype':5} {'bertkit s':>10} {'transformers s':>15} {'ratio':>6} "
          f"{'tokens/s ours':>14} {'max |diff|':>11}")
    for r in records:
        print(f"{r['name']:46} {r['dtype']:5} {r['ours']:10.3f} {r['reference']:15.3f} {r['ratio']:6.2f} "
              f"{r['tokens'] / r['ours']:14.0f} {r['max_abs_diff']:11.2e}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=2)


if __name__ == "__main__":
    main()
