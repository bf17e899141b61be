"""Mini-BERT in pure NumPy: BERT as linear algebra, with every gradient written by hand.

No deep-learning framework anywhere in this package (a test imports it with torch blocked);
scipy is used for one function, erf, in the exact GELU.

    from bertkit import numpy_ref
    model = numpy_ref.from_pretrained("runs/mini")          # any BERT masked-LM checkpoint
    logits = model.forward(input_ids, attention_mask)        # (B, T, V), NumPy in, NumPy out
    numpy_ref.train(model, batches, steps=300, lr=1e-3)      # MLM with AdamW, clipping, accumulation
    model.save_pretrained("runs/mini-numpy")                 # bertkit and transformers load it

    model = numpy_ref.build("mini-bert", dtype=np.float64)   # fresh weights, BERT's initializer

Reading order: ops.py (each operation, forward and backward side by side), model.py (BERT from
those ops, backpropagation, recomputation), optim.py (AdamW, clipping, schedule), train.py,
then safetensors.py and hf_io.py (files).

Dimension legend used throughout: B batch, T sequence length, H hidden size, N heads, D head
size, F intermediate size, V vocabulary, K predicted (masked) positions.
"""

from __future__ import annotations

import numpy as np

from ..config import EncoderConfig
from ..errors import BertkitError
from .hf_io import from_pretrained, save_pretrained
from .model import BertForMaskedLM, StepResult
from .optim import AdamW, clip_grad_norm, lr_factor
from .train import Trainer, TrainSettings, train

PRESETS = {
    # The torch side registers its presets in bertkit.models, which needs torch; the BERT ones
    # are repeated here (tests/test_numpy_ref_io.py checks they match).
    "mini-bert": EncoderConfig(vocab_size=8192, hidden_size=192, num_layers=3, num_heads=4,
                               intermediate_size=768, max_positions=64),
    "bert-base": EncoderConfig(),
    "bert-large": EncoderConfig(hidden_size=1024, num_layers=24, num_heads=16, intermediate_size=4096),
}


def build(name: str | EncoderConfig = "mini-bert", dtype=np.float32, seed: int = 0, **overrides) -> BertForMaskedLM:
    """A freshly initialized NumPy BERT masked LM from a preset name or a config; `overrides`
    change config fields by name (typed; an unknown name is an error)."""
    if isinstance(name, EncoderConfig):
        config = name
    elif name in PRESETS:
        config = PRESETS[name]
    else:
        raise BertkitError(f"unknown model {name!r}; the NumPy reference builds {', '.join(PRESETS)} "
                           "or any BERT EncoderConfig")
    if overrides:
        config = config.replace(**overrides)
    return BertForMaskedLM(config, dtype, seed)


__all__ = ["AdamW", "BertForMaskedLM", "PRESETS", "StepResult", "Trainer", "TrainSettings", "build",
           "clip_grad_norm", "from_pretrained", "lr_factor", "save_pretrained", "train"]
