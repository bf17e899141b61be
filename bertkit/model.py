"""`Model`: an encoder plus an optional task head, the object users build, load, run and save."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from .config import HEADS, EncoderConfig, get_preset
from .errors import BertkitError
from .layers import EncoderOutput, init_weights
from .models import assemble


class Model(nn.Module):
    def __init__(self, config: EncoderConfig, head: str | None = None, tokenizer=None):
        super().__init__()
        if head not in HEADS:
            raise BertkitError(f"unknown head {head!r}; choose one of {', '.join(map(str, HEADS))}")
        self.config = config
        self.head_kind = head
        self.backbone, self.head = assemble(config, head)
        self.tokenizer = tokenizer
        init_weights(self, config.initializer_range)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, output_attentions: bool = False) -> EncoderOutput:
        out = self.backbone(input_ids, attention_mask, token_type_ids, output_attentions)
        if self.head is not None:
            for name, value in self.head(out).items():
                setattr(out, name, value)
        return out

    def num_parameters(self) -> int:
        """Unique parameters (a tied decoder counts once), as `transformers` counts them."""
        return sum(p.numel() for p in self.parameters())

    def save_pretrained(self, path: str | Path) -> None:
        """Write Hugging Face format: config.json, model.safetensors, tokenizer files."""
        from .interop.hf import save_pretrained  # interop knows the foreign names; models do not

        save_pretrained(self, path)


def build(name: str | EncoderConfig, head: str | None = None, num_labels: int | None = None,
          **overrides) -> Model:
    """A freshly initialized model from a preset name (see `list_models()`) or a config.

    `overrides` change config fields by name (typed; an unknown name is an error)."""
    config = name if isinstance(name, EncoderConfig) else get_preset(name).config
    if num_labels is not None:
        overrides["num_labels"] = num_labels
    if overrides:
        config = config.replace(**overrides)
    return Model(config, head)
