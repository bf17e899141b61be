"""`bertkit bench`: bertkit next to transformers, same weights, same batches, one process.

Each workload builds a seeded bertkit model, saves it in Hugging Face format and loads that into
transformers, so both sides hold identical weights. Runs alternate (ours, reference, ours, ...)
after a warm-up; medians are reported and ratio = reference time / our time, so a ratio > 1
always means bertkit is better. Before timing, each workload checks that both sides compute the
same thing (max |diff| on real tokens, or of the loss).

Shapes: B batch, T length.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Callable

import torch

from .errors import BertkitError

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@dataclass
class Record:
    name: str
    dtype: str
    ours: float
    reference: float
    unit: str
    ratio: float
    max_abs_diff: float
    note: str = ""


def machine() -> str:
    cpu = platform.processor() or "cpu"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    import transformers

    return (f"{cpu}, {len(os.sched_getaffinity(0))} cores, torch {torch.__version__}, "
            f"transformers {transformers.__version__}")


def pair(preset: str, head: str | None, dtype: torch.dtype):
    """(ours, reference): the same seeded weights on both sides."""
    import transformers

    from .interop.hf import architecture_name
    from .model import build

    torch.manual_seed(0)
    ours = build(preset, head=head)
    with tempfile.TemporaryDirectory() as tmp:
        ours.save_pretrained(tmp)
        cls = getattr(transformers, architecture_name(ours.config.family, head))
        reference = cls.from_pretrained(tmp)
    return ours.to(dtype), reference.to(dtype)


def padded_batch(lengths: list[int], vocab: int, pad: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    T = max(lengths)
    ids = torch.randint(0, vocab - 1, (len(lengths), T), generator=g)
    ids = ids + (ids >= pad).long()  # never the pad id
    mask = (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).long()
    return ids.masked_fill(mask == 0, pad), mask


def uniform_lengths(n: int, low: int, high: int, seed: int = 1) -> list[int]:
    return torch.randint(low, high + 1, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def compare(fn_ours: Callable[[], None], fn_ref: Callable[[], None], repeats: int) -> tuple[float, float]:
    fn_ours(), fn_ref()  # warm-up
    ours, ref = [], []
    for _ in range(repeats):
        ours.append(_seconds(fn_ours))
        ref.append(_seconds(fn_ref))
    return statistics.median(ours), statistics.median(ref)


def inference(preset: str, lengths: list[int], dtype: str, repeats: int, label: str) -> Record:
    ours, ref = pair(preset, None, DTYPES[dtype])
    ours.eval(), ref.eval()
    ids, mask = padded_batch(lengths, ours.config.vocab_size, ours.config.pad_token_id)
    keep = mask.bool()
    with torch.inference_mode():
        a = ours(ids, mask).last_hidden_state
        b = ref(input_ids=ids, attention_mask=mask).last_hidden_state
        diff = (a[keep].float() - b[keep].float()).abs().max().item()
        o, r = compare(lambda: ours(ids, mask), lambda: ref(input_ids=ids, attention_mask=mask), repeats)
    tokens = int(mask.sum())
    return Record(label, dtype, tokens / o, tokens / r, "tokens/s", r / o, diff)


def mlm_training_step(preset: str, B: int, T: int, dtype: str, repeats: int, label: str) -> Record:
    """One optimizer step of masked-LM training on 15% masked tokens (AdamW, autocast for bf16).
    transformers gets labels = -100 off the masked positions, its documented way; bertkit gets
    the positions and computes the vocabulary projection only there."""
    ours, ref = pair(preset, "mlm", torch.float32)
    for m in (ours, ref):
        m.train()
        for module in m.modules():  # identical computation: no dropout on either side
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
    ids, mask = padded_batch([T] * B, ours.config.vocab_size, ours.config.pad_token_id)
    masked = torch.rand(B, T, generator=torch.Generator().manual_seed(3)) < 0.15
    labels = ids.masked_fill(~masked, -100)
    opt_ours = torch.optim.AdamW(ours.parameters(), lr=1e-9)
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-9)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16")

    def loss_ours():
        with autocast:
            logits = ours(ids, mask, masked_positions=masked).logits  # (K, V)
        return torch.nn.functional.cross_entropy(logits.float(), ids[masked])

    def loss_ref():
        with autocast:
            return ref(input_ids=ids, attention_mask=mask, labels=labels).loss

    def step(loss_fn, opt):
        def run():
            opt.zero_grad(set_to_none=True)
            loss_fn().backward()
            opt.step()
        return run

    with torch.no_grad():
        diff = abs(loss_ours().item() - loss_ref().item())
    o, r = compare(step(loss_ours, opt_ours), step(loss_ref, opt_ref), repeats)
    tokens = B * T
    return Record(label, dtype, tokens / o, tokens / r, "tokens/s", r / o, diff, note="max_abs_diff is of the loss")


def matmul_peak(tokens: int, hidden: int, intermediate: int, dtype: torch.dtype, repeats: int = 5) -> float:
    """FLOP/s of this machine on exactly the model's projection matmuls (Q, K, V, output, FFN up
    and down) at this token count: the ceiling a transformer layer can approach."""
    x = torch.randn(tokens, hidden, dtype=dtype)
    h = torch.randn(tokens, intermediate, dtype=dtype)
    weights = [(x, torch.randn(hidden, hidden, dtype=dtype))] * 4 + [
        (x, torch.randn(intermediate, hidden, dtype=dtype)), (h, torch.randn(hidden, intermediate, dtype=dtype))]
    flops = sum(2 * a.shape[0] * w.shape[0] * w.shape[1] for a, w in weights)

    def layer():
        for a, w in weights:
            torch.nn.functional.linear(a, w)

    layer()
    best = min(_seconds(layer) for _ in range(repeats))
    return flops / best


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def encoder_flops(config, B: int, T: int) -> int:
    """Forward FLOPs of the encoder blocks: projections 2*B*T*(4H^2 + 2HI) and attention
    scores and mixing 4*B*T^2*H, per layer (embeddings and pooler are negligible)."""
    H, I = config.hidden_size, config.intermediate_size
    return config.num_layers * (2 * B * T * (4 * H * H + 2 * H * I) + 4 * B * T * T * H)


def flop_utilization(preset: str, B: int, T: int, dtype: str, repeats: int, label: str) -> Record:
    """Model FLOP utilization of full-length inference against the measured matmul peak."""
    ours, ref = pair(preset, None, DTYPES[dtype])
    ours.eval(), ref.eval()
    ids, mask = padded_batch([T] * B, ours.config.vocab_size, ours.config.pad_token_id)
    c = ours.config
    peak = matmul_peak(B * T, c.hidden_size, c.intermediate_size, DTYPES[dtype])
    with torch.inference_mode():
        diff = (ours(ids).last_hidden_state.float() - ref(input_ids=ids).last_hidden_state.float()).abs().max().item()
        o, r = compare(lambda: ours(ids, mask), lambda: ref(input_ids=ids, attention_mask=mask), repeats)
    flops = encoder_flops(c, B, T)
    mfu_ours, mfu_ref = 100 * flops / o / peak, 100 * flops / r / peak
    return Record(label, dtype, mfu_ours, mfu_ref, "% of matmul peak", mfu_ours / mfu_ref, diff,
                  note=f"measured matmul peak {peak / 1e9:.0f} GFLOP/s")


def workloads(quick: bool, repeats: int) -> list[Callable[[], Record]]:
    """The named workloads; --quick is the mini-bert subset."""
    quick_set = [
        lambda: inference("mini-bert", uniform_lengths(32, 8, 64), "fp32", repeats,
                          "mini-bert inference, 32 seqs, lengths in [8, 64], padded"),
        lambda: inference("mini-bert", uniform_lengths(32, 8, 64), "bf16", repeats,
                          "mini-bert inference, 32 seqs, lengths in [8, 64], padded"),
        lambda: mlm_training_step("mini-bert", 64, 64, "fp32", repeats, "mini-bert MLM training step, B=64 T=64"),
        lambda: mlm_training_step("mini-bert", 64, 64, "bf16", repeats, "mini-bert MLM training step, B=64 T=64"),
    ]
    if quick:
        return quick_set
    mixed = uniform_lengths(32, 16, 256)
    return quick_set + [
        lambda: inference("bert-base", mixed, "fp32", repeats, "bert-base inference, 32 seqs, lengths in [16, 256]"),
        lambda: inference("bert-base", mixed, "bf16", repeats, "bert-base inference, 32 seqs, lengths in [16, 256]"),
        lambda: inference("bert-base", [256] * 16, "fp32", repeats, "bert-base inference, 16 x 256 full length"),
        lambda: inference("bert-base", [256] * 16, "bf16", repeats, "bert-base inference, 16 x 256 full length"),
        lambda: flop_utilization("bert-base", 16, 256, "fp32", repeats, "bert-base FLOP utilization, 16 x 256"),
        lambda: flop_utilization("bert-base", 16, 256, "bf16", repeats, "bert-base FLOP utilization, 16 x 256"),
        lambda: mlm_training_step("bert-base", 16, 128, "fp32", repeats, "bert-base MLM training step, B=16 T=128"),
        lambda: inference("deberta-v3-base", uniform_lengths(16, 16, 256), "fp32", repeats,
                          "deberta-v3-base inference, 16 seqs, lengths in [16, 256]"),
    ]


def run(quick: bool, repeats: int, json_path: str | None, progress: Callable[[str], None] = print) -> list[Record]:
    if repeats < 1:
        raise BertkitError(f"--repeats must be at least 1, got {repeats}")
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise BertkitError("bench compares against transformers: pip install 'bertkit[dev]'") from None
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    progress(machine())
    records = []
    for workload in workloads(quick, repeats):
        record = workload()
        records.append(record)
        progress(f"  {record.name} [{record.dtype}]: ours {record.ours:,.0f} {record.unit}, "
                 f"transformers {record.reference:,.0f}, ratio {record.ratio:.2f}")
    if json_path:
        with open(json_path, "w") as f:
            json.dump([asdict(r) for r in records], f, indent=2)
    return records
