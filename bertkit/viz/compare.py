"""The families side by side: parameters, inference speed and memory of the presets, as bar
charts (`bertkit compare`).

What is counted and what is measured:
- parameters: exact, from each preset's config on the meta device (nothing allocated), split
  into the embeddings (token, position and type tables, and ALBERT's / ELECTRA's projection to
  the hidden width) and the rest (the blocks, DeBERTa's relative-position table, the pooler);
- speed: tokens per second of an inference forward pass of the bare encoder with fresh random
  weights, fp32, on this machine's CPU (or the GPU with device="cuda"), batch x length tokens
  (default 4 x 64: short enough that the whole default set measures in under a minute on 2
  cores), the median of `repeats` passes after one warm-up pass;
- memory: the fp32 weights (exact, 4 bytes per parameter) plus the working memory of that
  forward pass (activations and temporaries): on CPU the growth of the process's peak resident
  memory during the pass (Linux /proc: the peak counter is reset just before it, and freed heap
  memory is returned to the system first, so earlier models cannot hide it); on CUDA
  torch.cuda.max_memory_allocated. Elsewhere only the weights are shown.
Weights do not change the amount of work, so random ones time the same as trained ones.

Shapes: B batch, T length.
"""

from __future__ import annotations

import ctypes
import json
import platform
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ..errors import BertkitError
from . import figure as F

# One preset per family at the size its paper calls base (ELECTRA: the small discriminator the
# design names; its base is BERT-base in shape), and the Mini-BERT.
DEFAULT_PRESETS = ("bert-base", "roberta-base", "albert-base", "distilbert-base", "electra-small",
                   "deberta-v3-base", "modernbert-base", "mini-bert")


@dataclass
class Row:
    preset: str
    family: str
    layers: int
    hidden: int
    parameters: int
    embedding_parameters: int
    weights_mib: float
    tokens_per_second: float | None = None
    length: int | None = None  # tokens per sequence timed: the asked length, cut to the model's maximum
    forward_mib: float | None = None  # working memory of one forward pass, None where not measured


def count_parameters(preset: str) -> Row:
    """Exact counts on the meta device: shapes without storage."""
    from ..config import get_preset
    from ..model import Model

    config = get_preset(preset).config
    with torch.device("meta"):
        model = Model(config)
    total = model.num_parameters()
    backbone = model.backbone
    embedding = sum(p.numel() for p in backbone.embeddings.parameters())
    if backbone.projection is not None:
        embedding += sum(p.numel() for p in backbone.projection.parameters())
    return Row(preset, config.family, config.num_layers, config.hidden_size, total, embedding, total * 4 / 2**20)


def _trim_heap() -> None:
    """Give freed heap memory back to the system (glibc), so a pass that reuses it shows up in
    the resident-memory peak."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def _peak_growth_mib(run) -> float | None:
    """Peak resident memory during run() minus the memory just before, or None off Linux."""
    _trim_heap()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the peak (VmHWM) to the current resident size
        before = _status_kib("VmRSS")
    except (OSError, StopIteration):
        return None
    run()
    return max(0.0, (_status_kib("VmHWM") - before) / 1024)


def measure(row: Row, batch_size: int, length: int, repeats: int, device: str = "cpu") -> Row:
    from ..config import get_preset
    from ..model import build

    config = get_preset(row.preset).config
    T = min(length, config.max_positions)
    with torch.random.fork_rng(devices=[]):  # the caller's random state stays as it was
        torch.manual_seed(0)
        model = build(config).to(device).eval()
        ids = torch.randint(1, config.vocab_size, (batch_size, T)).to(device)
    ids = ids.masked_fill(ids == config.pad_token_id, 1 if config.pad_token_id != 1 else 2)
    mask = torch.ones_like(ids)
    cuda = device.startswith("cuda")

    def forward():
        with torch.inference_mode():
            model(ids, mask)
        if cuda:
            torch.cuda.synchronize()

    forward()  # warm-up: first-call allocations and kernel choices
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        forward()
        times.append(time.perf_counter() - start)
    row.tokens_per_second = batch_size * T / statistics.median(times)
    row.length = T
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        forward()
        row.forward_mib = (torch.cuda.max_memory_allocated() - base) / 2**20
    else:
        row.forward_mib = _peak_growth_mib(forward)
    return row


def compare(presets=DEFAULT_PRESETS, measure_speed: bool = True, batch_size: int = 4, length: int = 64,
            repeats: int = 3, device: str = "cpu", progress=None) -> list[Row]:
    """A Row per preset; with measure_speed, each preset is built and timed in turn (one model
    in memory at a time). `progress(text)` hears about each step."""
    if batch_size < 1 or length < 1 or repeats < 1:
        raise BertkitError("--batch-size, --length and --repeats must be at least 1")
    rows = [count_parameters(name) for name in presets]  # an unknown name fails before any timing
    if measure_speed:
        for row in rows:
            if progress:
                progress(f"measuring {row.preset} ({row.parameters / 1e6:.1f}M parameters)")
            measure(row, batch_size, length, repeats, device)
    return rows


def describe_machine(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    cpu = platform.processor() or "CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {torch.get_num_threads()} threads"


def write_json(rows: list[Row], path: Path, settings: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"settings": settings, "rows": [asdict(r) for r in rows]}, indent=2) + "\n")
    return path


def plot_comparison(rows: list[Row], path: Path, subtitle: str = "") -> Path:
    """Horizontal bars, presets ordered by size: parameters (embeddings / rest), tokens per
    second (log axis), memory (weights / forward pass); the values written on the bars."""
    rows = sorted(rows, key=lambda r: r.parameters)
    measured = any(r.tokens_per_second is not None for r in rows)
    panels = 3 if measured else 1
    height = 1.6 + 0.42 * len(rows)
    fig = F.figure(5.0 * panels + 1.6, height)
    axes = fig.subplots(1, panels, sharey=True, squeeze=False)[0]
    y = list(range(len(rows)))
    names = [f"{r.preset}\n{r.layers} x {r.hidden}" for r in rows]

    ax = axes[0]
    emb = [r.embedding_parameters / 1e6 for r in rows]
    rest = [(r.parameters - r.embedding_parameters) / 1e6 for r in rows]
    ax.barh(y, emb, color="#9ecae1", label="embeddings")
    ax.barh(y, rest, left=emb, color="#3182bd", label="blocks and the rest")
    for i, r in enumerate(rows):
        ax.text(r.parameters / 1e6, i, f" {r.parameters:,}", va="center", fontsize=7.5)
    ax.set_title("parameters (millions, exact)", fontsize=10)
    ax.set_yticks(y, names, fontsize=8.5)
    ax.legend(fontsize=7.5, loc="lower right", frameon=False)
    ax.set_xlim(0, max(r.parameters for r in rows) / 1e6 * 1.45)

    if measured:
        ax = axes[1]
        speed = [r.tokens_per_second or 0 for r in rows]
        ax.barh(y, speed, color="#31a354")
        cut = {r.length for r in rows} != {max(r.length or 0 for r in rows)}  # some timed shorter
        for i, (s, r) in enumerate(zip(speed, rows)):
            ax.text(s, i, f" {s:,.0f}" + (f" (T={r.length})" if cut else ""), va="center", fontsize=7.5)
        ax.set_title("inference speed (tokens / s, log scale)", fontsize=10)
        ax.set_xscale("log")  # a Mini-BERT is ~50x a base model: a linear axis would hide the rest
        ax.set_xlim(min(s for s in speed if s > 0) / 2, max(speed) * 4)
        # the values are written on the bars; over one or two decades matplotlib would also
        # label the minor ticks (2x10^4, 3x10^4, ...), and those labels run into each other
        from matplotlib.ticker import NullFormatter

        ax.xaxis.set_minor_formatter(NullFormatter())
        ax = axes[2]
        weights = [r.weights_mib for r in rows]
        work = [r.forward_mib or 0 for r in rows]
        ax.barh(y, weights, color="#fdae6b", label="fp32 weights (exact)")
        if any(r.forward_mib is not None for r in rows):
            ax.barh(y, work, left=weights, color="#e6550d", label="forward pass (measured)")
        for i, (w, a) in enumerate(zip(weights, work)):
            ax.text(w + a, i, f" {w + a:,.0f}" + (f" ({a:,.0f})" if a else ""), va="center", fontsize=7.5)
        ax.set_title("memory (MiB; forward pass in brackets)", fontsize=10)
        ax.set_xlim(0, max(w + a for w, a in zip(weights, work)) * 1.4)
        ax.legend(fontsize=7.5, loc="lower right", frameon=False)
    for ax in axes:
        ax.grid(axis="x", alpha=0.3)
        ax.tick_params(axis="x", labelsize=8)
    fig.suptitle("The BERT family compared" + (f"\n{F.plain(subtitle)}" if subtitle else ""), fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    return F.save(fig, path)
