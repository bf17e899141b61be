"""Pre-training objectives. Each is an nn.Module whose `forward(batch)` returns a `Step` (a loss
and a few detached metrics) and whose `models()` names what a run saves; the training loop
(train/) knows nothing else about them (DESIGN: an objective is a module that returns a loss).

A batch is a dict of tensors: input_ids, attention_mask, token_type_ids (B, T); labels (B, T)
with the original id at predicted positions and -100 elsewhere; pair_labels (B,) for NSP/SOP.
"""

from .base import Objective, Step
from .distill import Distillation
from .mlm import MaskedLM, masked_lm_terms
from .registry import NAMES, build_objective
from .rtd import ReplacedTokenDetection

__all__ = ["NAMES", "Distillation", "MaskedLM", "Objective", "ReplacedTokenDetection", "Step", "build_objective",
           "masked_lm_terms"]
