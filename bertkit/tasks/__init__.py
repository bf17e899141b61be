"""Tasks built on an encoder: fine-tuning (sequence classification and regression, token
classification, extractive QA, multiple choice, sentence embeddings on text pairs), their data
readers and metrics, and sentence embeddings and search.

    from bertkit.tasks import finetune, evaluate, classify, tag, answer, choose, FinetuneSettings
"""

from .embedding import embed, mean_pool, search
from .finetune import FinetuneSettings, answer, choose, classify, evaluate, finetune, load_model, make_task, tag
from .readers import TASKS, Answer, ChoiceExample, Columns, QAExample, TaggedSentence, TextExample, load_examples

__all__ = ["TASKS", "Answer", "ChoiceExample", "Columns", "FinetuneSettings", "QAExample", "TaggedSentence",
           "TextExample", "answer", "choose", "classify", "embed", "evaluate", "finetune", "load_examples", "load_model",
           "make_task", "mean_pool", "search", "tag"]
