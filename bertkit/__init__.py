"""bertkit: the BERT encoder family from scratch.

    import bertkit
    model = bertkit.from_pretrained("path/to/checkpoint")   # Hugging Face format
    out = model(input_ids, attention_mask)                  # out.last_hidden_state, out.logits, ...
    model.save_pretrained("out/")                           # transformers loads it back

The public names are imported on first use (PEP 562), so `import bertkit.numpy_ref` works on a
machine without torch: only the torch side of the package needs it.
"""

from __future__ import annotations

import importlib

from .errors import BertkitError

__version__ = "0.1.0"

# public name -> module that defines it
_LAZY = {
    "PRESETS": ".config", "EncoderConfig": ".config",
    "Tokenizer": ".data", "load_tokenizer": ".data",
    "from_pretrained": ".interop.hf", "FreshHeadWarning": ".interop.hf", "UnusedHeadWarning": ".interop.hf",
    "EnhancedMaskDecoderWarning": ".interop.hf",
    "EncoderOutput": ".layers",
    "Model": ".model", "build": ".model", "build_electra_pair": ".model", "student_from_teacher": ".model",
}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'bertkit' has no attribute {name!r}")
    importlib.import_module(".models", __name__)  # the family files register their presets
    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value  # cache: the next lookup is an ordinary attribute
    return value


def __dir__() -> list[str]:
    """The public names too (they load on first use), for tab completion."""
    return sorted({name for name in globals() if not name.startswith("_")} - {"annotations", "importlib"}
                  | set(__all__) | {"PRESETS", "list_models"})


def list_models() -> list[str]:
    """Names of the presets `build` accepts."""
    return sorted(__getattr__("PRESETS"))


__all__ = ["BertkitError", "EncoderConfig", "EncoderOutput", "EnhancedMaskDecoderWarning", "FreshHeadWarning", "Model",
           "Tokenizer",
           "UnusedHeadWarning", "build",
           "build_electra_pair", "from_pretrained", "list_models", "load_tokenizer", "student_from_teacher"]
