"""bertkit: the BERT encoder family from scratch.

    import bertkit
    model = bertkit.from_pretrained("path/to/checkpoint")   # Hugging Face format
    out = model(input_ids, attention_mask)                  # out.last_hidden_state, out.logits, ...
    model.save_pretrained("out/")                           # transformers loads it back
"""

from .config import PRESETS, EncoderConfig
from .data import Tokenizer, load_tokenizer
from .errors import BertkitError
from .interop.hf import from_pretrained
from .layers import EncoderOutput
from .model import Model, build, build_electra_pair, student_from_teacher

__version__ = "0.1.0"


def list_models() -> list[str]:
    """Names of the presets `build` accepts."""
    return sorted(PRESETS)


__all__ = ["BertkitError", "EncoderConfig", "EncoderOutput", "Model", "Tokenizer", "build",
           "build_electra_pair", "from_pretrained", "list_models", "load_tokenizer", "student_from_teacher"]
