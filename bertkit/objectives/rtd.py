"""Replaced-token detection (Clark et al., 2020, ELECTRA, sec. 2).

A small generator is trained with MLM; its samples replace the masked tokens, and the
discriminator learns, at every real token, whether it was replaced. Loss (eq. 1):
L = L_MLM(generator) + lambda * L_Disc, lambda = 50. Sampling is not differentiated: the
discriminator's loss does not flow back into the generator (sec. 2). Where the generator
samples the original token, the label is "original" (sec. 2: such tokens count as real).

DeBERTaV3 (He et al., 2021, sec. 3) trains a DeBERTa discriminator with this same objective and
weight; only how the pair shares embeddings differs (objectives/gdes.py).

Shapes: B batch, T length, K masked positions, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..errors import BertkitError
from ..models.electra import ReplacedTokenHead
from .base import Objective, Step, check_loss_weights, share, wide
from .mlm import MASKED_LABELS, masked_lm_terms


def sample_tokens(logits: torch.Tensor) -> torch.Tensor:
    """(K, V) logits -> (K,) ids drawn from softmax(logits) with the Gumbel-max trick (one
    argmax over logits plus Gumbel noise; uses the global torch RNG, so a seed fixes it)."""
    u = torch.rand_like(logits, dtype=torch.float32).clamp_(1e-9, 1.0)
    return (logits.float() - torch.log(-torch.log(u))).argmax(-1)


def corrupt(ids: torch.Tensor, labels: torch.Tensor, sampled: torch.Tensor,
            real: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The discriminator's input and labels. ids, labels, real: (B, T); sampled: (K,) generator
    samples for the K masked positions (labels != -100), in row-major order. Returns the
    original text with the samples put in, and (B, T) bool labels, True exactly where a real
    token differs from the original."""
    masked = labels != -100
    original = torch.where(masked, labels, ids)  # (B, T): the text before masking
    corrupted = original.clone()
    corrupted[masked] = sampled
    return corrupted, (corrupted != original) & real


@dataclass
class Terms:
    """One batch's two losses, still in the graph, and what the metrics need."""
    mlm_loss: torch.Tensor       # scalar: the generator's cross-entropy at the masked positions
    mlm_accuracy: torch.Tensor   # scalar, detached
    rtd_loss: torch.Tensor       # scalar: the discriminator's BCE over every real token
    predicted: torch.Tensor      # (N,) bool over the N real tokens: the discriminator says "replaced"
    replaced: torch.Tensor       # (N,) bool: the token was in fact replaced


class ReplacedTokenDetection(Objective):
    """ELECTRA's objective (module docstring): the `generator` (a small masked LM) fills the
    masked positions with samples, the `discriminator` (head "pretraining") tells each token
    original or replaced; the loss is the generator's MLM loss plus `weight` times the
    discriminator's (ELECTRA's lambda, 50). The run saves the discriminator, the generator
    beside it in generator/."""

    def __init__(self, generator, discriminator, weight: float = 50.0):
        super().__init__()
        check_loss_weights(weight=weight)  # (the command line checks it first, as rtd_weight)
        if generator.head is None or not generator.head.predicts_tokens:
            raise BertkitError("the RTD generator needs a masked-LM head (build it with head='mlm')")
        if not isinstance(discriminator.head, ReplacedTokenHead):
            raise BertkitError("the RTD discriminator needs the replaced-token head: an ELECTRA or DeBERTa model "
                               f"built with head='pretraining' (got {discriminator.config.family}, "
                               f"head {discriminator.head_kind!r})")
        if generator.config.vocab_size != discriminator.config.vocab_size:
            raise BertkitError(f"generator vocabulary {generator.config.vocab_size} != discriminator "
                               f"vocabulary {discriminator.config.vocab_size}")
        self.generator = generator
        self.discriminator = discriminator
        self.weight = weight

    def models(self):
        return {"": self.discriminator, "generator": self.generator}

    def batch_keys(self):
        return {**super().batch_keys(), "labels": MASKED_LABELS}

    def terms(self, batch: dict[str, torch.Tensor]) -> Terms:
        """Both losses apart (for `forward`, and for checking where each one's gradient goes)."""
        ids, labels = batch["input_ids"], batch["labels"]
        mask, types = batch.get("attention_mask"), batch.get("token_type_ids")
        masked = labels != -100  # (B, T)
        gen_logits = self.generator(ids, mask, types, masked_positions=masked).logits  # (K, V)
        gen_loss, gen_accuracy = masked_lm_terms(gen_logits, labels[masked])

        real = torch.ones_like(ids, dtype=torch.bool) if mask is None else mask.bool()
        corrupted, replaced = corrupt(ids, labels, sample_tokens(gen_logits.detach()), real)

        disc_logits = self.discriminator(corrupted, mask, types).logits  # (B, T)
        scores = wide(disc_logits[real])
        disc_loss = F.binary_cross_entropy_with_logits(scores, replaced[real].to(scores.dtype))
        return Terms(gen_loss, gen_accuracy, disc_loss, disc_logits[real] > 0, replaced[real])

    metric_counts = {"mlm": "mlm", "rtd": "rtd", "replaced": "rtd"}

    def counts(self, batch):
        """Masked tokens (the generator's) and real tokens (the discriminator's)."""
        mask = batch.get("attention_mask")
        real = batch["input_ids"].numel() if mask is None else mask.bool().sum()
        return {"mlm": (batch["labels"] != -100).sum(), "rtd": torch.as_tensor(real, device=batch["labels"].device)}

    def forward(self, batch: dict[str, torch.Tensor], totals: dict[str, torch.Tensor] | None = None) -> Step:
        t = self.terms(batch)
        counts = self.counts(batch)
        loss = share(t.mlm_loss, counts["mlm"], totals, "mlm") + self.weight * share(t.rtd_loss, counts["rtd"],
                                                                                      totals, "rtd")
        return Step(loss, {
            "loss": (t.mlm_loss + self.weight * t.rtd_loss).detach(),
            "mlm_loss": t.mlm_loss.detach(), "mlm_accuracy": t.mlm_accuracy,
            "rtd_loss": t.rtd_loss.detach(),
            "rtd_accuracy": (t.predicted == t.replaced).float().mean(),
            "replaced_fraction": t.replaced.float().mean(),
        })
