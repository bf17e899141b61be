"""Tasks built on an encoder: fine-tuning (sequence classification and regression, token
classification, extractive QA, multiple choice, sentence embeddings on text pairs), their data
readers and metrics, sentence embeddings and search, and fill-mask.

    from bertkit.tasks import finetune, evaluate, classify, tag, answer, choose, fill_mask, FinetuneSettings
"""

from .embedding import embed, mean_pool, search
from .fillmask import fill_mask
from .finetune import FinetuneSettings, answer, choose, classify, evaluate, finetune, load_model, make_task, tag
from .readers import TASKS, Answer, ChoiceExample, Columns, QAExample, TaggedSentence, TextExample, load_examples

__all__ = ["TASKS", "Answer", "ChoiceExample", "Columns", "FinetuneSettings", "QAExample", "TaggedSentence",
           "TextExample", "answer", "choose", "classify", "embed", "evaluate", "fill_mask", "finetune", "load_examples",
           "load_model", "make_task", "mean_pool", "search", "tag"]
