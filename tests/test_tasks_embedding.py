"""The `embedding` fine-tuning task: its two losses and their gradients against
sentence-transformers', training that measurably improves, folders sentence-transformers loads
and embeds alike, dev scores against scipy and sentence-transformers' search, and bad input."""

from __future__ import annotations

import csv
import json
import random
import warnings

import numpy as np
import pytest
import torch

from bertkit.cli import main
from bertkit.errors import BertkitError
from bertkit.tasks import Columns, FinetuneSettings, TextExample, embed, evaluate, finetune, load_examples
from bertkit.tasks.contrastive import PairObjective, SentenceEmbedding, collate_pairs, encode_pairs
from bertkit.tasks.finetune import load_model
from tasks_support import FAST_BF16, add_dense, copy_of, minilm_lower_layers
from test_embed_cli import st_folder

pytestmark = pytest.mark.filterwarnings("ignore::bertkit.data.DataWarning")


def halves(split: str, n: int) -> list[TextExample]:
    """Rotten Tomatoes sentences cut in two: the first half's pair is its own second half."""
    out = []
    for record in load_examples("classification", "rotten-tomatoes", split):
        words = record.text.split()
        if len(words) >= 10:
            out.append(TextExample(" ".join(words[:len(words) // 2]), " ".join(words[len(words) // 2:])))
        if len(out) == n:
            return out
    return out


def scored(split: str, n: int) -> list[TextExample]:
    """Pairs of Rotten Tomatoes sentences (a seeded sample: the split is grouped by label) scored
    1 when they share a sentiment, else 0, and 0.5 for a sentence and its own second half, so
    three levels."""
    records = random.Random(0).sample(load_examples("classification", "rotten-tomatoes", split), 2 * n)
    out = []
    for i, (a, b) in enumerate(zip(records[::2], records[1::2])):
        if i % 5 == 0:
            words = a.text.split()
            out.append(TextExample(a.text, " ".join(words[len(words) // 2:]) or a.text, 0.5))
        else:
            out.append(TextExample(a.text, b.text, 1.0 if a.label == b.label else 0.0))
    return out


def with_negatives(examples: list[TextExample]) -> list[TextExample]:
    """Each pair gets a hard negative: the next pair's second half."""
    return [TextExample(e.text, e.text_pair, negative=examples[(i + 1) % len(examples)].text_pair)
            for i, e in enumerate(examples)]


def write_csv(path, rows, header=("text", "text_pair", "label")):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def sentence_transformer(path):
    from sentence_transformers import SentenceTransformer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return SentenceTransformer(str(path), device="cpu")


@pytest.mark.parametrize("kind", ["pairs", "negatives", "scores", "dense"])
def test_losses_and_gradients_match_sentence_transformers(minilm_dir, tmp_path, kind):
    from sentence_transformers.sentence_transformer import losses

    examples = {"pairs": halves("dev", 8), "negatives": with_negatives(halves("dev", 8)),
                "scores": scored("dev", 8), "dense": halves("dev", 8)}[kind]
    folder = minilm_dir
    if kind == "dense":  # a Dense module after the pooling: trained too, as sentence-transformers trains it
        folder = copy_of(minilm_dir, tmp_path)
        add_dense(folder, "2_Dense", 384, 64, 0)
    st = sentence_transformer(folder).eval()  # dropout off on both sides
    model = load_model(folder).eval()
    task = SentenceEmbedding()
    max_length = task.prepare(model, None)
    assert max_length == st.max_seq_length == 256
    features, _ = encode_pairs(examples, model.tokenizer, task.sentence, max_length)
    ours = PairObjective(model, task.sentence)(collate_pairs(features, model.tokenizer.pad_token_id)).loss
    loss = losses.CoSENTLoss(st) if kind == "scores" else losses.MultipleNegativesRankingLoss(st)
    columns = [st.tokenize([getattr(e, field) for e in examples]) for field in ("text", "text_pair", "negative")
               if getattr(examples[0], field) is not None]
    reference = loss(columns, torch.tensor([float(e.label or 0) for e in examples]))
    assert ours.item() == pytest.approx(reference.item(), abs=1e-5)
    ours.backward()
    reference.backward()
    grad = model.backbone.embeddings.word.weight.grad
    ref_grad = st[0].auto_model.embeddings.word_embeddings.weight.grad
    assert ref_grad.abs().max() > 0
    assert (grad - ref_grad).abs().max() <= 1e-5 * ref_grad.abs().max() + 1e-7
    if kind == "dense":
        grad, ref_grad = task.sentence.after[0].linear.weight.grad, st[2].linear.weight.grad
        assert ref_grad.abs().max() > 0
        assert (grad - ref_grad).abs().max() <= 1e-5 * ref_grad.abs().max() + 1e-7


def test_dense_modules_are_trained_and_the_best_ones_saved(minilm_dir, tmp_path):
    from safetensors.torch import load_file

    from bertkit.interop.hf import companion_files

    folder = copy_of(minilm_dir, tmp_path)
    add_dense(folder, "2_Dense", 384, 64, 0)
    model = minilm_lower_layers(minilm_dir, None)
    model.companion_files = companion_files(folder)
    pairs = halves("train", 64)
    out = tmp_path / "out"
    metrics = finetune("embedding", model, pairs, pairs, out,
                       FinetuneSettings(epochs=2, lr=2e-4, batch_size=16, max_length=40, progress=False))
    before, after = (load_file(str(f / "2_Dense" / "model.safetensors")) for f in (folder, out))
    assert (before["linear.weight"] - after["linear.weight"]).abs().max() > 1e-4
    # the saved Dense weights are the best evaluation's, which the saved folder scores again
    assert evaluate(out, None, pairs, progress=False)["mrr"] == pytest.approx(metrics["mrr"], abs=1e-6)
    texts = [e.text for e in pairs[:10]]
    reference = torch.from_numpy(sentence_transformer(out).encode(texts))
    assert reference.shape == (10, 64) and (embed(out, texts) - reference).abs().max() < 1e-5


@pytest.fixture(scope="module")
def trained(minilm_dir, tmp_path_factory):
    """Two MiniLM blocks (no sentence-transformers files) trained for three epochs with in-batch
    negatives to find each half sentence's other half, scored on the pairs it was shown: whether
    the loss teaches what it should, in seconds (a 30-step run barely moves held-out retrieval;
    the README has the full model's held-out numbers)."""
    out = tmp_path_factory.mktemp("embedding")
    pairs = halves("train", 160)
    torch.manual_seed(0)
    untrained = evaluate(minilm_lower_layers(minilm_dir, None), "embedding", pairs, progress=False)
    metrics = finetune("embedding", minilm_lower_layers(minilm_dir, None), pairs, pairs, out,
                       FinetuneSettings(epochs=3, lr=2e-4, batch_size=16, max_length=48, progress=False,
                                        bf16=FAST_BF16))
    return out, pairs, untrained, metrics


def test_in_batch_negatives_teach_retrieval(trained):
    out, dev, untrained, metrics = trained
    assert metrics["mrr"] > untrained["mrr"] + 0.2, (untrained, metrics)
    assert metrics["accuracy"] > untrained["accuracy"] + 0.2
    assert json.loads((out / "task.json").read_text())["metric"] == "mrr"
    again = evaluate(out, None, dev, progress=False)  # task and length from task.json
    assert again["mrr"] == pytest.approx(metrics["mrr"], abs=1e-6)


def test_the_saved_folder_embeds_alike_in_sentence_transformers(trained):
    out, dev, _, _ = trained
    modules = [m["type"].rpartition(".")[2] for m in json.loads((out / "modules.json").read_text())]
    assert modules == ["Transformer", "Pooling", "Normalize"]
    st = sentence_transformer(out)
    assert st.max_seq_length == 48
    texts = [e.text for e in dev[:20]] + ["a sentence well over forty-eight tokens long " * 12]
    ours = embed(out, texts)
    reference = torch.from_numpy(st.encode(texts))
    assert (ours - reference).abs().max() < 1e-5


def test_scored_pairs_train_with_cls_pooling_into_a_folder_sentence_transformers_reads(minilm_dir, tmp_path):
    pairs = scored("train", 64)
    model = minilm_lower_layers(minilm_dir, None, layers=1)
    untrained = evaluate(model, "embedding", pairs, pooling="cls", progress=False)
    metrics = finetune("embedding", model, pairs, pairs, tmp_path,
                       FinetuneSettings(epochs=5, lr=2e-4, batch_size=16, max_length=40, progress=False,
                                        pooling="cls", bf16=FAST_BF16))
    assert "mrr" not in metrics and metrics["spearman"] > untrained["spearman"] + 0.15, (untrained, metrics)
    pooling = json.loads((tmp_path / "1_Pooling" / "config.json").read_text())
    assert pooling["pooling_mode_cls_token"] and not pooling["pooling_mode_mean_tokens"]
    texts = [e.text for e in pairs[:10]]
    reference = torch.from_numpy(sentence_transformer(tmp_path).encode(texts))
    assert (embed(tmp_path, texts) - reference).abs().max() < 1e-5


def test_dev_scores_match_scipy_and_sentence_transformers_search(minilm_dir, tmp_path):
    from scipy.stats import pearsonr, spearmanr
    from sentence_transformers.util import cos_sim, semantic_search

    st = sentence_transformer(minilm_dir)
    pairs = scored("test", 40)
    ours = evaluate(minilm_dir, "embedding", pairs, progress=False)
    cosines = cos_sim(st.encode([e.text for e in pairs], convert_to_tensor=True),
                      st.encode([e.text_pair for e in pairs], convert_to_tensor=True)).diagonal().numpy()
    gold = [e.label for e in pairs]
    assert ours["spearman"] == pytest.approx(spearmanr(gold, cosines)[0], abs=1e-4)
    assert ours["pearson"] == pytest.approx(pearsonr(gold, cosines)[0], abs=1e-4)

    examples = halves("test", 60)
    examples.append(TextExample("an extra first half", examples[0].text_pair))  # a second text twice: one candidate
    words = [e.text_pair.split() for e in examples]  # hard negatives: each second half's words reversed
    negatives = [TextExample(e.text, e.text_pair, negative=" ".join(w[::-1])) for e, w in zip(examples, words)]
    for data in (examples, negatives):  # the negatives join the candidates
        ours = evaluate(minilm_dir, "embedding", data, progress=False)
        corpus = list(dict.fromkeys([e.text_pair for e in data] + [e.negative for e in data if e.negative]))
        hits = semantic_search(st.encode([e.text for e in data], convert_to_tensor=True),
                               st.encode(corpus, convert_to_tensor=True), top_k=10)
        ranks = [next((r for r, h in enumerate(found, 1) if corpus[h["corpus_id"]] == e.text_pair), None)
                 for e, found in zip(data, hits)]
        assert ours["accuracy"] == pytest.approx(sum(r == 1 for r in ranks) / len(ranks))
        assert ours["mrr"] == pytest.approx(sum(1 / r for r in ranks if r) / len(ranks), abs=1e-6)
        assert 0 < ours["mrr"] < 1
    assert len(corpus) > 1.5 * len(examples)  # the negatives joined it


def test_pair_files_with_and_without_scores(tmp_path):
    plain = load_examples("embedding", write_csv(tmp_path / "p.csv", [("a b", "c d"), ("e", "f")],
                                                 ("text", "text_pair")))
    assert plain == [TextExample("a b", "c d"), TextExample("e", "f")]
    rows = [{"text": "a", "text_pair": "b", "label": 4.5}, {"text": "c", "text_pair": "d", "label": "1"}]
    (tmp_path / "s.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert [e.label for e in load_examples("embedding", tmp_path / "s.jsonl")] == [4.5, 1.0]
    triplets = load_examples("embedding", write_csv(tmp_path / "t.csv", [("a", "b", "c")], ("anchor", "pos", "neg")),
                             columns=Columns(text="anchor", text_pair="pos", negative="neg"))
    assert triplets == [TextExample("a", "b", negative="c")]


def test_sentence_transformers_anchor_positive_negative_columns_are_read_as_pairs(tmp_path):
    """sentence-transformers' standard layout, read where `text` / `text_pair` are not there."""
    triplets = write_csv(tmp_path / "t.csv", [("a", "b", "c")], ("anchor", "positive", "negative"))
    assert load_examples("embedding", triplets) == [TextExample("a", "b", negative="c")]
    (tmp_path / "p.jsonl").write_text('{"anchor": "a", "positive": "b"}\n')
    assert load_examples("embedding", tmp_path / "p.jsonl") == [TextExample("a", "b")]
    with pytest.raises(BertkitError, match="no column 'q'"):  # a named column is still the one read
        load_examples("embedding", triplets, columns=Columns(text="q"))


@pytest.mark.parametrize("rows, header, message", [
    ([("a", "b")], ("text", "label"), "no column 'text_pair'"),
    ([("a", "b", "1"), ("c", "", "0")], ("text", "text_pair", "label"), "line 3: column 'text_pair' is empty"),
    ([("a", "b", "x")], ("text", "text_pair", "label"), "line 2: label 'x' in column 'label' is not a number"),
    ([("a", "b", "c"), ("d", "e", " ")], ("text", "text_pair", "negative"), "line 3: column 'negative' is empty"),
    ([("a", "b"), ("", "e")], ("text", "text_pair"), "line 3: column 'text' is empty"),
])
def test_bad_pair_files_are_one_error_naming_the_line(tmp_path, rows, header, message):
    with pytest.raises(BertkitError, match=message):
        load_examples("embedding", write_csv(tmp_path / "d.csv", rows, header))


def test_scores_on_some_json_rows_only_are_refused(tmp_path):
    (tmp_path / "d.jsonl").write_text('{"text": "a", "text_pair": "b"}\n{"text": "c", "text_pair": "d", "label": 1}\n')
    with pytest.raises(BertkitError, match="line 2: has a 'label' but the first row has none"):
        load_examples("embedding", tmp_path / "d.jsonl")
    (tmp_path / "n.jsonl").write_text('{"text": "a", "text_pair": "b"}\n{"text": "c", "text_pair": "d", "negative": "e"}\n')
    with pytest.raises(BertkitError, match="line 2: has a 'negative' but the first row has none"):
        load_examples("embedding", tmp_path / "n.jsonl")


def test_unusable_settings_and_data_are_refused_before_training(minilm_dir, tmp_path):
    pairs = halves("dev", 4)
    with pytest.raises(BertkitError, match="batch_size >= 2"):
        finetune("embedding", minilm_dir, pairs, pairs, tmp_path / "a", FinetuneSettings(batch_size=1))
    with pytest.raises(BertkitError, match="truncation 'tail' is for classification"):
        finetune("embedding", minilm_dir, pairs, pairs, tmp_path / "a", FinetuneSettings(truncation="tail"))
    with pytest.raises(BertkitError, match="pooling is a setting of the embedding task, not of classification"):
        finetune("classification", minilm_dir, pairs, pairs, tmp_path / "a", FinetuneSettings(pooling="cls"))
    with pytest.raises(BertkitError, match="example 2 is not a pair"):
        finetune("embedding", minilm_dir, pairs, [pairs[0], TextExample("alone")], tmp_path / "c")
    with pytest.raises(BertkitError, match="some pairs have a score and some do not"):
        finetune("embedding", minilm_dir, pairs, [pairs[0], TextExample("x", "y", 1.0)], tmp_path / "d")
    with pytest.raises(BertkitError, match="some pairs have a negative and some do not"):
        finetune("embedding", minilm_dir, [pairs[0], *with_negatives(pairs[1:])], pairs, tmp_path / "d")
    with pytest.raises(BertkitError, match="a negative is for pairs without a score"):
        finetune("embedding", minilm_dir, [TextExample("x", "y", 1.0, "z")] * 2, pairs, tmp_path / "d")
    with pytest.raises(BertkitError, match="'imdb' is a sentiment data set; it has no text pairs for embedding"):
        finetune("embedding", minilm_dir, "imdb", "imdb", tmp_path / "e")
    with pytest.raises(BertkitError, match="early stopping cannot follow 'spearman' for embedding"):
        finetune("embedding", minilm_dir, pairs, pairs, tmp_path / "f", FinetuneSettings(metric="spearman"))
    mlm = minilm_lower_layers(minilm_dir, "mlm", layers=1)
    with pytest.raises(BertkitError, match="embedding needs an encoder without a head"):
        finetune("embedding", mlm, pairs, pairs, tmp_path / "g")
    assert not any((tmp_path / d).exists() and any((tmp_path / d).iterdir()) for d in "acdefg")


def test_finetune_command_trains_embeddings(minilm_dir, tmp_path, capsys):
    train = write_csv(tmp_path / "train.csv", [(e.text, e.text_pair) for e in halves("train", 40)],
                      ("text", "text_pair"))
    dev = write_csv(tmp_path / "dev.csv", [(e.text, e.text_pair, e.label) for e in scored("dev", 30)])
    model = minilm_lower_layers(minilm_dir, None, layers=1)
    model.save_pretrained(tmp_path / "base")
    code = main(["finetune", "--task", "embedding", "--model", str(tmp_path / "base"), "--train", str(train),
                 "--eval", str(dev), "--out", str(tmp_path / "out"), "--steps", "2", "--batch-size", "8",
                 "--max-length", "32", "--pooling", "cls", "--precision", "fp32", "--no-progress"])
    assert code in (0, None)
    metrics = json.loads(capsys.readouterr().out)
    assert set(metrics) >= {"spearman", "pearson"}  # the dev pairs are scored, the training pairs not
    assert json.loads((tmp_path / "out" / "sentence_bert_config.json").read_text())["max_seq_length"] == 32


def test_a_collapsed_model_scores_worst_not_best_in_retrieval():
    from bertkit.tasks.contrastive import retrieval_scores

    same = np.ones(4, dtype=np.float32) / 2  # every text the same unit vector: ties everywhere
    scores = retrieval_scores({"x": same, "y": same, "z": same}, {"a": same, "b": same, "c": same},
                              {"x": {"a"}, "y": {"b"}, "z": {"c"}})
    assert scores == {"accuracy": 0.0, "mrr": pytest.approx(1 / 3)}  # each right text ranks third of three


def test_a_query_asked_in_two_rows_is_one_query_with_two_right_answers(minilm_dir, tmp_path):
    # as sentence-transformers' InformationRetrievalEvaluator counts relevant_docs: row by row, a
    # perfect ranking of a query with two answers scored 0.5
    from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator

    pairs = halves("dev", 16)
    data = pairs + [TextExample(pairs[0].text, pairs[1].text_pair), TextExample(pairs[2].text, pairs[5].text_pair)]
    folder = st_folder(minilm_dir, tmp_path / "st")
    asked = list(dict.fromkeys(e.text for e in data))
    corpus = list(dict.fromkeys(e.text_pair for e in data))
    relevant = {str(asked.index(e.text)): set() for e in data}
    for e in data:
        relevant[str(asked.index(e.text))].add(corpus.index(e.text_pair))
    r = InformationRetrievalEvaluator({str(i): t for i, t in enumerate(asked)}, dict(enumerate(corpus)), relevant,
                                      write_csv=False)(sentence_transformer(folder))
    ours = evaluate(folder, "embedding", data, progress=False)
    assert {k: ours[k] for k in ("accuracy", "mrr")} == pytest.approx(
        {"accuracy": r["cosine_accuracy@1"], "mrr": r["cosine_mrr@10"]}, abs=1e-5)


def test_retrieval_reads_queries_and_documents_with_their_prompts_as_sentence_transformers(minilm_dir, tmp_path):
    # the retrieval evaluator encodes queries with the "query" prompt and the corpus with the
    # "document" one (E5 / BGE folders); bertkit read both without: 0.115 against 0.165 accuracy
    from scipy.stats import spearmanr
    from sentence_transformers.sentence_transformer.evaluation import (EmbeddingSimilarityEvaluator,
                                                                        InformationRetrievalEvaluator)

    folder = st_folder(minilm_dir, tmp_path / "st", prompts={"query": "query: ", "document": "passage: "})
    pairs, rated = halves("dev", 24), scored("dev", 24)
    corpus = list(dict.fromkeys(e.text_pair for e in pairs))
    r = InformationRetrievalEvaluator({str(i): e.text for i, e in enumerate(pairs)}, dict(enumerate(corpus)),
                                      {str(i): {corpus.index(e.text_pair)} for i, e in enumerate(pairs)},
                                      write_csv=False)(sentence_transformer(folder))
    ours = evaluate(folder, "embedding", pairs, progress=False)
    assert {k: ours[k] for k in ("accuracy", "mrr")} == pytest.approx(
        {"accuracy": r["cosine_accuracy@1"], "mrr": r["cosine_mrr@10"]}, abs=1e-5)
    s = EmbeddingSimilarityEvaluator([e.text for e in rated], [e.text_pair for e in rated], [e.label for e in rated],
                                     write_csv=False)(sentence_transformer(folder))  # scored pairs: no prompt
    ours = evaluate(folder, "embedding", rated, progress=False, predictions=tmp_path / "p.jsonl")
    assert {k: ours[k] for k in ("spearman", "pearson")} == pytest.approx(
        {"spearman": s["spearman_cosine"], "pearson": s["pearson_cosine"]}, abs=1e-5)
    each = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]  # each pair's cosine
    assert [(r["text"], r["text_pair"], r["gold"]) for r in each] == [(e.text, e.text_pair, e.label) for e in rated]
    assert spearmanr([r["score"] for r in each], [r["gold"] for r in each])[0] == pytest.approx(ours["spearman"])


def test_one_training_pair_is_refused(minilm_dir, tmp_path):
    pairs = halves("dev", 3)
    with pytest.raises(BertkitError, match="embedding needs at least two training pairs, got 1"):
        finetune("embedding", minilm_dir, pairs[:1], pairs, tmp_path)


def test_dev_evaluations_leave_dropout_on_for_the_rest_of_training(minilm_dir, tmp_path, monkeypatch):
    model = minilm_lower_layers(minilm_dir, None, layers=1).train()
    embed(model, ["a text", "another"])
    assert model.training  # embed() puts back the mode it found
    modes, forward = [], PairObjective.forward

    def recording(self, batch):
        modes.append(self.model.training)
        return forward(self, batch)

    monkeypatch.setattr(PairObjective, "forward", recording)
    pairs = halves("train", 32)
    finetune("embedding", model, pairs, pairs[:8], tmp_path,
             FinetuneSettings(steps=4, eval_every=1, batch_size=8, max_length=24, progress=False))
    assert modes == [True] * 4


def test_a_sentence_transformers_folder_is_evaluated_as_embeddings_without_naming_the_task(minilm_dir):
    pairs = scored("test", 12)
    assert evaluate(minilm_dir, None, pairs, progress=False) == evaluate(minilm_dir, "embedding", pairs, progress=False)


def test_truncate_dim_is_followed_in_dev_scores_and_kept_by_the_fine_tuned_folder(minilm_dir, tmp_path):
    """sentence-transformers' evaluators score model.encode's vectors, which truncate_dim cuts (its
    losses see them whole): bertkit's dev scores are theirs, and the fine-tuned folder keeps
    truncate_dim, so both embed it alike."""
    from sentence_transformers.base.modules import Normalize
    from sentence_transformers.sentence_transformer.evaluation import (EmbeddingSimilarityEvaluator,
                                                                        InformationRetrievalEvaluator)

    def reference_scores(path, data):
        st = sentence_transformer(path)
        if data[0].label is not None:
            s = EmbeddingSimilarityEvaluator([e.text for e in data], [e.text_pair for e in data],
                                             [e.label for e in data], write_csv=False)(st)
            return {"spearman": s["spearman_cosine"], "pearson": s["pearson_cosine"]}
        corpus = list(dict.fromkeys(e.text_pair for e in data))
        s = InformationRetrievalEvaluator({str(i): e.text for i, e in enumerate(data)}, dict(enumerate(corpus)),
                                          {str(i): {corpus.index(e.text_pair)} for i, e in enumerate(data)},
                                          write_csv=False)(st)
        return {"accuracy": s["cosine_accuracy@1"], "mrr": s["cosine_mrr@10"]}

    folder = st_folder(minilm_dir, tmp_path / "st", after=[Normalize()], truncate_dim=8)
    pairs, rated = halves("dev", 24), scored("dev", 24)
    for data in (rated, pairs):
        ours, theirs = evaluate(folder, "embedding", data, progress=False), reference_scores(folder, data)
        assert {k: ours[k] for k in theirs} == pytest.approx(theirs, abs=1e-5)
    out = tmp_path / "out"
    metrics = finetune("embedding", folder, halves("train", 32), pairs, out,
                       FinetuneSettings(steps=2, batch_size=8, lr=1e-3, progress=False))
    assert json.loads((out / "config_sentence_transformers.json").read_text())["truncate_dim"] == 8
    assert {k: metrics[k] for k in ("accuracy", "mrr")} == pytest.approx(reference_scores(out, pairs), abs=1e-5)
    texts = [e.text for e in pairs[:6]]
    reference = torch.from_numpy(sentence_transformer(out).encode(texts))
    assert reference.shape == (6, 8) and (embed(out, texts) - reference).abs().max() < 1e-5


@pytest.mark.parametrize("compared", ["dot", "euclidean"])
def test_dev_scores_compare_vectors_by_the_folders_similarity_as_sentence_transformers(compared, minilm_dir,
                                                                                        tmp_path):
    """sentence-transformers' evaluators compare model.encode's vectors (here not normalized: no
    Normalize module) by the model's similarity_fn_name: so do bertkit's dev scores."""
    from sentence_transformers.sentence_transformer.evaluation import (EmbeddingSimilarityEvaluator,
                                                                        InformationRetrievalEvaluator)

    folder = st_folder(minilm_dir, tmp_path / "st", similarity_fn_name=compared)
    st = sentence_transformer(folder)
    rated, pairs = scored("dev", 24), halves("dev", 24)
    s = EmbeddingSimilarityEvaluator([e.text for e in rated], [e.text_pair for e in rated], [e.label for e in rated],
                                     write_csv=False)(st)
    corpus = list(dict.fromkeys(e.text_pair for e in pairs))
    r = InformationRetrievalEvaluator({str(i): e.text for i, e in enumerate(pairs)}, dict(enumerate(corpus)),
                                      {str(i): {corpus.index(e.text_pair)} for i, e in enumerate(pairs)},
                                      write_csv=False)(st)
    theirs = {"spearman": s[f"spearman_{compared}"], "pearson": s[f"pearson_{compared}"],
              "accuracy": r[f"{compared}_accuracy@1"], "mrr": r[f"{compared}_mrr@10"]}
    ours = {**evaluate(folder, "embedding", rated, progress=False), **evaluate(folder, "embedding", pairs, progress=False)}
    assert {k: ours[k] for k in theirs} == pytest.approx(theirs, abs=1e-5)


def test_finetune_pooling_replaces_the_folders_own_as_embed_does(minilm_dir, tmp_path, capsys):
    """--pooling given for a folder whose Pooling module bertkit cannot run (max) trains with it,
    says so once, and saves a folder whose Pooling module says it; without it the error names the
    folder's file on disk."""
    folder = st_folder(minilm_dir, tmp_path / "max", pooling="max")
    train = write_csv(tmp_path / "train.csv", [(e.text, e.text_pair) for e in halves("train", 16)],
                      ("text", "text_pair"))
    dev = write_csv(tmp_path / "dev.csv", [(e.text, e.text_pair) for e in halves("dev", 8)], ("text", "text_pair"))
    argv = ["finetune", "--task", "embedding", "--model", str(folder), "--train", str(train), "--eval", str(dev),
            "--out", str(tmp_path / "out"), "--steps", "1", "--batch-size", "8", "--precision", "fp32",
            "--no-progress"]
    capsys.readouterr()
    assert main(argv) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"bertkit: error: {folder}/1_Pooling/config.json: pooling mode max is not one bertkit has (mean, cls); "
        "choose one with pooling= (--pooling)")
    assert main([*argv, "--pooling", "mean"]) in (0, None)
    warned = [line for line in capsys.readouterr().err.splitlines() if line.startswith("bertkit: warning: pooling")]
    assert warned == [f"bertkit: warning: pooling mean replaces the max pooling of {folder}/1_Pooling/config.json; "
                      "the fine-tuned folder is saved pooling by mean"]
    pooling = json.loads((tmp_path / "out" / "1_Pooling" / "config.json").read_text())
    assert pooling["pooling_mode"] == "mean"
    texts = [e.text for e in halves("dev", 4)]
    reference = torch.from_numpy(sentence_transformer(tmp_path / "out").encode(texts))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the saved folder pools by mean itself: nothing to say
        assert (embed(tmp_path / "out", texts) - reference).abs().max() < 1e-5
