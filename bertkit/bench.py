"""`bertkit bench`: bertkit next to transformers, same weights, same batches, one process.

Each workload builds a seeded bertkit model, saves it in Hugging Face format and loads that into
transformers, so both sides hold identical weights. Before timing, each workload checks that both
sides compute the same thing (max |diff| on real tokens, or of the loss) and refuses the row when
they differ beyond `TOLERANCE`: a fast wrong answer must not read as a win. Runs then alternate
in ABBA order (ours, reference, reference, ours, ...) after a warm-up; medians are reported and
ratio = reference time / our time, so a ratio > 1 always means bertkit is better. Each record
also keeps what says how far to trust it: each side's range over the repeats, the repeat count
and the load average when the row ended; `row_warnings` turns a wide range, a busy machine or a
ratio past its ceiling into a line under the table. With --json the records are written after
every row, so a failure or Ctrl-C late in a long run keeps those already measured.

On CUDA (`--device cuda`) the same workloads run on the GPU: every timed call is bracketed by
torch.cuda.synchronize(), and memory rows read the allocator's peak instead of the process's.

Shapes: B batch, T length.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import platform
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch

from .errors import BertkitError
from .files import output_file, write_text
from .layers import dense

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
CPU = torch.device("cpu")


@dataclass
class Record:
    name: str
    dtype: str
    ours: float
    reference: float
    unit: str
    ratio: float
    max_abs_diff: float | None  # ours vs reference on the same input; None where not a computation
    note: str = ""
    device: str = "cpu"
    # The ratio bertkit would reach if its forward cost only its real tokens' matmul FLOPs at this
    # machine's measured matmul peak: an upper bound no implementation passes here (inference
    # rows of plain BERT-shaped models, whose FLOPs `encoder_flops` counts exactly; else None).
    ceiling: float | None = None
    machine: str = ""  # where it ran: the CPU or GPU, bf16 support, torch and transformers versions
    repeats: int | None = None  # timed runs per side (memory rows: one process per side)
    # [slowest, fastest] of each side over the repeats, in `unit`: how much a median can be trusted
    ours_range: list[float] | None = None
    reference_range: list[float] | None = None
    load_average: float | None = None  # the machine's 1-minute load average when the row ended
    warnings: list[str] = field(default_factory=list)  # why this row's ratio may mislead (row_warnings)


# How far bertkit's output may lie from transformers' before a row is refused, as a fraction of
# the largest |value| of transformers' output (at least 1, so near-zero outputs get an absolute
# floor). fp32 agrees to rounding: committed runs measured 1e-6..6e-6 on hidden states up to ~5
# and ~1e-6 on losses of ~10. bf16 hidden states drift through the layers (bert-base: 0.05..0.12),
# while a loss averages the rounding away (bf16 autocast: ~1e-5). Each bound leaves a margin of 4x
# or more over those; wrong weights or a broken kernel miss them by orders of magnitude.
TOLERANCE = {("hidden states", "fp32"): 1e-4, ("hidden states", "bf16"): 0.1,
             ("loss", "fp32"): 1e-4, ("loss", "bf16"): 1e-3}

# A side whose fastest and slowest runs differ by more than this fraction of its median was timed
# through the machine's slow and fast spells: its median, and so the ratio, may not repeat.
WIDE_SPREAD = 0.2


def agreement(label: str, dtype: str, what: str, ours: torch.Tensor, reference: torch.Tensor) -> float:
    """max |ours - reference|, refused (one BertkitError naming the row) beyond TOLERANCE[what,
    dtype] times the largest |value| of `reference` (at least 1); NaN never agrees."""
    ours, reference = ours.detach().float(), reference.detach().float()
    diff = (ours - reference).abs().max().item()
    bound = TOLERANCE[what, dtype]
    tolerance = bound * max(1.0, reference.abs().max().item())
    if not diff <= tolerance:
        raise BertkitError(f"{label} [{dtype}]: bertkit's {what} and transformers' differ by {diff:.3g} (max |diff|), "
                           f"beyond the tolerance {tolerance:.3g} ({bound:g} x the largest |value|, at least 1): "
                           "the two sides do not compute the same thing, so the row is not timed")
    return diff


def machine(device: torch.device = CPU) -> str:
    import transformers

    from .pretraining import native_bf16

    versions = f"torch {torch.__version__}, transformers {transformers.__version__}"
    if device.type == "cuda":
        bf16 = "bf16 in hardware" if native_bf16(device) else "no bf16 support"
        return f"{torch.cuda.get_device_name(device)} (CUDA {torch.version.cuda}), {bf16}, {versions}"
    cpu = platform.processor() or "cpu"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    bf16 = EMULATED_BF16 if bf16_emulated() else "bf16 in hardware"
    cores, threads = len(os.sched_getaffinity(0)), torch.get_num_threads()
    chosen = f" ({threads} torch thread{'s' * (threads > 1)})" if threads != cores else ""  # (OMP_NUM_THREADS)
    return f"{cpu}, {cores} cores{chosen}, {bf16}, {versions}"


def use_cores() -> None:
    """Both sides on every core this process may use (torch's default counts physical cores
    only), unless the user chose a count with OMP_NUM_THREADS, which is kept (and reported)."""
    if not os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(len(os.sched_getaffinity(0)))


EMULATED_BF16 = "bf16 emulated (no AVX512-BF16 or AMX: bf16 rows time the emulation, several times slower than fp32)"


def bf16_emulated() -> bool:
    """Whether this CPU lacks bf16 matmul hardware, so bf16 rows time a slow emulation."""
    from .pretraining import native_bf16

    return not native_bf16(torch.device("cpu"))


def pair(preset: str, head: str | None, dtype: torch.dtype, device: torch.device = CPU):
    """(ours, reference): the same seeded weights on both sides, on `device`."""
    import transformers

    from .interop.hf import architecture_name
    from .model import build

    torch.manual_seed(0)
    ours = build(preset, head=head)
    with tempfile.TemporaryDirectory() as tmp, quiet_loading():
        ours.save_pretrained(tmp)
        cls = getattr(transformers, architecture_name(ours.config.family, head))
        reference = cls.from_pretrained(tmp)
    return ours.to(device, dtype), reference.to(device, dtype)


@contextlib.contextmanager
def quiet_loading():
    """transformers' "Loading weights" progress bar off while the reference loads: on every row it
    would fill the bench's stderr (and a memory side's last line, which its error quotes). The
    switch is process-wide, so it is put back as it was."""
    from transformers.utils import logging

    was_on = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            logging.enable_progress_bar()


def padded_batch(lengths: list[int], vocab: int, pad: int, seed: int = 0,
                 device: torch.device = CPU):
    g = torch.Generator().manual_seed(seed)
    T = max(lengths)
    ids = torch.randint(0, vocab - 1, (len(lengths), T), generator=g)
    ids = ids + (ids >= pad).long()  # never the pad id
    mask = (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).long()
    return ids.masked_fill(mask == 0, pad).to(device), mask.to(device)


def uniform_lengths(n: int, low: int, high: int, seed: int = 1) -> list[int]:
    return torch.randint(low, high + 1, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def compare(fn_ours: Callable[[], None], fn_ref: Callable[[], None], repeats: int,
            device: torch.device = CPU) -> tuple[float, float]:
    """Median seconds of each side, timed alternately after one warm-up call each."""
    ours, ref = alternate([fn_ours, fn_ref], repeats, device)
    return statistics.median(ours), statistics.median(ref)


def alternate(fns: list[Callable[[], None]], repeats: int, device: torch.device = CPU) -> list[list[float]]:
    """Seconds of each call of each function: one warm-up call each, then `repeats` rounds of
    one call each in turn, so that the machine's slow and fast spells fall on all of them. Every
    other round runs them in reverse (ABBA: a, b, b, a, a, b, ...), so that no function always
    runs first, or always right after another (whose leftover cache contents, spinning threads
    or freed memory it would meet every time)."""
    for fn in fns:
        fn()
    times = [[] for _ in fns]
    for round_ in range(repeats):
        turns = list(zip(fns, times))
        for fn, seconds in turns if round_ % 2 == 0 else turns[::-1]:
            seconds.append(_seconds(fn, device))
    return times


def timed_record(label: str, dtype: str, work: float, unit: str, ours: list[float], reference: list[float],
                 max_abs_diff: float | None, **extra) -> Record:
    """The record of a timed row: each side's rate (`work` per second: tokens, or a FLOP share) at
    its median run, ratio = ours / reference (> 1: bertkit better), and each side's rate at its
    slowest and fastest run."""
    def rates(seconds: list[float]) -> tuple[float, list[float]]:
        return work / statistics.median(seconds), [work / max(seconds), work / min(seconds)]

    (o, o_range), (r, r_range) = rates(ours), rates(reference)
    return Record(label, dtype, o, r, unit, o / r, max_abs_diff, repeats=len(ours), ours_range=o_range,
                  reference_range=r_range, **extra)


def inference(preset: str, lengths: list[int], dtype: str, repeats: int, label: str,
              compiled: bool = False, prepacked: bool = False, device: torch.device = CPU) -> Record:
    """Forward passes; `compiled` runs ours through Model.compile(freeze=True) (blocks compiled
    once, the token count dynamic: the warm-up call compiles, the timed calls reuse it),
    `prepacked` through Model.prepack()."""
    ours, ref = pair(preset, None, DTYPES[dtype], device)
    ours.eval(), ref.eval()
    if compiled:
        ours.compile(freeze=True)
    if prepacked:
        ours.prepack()
    ids, mask = padded_batch(lengths, ours.config.vocab_size, ours.config.pad_token_id, device=device)
    keep = mask.bool()
    with torch.inference_mode():
        a = ours(ids, mask).last_hidden_state
        b = ref(input_ids=ids, attention_mask=mask).last_hidden_state
        diff = agreement(label, dtype, "hidden states", a[keep], b[keep])
        o, r = alternate([lambda: ours(ids, mask), lambda: ref(input_ids=ids, attention_mask=mask)], repeats, device)
    return timed_record(label, dtype, int(mask.sum()), "tokens/s", o, r, diff,
                        note=("ours compiled (Model.compile(freeze=True))" if compiled else
                              "ours prepacked (Model.prepack())" if prepacked else ""),
                        ceiling=inference_ceiling(ours.config, lengths, statistics.median(r), dtype, device))


def inference_ceiling(config, lengths: list[int], reference_seconds: float, dtype: str,
                      device: torch.device = CPU) -> float | None:
    """reference time / the time of the real tokens' FLOPs at the measured matmul peak (see
    Record.ceiling); None where `encoder_flops` would miscount the model (feed-forward not
    H -> I -> H, attention not over all T keys, scores with extra terms: e.g. DeBERTa, ModernBERT)."""
    if config.family not in EXACT_FLOPS:
        return None
    flops = sum(encoder_flops(config, 1, n) for n in lengths)
    peak = matmul_peak(sum(lengths), config.hidden_size, config.intermediate_size, DTYPES[dtype], device=device)
    return reference_seconds * peak / flops


# Families whose forward FLOPs `encoder_flops` counts exactly (ALBERT's factorized embedding
# projection is negligible beside its blocks).
EXACT_FLOPS = ("bert", "roberta", "albert", "distilbert", "electra")


def mlm_training_step(preset: str, B: int, T: int, dtype: str, repeats: int, label: str,
                      compiled: bool = False, device: torch.device = CPU, dropout: bool = False) -> Record:
    """One optimizer step of masked-LM training on 15% masked tokens (fused AdamW, the default of
    both libraries' trainers; autocast for bf16).
    transformers gets labels = -100 off the masked positions, its documented way; bertkit gets
    the positions and computes the vocabulary projection only there. Without `dropout` both
    sides compute the same thing (every dropout off); with it, each keeps its configured
    dropout, as trained, and draws its own masks (the loss check still runs with dropout off)."""
    ours, ref = pair(preset, "mlm", torch.float32, device)
    if compiled:
        ours.compile()
    ours.train(), ref.train()
    dropouts = [m for side in (ours, ref) for m in side.modules() if isinstance(m, torch.nn.Dropout)]
    configured = [m.p for m in dropouts]
    for module in dropouts:
        module.p = 0.0
    ids, mask = padded_batch([T] * B, ours.config.vocab_size, ours.config.pad_token_id, device=device)
    masked = (torch.rand(B, T, generator=torch.Generator().manual_seed(3)) < 0.15).to(device)
    labels = ids.masked_fill(~masked, -100)
    opt_ours = torch.optim.AdamW(ours.parameters(), lr=1e-9, fused=True)
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-9, fused=True)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=dtype == "bf16")

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
        diff = agreement(label, dtype, "loss", loss_ours(), loss_ref())
    if dropout:
        for module, p in zip(dropouts, configured):
            module.p = p
    o, r = alternate([step(loss_ours, opt_ours), step(loss_ref, opt_ref)], repeats, device)
    note = ("max_abs_diff is of the loss (dropout off)" + ("; ours compiled (Model.compile)" if compiled else "")
            + ("; timed with dropout on, as trained" if dropout else ""))
    return timed_record(label, dtype, B * T, "tokens/s", o, r, diff, note=note)


def matmul_peak(tokens: int, hidden: int, intermediate: int, dtype: torch.dtype, repeats: int = 5,
                device: torch.device = CPU) -> float:
    """FLOP/s of this machine on exactly the model's projection matmuls (Q, K, V, output, FFN up
    and down) at this token count: the ceiling a transformer layer can approach. The fastest of
    the kernels of `projection_kernels`, best of `repeats` runs each."""
    flops, kernels = projection_kernels(tokens, hidden, intermediate, dtype, device)
    return flops / fastest(kernels, repeats, device)[1]


def fastest(fns: list[Callable[[], None]], repeats: int,
            device: torch.device = CPU) -> tuple[Callable[[], None], float]:
    """The function with the shortest single run (one warm-up each, then `repeats` runs) and
    that run's seconds."""
    seconds, fn = min(((min(alternate([fn], repeats, device)[0]), fn) for fn in fns), key=lambda t: t[0])
    return fn, seconds


def projection_kernels(tokens: int, hidden: int, intermediate: int, dtype: torch.dtype,
                       device: torch.device = CPU) -> tuple[int, list[Callable[[], None]]]:
    """One layer's projection matmuls on random operands, their FLOPs and one callable per
    kernel that runs them all: torch's F.linear and, on CPU, oneDNN's matmul (what bertkit's
    inference calls: dense.py) on plain and on prepacked weights (Model.prepack()), so that a
    library faster than torch's default raises the peak instead of the score."""
    x = torch.randn(tokens, hidden, dtype=dtype, device=device)
    h = torch.randn(tokens, intermediate, dtype=dtype, device=device)
    weights = [(x, torch.randn(hidden, hidden, dtype=dtype, device=device))] * 4 + [
        (x, torch.randn(intermediate, hidden, dtype=dtype, device=device)),
        (h, torch.randn(hidden, intermediate, dtype=dtype, device=device))]
    flops = sum(2 * a.shape[0] * w.shape[0] * w.shape[1] for a, w in weights)

    kernels = [(torch.nn.functional.linear, weights)]
    if dense.onednn_tensor(x):
        packed = [(a, torch.ops.mkldnn._reorder_linear_weight(w)) for a, w in weights]
        kernels += [(dense.linear, weights), (dense.linear, packed)]

    def layer(kernel, operands):
        def run():
            for a, w in operands:
                kernel(a, w)
        return run

    return flops, [layer(kernel, operands) for kernel, operands in kernels]


def _seconds(fn, device: torch.device = CPU) -> float:
    """Wall time of fn(); on CUDA, of the GPU work it queued too (synchronized on both ends)."""
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    fn()
    if cuda:
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def encoder_flops(config, B: int, T: int) -> int:
    """Forward FLOPs of the encoder blocks: projections 2*B*T*(4H^2 + 2HI) and attention
    scores and mixing 4*B*T^2*H, per layer (embeddings and pooler are negligible)."""
    H, I = config.hidden_size, config.intermediate_size
    return config.num_layers * (2 * B * T * (4 * H * H + 2 * H * I) + 4 * B * T * T * H)


def flop_utilization(preset: str, B: int, T: int, dtype: str, repeats: int, label: str,
                     device: torch.device = CPU) -> Record:
    """Model FLOP utilization of full-length inference: each side's median FLOP/s over the
    matmul peak's median, its fastest projection kernel (`projection_kernels`) timed in turn
    with both models, so that the machine's slow and fast spells weigh on all three alike. The
    note also gives the best single peak run and ours against it. Ours runs prepacked (its
    fastest inference; the peak counts prepacked matmuls too); prepack() does nothing on CUDA."""
    ours, ref = pair(preset, None, DTYPES[dtype], device)
    ours.eval().prepack(), ref.eval()
    ids, mask = padded_batch([T] * B, ours.config.vocab_size, ours.config.pad_token_id, device=device)
    c = ours.config
    layer_flops, kernels = projection_kernels(B * T, c.hidden_size, c.intermediate_size, DTYPES[dtype], device)
    peak_layer, _ = fastest(kernels, 3, device)
    with torch.inference_mode():
        diff = agreement(label, dtype, "hidden states", ours(ids).last_hidden_state, ref(input_ids=ids).last_hidden_state)
        o, r, p = alternate([lambda: ours(ids, mask), lambda: ref(input_ids=ids, attention_mask=mask), peak_layer],
                            repeats, device)
    flops, peak, best = encoder_flops(c, B, T), layer_flops / statistics.median(p), layer_flops / min(p)
    # each run's utilization against the median peak: work = 100 * flops / peak per second
    packed = "ours prepacked; " if device.type == "cpu" else ""
    return timed_record(label, dtype, 100 * flops / peak, "% of matmul peak", o, r, diff,
                        note=f"{packed}matmul peak {peak / 1e9:.0f} GFLOP/s (median, timed in turn with both "
                             f"models); against its best run, {best / 1e9:.0f} GFLOP/s, ours "
                             f"{100 * flops / statistics.median(o) / best:.0f}%")


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def _memory_side(side: str, preset: str, B: int, T: int, device: torch.device = CPU) -> dict:
    """Run in a fresh process (see `activation_memory`): one MLM forward and backward of a BERT.
    Activation memory = the peak memory during the pass minus what was held just before, minus
    the gradients' bytes (which both sides need alike). On CPU the memory is the process's
    resident set, whose peak counter (VmHWM) is reset just before the pass
    (/proc/self/clear_refs), so a higher peak while building or loading the model cannot hide the
    pass's own; on CUDA it is the caching allocator's count of allocated bytes and its peak.
    Either side's weights are made resident first (`resident`), so the baseline holds them."""
    from .model import build

    torch.manual_seed(0)
    model = build(preset, head="mlm")
    if side == "transformers":
        import transformers
        with tempfile.TemporaryDirectory() as tmp, quiet_loading():
            model.save_pretrained(tmp)
            model = transformers.BertForMaskedLM.from_pretrained(tmp)
    resident(model.to(device).train())
    if side == "bertkit+checkpointing":
        model.backbone.encoder.checkpointing = True
    ids = torch.randint(1, model.config.vocab_size, (B, T), generator=torch.Generator().manual_seed(0)).to(device)
    masked = (torch.rand(B, T, generator=torch.Generator().manual_seed(1)) < 0.15).to(device)
    before = _memory_reset(device)
    if side == "transformers":
        loss = model(input_ids=ids, labels=ids.masked_fill(~masked, -100)).loss
    else:
        loss = torch.nn.functional.cross_entropy(model(ids, masked_positions=masked).logits, ids[masked])
    loss.backward()
    peak = _memory_peak(device)
    grads = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None)
    return {"activation_mib": (peak - before - grads) / 2**20, "peak_mib": peak / 2**20}


def resident(model: torch.nn.Module) -> torch.nn.Module:
    """`model` with every parameter and buffer copied into memory of its own, written once.
    transformers (5.x) leaves the weights it loads memory-mapped from the safetensors file, paged
    in only when first read: in a memory row that is during the measured pass, so transformers'
    whole weight size counted as its activations (bert-base MLM B=2 T=128: 809 MiB, 375 once
    resident). bertkit's side, built and initialized in its process, is resident already; both
    go through this, so both are measured alike. Tied weights stay tied (the same Parameter's
    data is replaced); the mapping goes once nothing refers to it (gc)."""
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.data = parameter.data.clone()
        for module in model.modules():
            for name, buffer in module.named_buffers(recurse=False):
                setattr(module, name, buffer.clone())
    gc.collect()
    return model


def _memory_reset(device: torch.device) -> int:
    """Bytes held now, with the peak counter reset to them."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        return torch.cuda.memory_allocated(device)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak-RSS counter to the current RSS
    return _status_kib("VmRSS") * 1024


def _memory_peak(device: torch.device) -> int:
    """Peak bytes since `_memory_reset`."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device)
    return _status_kib("VmHWM") * 1024


def activation_memory(preset: str, B: int, T: int, label: str, device: torch.device = CPU) -> list[Record]:
    """Activation memory of a BERT MLM training step's forward + backward (no optimizer step),
    each side in its own process (so no allocator cache or earlier peak of one side counts for
    the other): transformers, bertkit, and bertkit with activation checkpointing.
    ratio = transformers' MiB / ours."""
    import subprocess
    import sys

    mib = {}
    for side in ("transformers", "bertkit", "bertkit+checkpointing"):
        out = subprocess.run([sys.executable, "-m", "bertkit.bench", side, preset, str(B), str(T), str(device)],
                             capture_output=True, text=True)
        if out.returncode != 0:
            last = (out.stderr.strip().splitlines() or ["no output"])[-1]
            raise BertkitError(f"memory run for {side} failed: {last}")
        mib[side] = json.loads(out.stdout.strip().splitlines()[-1])["activation_mib"]
        if mib[side] <= 0:
            raise BertkitError(f"memory run for {side} measured {mib[side]:.0f} MiB of activations; "
                               "the measurement is broken on this system")
    ref, ours, ckpt = mib["transformers"], mib["bertkit"], mib["bertkit+checkpointing"]
    fwd_bwd = "one MLM forward + backward (no optimizer step), each side in its own process"
    return [
        Record(label, "fp32", ours, ref, "MiB activations", ref / ours, None, repeats=1,
               note=f"{fwd_bwd}; lower is better, ratio = transformers / ours"),
        Record(label + ", activation checkpointing", "fp32", ckpt, ref, "MiB activations", ref / ckpt, None,
               repeats=1, note=f"{fwd_bwd}; checkpointing cuts bertkit's activations {ours / ckpt:.1f}x"),
    ]


@dataclass(frozen=True)
class Workload:
    name: str
    dtype: str
    run: Callable[[], "Record | list[Record]"]


def workloads(quick: bool, repeats: int, device: torch.device = CPU) -> list[Workload]:
    """The named workloads; --quick is the mini-bert subset (under 2 minutes on 2 cores)."""
    short = uniform_lengths(32, 8, 64)
    mixed = uniform_lengths(32, 16, 256)
    W, on = Workload, dict(device=device)
    name = "mini-bert inference, 32 seqs, lengths in [8, 64], padded"
    quick_set = [W(name, dt, lambda dt=dt, n=name: inference("mini-bert", short, dt, repeats, n, **on))
                 for dt in DTYPES]
    name = "mini-bert MLM training step, B=64 T=64"
    quick_set += [W(name, dt, lambda dt=dt, n=name: mlm_training_step("mini-bert", 64, 64, dt, repeats, n, **on))
                  for dt in DTYPES]
    if quick:
        return quick_set
    full = []
    variants = [("bert-base inference, 32 seqs, lengths in [16, 256]", mixed, {}),
                ("bert-base inference, 16 x 256 full length", [256] * 16, {}),
                ("bert-base inference, 32 seqs, lengths in [16, 256], prepacked", mixed, {"prepacked": True}),
                ("bert-base inference, 16 x 256 full length, prepacked", [256] * 16, {"prepacked": True}),
                ("bert-base inference, 32 seqs, lengths in [16, 256], compiled", mixed, {"compiled": True}),
                ("bert-base inference, 16 x 256 full length, compiled", [256] * 16, {"compiled": True})]
    for name, lengths, option in variants:
        if option.get("prepacked") and device.type != "cpu":  # prepack() packs for oneDNN: a no-op elsewhere
            continue
        full += [W(name, dt, lambda dt=dt, n=name, l=lengths, o=option: inference(
                   "bert-base", l, dt, repeats, n, **o, **on)) for dt in DTYPES]
    name = "bert-base FLOP utilization, 16 x 256"
    full += [W(name, dt, lambda dt=dt, n=name: flop_utilization("bert-base", 16, 256, dt, repeats, n, **on))
             for dt in DTYPES]
    for compiled in (False, True):
        name = "bert-base MLM training step, B=16 T=128" + (", compiled" if compiled else "")
        full.append(W(name, "fp32", lambda n=name, c=compiled: mlm_training_step(
            "bert-base", 16, 128, "fp32", repeats, n, compiled=c, **on)))
    name = "bert-base MLM training step, B=16 T=128, dropout 0.1 as trained"
    full.append(W(name, "fp32", lambda n=name: mlm_training_step("bert-base", 16, 128, "fp32", repeats, n,
                                                                 dropout=True, **on)))
    name = "deberta-v3-base inference, 16 seqs, lengths in [16, 256]"
    full.append(W(name, "fp32", lambda n=name: inference("deberta-v3-base", uniform_lengths(16, 16, 256),
                                                        "fp32", repeats, n, **on)))
    for name, lengths in [("modernbert-base inference, 16 seqs, lengths in [16, 256]", uniform_lengths(16, 16, 256)),
                          ("modernbert-base inference, 2 x 2048 full length", [2048] * 2)]:
        full.append(W(name, "fp32", lambda n=name, l=lengths: inference("modernbert-base", l, "fp32", repeats, n, **on)))
    name = "modernbert-base MLM training step, B=16 T=128"
    full.append(W(name, "fp32", lambda n=name: mlm_training_step("modernbert-base", 16, 128, "fp32", repeats, n, **on)))
    name = "bert-base MLM training step, B=8 T=512, activation memory"
    full.append(W(name, "fp32", lambda n=name: activation_memory("bert-base", 8, 512, n, **on)))
    return quick_set + full


def selected(name: str, only: str | None, dtype: str = "") -> bool:
    """Whether --only picks the workload `name` of `dtype`: TEXT anywhere in the name, or with
    =NAME the whole name (case aside), for a row whose name begins its variants' names: "=bert-base
    inference, 32 seqs, lengths in [16, 256]" is that row without its prepacked and compiled ones;
    "NAME [fp32]", as the list of workloads shows it, is that row in that dtype."""
    if only is None:
        return True
    if only.startswith("="):
        return only[1:].strip().lower() in (name.lower(), f"{name} [{dtype}]".lower())
    return only.lower() in name.lower()


def write_records(path: Path, records: list[Record]) -> None:
    """Every record so far into `path`, atomically (a new file in the same folder, then renamed
    over it): written after each row, so a failure or Ctrl-C later in the run keeps the rows
    measured, and an interruption during the write leaves the previous complete list."""
    write_text(path, json.dumps([asdict(r) for r in records], indent=2), flag="--json")


def row_warnings(record: Record, cores: int) -> list[str]:
    """Why `record`'s ratio may mislead, one phrase each: a side whose runs spread wider than
    WIDE_SPREAD of its median, a load average above the machine's cores (other work competed
    for them), a ratio past its ceiling (measured apart from the row's timings, so a slow spell
    while measuring the peak, or a fast one during the row, puts the ratio past an upper bound)."""
    said = []
    for side, value, span in (("bertkit's", record.ours, record.ours_range),
                              ("transformers'", record.reference, record.reference_range)):
        if span and value and (span[1] - span[0]) / value > WIDE_SPREAD:
            said.append(f"{side} {record.repeats} runs ranged {_amount(span[0])} to {_amount(span[1])} "
                        f"{record.unit} ({100 * (span[1] - span[0]) / value:.0f}% of the median)")
    if record.load_average is not None and record.load_average > cores:
        said.append(f"load average {record.load_average:.1f} on {cores} cores: other work ran alongside")
    if record.ceiling is not None and record.ratio > record.ceiling:
        said.append(f"ratio {record.ratio:.2f} above its ceiling {record.ceiling:.2f} (an upper bound, measured "
                    "apart from the timings): one of them caught a slow or fast spell")
    return said


def _amount(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def run(quick: bool, repeats: int, json_path: str | None, progress: Callable[[str], None] = print,
        only: str | None = None, dtype: str | None = None, device: str = "cpu") -> list[Record]:
    """Run the workloads (those --only picks, see `selected`, and whose dtype is `dtype`, when
    given) on `device` (cpu, cuda, cuda:1, ...) and return their records, each with its load
    average and warnings; with `json_path`, all records so far are written after each row."""
    from .pretraining import pick_device

    where = pick_device(device)
    if where.type not in ("cpu", "cuda"):
        raise BertkitError(f"--device {device}: bench runs on cpu or cuda")
    if repeats < 1:
        raise BertkitError(f"--repeats must be at least 1, got {repeats}")
    if only is not None and not only.strip(" ="):  # an empty --only would start the whole run
        raise BertkitError(f"--only {only!r} names no workload: give part of a name, or =NAME for exactly one "
                           "(bertkit bench without --only runs them all)")
    if json_path:
        json_path = output_file(json_path, "--json")  # before minutes of timing, not after
    if dtype is not None and dtype not in DTYPES:
        raise BertkitError(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    chosen = [w for w in workloads(quick, repeats, where) if selected(w.name, only, w.dtype)
              and (dtype is None or w.dtype == dtype)]
    skip_emulated = quick and dtype is None and where.type == "cpu" and bf16_emulated()
    if skip_emulated:  # minutes spent timing an emulation no one would train with
        chosen = [w for w in chosen if w.dtype != "bf16"]
    if not chosen:
        names = sorted({f"{w.name} [{w.dtype}]" for w in workloads(quick, repeats, where)})
        asked = " and ".join(f"{flag} {value!r}" for flag, value in (("--only", only), ("--dtype", dtype)) if value)
        verb = "match" if only and dtype else "matches"
        raise BertkitError(f"{asked} {verb} no workload{' of --quick' if quick else ''}; "
                           "the workloads are: " + "; ".join(names))
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise BertkitError("bench compares against transformers: pip install transformers==5.23.0 (the version "
                           "the parity tests pin)") from None
    use_cores()
    here = machine(where)
    progress(here)
    if skip_emulated:
        progress("  bf16 rows skipped: this CPU emulates bf16, and timing the emulation would take --quick "
                 "past 2 minutes (--dtype bf16 runs them anyway)")
    records, saved = [], 0
    try:
        for workload in chosen:
            result = workload.run()
            load = os.getloadavg()[0]
            for record in result if isinstance(result, list) else [result]:
                record.device, record.machine, record.load_average = str(where), here, load
                record.warnings = row_warnings(record, os.cpu_count() or 1)
                records.append(record)
                progress(f"  {record.name} [{record.dtype}]: ours {record.ours:,.0f} {record.unit}, "
                         f"transformers {record.reference:,.0f}, ratio {record.ratio:.2f}")
            if json_path:
                write_records(json_path, records)
                saved = len(records)
    except (BertkitError, KeyboardInterrupt) as e:
        if not saved:
            raise
        kept = f"the {saved} record{'s' if saved > 1 else ''} measured before {'are' if saved > 1 else 'is'} in {json_path}"
        if isinstance(e, KeyboardInterrupt):
            raise KeyboardInterrupt(f"({kept})") from None
        raise BertkitError(f"{e}; {kept}") from None
    return records


if __name__ == "__main__":  # one side of `activation_memory`, in its own process
    import sys

    side, preset, B, T, device = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    print(json.dumps(_memory_side(side, preset, B, T, torch.device(device))))
