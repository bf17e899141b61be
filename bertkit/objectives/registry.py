"""Objectives by their command-line names, built with the models they train.

    objective = build_objective("mlm+nsp", "bert-base", vocab_size=len(tokenizer))

Which model each name builds: mlm -> the preset with an MLM head; mlm+nsp / mlm+sop -> the
preset with its pre-training head (a sentence-pair classifier: BERT's NSP, ALBERT's SOP);
rtd -> an ELECTRA generator/discriminator pair sharing embeddings, or for a DeBERTa-v3 preset a
DeBERTa pair with gradient-disentangled embedding sharing (gdes.py); distill -> a DistilBERT-style
student initialized from chosen layers of a BERT teacher (`teacher`: a checkpoint directory,
hub id or preset; default an untrained bert-base, for trying the objective out).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from ..errors import BertkitError
from .base import Objective, check_loss_weights
from .distill import Distillation
from .mlm import MaskedLM
from .rtd import ReplacedTokenDetection

NAMES = ("mlm", "mlm+nsp", "mlm+sop", "rtd", "distill")


@dataclass(frozen=True)
class LossSettings:
    """The weights inside an objective's loss (`bertkit pretrain --set temperature=4`, or in a
    job file's [train] table): distill's temperature and the weights of its soft-target, MLM and
    cosine terms (DistilBERT's released script: 2, 5, 2, 1), and rtd's weight of the
    discriminator's loss against the generator's (ELECTRA's lambda, 50)."""
    temperature: float = 2.0
    alpha_ce: float = 5.0
    alpha_mlm: float = 2.0
    alpha_cos: float = 1.0
    rtd_weight: float = 50.0


LOSS_KEYS = {"distill": ("temperature", "alpha_ce", "alpha_mlm", "alpha_cos"), "rtd": ("rtd_weight",)}
LOSS_FIELDS = tuple(f.name for f in fields(LossSettings))


def check_loss(name: str, loss: dict) -> None:
    """Refuse a loss setting objective `name` does not have, and values that make no loss: a
    temperature must be positive and a weight at least 0 (all finite)."""
    for key, value in loss.items():
        if key not in LOSS_KEYS.get(name, ()):
            owner = next((o for o, keys in LOSS_KEYS.items() if key in keys), None)
            raise BertkitError(f"{key} is a setting of objective {owner}, not {name}" if owner else
                               f"unknown loss setting {key!r}; known: {', '.join(LOSS_FIELDS)}")
    check_loss_weights(**loss)


def build_objective(name: str, preset: str, teacher: str | None = None,
                    teacher_layers: tuple[int, ...] | None = None, loss: dict | None = None,
                    **overrides) -> Objective:
    """`overrides` change the model config (e.g. vocab_size to fit a tokenizer); distill's
    student copies the teacher's blocks `teacher_layers` (default: half of them, spread evenly from
    the first to the last, as student_from_teacher takes them); `loss` sets the
    objective's LossSettings (those LOSS_KEYS gives it)."""
    from ..model import STUDENT_FAMILY, STUDENT_SETTINGS, build, build_electra_pair, student_from_teacher

    if name not in NAMES:
        raise BertkitError(f"unknown objective {name!r}; choose one of {', '.join(NAMES)}")
    loss = dict(loss or {})
    check_loss(name, loss)
    weight = {"weight": loss.pop("rtd_weight")} if "rtd_weight" in loss else {}
    if name == "mlm":
        return MaskedLM(build(preset, head="mlm", **overrides))
    if name in ("mlm+nsp", "mlm+sop"):
        try:
            model = build(preset, head="pretraining", **overrides)
        except BertkitError as e:
            raise BertkitError(f"objective {name} does not fit {preset}: {e}") from None
        if not hasattr(model.head, "pair"):
            raise BertkitError(f"objective {name} does not fit {preset}: it has no sentence-pair head; use mlm")
        if model.config.type_vocab_size < 2:  # segment B is token type 1: an index error at the first step
            raise BertkitError(f"objective {name} does not fit type_vocab_size {model.config.type_vocab_size}: "
                               "sentence pairs need 2 token types")
        return MaskedLM(model, name.split("+")[1])
    if name == "rtd":
        from ..config import get_preset
        from ..models.deberta import V3_PRESETS
        from ..models.electra import GENERATOR_FOR

        if preset in V3_PRESETS:
            from .gdes import build_pair

            return ReplacedTokenDetection(*build_pair(get_preset(preset).config.replace(**overrides)), **weight)
        if preset not in GENERATOR_FOR:
            fits = ", ".join(sorted(GENERATOR_FOR) + list(V3_PRESETS))
            raise BertkitError("objective rtd trains an ELECTRA pair or a DeBERTa-v3 pair (gradient-disentangled "
                               f"embedding sharing); choose one of {fits}")
        return ReplacedTokenDetection(*build_electra_pair(preset, **overrides), **weight)
    # distill: the student's shape comes from the teacher (every other layer, sec. 3)
    from pathlib import Path

    from ..config import PRESETS, get_preset

    family = get_preset(preset).config.family
    if family not in STUDENT_FAMILY.values():
        raise BertkitError(f"objective distill trains a DistilBERT student of a BERT teacher (a distilbert preset) or "
                           f"a RoBERTa one of a RoBERTa teacher (a roberta preset), not {preset}")
    source = teacher or ("roberta-base" if family == "roberta" else "bert-base")
    if source in PRESETS and not Path(source).is_dir():
        teacher_model = build(source, head="mlm", **overrides)  # an untrained teacher: for trying it out
    else:
        teacher_model = _trained_masked_lm(source)
    if STUDENT_FAMILY.get(teacher_model.config.family) != family:
        raise BertkitError(f"the teacher {source} is of the {teacher_model.config.family} family, whose student is "
                           f"not {preset}: distill a BERT into a distilbert preset, a RoBERTa into a roberta one")
    own = {k: v for k, v in overrides.items() if k in STUDENT_SETTINGS}  # a checkpoint teacher's shape is fixed
    # student_from_teacher checks the layers; None: half of them, first to last, as DistilBERT's
    return Distillation(student_from_teacher(teacher_model, layers=teacher_layers, **own), teacher_model, **loss)


def _trained_masked_lm(source: str):
    """The teacher checkpoint with its masked-LM head. One whose file holds no trained head (a
    plain BertModel, a sentence encoder) is refused: its soft targets would come from a random
    vocabulary projection, which the student would then be taught to copy."""
    import warnings

    from ..interop.hf import FreshHeadWarning, from_pretrained

    with warnings.catch_warnings():
        warnings.simplefilter("error", FreshHeadWarning)
        try:
            return from_pretrained(source, head="mlm")
        except FreshHeadWarning:
            raise BertkitError(f"teacher {source}: the checkpoint has no trained masked-LM head (its MLM weights "
                               "are missing), so its soft targets would be random; give a masked-LM checkpoint "
                               "(e.g. BertForMaskedLM or BertForPreTraining)") from None
