"""One family-agnostic training loop (loop.py), its optimizer groups and schedules (optim.py) and
resumable checkpoints (checkpoint.py). It runs any objective (objectives/) and imports no family."""

from .loop import Trainer, TrainSettings
from .optim import lr_factor, param_groups

__all__ = ["TrainSettings", "Trainer", "lr_factor", "param_groups"]
