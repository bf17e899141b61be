"""Resumable checkpoints: every model an objective saves, in Hugging Face format, plus
trainer_state.pt (optimizer, step, elapsed seconds, RNG states). Each checkpoint is written to a
temporary directory and renamed into place, so a crash or a full disk mid-save never damages
the previous one; only the newest `keep` are kept.

Layout: OUT/checkpoints/step-00000100/{config.json, model.safetensors, tokenizer files,
generator/, trainer_state.pt}.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import numpy as np
import torch

from ..errors import BertkitError, first_line, refused_global
from ..files import checkpoint_folders, staging_dir

STATE = "trainer_state.pt"
STATE_KEYS = ("optimizer", "step", "elapsed", "tokens", "rng")  # what Trainer.resume reads
# What earlier bertkit wrote into trainer_state.pt beyond tensors and plain values: numpy's random
# state as an array. Loading allows these and nothing else (weights_only), so a checkpoint from a
# shared run folder cannot run code when resumed.
_np_core = getattr(np, "_core", None) or np.core
EARLIER_GLOBALS = (_np_core.multiarray._reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32)))


def save_models(models: dict, directory: Path) -> None:
    for name, model in models.items():
        model.save_pretrained(directory / name if name else directory)


def save_final(models: dict, root: Path) -> None:
    """The finished run's models at the root of OUT: written to a temporary folder first, then
    moved into place file by file, so a failed save leaves the earlier files whole."""
    root.mkdir(parents=True, exist_ok=True)
    tmp = staging_dir(root, ".writing-")
    try:
        save_models(models, tmp)
        for written in sorted(tmp.rglob("*"), key=lambda p: len(p.parts)):
            target = root / written.relative_to(tmp)
            if written.is_dir():
                target.mkdir(exist_ok=True)
            else:
                os.replace(written, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def rng_state(device: torch.device | None = None) -> dict:
    """Every generator's state, in plain values and tensors (what weights_only loads): the CPU's,
    and the training GPU's when it trains on one (not every visible GPU's: a CPU run would start
    CUDA on each, and a machine with fewer GPUs could not take them back)."""
    key, keys, position, has_gauss, gauss = np.random.get_state()
    numpy = {"key": key, "keys": keys.tolist(), "position": position, "has_gauss": has_gauss, "gauss": gauss}
    state = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": numpy}
    if device is not None and device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict, device: torch.device | None = None) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    numpy = state["numpy"]
    if isinstance(numpy, dict):
        numpy = (numpy["key"], np.array(numpy["keys"], dtype=np.uint32), numpy["position"], numpy["has_gauss"],
                 numpy["gauss"])
    np.random.set_state(numpy)  # (a tuple in checkpoints of earlier bertkit)
    cuda = state.get("cuda")
    if cuda is not None and device is not None and device.type == "cuda":
        if isinstance(cuda, (list, tuple)):  # earlier checkpoints: every visible GPU's, by index
            index = torch.cuda.current_device() if device.index is None else device.index
            if index >= len(cuda):
                return  # saved where this GPU index did not exist: its stream stays as seeded
            cuda = cuda[index]
        torch.cuda.set_rng_state(cuda, device)


def save(root: Path, step: int, models: dict, trainer_state: dict, keep: int,
         device: torch.device | None = None) -> Path:
    """Write checkpoints/step-N atomically and drop all but the newest `keep`."""
    folder = root / "checkpoints"
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"step-{step:08d}"
    tmp = staging_dir(folder, ".writing-")
    try:
        save_models(models, tmp)
        torch.save({**trainer_state, "rng": rng_state(device)}, tmp / STATE)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for old in checkpoint_folders(root)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def latest(root: Path) -> Path | None:
    found = checkpoint_folders(root)
    return found[-1] if found else None


def load(checkpoint: Path, models: dict) -> dict:
    """Load every model's weights from `checkpoint` into the live models (exact copies) and
    return the trainer state; RNG states are restored by the caller once it has built its data."""
    for name, model in models.items():
        directory = checkpoint / name if name else checkpoint
        if not (directory / "config.json").exists():
            raise BertkitError(f"{directory}: checkpoint has no {name or 'root'} model (config.json missing)")
        model.load_weights(directory)
    path = checkpoint / STATE
    earlier = [c for c in checkpoint_folders(checkpoint.parent.parent) if c.name < checkpoint.name]
    advice = (f"; {earlier[-1]} is the checkpoint before it: move {checkpoint.name} out of checkpoints/ to "
              "resume from that one" if earlier else "")
    if not path.exists():
        raise BertkitError(f"{path}: missing; the checkpoint was not written completely{advice}")
    try:
        with torch.serialization.safe_globals(list(EARLIER_GLOBALS)):
            state = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as e:  # truncated, not a torch file, unpickling errors: one line, not a traceback
        if refused_global(e):  # an object of a class weights_only does not allow, e.g. os.system
            raise BertkitError(f"{path}: refused to unpickle: it holds Python objects a trainer state never holds "
                               f"({refused_global(e)}), which could run code when loaded (a file that was tampered "
                               f"with?){advice}") from None
        reason = "not a PyTorch file it can read" if "Weights only load failed" in str(e) else first_line(e)
        raise BertkitError(f"{path}: unreadable ({reason}){advice}") from None
    missing = [k for k in STATE_KEYS if not isinstance(state, dict) or k not in state]
    if missing:
        raise BertkitError(f"{path}: not a trainer state (no {', '.join(missing)}){advice}")
    return state
