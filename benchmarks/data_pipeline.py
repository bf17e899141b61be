"""Is the data pipeline fast enough that training never waits?

Three measurements on the built-in imdb corpus (train split) with mini-bert's tokenizer: an
uncased WordPiece of 8,192 tokens (mini-bert's vocabulary size) trained on that split (saved in
the cache folder, so trained once), B = 64, T = 64 (mini-bert's maximum length):

1. pipeline: `PretrainingData.batch_at(i)` end to end (example rows gathered from the memory-mapped
   token cache, framed, masked, turned into tensors), in tokens/s;
2. training: one mini-bert MLM optimizer step (bertkit.build("mini-bert", head="mlm"), the MaskedLM
   objective, AdamW) on those batches, fp32 and bf16 autocast, in tokens/s; the pipeline should be
   at least 10x faster than the faster of the two;
3. collators: our MaskingCollator vs transformers' DataCollatorForLanguageModeling (given the
   same tokenizer, saved and loaded by transformers) on the same examples, both producing masked
   input_ids + labels (ratio = transformers time / ours, > 1 = ours faster):
   - "mask": the same already-built, padded (B, T) batches. The reference gets its fastest fair
     form: `torch_mask_tokens` on a copy of the padded int64 tensor with the special-token mask
     computed in the call by `torch.isin` (what our collator's vocabulary lookup does), which
     skips both `tokenizer.pad` (the collator's `__call__` pads even padded tensors) and the
     per-row Python `get_special_tokens_mask` it falls back to without a mask. Ours does a bit
     more: it also returns attention_mask and token_type_ids. The note gives our whole-word
     masking on the same batches, also timed alternating with the reference (transformers'
     whole-word mode needs offset mappings, so it is not a like-for-like ratio);
   - "collate": from the example rows (ours gathers and frames them from the cache, transformers
     gets the already-tokenized rows as lists and pads them), the collators' ordinary use.

Timings alternate ours / reference after a warm-up and report medians (bertkit.bench.compare).
The tokenizer (about 13 s) and the token cache (about 15 s on 2 cores) are built on first use and
reused afterwards; the cache's build rate is reported too.

    .venv/bin/python benchmarks/data_pipeline.py [--repeats 30] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")  # tokenize the cache on every core

import torch  # noqa: E402

import bertkit  # noqa: E402
from bertkit.bench import compare, machine  # noqa: E402
from bertkit.data import MaskingCollator, MaskingSettings, PipelineSettings, pretraining_data  # noqa: E402


def mini_bert_tokenizer(cache_dir) -> str:
    """An 8,192-token uncased WordPiece trained on imdb train, saved once under the cache."""
    from bertkit.data import TokenizerSettings, builtin, cache_root, train_tokenizer

    directory = cache_root(cache_dir) / "tokenizers" / "imdb-wordpiece-8192"
    if not (directory / "tokenizer.json").exists():
        tok = train_tokenizer((r.text for r in builtin("imdb").train), TokenizerSettings(vocab_size=8192))
        directory.mkdir(parents=True, exist_ok=True)
        tok.save(directory, "BertTokenizer", 64)
    return str(directory)


def median_seconds(fn, repeats: int, warmup: int = 1) -> float:
    for _ in range(warmup):  # the first training steps pay oneDNN's one-time setup (seconds)
        fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def training_rate(data, dtype: str, repeats: int) -> float:
    from bertkit.objectives import MaskedLM

    torch.manual_seed(0)
    model = bertkit.build("mini-bert", head="mlm")
    model.train()
    objective = MaskedLM(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batches = [data.batch_at(i) for i in range(repeats + 1)]
    counter = iter(range(10**9))

    def step():
        b = batches[next(counter) % len(batches)]
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
            loss = objective(b).loss
        loss.backward()
        opt.step()

    tokens = batches[0]["input_ids"].numel()
    return tokens / median_seconds(step, repeats, warmup=5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--cache-dir", default=None, help="token cache folder (default: BERTKIT_CACHE or ~/.cache/bertkit)")
    args = parser.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    print(machine())

    from bertkit.data import check_vocab_fits

    tokenizer_dir = mini_bert_tokenizer(args.cache_dir)
    tokenizer = bertkit.load_tokenizer(tokenizer_dir)
    check_vocab_fits(tokenizer, bertkit.build("mini-bert").config.vocab_size)
    B, T = 64, 64
    t = time.perf_counter()
    data = pretraining_data("imdb", tokenizer, PipelineSettings(objective="mlm", batch_size=B, max_length=T),
                            cache_dir=args.cache_dir)
    setup = time.perf_counter() - t
    meta = data.corpus.meta
    print(f"imdb train: {meta['documents']} documents, {meta['tokens']} tokens, cache built in {meta['seconds']} s "
          f"({meta['tokens'] / meta['seconds']:,.0f} tokens/s); pipeline ready in {setup:.2f} s; "
          f"{len(data.examples)} packed rows, {data.batches_per_epoch} batches per epoch")
    records = []

    counter = iter(range(10**9))
    pipeline = B * T / median_seconds(lambda: data.batch_at(next(counter)), args.repeats * 5)
    train = {d: training_rate(data, d, max(5, args.repeats // 2)) for d in ("fp32", "bf16")}
    fastest = max(train.values())
    records.append({"name": "pipeline vs mini-bert training (B=64, T=64)", "dtype": "-", "ours": pipeline,
                    "reference": fastest, "unit": "tokens/s", "ratio": pipeline / fastest,
                    "note": f"training fp32 {train['fp32']:,.0f}, bf16 {train['bf16']:,.0f} tokens/s"})

    # collators on the same example rows
    import transformers

    reference_tokenizer = transformers.BertTokenizerFast.from_pretrained(tokenizer_dir)
    hf = transformers.DataCollatorForLanguageModeling(reference_tokenizer, mlm_probability=0.15, return_tensors="pt",
                                                      seed=0)
    rows = [data.indices(i)[0] for i in range(8)]
    framed = [data.examples.batch(r, tokenizer.pad_token_id) for r in rows]
    padded = [torch.from_numpy(b.input_ids) for b in framed]
    as_lists = [[{"input_ids": ids[:n].tolist()} for ids, n in zip(b.input_ids, b.lengths)] for b in framed]
    special_ids = torch.tensor(reference_tokenizer.all_special_ids)
    whole_word = MaskingCollator.for_tokenizer(tokenizer, MaskingSettings(whole_word=True))
    k = iter(range(10**9))

    def ours_mask():
        j = next(k) % 8
        data.collator(framed[j], rows[j], 0)

    def ref_mask():
        j = next(k) % 8
        inputs = padded[j].clone()
        special = torch.isin(inputs, special_ids)
        hf.torch_mask_tokens(inputs, special_tokens_mask=special)

    def ours_whole_word():
        j = next(k) % 8
        whole_word(framed[j], rows[j], 0)

    def ours_collate():
        j = next(k) % 8
        data.collator(data.examples.batch(rows[j], tokenizer.pad_token_id), rows[j], 0)

    def ref_collate():
        hf(as_lists[next(k) % 8])

    t_whole_word, _ = compare(ours_whole_word, ref_mask, args.repeats * 10)  # alternating, like the rows
    for name, o, r in (("mask", ours_mask, ref_mask), ("collate", ours_collate, ref_collate)):
        t_ours, t_ref = compare(o, r, args.repeats * 10)
        note = f"ours whole-word {B * T / t_whole_word:,.0f} tokens/s" if name == "mask" else ""
        records.append({"name": f"collator {name} vs DataCollatorForLanguageModeling (B=64, T=64)", "dtype": "-",
                        "ours": B * T / t_ours, "reference": B * T / t_ref, "unit": "tokens/s", "ratio": t_ref / t_ours,
                        "note": note})

    width = max(len(r["name"]) for r in records)
    print(f"\n{'workload':<{width}}  {'ours':>14}  {'reference':>14}  {'ratio':>7}")
    for r in records:
        print(f"{r['name']:<{width}}  {r['ours']:>14,.0f}  {r['reference']:>14,.0f}  {r['ratio']:>7.2f}  {r['note']}")
    print("\ntokens/s; ratio > 1 means the pipeline is faster (row 1: than mini-bert training consumes, "
          "the faster of fp32/bf16; rows 2-3: than transformers' collator)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=2)


if __name__ == "__main__":
    main()
