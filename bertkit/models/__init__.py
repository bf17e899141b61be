"""The family registry. Each family module registers how to build its encoder and heads, and its
presets; everything shared lives in layers/."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from torch import nn

from ..config import EncoderConfig
from ..errors import BertkitError
from ..layers import EncoderModel


@dataclass(frozen=True)
class Family:
    name: str  # Hugging Face's model_type
    config_class: type[EncoderConfig]
    build_backbone: Callable[[EncoderConfig, bool], EncoderModel]  # (config, with_pooler)
    build_head: Callable[[str, EncoderConfig, EncoderModel], nn.Module]  # (kind, config, backbone)
    bare_has_pooler: bool = True  # whether the head-less model (HF's XxxModel) has a pooler


FAMILIES: dict[str, Family] = {}


def register_family(family: Family) -> None:
    FAMILIES[family.name] = family


def get_family(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        raise BertkitError(f"unknown model family {name!r}; bertkit knows: {', '.join(sorted(FAMILIES))}") from None


def assemble(config: EncoderConfig, head: str | None) -> tuple[EncoderModel, nn.Module | None]:
    """Encoder and head for a config; the pooler exists only when the head (or bare model) uses it."""
    family = get_family(config.family)
    if type(config) is not family.config_class:  # another family's config, or one without this one's fields
        raise BertkitError(f"family {config.family!r} is built from its own config class, "
                           f"{family.config_class.__name__}, not {type(config).__name__}: start from one of its "
                           f"presets (bertkit.build(name, **overrides)) or "
                           f"{family.config_class.__module__}.{family.config_class.__name__}(...)")
    if head is None:
        return family.build_backbone(config, family.bare_has_pooler), None
    backbone = family.build_backbone(config, True)
    head_module = family.build_head(head, config, backbone)
    if not head_module.uses_pooler:
        backbone.pooler = None
    backbone.reads_first_token = head_module.reads_first_token
    return backbone, head_module


from . import albert, bert, deberta, distilbert, electra, modern, roberta  # noqa: E402,F401  (each registers its family)
