"""Peak memory of one bert-base MLM training step (B=8, T=512), each side in its own process.

Each run starts a fresh Python process, builds the model and runs one forward and backward pass.
Activation memory = the process's peak resident memory (ru_maxrss) during the pass, minus the
resident memory just before it, minus the gradients' bytes (which every side needs alike). The
three runs: transformers BertForMaskedLM, bertkit, bertkit with activation checkpointing.

    python benchmarks/memory.py [--batch 8] [--length 512]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys


def one_step(side: str, batch: int, length: int) -> None:
    import torch

    import bertkit

    torch.manual_seed(0)
    model = bertkit.build("bert-base", head="mlm")
    if side == "transformers":
        import tempfile

        import transformers
        with tempfile.TemporaryDirectory() as tmp:
            model.save_pretrained(tmp)
            model = transformers.BertForMaskedLM.from_pretrained(tmp)
    model.train()
    if side == "bertkit+checkpointing":
        model.backbone.encoder.checkpointing = True
    ids = torch.randint(1, 30000, (batch, length))
    masked = torch.rand(batch, length) < 0.15
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with open("/proc/self/statm") as f:
        current = int(f.read().split()[1]) * resource.getpagesize() // 1024
    if side == "transformers":
        loss = model(input_ids=ids, labels=ids.masked_fill(~masked, -100)).loss
    else:
        logits = model(ids, masked_positions=masked).logits
        loss = torch.nn.functional.cross_entropy(logits, ids[masked])
    loss.backward()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    grads = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None)
    activations = (peak - max(before, current)) / 1024 - grads / 2**20
    print(json.dumps({"side": side, "activation_mib": activations, "peak_mib": peak / 1024}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--length", type=int, default=512)
    p.add_argument("--side", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.side:
        return one_step(args.side, args.batch, args.length)
    results = {}
    for side in ("transformers", "bertkit", "bertkit+checkpointing"):
        out = subprocess.run([sys.executable, __file__, "--side", side, "--batch", str(args.batch),
                              "--length", str(args.length)], capture_output=True, text=True, check=True)
        results[side] = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{side:24} activations {results[side]['activation_mib']:8.0f} MiB   process peak "
              f"{results[side]['peak_mib']:8.0f} MiB")
    ours, ckpt = results["bertkit"]["activation_mib"], results["bertkit+checkpointing"]["activation_mib"]
    print(f"activations bertkit / transformers: {ours / results['transformers']['activation_mib']:.2f}; "
          f"checkpointing cuts them {ours / ckpt:.1f}x")


if __name__ == "__main__":
    main()
