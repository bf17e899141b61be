"""Knowledge distillation of a BERT teacher into a DistilBERT student (Sanh et al., 2019,
sec. 3): a triple loss, with the defaults of the authors' training script (weights 5.0 / 2.0 /
1.0, temperature 2.0):

- soft-target cross-entropy: KL(softmax(t / tau) || softmax(s / tau)) * tau^2 over every real
  token's vocabulary distribution (Hinton et al., 2015: the tau^2 keeps gradient sizes
  comparable across temperatures);
- the student's own MLM loss at the masked positions;
- a cosine loss aligning the directions of student and teacher last hidden states.

Shapes: B batch, T length, R real tokens, K masked positions, V vocabulary, H hidden.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..errors import BertkitError
from .base import Objective, Step, check_loss_weights, share, wide
from .mlm import MASKED_LABELS, masked_lm_terms


class Distillation(Objective):
    """DistilBERT's triple loss (module docstring): the `student` (a masked LM, usually
    bertkit.student_from_teacher(teacher)) learns from the frozen `teacher`'s logits softened by
    `temperature`, weighted alpha_ce, its own MLM loss (alpha_mlm) and the cosine between their
    last hidden states (alpha_cos). The run saves the student only."""

    def __init__(self, student, teacher, temperature: float = 2.0, alpha_ce: float = 5.0,
                 alpha_mlm: float = 2.0, alpha_cos: float = 1.0):
        super().__init__()
        for role, model in (("student", student), ("teacher", teacher)):
            if model.head is None or not model.head.predicts_tokens:
                raise BertkitError(f"distillation needs a masked-LM head on the {role}")
        if student.config.vocab_size != teacher.config.vocab_size:
            raise BertkitError(f"student vocabulary {student.config.vocab_size} != teacher's {teacher.config.vocab_size}")
        if student.config.hidden_size != teacher.config.hidden_size:
            raise BertkitError("the cosine loss compares hidden states: student hidden size "
                               f"{student.config.hidden_size} != teacher's {teacher.config.hidden_size}")
        check_loss_weights(temperature=temperature, alpha_ce=alpha_ce, alpha_mlm=alpha_mlm, alpha_cos=alpha_cos)
        if alpha_ce == alpha_mlm == alpha_cos == 0:
            raise BertkitError("alpha_ce, alpha_mlm and alpha_cos are all 0: the loss would be 0 (the run would only "
                               "decay the weights)")
        self.student = student
        self.teacher = teacher.eval().requires_grad_(False)
        self.temperature = temperature
        self.alpha_ce, self.alpha_mlm, self.alpha_cos = alpha_ce, alpha_mlm, alpha_cos

    def models(self):
        return {"": self.student}

    def batch_keys(self):
        return {**super().batch_keys(), "labels": MASKED_LABELS}

    def train(self, mode: bool = True):
        super().train(mode)
        self.teacher.eval()  # the teacher never drops out
        return self

    metric_counts = {"mlm": "mlm", "distill": "real", "cosine": "real"}

    def counts(self, batch):
        """Real tokens (the soft targets' and the hidden states' terms) and masked tokens (MLM's)."""
        mask = batch.get("attention_mask")
        real = batch["input_ids"].numel() if mask is None else mask.bool().sum()
        return {"real": torch.as_tensor(real, device=batch["labels"].device), "mlm": (batch["labels"] != -100).sum()}

    def forward(self, batch: dict[str, torch.Tensor], totals: dict[str, torch.Tensor] | None = None) -> Step:
        ids, labels, mask = batch["input_ids"], batch["labels"], batch.get("attention_mask")
        real = torch.ones_like(ids, dtype=torch.bool) if mask is None else mask.bool()  # (B, T)
        masked = (labels != -100)[real]  # (R,): which real tokens carry an MLM label
        # DistilBERT has no token types: neither side gets them, so both see the same input.
        with torch.no_grad():
            t = self.teacher(ids, mask, masked_positions=real)
        s = self.student(ids, mask, masked_positions=real)  # logits (R, V): every real token
        tau = self.temperature
        ce = F.kl_div(F.log_softmax(wide(s.logits) / tau, -1), F.softmax(wide(t.logits) / tau, -1),
                      reduction="batchmean") * tau ** 2
        mlm, accuracy = masked_lm_terms(s.logits[masked], labels[real][masked])  # (K, V)
        s_h, t_h = s.last_hidden_state, t.last_hidden_state  # (R, H): masked_positions=real
        cos = (1.0 - F.cosine_similarity(wide(s_h), wide(t_h), dim=-1)).mean()
        whole = self.alpha_ce * ce + self.alpha_mlm * mlm + self.alpha_cos * cos
        R, K = real.sum(), masked.sum()
        loss = (share(self.alpha_ce * ce + self.alpha_cos * cos, R, totals, "real")
                + share(self.alpha_mlm * mlm, K, totals, "mlm"))
        return Step(loss, {"loss": whole.detach(), "distill_ce": ce.detach(), "mlm_loss": mlm.detach(),
                           "mlm_accuracy": accuracy, "cosine_loss": cos.detach()})
