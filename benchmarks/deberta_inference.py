"""DeBERTa-v3-base inference: bertkit next to transformers, same weights, same batch, same process.

Method
  1. Build a seeded, randomly initialized bertkit deberta-v3-base, save it in Hugging Face format
     to a temporary directory and load that into transformers (DebertaV2Model). Both go to
     .eval() and, with --dtype bf16, to torch.bfloat16. Everything runs under inference_mode.
  2. For each workload (a seeded batch of token ids, right-padded with id 0), first check that
     both models give the same last_hidden_state on real (non-pad) tokens and report the max
     absolute difference, so the timing compares the same work. In fp32 a difference above 1e-4
     stops the script; in bf16 it is only reported.
  3. One warm-up forward per side, then --repeats timed forwards alternating ours, reference,
     ours, reference, ... (time.perf_counter), so drift in machine load hits both sides alike.
  4. Report the median seconds per batch for each side and ratio = reference / ours (> 1 means
     bertkit is faster). Tokens/s counts only real tokens, not padding.

Workloads
  deberta-v3-base mixed lengths   16 sequences, lengths uniform in [16, 256], padded to the longest
  deberta-v3-base full length     8 x 256, no padding
  --quick shrinks them to 4 sequences in [16, 64] and 2 x 64 (about half a minute on 2 idle cores).

Compare ratios from one run; absolute times vary with the machine and whatever else runs on it.
"""

from __future__ import annotations

import argparse
import json
import os

import torch

from bertkit import bench

PRESET = "deberta-v3-base"
FP32_TOLERANCE = 1e-4


def workloads(quick: bool) -> dict[str, list[int]]:
    """Workload name -> sequence lengths (seeded)."""
    n, longest = (4, 64) if quick else (16, 256)
    return {
        f"{PRESET} mixed lengths": bench.uniform_lengths(n, 16, longest),
        f"{PRESET} full length": [longest] * (n // 2),
    }


def run_workload(name, lengths, ours, reference, dtype: str, repeats: int) -> dict:
    ids, mask = bench.padded_batch(lengths, ours.config.vocab_size, ours.config.pad_token_id, seed=2)
    run_ours = lambda: ours(ids, mask).last_hidden_state  # noqa: E731
    run_ref = lambda: reference(input_ids=ids, attention_mask=mask).last_hidden_state  # noqa: E731

    # Same numbers first.
    real = mask.bool()
    diff = (run_ours()[real].float() - run_ref()[real].float()).abs().max().item()
    if dtype == "fp32" and diff > FP32_TOLERANCE:
        raise SystemExit(f"{name}: outputs differ by {diff:.2e} > {FP32_TOLERANCE:g} on real tokens; "
                         "not timing different work")
    o, r = bench.compare(run_ours, run_ref, repeats)  # one warm-up each, then alternating
    return {
        "name": name, "dtype": dtype, "ours": o, "reference": r, "unit": "s/batch",
        "ratio": r / o, "max_abs_diff": diff,
        # for the table only, not written to --json
        "_shape": f"{ids.shape[0]} x {ids.shape[1]}", "_real_tokens": int(mask.sum()),
    }


def print_table(records: list[dict]) -> None:
    head = (f"{'workload':32} {'batch':>8} {'real tok':>8} {'dtype':>5} {'bertkit s':>10} "
            f"{'transf. s':>10} {'ratio':>6} {'bertkit tok/s':>13} {'transf. tok/s':>13} {'max|diff|':>9}")
    print(head)
    print("-" * len(head))
    for r in records:
        tokens = r["_real_tokens"]
        print(f"{r['name']:32} {r['_shape']:>8} {tokens:8d} {r['dtype']:>5} {r['ours']:10.3f} "
              f"{r['reference']:10.3f} {r['ratio']:6.2f} {tokens / r['ours']:13.0f} "
              f"{tokens / r['reference']:13.0f} {r['max_abs_diff']:9.1e}")
    print("ratio = transformers / bertkit median s/batch (> 1: bertkit faster); tok/s counts real tokens")


def main() -> None:
    p = argparse.ArgumentParser(
        description="Time bertkit's deberta-v3-base against transformers' DebertaV2Model on the same "
                    "weights and batches, in one process, alternating runs; report medians and "
                    "ratio = transformers / bertkit (> 1: bertkit is faster).",
        epilog=("Workloads: 'mixed lengths' (16 seqs, lengths uniform in [16, 256], right-padded) and "
                "'full length' (8 x 256). Outputs are checked to agree on real tokens first "
                f"(fp32: max abs diff <= {FP32_TOLERANCE:g}, else the script stops)."))
    p.add_argument("--quick", action="store_true",
                   help="smaller workloads (4 seqs in [16, 64]; 2 x 64), about half a minute on 2 idle cores")
    p.add_argument("--dtype", choices=list(bench.DTYPES), default="fp32",
                   help="fp32 (default) or bf16 (both models converted with .to(torch.bfloat16))")
    p.add_argument("--repeats", type=int, default=5, metavar="N",
                   help="timed runs per side after one warm-up; the median is reported (default 5)")
    p.add_argument("--json", metavar="PATH",
                   help="also write the records (name, dtype, ours, reference, unit, ratio, "
                        "max_abs_diff) as a JSON list")
    args = p.parse_args()
    if args.repeats < 1:
        p.error("--repeats must be at least 1")

    torch.set_num_threads(len(os.sched_getaffinity(0)))
    print(bench.machine())
    print(f"threads {torch.get_num_threads()} | dtype {args.dtype} | repeats {args.repeats}"
          f"{' | quick' if args.quick else ''}\n", flush=True)

    ours, reference = bench.pair(PRESET, None, bench.DTYPES[args.dtype])  # same seeded weights
    ours.eval(), reference.eval()

    records = []
    with torch.inference_mode():
        for name, lengths in workloads(args.quick).items():
            records.append(run_workload(name, lengths, ours, reference, args.dtype, args.repeats))
            print(f"done: {name}", flush=True)
    print()
    print_table(records)

    if args.json:
        with open(args.json, "w") as f:
            json.dump([{k: v for k, v in r.items() if not k.startswith("_")} for r in records], f, indent=2)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
