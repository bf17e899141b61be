"""Fine-tuning sentence embeddings on pairs of texts (the `embedding` task), with the two losses
sentence-transformers recommends, chosen by the data:

- Pairs without a score (a question and its answer, a title and its article, two paraphrases):
  in-batch negatives (Henderson et al., 2017, "Efficient Natural Language Response Suggestion";
  sentence-transformers' MultipleNegativesRankingLoss). Each text should be nearer its own pair
  than every other pair in the batch: cross-entropy over the (B, B) cosines times 20, the right
  answer on the diagonal. A bigger batch gives more negatives. A `negative` column adds one hard
  negative per pair (a text near it that is not its pair, as NLI contradictions are): every
  text is then scored against all B pairs and all B negatives, (B, 2B).
- Pairs with a similarity score (`label`, a number, as in STS-B): CoSENT (Su, 2022). For every two
  pairs whose scores differ, the higher-scored pair should have the higher cosine:
  log(1 + sum exp(20 * (cos_kl - cos_ij))) over pairs (i, j) scored above (k, l). Only the order
  of the scores matters, so 0-5 and 0-1 scales train alike.

The sentence vector is the one `embed` computes (the model's pooling and Dense modules; the
folder's prompt). The encoder and a sentence-transformers folder's Dense modules are trained, as
sentence-transformers trains them; the saved folder holds the new Dense weights. The saved folder carries sentence-transformers files (a plain model gets
Transformer -> Pooling -> Normalize), so `embed` and sentence-transformers read it alike.

Dev scores, chosen by the dev data: scored pairs give spearman (the main score, as
sentence-transformers' EmbeddingSimilarityEvaluator) and pearson of the similarity against
score; pairs without a score give retrieval among the dev set's distinct second texts (and
negatives); both compare vectors by the folder's similarity function, as its evaluators do:
`accuracy` (a text's own pair ranks first) and `mrr` (mean reciprocal rank of it, 0 beyond
rank 10).

Shapes: B pairs in a batch, K texts per example (2, or 3 with a negative), T sequence length,
H hidden size.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import BertkitError
from ..objectives.base import Objective, Step
from .base import Task, keep_part, model_max_length, report_truncated
from .embedding import (POOLING, STFiles, _embed, prepared, saved_max_length, sentence_files, similarity,
                        with_dense_weights)
from .metrics import regression_scores
from .readers import TextExample

SCALE = 20.0  # cosines times this are the logits (sentence-transformers' default for both losses)
MRR_AT = 10


def example_texts(example: TextExample) -> tuple[str, ...]:
    """The texts of one example, in order: the text, its pair, and its negative if it has one."""
    return (example.text, example.text_pair) + ((example.negative,) if example.negative else ())


def encode_pairs(examples: list[TextExample], tokenizer, settings, max_length: int) -> tuple[list[dict], int]:
    """One feature per example: `texts`, its K texts' (input_ids, token_type_ids) (the text, its
    pair, its negative), each framed as a single sequence (the prompt before each, cut to
    max_length from the end), `length`, the longest, and `label`, the score when there is one.
    Returns the features and how many texts were cut."""
    frame, budget = tokenizer.frame, max_length - tokenizer.frame.specials(pair=False)
    texts = settings.read([t for e in examples for t in example_texts(e)])
    encoded = iter(tokenizer.encode_plain(texts))
    features, cut = [], 0
    for example in examples:
        parts = [next(encoded) for _ in example_texts(example)]
        cut += sum(len(part) > budget for part in parts)
        framed = [frame.apply(np.asarray(keep_part(part, budget))) for part in parts]
        feature = {"texts": framed, "length": max(len(ids) for ids, _ in framed)}
        if example.label is not None:
            feature["label"] = float(example.label)
        features.append(feature)
    return features, cut


def collate_pairs(features: list[dict], pad_id: int) -> dict[str, torch.Tensor]:
    """(B, K, T) input_ids / attention_mask / token_type_ids, right-padded (an example's texts in
    dim 1, so a batch split over processes keeps them together) and, with scores, the (B,) float
    `label`."""
    B, K, T = len(features), len(features[0]["texts"]), max(f["length"] for f in features)
    batch = {"input_ids": torch.full((B, K, T), pad_id, dtype=torch.long),
             "attention_mask": torch.zeros(B, K, T, dtype=torch.long),
             "token_type_ids": torch.zeros(B, K, T, dtype=torch.long)}
    for i, f in enumerate(features):
        for j, (ids, types) in enumerate(f["texts"]):
            batch["input_ids"][i, j, :len(ids)] = torch.from_numpy(ids)
            batch["attention_mask"][i, j, :len(ids)] = 1
            batch["token_type_ids"][i, j, :len(ids)] = torch.from_numpy(types)
    if "label" in features[0]:
        batch["label"] = torch.tensor([f["label"] for f in features], dtype=torch.float32)  # (B,)
    return batch


def ranking_loss(a: torch.Tensor, b: torch.Tensor, scale: float = SCALE) -> tuple[torch.Tensor, torch.Tensor]:
    """In-batch negatives: (B, H) texts and (N, H) candidates whose first B rows are their pairs
    (then any hard negatives) -> the cross-entropy of each row of scaled cosines against the
    text's own pair, and how often that pair wins."""
    logits = F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).T * scale  # (B, N)
    target = torch.arange(len(a), device=a.device)
    return F.cross_entropy(logits, target), (logits.argmax(-1) == target).float().mean()


def cosent_loss(a: torch.Tensor, b: torch.Tensor, scores: torch.Tensor, scale: float = SCALE) -> torch.Tensor:
    """CoSENT: (B, H) texts, their (B, H) pairs and the (B,) gold scores -> log(1 + sum over
    i scored above j of exp(scale * (cos_j - cos_i)))."""
    cos = F.cosine_similarity(a, b, dim=-1) * scale  # (B,)
    gap = cos[None, :] - cos[:, None]  # [i, j] = cos_j - cos_i
    above = scores[:, None] > scores[None, :]  # [i, j]: pair i is scored above pair j
    return torch.logsumexp(torch.cat([gap.new_zeros(1), gap[above]]), dim=0)


class PairObjective(Objective):
    """Sentence vectors of every text of each example in one pass of the encoder (B * K
    sequences), then CoSENT where the batch has scores, in-batch negatives where it has none."""

    def __init__(self, model, settings):
        super().__init__()
        if model.head is not None:
            raise BertkitError(f"embedding trains an encoder without a head, not one with a {model.head_kind!r} head")
        self.model, self.sentence = model, settings
        self.after = settings.after  # a folder's Dense modules: trained with the encoder

    def forward(self, batch: dict[str, torch.Tensor]) -> Step:
        B, K, T = batch["input_ids"].shape
        ids, mask, types = (batch[k].view(B * K, T) for k in ("input_ids", "attention_mask", "token_type_ids"))
        hidden = self.model.backbone(ids, mask, types).last_hidden_state.float()  # (B * K, T, H)
        vectors = self.after(self.sentence.pool(hidden, mask)).float().view(B, K, -1)  # (B, K, H')
        if "label" in batch:
            loss = cosent_loss(vectors[:, 0], vectors[:, 1], batch["label"])
            return Step(loss, {"loss": loss.detach()})
        candidates = vectors[:, 1:].transpose(0, 1).reshape(B * (K - 1), -1)  # the B pairs, then the B negatives
        loss, accuracy = ranking_loss(vectors[:, 0], candidates)
        return Step(loss, {"loss": loss.detach(), "accuracy": accuracy.detach()})


class SentenceEmbedding(Task):
    """The `embedding` task. Which scores it gives depends on the dev data, so `check_gold` sets
    `metrics` and `metric`: spearman and pearson for scored pairs, accuracy and mrr for pairs
    without scores."""

    name = "embedding"
    head = None
    metric = "spearman"
    metrics = ("spearman", "pearson", "accuracy", "mrr")
    length = 128
    collate = staticmethod(collate_pairs)

    def __init__(self, pooling: str | None = None):
        if pooling is not None and pooling not in POOLING:
            raise BertkitError(f"unknown pooling {pooling!r}; choose one of {', '.join(POOLING)}")
        self.pooling = pooling
        self.sentence = None  # the model's SentenceSettings, once prepare() has seen it
        self.compared = "cosine"  # the similarity the last predictions were scored with

    def prepare(self, model, max_length: int | None) -> int:
        """The length: `max_length`, else the model's sentence-transformers length, else 128; and
        the model's sentence-transformers files made or updated for that length and pooling, so
        training, dev predictions and the saved folder all embed alike."""
        if max_length is None:
            saved = saved_max_length(STFiles(model.companion_files, "(the model's files)"), None, model.tokenizer)
            max_length = min(saved or self.length, model.backbone.embeddings.max_length)
        max_length = model_max_length(model, max_length)
        model.companion_files = sentence_files(model, max_length, self.pooling)
        _, self.sentence = prepared(model)
        return max_length

    def labels_of(self, examples) -> tuple[str, ...]:
        """No label names: the model has no outputs beyond its vectors."""
        return ()

    def _pairs(self, examples, source: str) -> bool:
        """Whether the pairs have scores; an example without a second text, scores or negatives
        on some pairs only, or a negative beside a score, is an error."""
        for n, e in enumerate(examples, 1):
            if not isinstance(e, TextExample) or not e.text_pair:
                raise BertkitError(f"{source}: example {n} is not a pair of texts (embedding needs text and text_pair)")
        scored = {e.label is not None for e in examples}
        if len(scored) > 1:
            raise BertkitError(f"{source}: some pairs have a score and some do not; give every pair one or none")
        if len({e.negative is not None for e in examples}) > 1:
            raise BertkitError(f"{source}: some pairs have a negative and some do not; give every pair one or none")
        if scored == {True} and examples[0].negative is not None:
            raise BertkitError(f"{source}: a negative is for pairs without a score (a scored pair says how "
                               "similar it is itself)")
        if any(e.label is not None and not isinstance(e.label, (int, float)) for e in examples):
            raise BertkitError(f"{source}: similarity scores must be numbers")
        return scored == {True}

    def features(self, examples, tokenizer, labels, max_length, source):
        self._pairs(examples, source)
        if len(examples) < 2:  # both losses compare a pair with others: one alone has no gradient
            raise BertkitError(f"{source}: embedding needs at least two training pairs, got {len(examples)}")
        features, cut = encode_pairs(examples, tokenizer, self.sentence, max_length)
        report_truncated(cut, sum(len(example_texts(e)) for e in examples), max_length)
        return features

    def objective(self, model):
        return PairObjective(model, self.sentence)

    def check_gold(self, examples, labels, source):
        scored = self._pairs(examples, source)
        self.metrics = ("spearman", "pearson") if scored else ("accuracy", "mrr")
        self.metric = self.metrics[0] if scored else "mrr"

    def snapshot(self, model) -> dict:
        """The model's weights and its Dense modules' (trained too)."""
        state = super().snapshot(model)
        return {"model": state, "after": {k: v.detach().to("cpu", copy=True)
                                          for k, v in self.sentence.after.state_dict().items()}}

    def restore(self, model, state: dict) -> None:
        """Both back, and the Dense weights into the files the model is saved with."""
        super().restore(model, state["model"])
        with torch.no_grad():
            self.sentence.after.load_state_dict(state["after"])
        model.companion_files = with_dense_weights(model.companion_files, self.sentence.after)

    def predict(self, model, examples, batch_size=64, max_length=None, bf16=False, progress=False):
        """{"score": the similarity of the pair's two vectors, "vectors": the two vectors} per pair
        (the vectors are what retrieval scores are computed from), as sentence-transformers'
        evaluators compute them: the vectors its encode gives (normalized where the folder says)
        compared by the folder's similarity_fn_name (cosine unless it names dot, euclidean or
        manhattan). Pairs without scores are a retrieval: their first texts are read with the
        model's "query" prompt and the others with its "document" prompt, as the retrieval
        evaluator's encode_query and encode_document read them (scored pairs: the default prompt,
        as the similarity evaluator's encode). In training, the Dense modules being trained;
        otherwise the model's own."""
        if self.sentence is not None and (max_length is None or max_length == self.sentence.max_length):
            settings = self.sentence
        else:
            model, settings = prepared(model, max_length=max_length)
        self.compared = settings.similarity
        retrieval = all(isinstance(e, TextExample) and e.label is None for e in examples)
        sides = [settings.with_prompt("query"), settings.with_prompt("document")] if retrieval else [settings] * 2
        vectors = {}  # (side, text) -> vector: side 0 the first texts, 1 the rest
        for side, read in enumerate(sides):
            texts = sorted({t for e in examples for k, t in enumerate(example_texts(e)) if min(k, 1) == side})
            vectors.update(zip(((side, t) for t in texts), _embed(model, texts, read, batch_size, None, progress,
                                                                  bf16)))
        results = []
        for e in examples:
            own = [vectors[min(k, 1), t] for k, t in enumerate(example_texts(e))]
            score = similarity(own[0][None], own[1][None], self.compared).item()
            results.append({"score": score, "vectors": [v.numpy() for v in own]})
        return results

    def score(self, examples, predictions, labels):
        if self._pairs(examples, "evaluation data"):
            scores = regression_scores([e.label for e in examples], [p["score"] for p in predictions])
            return {"spearman": scores["spearman"], "pearson": scores["pearson"]}
        candidates = {}  # text -> unit vector: every second text, then every negative
        for k in (1, 2):
            candidates.update({example_texts(e)[k]: p["vectors"][k]
                               for e, p in zip(examples, predictions) if k < len(p["vectors"])})
        queries, relevant = {}, {}  # a text asked in several rows is one query with each row's answer
        for e, p in zip(examples, predictions):
            queries[e.text] = p["vectors"][0]
            relevant.setdefault(e.text, set()).add(e.text_pair)
        return retrieval_scores(queries, candidates, relevant, self.compared)


def retrieval_scores(queries: dict[str, np.ndarray], candidates: dict[str, np.ndarray],
                     relevant: dict[str, set[str]], compared: str = "cosine") -> dict[str, float]:
    """Each query (text -> vector) searches the candidates (text -> vector) by the similarity
    `compared` (the folder's similarity_fn_name), and its `relevant` texts are right, as
    sentence-transformers' InformationRetrievalEvaluator counts its relevant_docs: accuracy = how
    often a right text ranks first, mrr = the mean of 1 / the rank of the first right one (0
    beyond rank 10). A query with two right answers scores 1 when either ranks first (one row per
    answer scored 0.5 for a perfect ranking). Candidates that tie with the best right one rank
    before it, so a collapsed model that gives every text the same vector scores worst, not best
    (sentence-transformers' evaluator breaks ties by corpus order instead)."""
    position = {t: i for i, t in enumerate(candidates)}
    corpus = torch.from_numpy(np.stack(list(candidates.values())))  # (M, H)
    sims = similarity(torch.from_numpy(np.stack(list(queries.values()))), corpus, compared).numpy()  # (Q, M)
    right = np.zeros(sims.shape, dtype=bool)
    for q, text in enumerate(queries):
        right[q, [position[t] for t in relevant[text]]] = True
    best = np.where(right, sims, -np.inf).max(1)  # (Q,) the best-placed right text
    rank = 1 + ((sims >= best[:, None]) & ~right).sum(1)  # 1 = first
    reciprocal = np.where(rank <= MRR_AT, 1.0 / rank, 0.0)
    return {"accuracy": float(np.mean(rank == 1)), "mrr": float(reciprocal.mean())}
