"""Fill-mask: a masked LM's top predictions at every mask of a text, as transformers'
fill-mask pipeline gives them (the same ids, scores, token strings and filled sequences), with
its `targets` too. The vocabulary projection runs only at the masks (`masked_positions`).

    from bertkit.tasks import fill_mask
    fill_mask("runs/demo", ["The film was [MASK]."], top_k=3)
    fill_mask(model, ["The film was [MASK]."], targets=["good", "bad"])
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch
from ..data.corpora import DataWarning
from ..errors import BertkitError, outside_stacklevel
from .base import check_count, check_texts, device_of, length_batches, report_truncated, streamed


def masked_lm(source):
    """The model at `source` (a Model is taken as is), with its MLM head where the file holds one
    though its config names no architecture (DeBERTa-v3's released files): transformers'
    fill-mask pipeline loads those."""
    from ..interop.hf import FreshHeadWarning, UnusedHeadWarning, from_pretrained
    from ..model import Model

    if isinstance(source, Model):
        return source
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        model = from_pretrained(source)
    if model.head_kind is None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", FreshHeadWarning)  # no MLM weights in the file: keep the encoder
                model = from_pretrained(source, head="mlm")
            said = [w for w in said if not issubclass(w.category, UnusedHeadWarning)]  # they are used now
        except FreshHeadWarning:
            pass
    for w in said:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return model


def check_masked_lm(model, source) -> None:
    """Refuse a model without a masked-LM head, naming `source` (a folder, or a Model) and, for a
    replaced-token-detection run's folder, the generator beside it that has one."""
    if model.head is not None and model.head.predicts_tokens:
        return
    named, hint = "the model", ""
    if isinstance(source, (str, Path)):
        named = str(source)
        if (Path(source) / "generator" / "config.json").exists():
            hint = f"; its generator, {Path(source) / 'generator'}, is one (a replaced-token detection run)"
    raise BertkitError(f"{named}: has no masked-LM head (head: {model.head_kind}); fill-mask needs one{hint}")


def target_ids(tok, targets: list[str]) -> list[int]:
    """The ids `targets` name, as the pipeline finds them: a vocabulary entry ("Ġgood" for a
    byte-level BPE word after a space), else the first token of the word's encoding, with a
    warning naming that token; a word that encodes to nothing is left out with a warning."""
    if isinstance(targets, str):
        targets = [targets]
    ids = []
    for target in targets:
        i = tok.backend.token_to_id(target)
        if i is None:
            pieces = tok.encode_plain([target])[0]
            if not pieces:
                warnings.warn(f"target {target!r} is not in the vocabulary and encodes to no token; left out",
                              DataWarning, stacklevel=outside_stacklevel())
                continue
            i = pieces[0]
            warnings.warn(f"target {target!r} is not in the vocabulary; its first token {tok.id_to_token(i)!r} "
                          "is scored instead", DataWarning, stacklevel=outside_stacklevel())
        ids.append(i)
    ids = sorted(set(ids))
    if not ids:
        raise BertkitError(f"none of the targets {list(targets)} names a token of the vocabulary")
    return ids


def fill_mask(model, texts: list[str], top_k: int = 5, targets: list[str] | None = None, batch_size: int = 32,
              progress: bool = False, tokenizer=None, stream: bool = False,
              bf16: bool = False) -> list[dict] | Iterator[dict]:
    """Top-k predictions at every mask of every text: one record per mask, in the order of the
    texts, with the text, the mask's `position` (its index among the text's token ids, 0 being
    the first special token) and `predictions`: [{"token", "token_str", "id", "score", "sequence"}].
    "token" is the vocabulary's entry ("Ġgood"), "token_str" the text it decodes to (" good"), and
    "sequence" the text with this mask filled, as transformers' pipeline gives them: without special
    tokens where the text has one mask, with them, the other masks included, where it has several
    (padding left out). Scores are the softmax over the whole vocabulary; `targets` (words or
    vocabulary entries, as the pipeline takes them) limits the list to those tokens. Special tokens
    may be proposed, as the pipeline proposes them; rows of a model vocabulary padded past the
    tokenizer's are not (no text names them), though they keep their share of the softmax. top_k
    is capped at the number of candidates. `[MASK]` is read as the model's own mask token.
    `model` is a Model or a folder, `tokenizer` (a Tokenizer, file or folder) one for a model that
    has none; every text is checked for a mask before any runs. `stream=True` gives an iterator
    of the records instead, each text's as soon as its window of texts is done (base.streamed).
    `bf16` runs the model under bf16 autocast (faster where the hardware has bf16; scores to two or
    three digits, and near-ties may swap)."""
    from ..data.tokenizer import Tokenizer, load_tokenizer

    check_texts(texts)  # a bare string was read as one text per character
    check_count(top_k, "top_k")
    check_count(batch_size)
    source, model = model, masked_lm(model)
    if tokenizer is not None:
        model.tokenizer = tokenizer if isinstance(tokenizer, Tokenizer) else load_tokenizer(tokenizer)
    tok = model.tokenizer
    check_masked_lm(model, source)
    if tok is None:
        where = source if isinstance(source, (str, os.PathLike)) else "the model"
        raise BertkitError(f"{where}: holds no tokenizer files; give one with --tokenizer (tokenizer= in Python): "
                           "a checkpoint directory, tokenizer.json, vocab.txt, vocab.json or spm.model")
    if tok.mask_token is None:
        raise BertkitError("the model's tokenizer has no mask token")
    if bf16:
        from ..pretraining import warn_if_emulated_bf16

        warn_if_emulated_bf16(model.device)
    if tok.mask_token_id >= model.config.vocab_size:  # added to the tokenizer, unknown to the model
        raise BertkitError(f"the mask token {tok.mask_token!r} has id {tok.mask_token_id}, outside the model's "
                           f"vocabulary of {model.config.vocab_size}: the model has no prediction head row for it "
                           "(a tokenizer that is not the model's?)")
    listed = min(len(tok), model.config.vocab_size)  # every id the tokenizer has, added tokens too
    chosen = None
    if targets is not None:
        chosen = torch.tensor(target_ids(tok, targets))
        if int(chosen.max()) >= model.config.vocab_size:
            raise BertkitError(f"target token id {int(chosen.max())} lies outside the model's vocabulary of "
                               f"{model.config.vocab_size}")
    given, texts = texts, [text.replace("[MASK]", tok.mask_token) for text in texts]  # BERT's spelling, any family
    limit = model.backbone.embeddings.max_length
    # each text's ids, cut at the limit: tokenized once, checked, batched
    rows = tok(texts, max_length=limit, padding=False, return_tensors=None, return_token_type_ids=True,
               return_attention_mask=True)
    for i, ids in enumerate(rows["input_ids"]):
        kept = ids.count(tok.mask_token_id)  # masks in the (perhaps cut) row
        if kept and len(ids) < limit:
            continue
        where = f"text {i + 1} of {len(texts)}: " if len(texts) > 1 else ""
        shown = given[i] if len(given[i]) <= 80 else given[i][:60] + "..." + given[i][-17:]
        whole = tok.encode(texts[i])
        masks = [k for k, t in enumerate(whole) if t == tok.mask_token_id]
        if len(masks) > kept:  # one the cut left out: no answer for it would be said silently
            raise BertkitError(f"{where}its {tok.mask_token} at token {masks[kept] + 1} of {len(whole)} lies "
                               f"past the model's limit of {limit} tokens: {shown!r}")
        if not masks:
            raise BertkitError(f"{where}no {tok.mask_token} in {shown!r}")
    if any(len(ids) == limit for ids in rows["input_ids"]):  # perhaps cut: count those that were
        lengths = [len(ids) + tok.frame.specials(pair=False) for ids in tok.encode_plain(texts)]
        report_truncated(sum(n > limit for n in lengths), len(texts), limit)
    device = device_of(model)
    if chosen is not None:
        chosen = chosen.to(device)

    @torch.no_grad()
    def predict(part: list[int]) -> list[list[dict]]:  # each text's records, for the texts `part`
        found: dict[int, list[dict]] = {i: [] for i in part}
        for chunk in length_batches([len(rows["input_ids"][i]) for i in part], batch_size):  # similar lengths
            chunk = [part[j] for j in chunk]
            # right-padded whatever the tokenizer says: a text's positions, and so its answers, do
            # not depend on the texts it is batched with
            batch = tok.pad({k: [v[i] for i in chunk] for k, v in rows.items()}, padding_side="right",
                            return_tensors="pt")
            masked = batch["input_ids"] == tok.mask_token_id  # (B, T)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                logits = model(batch["input_ids"].to(device), batch["attention_mask"].to(device),
                               batch["token_type_ids"].to(device), masked_positions=masked.to(device)).logits
            probs = logits.float().softmax(-1)  # (K, V), the masks in row-major order
            if chosen is None:
                top = probs[:, :listed].topk(min(top_k, listed))
                scores, ids = top.values.tolist(), top.indices.tolist()
            else:
                top = probs[:, chosen].topk(min(top_k, len(chosen)))
                scores, ids = top.values.tolist(), chosen[top.indices].tolist()
            for (row, pos), row_scores, row_ids in zip(masked.nonzero().tolist(), scores, ids):
                text_ids = batch["input_ids"][row, :int(batch["attention_mask"][row].sum())].tolist()
                one_mask = int(masked[row].sum()) == 1

                def filled(i):  # padding proposed for this mask fills nothing, as in the pipeline
                    ids = [t for t in text_ids[:pos] + [i] + text_ids[pos + 1:] if t != tok.pad_token_id]
                    return tok.decode(ids, skip_special_tokens=one_mask)

                found[chunk[row]].append({"text": given[chunk[row]], "position": pos, "predictions": [
                    {"token": tok.id_to_token(i), "token_str": tok.decode([i], skip_special_tokens=False),
                     "id": i, "score": p, "sequence": filled(i)} for p, i in zip(row_scores, row_ids)]})
        return [found[i] for i in part]

    texts_records = streamed(model, list(range(len(texts))), batch_size, bf16, predict, progress, "filling masks")
    records = (record for records in texts_records for record in records)
    return records if stream else list(records)
