"""Masked language modelling (Devlin et al., 2019, sec. 3.1, task #1), optionally with a
sentence-pair task: next-sentence prediction (BERT, task #2) or sentence-order prediction
(Lan et al., 2020, sec. 4.1, ALBERT). The vocabulary projection runs only at the predicted
positions (the model's `masked_positions`).

Shapes: B batch, T length, K predicted positions in the batch, V vocabulary.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..errors import BertkitError
from .base import Objective, Step, labelled_positions, share, wide


def masked_lm_terms(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(K, V) logits and (K,) target ids -> (mean cross-entropy, accuracy); a target of -100 (the
    labels' "not predicted") counts in neither. A batch without a predicted position gives a zero
    loss that still reaches the graph, not NaN."""
    kept = targets != -100
    if not kept.all():
        logits, targets = logits[kept], targets[kept]
    if targets.numel() == 0:
        return logits.sum() * 0.0, logits.new_zeros(())
    loss = F.cross_entropy(wide(logits), targets)
    accuracy = (logits.argmax(-1) == targets).float().mean()
    return loss, accuracy.detach()


MASKED_LABELS = "(B, T) target ids, -100 where a position is not predicted (a masking collator gives them)"


class MaskedLM(Objective):
    """`pair` = None (MLM alone: RoBERTa, DistilBERT without a teacher, DeBERTa), "nsp" or "sop";
    a pair task needs a model built with head="pretraining" whose head has a pair classifier."""

    def __init__(self, model, pair: str | None = None):
        super().__init__()
        if pair not in (None, "nsp", "sop"):
            raise BertkitError(f"unknown pair task {pair!r}; choose nsp or sop")
        head = model.head
        if head is None or not head.predicts_tokens:
            raise BertkitError(f"masked-LM training needs a masked-LM head; this model's head is {model.head_kind!r}")
        if pair is not None and not hasattr(head, "pair"):
            raise BertkitError(f"mlm+{pair} needs a sentence-pair head, which {model.config.family} "
                               f"({model.head_kind!r} head) does not have; use the mlm objective")
        self.model = model
        self.pair = pair

    def batch_keys(self):
        keys = {**super().batch_keys(), "labels": MASKED_LABELS}
        return {**keys, "pair_labels": "(B,) 1 where the second segment is not the "
                                                  "true next one (NSP) or the order is swapped (SOP), else 0"} if self.pair else keys

    metric_counts = {"mlm": "mlm", "nsp": "pair", "sop": "pair"}

    def check_batch(self, batch) -> None:
        super().check_batch(batch)
        labels, vocab = batch["labels"], self.model.config.vocab_size
        if labels.shape != batch["input_ids"].shape:
            raise BertkitError(f"batch key 'labels' has shape {tuple(labels.shape)}, not input_ids' shape "
                               f"{tuple(batch['input_ids'].shape)} (a target id or -100 for every token)")
        wrong = labels[(labels != -100) & ((labels < 0) | (labels >= vocab))]
        if wrong.numel():
            raise BertkitError(f"batch key 'labels' holds {int(wrong[0])}, outside the vocabulary of {vocab} "
                               "(-100 marks a position not predicted)")

    def counts(self, batch):
        """Masked tokens (and sentence pairs)."""
        counts = {"mlm": (batch["labels"] != -100).sum()}
        if self.pair is not None:
            counts["pair"] = torch.tensor(len(batch["pair_labels"]), device=batch["labels"].device)
        return counts

    def forward(self, batch: dict[str, torch.Tensor], totals: dict[str, torch.Tensor] | None = None) -> Step:
        labels = batch["labels"]
        masked = labelled_positions(labels, batch.get("attention_mask"))  # (B, T)
        out = self.model(batch["input_ids"], batch.get("attention_mask"), batch.get("token_type_ids"),
                         masked_positions=masked)
        loss, accuracy = masked_lm_terms(out.logits, labels[masked])  # logits (K, V)
        metrics = {"mlm_loss": loss.detach(), "mlm_accuracy": accuracy}
        total = loss.detach()
        loss = share(loss, masked.sum(), totals, "mlm")
        if self.pair is not None:
            pair_loss = F.cross_entropy(wide(out.pair_logits), batch["pair_labels"])  # (B, 2) vs (B,)
            metrics[f"{self.pair}_loss"] = pair_loss.detach()
            metrics[f"{self.pair}_accuracy"] = (out.pair_logits.argmax(-1) == batch["pair_labels"]).float().mean()
            total = total + pair_loss.detach()
            loss = loss + share(pair_loss, len(batch["pair_labels"]), totals, "pair")
        metrics["loss"] = total
        return Step(loss, metrics)
