"""What every objective shares: the Step it returns and the models it saves."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class Step:
    loss: torch.Tensor                  # scalar, what backward() runs on
    metrics: dict[str, torch.Tensor]    # detached scalars (means over the batch) for logs


class Objective(nn.Module):
    def models(self) -> dict[str, nn.Module]:
        """What a run saves: the "" entry at the root of the output directory, others in a
        subdirectory of that name (ELECTRA: the generator in generator/)."""
        raise NotImplementedError
