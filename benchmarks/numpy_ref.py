"""The pure-NumPy Mini-BERT next to bertkit's torch mini-bert (eager), same weights, same batch.

Method
  1. Build the torch mini-bert with an MLM head (seeded, dropout off) and hand its parameters to
     bertkit.numpy_ref; both compute in float32. Check that the logits agree on real tokens
     (stop above 1e-4), so the timing compares the same work.
  2. forward: masked-LM logits (B, T, V) for a right-padded batch (lengths uniform in
     [T/2, T]); torch under inference_mode.
     training step: 15% of the real tokens predicted (vocabulary projection at those positions
     only, on both sides), loss, backward, gradient clipping at 1.0, AdamW.
     One warm-up per side, then --repeats runs alternating NumPy, torch, NumPy, ...; medians.
     ratio = torch time / NumPy time (> 1 would mean NumPy is faster): the goal is a forward
     within 2x (ratio >= 0.5) and a training step within 3x (ratio >= 0.33).
  3. memory: the peak of NumPy allocations (tracemalloc; NumPy reports its array buffers to it)
     during one training step's forward and backward, above what was allocated before (weights,
     gradients, optimizer state), with and without activation recomputation; for the batch
     above and for a long-sequence variant (mini-bert widths, 512 positions, --long-batch x 512).
     ratio = without / with (> 1: recomputation saves memory).

Both sides use the machine's cores (torch.set_num_threads = usable cores; NumPy's OpenBLAS
picks the same by default). Run it on an otherwise idle machine and compare ratios within one
run: absolute times move with whatever else runs.

    .venv/bin/python benchmarks/numpy_ref.py                 # about a minute on 2 cores
    .venv/bin/python benchmarks/numpy_ref.py --batch 16 --repeats 20 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
import tracemalloc

import numpy as np
import torch
import torch.nn.functional as F

import bertkit
from bertkit import bench, numpy_ref

TOLERANCE = 1e-4


def models(config):
    torch.manual_seed(0)
    theirs = bertkit.build(config, head="mlm")
    ours = numpy_ref.BertForMaskedLM(config, np.float32,
                                     params={n: p.detach().numpy() for n, p in theirs.named_parameters()})
    return ours, theirs


def mlm_labels(ids: torch.Tensor, mask: torch.Tensor, seed: int = 3) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    chosen = (torch.rand(ids.shape, generator=g) < 0.15) & mask.bool()
    chosen[:, 0] = True
    return ids.masked_fill(~chosen, -100)


def forward_record(ours, theirs, ids, mask, repeats: int) -> dict:
    real = mask.bool().numpy()
    theirs.eval()
    with torch.inference_mode():
        expected = theirs(ids, mask).logits.numpy()
        diff = float(np.abs(ours.forward(ids.numpy(), mask.numpy())[real] - expected[real]).max())
        if diff > TOLERANCE:
            raise SystemExit(f"forward: logits differ by {diff:.2e} > {TOLERANCE:g}; not timing different work")
        o, r = bench.compare(lambda: ours.forward(ids.numpy(), mask.numpy()), lambda: theirs(ids, mask), repeats)
    return {"name": f"mini-bert forward {tuple(ids.shape)}", "dtype": "fp32", "ours": o, "reference": r,
            "unit": "s/batch", "ratio": r / o, "max_abs_diff": diff}


def train_step_record(ours, theirs, ids, mask, repeats: int) -> dict:
    labels = mlm_labels(ids, mask)
    masked = labels != -100
    theirs.train()
    torch_opt = torch.optim.AdamW(theirs.parameters(), lr=1e-4)
    numpy_opt = numpy_ref.AdamW(ours.params, lr=1e-4)
    batch = (ids.numpy(), mask.numpy(), labels.numpy())

    def torch_step():
        loss = F.cross_entropy(theirs(ids, mask, masked_positions=masked).logits, labels[masked])
        torch_opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(theirs.parameters(), 1.0)
        torch_opt.step()

    def numpy_step():
        ours.zero_grad()
        ours.forward_backward(*batch)
        numpy_ref.clip_grad_norm(ours.grads, 1.0)
        numpy_opt.step(ours.grads)

    o, r = bench.compare(numpy_step, torch_step, repeats)
    return {"name": f"mini-bert MLM training step {tuple(ids.shape)}", "dtype": "fp32", "ours": o, "reference": r,
            "unit": "s/step", "ratio": r / o}


def step_memory(model, ids, mask, labels, recompute: bool) -> int:
    """Peak bytes NumPy allocated during one forward + backward, above the starting point."""
    model.recompute = recompute
    model.zero_grad()
    model.forward_backward(ids, mask, labels)  # warm-up: lazily created buffers are not activations
    tracemalloc.start()
    tracemalloc.reset_peak()
    before = tracemalloc.get_traced_memory()[0]
    model.forward_backward(ids, mask, labels)
    peak = tracemalloc.get_traced_memory()[1] - before
    tracemalloc.stop()
    model.recompute = False
    return peak


def memory_record(config, B: int, T: int, label: str) -> dict:
    model = numpy_ref.BertForMaskedLM(config, np.float32)
    ids, mask = bench.padded_batch(bench.uniform_lengths(B, T // 2, T), config.vocab_size, config.pad_token_id)
    labels = mlm_labels(ids, mask).numpy()
    plain = step_memory(model, ids.numpy(), mask.numpy(), labels, recompute=False)
    recomputed = step_memory(model, ids.numpy(), mask.numpy(), labels, recompute=True)
    return {"name": f"{label} {B} x {T}: activation peak, recomputation vs none", "dtype": "fp32",
            "ours": recomputed / 2**20, "reference": plain / 2**20, "unit": "MiB", "ratio": plain / recomputed}


def recompute_time_record(config, B: int, T: int, repeats: int, label: str) -> dict:
    model = numpy_ref.BertForMaskedLM(config, np.float32)
    ids, mask = bench.padded_batch(bench.uniform_lengths(B, T // 2, T), config.vocab_size, config.pad_token_id)
    batch = (ids.numpy(), mask.numpy(), mlm_labels(ids, mask).numpy())

    def run(recompute):
        def step():
            model.recompute = recompute
            model.zero_grad()
            model.forward_backward(*batch)
        return step

    with_, without = bench.compare(run(True), run(False), repeats)
    return {"name": f"{label} {B} x {T}: forward + backward time, recomputation vs none", "dtype": "fp32",
            "ours": with_, "reference": without, "unit": "s/step", "ratio": without / with_}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--long-batch", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--json", help="write the records to this file")
    args = parser.parse_args()
    config = numpy_ref.PRESETS["mini-bert"].replace(hidden_dropout=0.0, attention_dropout=0.0)
    for flag, value, low, high in (("--batch", args.batch, 1, None), ("--long-batch", args.long_batch, 1, None),
                                   ("--repeats", args.repeats, 1, None), ("--length", args.length, 2, config.max_positions)):
        if value < low or (high is not None and value > high):  # one line, not a traceback from inside a run
            parser.error(f"{flag} must be at least {low}{f' and at most {high}' if high else ''}, got {value}")

    torch.set_num_threads(len(os.sched_getaffinity(0)))
    print(bench.machine(), f"numpy {np.__version__}")
    ours, theirs = models(config)
    lengths = bench.uniform_lengths(args.batch, args.length // 2, args.length)
    ids, mask = bench.padded_batch(lengths, config.vocab_size, config.pad_token_id)
    long = config.replace(max_positions=512)
    started = time.perf_counter()
    records = [
        forward_record(ours, theirs, ids, mask, args.repeats),
        train_step_record(ours, theirs, ids, mask, args.repeats),
        memory_record(config, args.batch, args.length, "mini-bert"),
        memory_record(long, args.long_batch, 512, "mini-bert, 512 positions"),
        recompute_time_record(long, args.long_batch, 512, max(args.repeats // 2, 3), "mini-bert, 512 positions"),
    ]
    for r in records:
        print(f"{r['name']:<78} numpy {r['ours']:9.4f}  reference {r['reference']:9.4f} {r['unit']:<8} "
              f"ratio {r['ratio']:.2f}")
    print(f"({time.perf_counter() - started:.0f} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=2)


if __name__ == "__main__":
    main()
