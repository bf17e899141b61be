"""The pre-training data pipeline in one object: corpus -> token cache -> examples -> masked batches.

    data = pretraining_data("imdb", tokenizer, PipelineSettings(objective="mlm", batch_size=64))
    batch = data.batch_at(i)          # a pure function of i: what the Trainer's batch_at needs

Batch i belongs to epoch i // batches_per_epoch; each epoch visits the examples in its own seeded
permutation (the last incomplete batch of an epoch is dropped), and each row is masked with a
mask version of epoch (dynamic) or epoch % K (static, K duplicates). So resuming at step s
reproduces exactly the batches an uninterrupted run would have seen.
"""

from __future__ import annotations

import numbers
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..config import check_field_types
from ..errors import BertkitError, outside_stacklevel
from .builders import ExampleSettings, build_examples
from .cache import CacheSettings, TokenizedCorpus, tokenize_corpus
from .collators import ALBERT_MASKING, ELECTRA_MASKING, MaskingCollator, MaskingSettings
from .corpora import Corpus, DataWarning, open_corpus
from .tokenizer import Tokenizer

# The masking each recipe used where it is not BERT's: ELECTRA's generator input (85/15, no random
# tokens) and ALBERT's whole-word n-grams of up to three words (Lan et al., 2020, sec. 4.1)
OBJECTIVE_MASKING = {"rtd": ELECTRA_MASKING, "mlm+sop": ALBERT_MASKING}
OBJECTIVE_LAYOUT = {"mlm": "packed", "mlm+nsp": "nsp", "mlm+sop": "sop", "rtd": "segments", "distill": "packed"}


def default_layout(objective: str, family: str | None = None) -> str:
    """The example layout each recipe used: RoBERTa packs FULL-SENTENCES, BERT pairs with NSP,
    ALBERT with SOP, ELECTRA frames one or two segments, the others pack the stream."""
    if objective not in OBJECTIVE_LAYOUT:
        raise BertkitError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVE_LAYOUT)}")
    if objective == "mlm" and family in ("roberta", "xlm-roberta"):
        return "full-sentences"
    return OBJECTIVE_LAYOUT[objective]


def default_masking(objective: str) -> MaskingSettings:
    """BERT's 15% 80/10/10, or the recipe's own (OBJECTIVE_MASKING)."""
    return OBJECTIVE_MASKING.get(objective, MaskingSettings())


@dataclass(frozen=True)
class PipelineSettings:
    """How pretraining_data makes batches: the `objective` (mlm, mlm+nsp, mlm+sop, rtd, distill)
    and the `family` pick the example `layout` and the masking (None: their defaults, see
    default_layout / default_masking), examples of at most `max_length` tokens, `batch_size`
    rows, the `seed` of the order and masks, `static_masks` (K fixed masks per example; None:
    new masks every epoch), `short_seq_prob` and the token `cache`. Every field is type-checked."""
    objective: str = "mlm"
    layout: str | None = None                 # None: default_layout(objective, family)
    family: str | None = None
    max_length: int = 128
    batch_size: int = 32
    seed: int = 0
    masking: MaskingSettings | None = None     # None: default_masking(objective)
    static_masks: int | None = None            # K fixed masks per example; None = dynamic
    short_seq_prob: float | None = None        # None: the layout's recipe (builders.SHORT_SEQ_PROB)
    cache: CacheSettings = field(default_factory=CacheSettings)

    def __post_init__(self) -> None:
        check_field_types(self)
        for name, cls in (("masking", MaskingSettings), ("cache", CacheSettings)):  # (a dict passes the check above)
            value = getattr(self, name)
            if not isinstance(value, cls) and not (name == "masking" and value is None):
                raise BertkitError(f"PipelineSettings: {name} must be a {cls.__name__}, got {value!r}")
        default_layout(self.objective, self.family)  # validates the objective
        if self.batch_size < 1:
            raise BertkitError(f"batch_size must be at least 1, got {self.batch_size}")
        if self.static_masks is not None and self.static_masks < 1:
            raise BertkitError(f"static_masks must be at least 1, got {self.static_masks}")

    @property
    def example_settings(self) -> ExampleSettings:
        return ExampleSettings(self.layout or default_layout(self.objective, self.family), self.max_length,
                               self.short_seq_prob, self.seed)

    @property
    def masking_settings(self) -> MaskingSettings:
        return self.masking if self.masking is not None else default_masking(self.objective)


class PretrainingData:
    """A tokenized corpus made into pre-training examples, and `batch_at(i)`: the i-th batch, a
    pure function of i (the same batch whenever asked, so a resumed run reads what it would
    have). `summary()` says what was built and repaired; `examples.stats` holds the counts."""

    def __init__(self, corpus: TokenizedCorpus, tokenizer: Tokenizer, settings: PipelineSettings):
        self.corpus, self.tokenizer, self.settings = corpus, tokenizer, settings
        frame = tokenizer.frame
        separator = next((p for p, _ in reversed(frame.single) if not isinstance(p, str)), None)
        if separator is None:  # e.g. a tokenizer.json saved without a post-processor
            raise BertkitError("the tokenizer frames a text with no special tokens (its tokenizer.json has no "
                               "post-processor adding [CLS] ... [SEP]); pre-training examples need them: give a "
                               "folder whose tokenizer_config.json names the class (e.g. BertTokenizer) or a "
                               "tokenizer.json with a post-processor")
        self.examples = build_examples(corpus, frame, separator, settings.example_settings)
        self.collator = MaskingCollator.for_tokenizer(tokenizer, settings.masking_settings, settings.seed,
                                                      generator_outputs=settings.objective == "rtd")
        self.batches_per_epoch = len(self.examples) // settings.batch_size
        if self.batches_per_epoch == 0:
            raise BertkitError(f"the corpus gives {len(self.examples)} examples, fewer than one batch of "
                               f"{settings.batch_size}; use a smaller batch or more text")
        self._order: tuple[int, np.ndarray] | None = None
        if self.examples.stats.truncated_tokens:
            warnings.warn(self.summary(), DataWarning, stacklevel=outside_stacklevel())

    def summary(self) -> str:
        """One line: what the corpus and the builder repaired or split (the counts behind it are
        in `corpus.meta["read"]` and `examples.stats`)."""
        s, read = self.examples.stats, self.corpus.meta["read"]
        return (f"{self.corpus.num_documents} documents, {self.corpus.num_tokens} tokens -> {s.examples} "
                f"{self.examples.settings.layout} examples of <= {self.settings.max_length} tokens; "
                f"{s.long_documents} longer documents split across examples, {s.split_sentences} overlong "
                f"sentences cut, {s.truncated_tokens} tokens trimmed from pairs, {s.dropped_tokens} tail tokens "
                f"unused, {read['undecodable_lines']} lines with undecodable bytes replaced")

    def order(self, epoch: int) -> np.ndarray:
        if self._order is None or self._order[0] != epoch:
            rng = np.random.default_rng([self.settings.seed, 1, epoch])
            self._order = (epoch, rng.permutation(len(self.examples)))
        return self._order[1]

    def indices(self, i: int) -> tuple[np.ndarray, int]:
        epoch, j = divmod(i, self.batches_per_epoch)
        B = self.settings.batch_size
        return self.order(epoch)[j * B:(j + 1) * B], epoch

    def batch_at(self, i: int) -> dict:
        """Batch i: input_ids, attention_mask, token_type_ids, labels (the original id where a
        token is predicted, -100 elsewhere) and, for NSP / SOP, pair_labels; each (B, T) or (B,)
        int64 tensors. Epochs follow each other in a seeded order of the examples."""
        if isinstance(i, bool) or not isinstance(i, numbers.Integral):  # 1.0 failed in NumPy's seeding
            raise BertkitError(f"batch index must be a whole number, got {i!r}")
        i = int(i)
        if i < 0:
            raise BertkitError(f"batch index must be >= 0, got {i}")
        rows, epoch = self.indices(i)
        version = epoch % self.settings.static_masks if self.settings.static_masks else epoch
        batch = self.examples.batch(rows, self.tokenizer.pad_token_id)
        return self.collator(batch, rows, version)

    def __len__(self) -> int:
        return self.batches_per_epoch


def pretraining_data(corpus: str | Path | Corpus, tokenizer: Tokenizer, settings: PipelineSettings = PipelineSettings(),
                     cache_dir: str | Path | None = None, field: str = "text") -> PretrainingData:
    """The whole pipeline for a corpus spec (see `open_corpus`: built-in names use their train
    split) or a `Corpus`."""
    if not isinstance(corpus, Corpus):
        corpus = open_corpus(corpus, field=field)
    return PretrainingData(tokenize_corpus(corpus, tokenizer, cache_dir, settings.cache), tokenizer, settings)
