"""`bertkit embed` and `embed()` given a model directory run it as the tool that made it does:
sentence-transformers' max_seq_length, Pooling module, truncate_dim, the module folder it runs and
the module types it accepts (checked against sentence-transformers itself), a fine-tuned model's
task.json length; a cut text is counted in one warning; a bad --max-length is one error line. And
`save_pretrained` onto a file is one error line."""

from __future__ import annotations

import json
import re
import shutil
import warnings

import pytest
import torch

import bertkit
from bertkit.cli import main
from conftest import randomize
from bertkit.errors import BertkitError
from bertkit.tasks import embed, search
from tasks_support import add_dense, copy_of

LONG = " ".join(f"sentence {i} goes on about the film's acting, plot and music" for i in range(30))  # > 256 tokens
SHORT = "A short review."
QUIET = pytest.mark.filterwarnings("ignore:.*were truncated")  # for tests that cut texts on purpose


def cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cosine_similarity(a, b, dim=-1)


def reference(directory, texts) -> torch.Tensor:
    from sentence_transformers import SentenceTransformer

    return torch.as_tensor(SentenceTransformer(str(directory), device="cpu").encode(texts, convert_to_numpy=True))


def st_folder(minilm_dir, path, pooling="mean", after=(), seed=0, max_seq_length=48, **settings):
    """A small sentence-transformers folder that sentence-transformers writes itself: a random
    2-layer, 32-wide BERT with MiniLM's tokenizer, its Pooling module (`pooling`), the modules
    `after` it (Dense, Normalize ...) and SentenceTransformer's `settings` (truncate_dim ...)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling
    from transformers import BertConfig, BertModel

    base = path.parent / f"{path.name}-base"
    bert = BertModel(BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                intermediate_size=64, max_position_embeddings=64))
    randomize(bert, seed)
    bert.save_pretrained(base)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(minilm_dir / name, base / name)
    modules = [Transformer(str(base), max_seq_length=max_seq_length), Pooling(32, pooling_mode=pooling), *after]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        SentenceTransformer(modules=modules, device="cpu", **settings).save(str(path))
    return path


def cli_vectors(capsys, *argv) -> tuple[torch.Tensor, str]:
    assert main(["embed", *map(str, argv)]) == 0
    out, err = capsys.readouterr()
    return torch.tensor([json.loads(line)["embedding"] for line in out.splitlines()]), err


def one_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("bertkit: error: "), err
    return err[0]


def test_a_long_text_embeds_at_the_models_own_length_like_sentence_transformers(minilm_dir, capsys):
    tokens = len(bertkit.load_tokenizer(minilm_dir).encode(LONG))
    assert 256 < tokens <= 512, tokens  # cut by max_seq_length 256, not by the 512 positions
    expected = reference(minilm_dir, [LONG, SHORT])
    with pytest.warns(UserWarning, match="1 of 2 texts were longer than 256 tokens and were truncated"):
        api = embed(str(minilm_dir), [LONG, SHORT])
    assert cosine(api, expected).min() > 0.9999 and (api - expected).abs().max() < 1e-5
    capsys.readouterr()  # transformers' loading bars
    cli, err = cli_vectors(capsys, "--model", minilm_dir, LONG, SHORT)
    assert cosine(cli, expected).min() > 0.9999 and (cli - expected).abs().max() < 1e-5
    assert cli.dtype == api.dtype == torch.float32 and torch.equal(cli, api)  # every digit, not 6 decimals
    assert err.strip() == "bertkit: warning: 1 of 2 texts were longer than 256 tokens and were truncated"
    hits = search(str(minilm_dir), [LONG], [SHORT, LONG], top_k=1)
    assert hits[0][0]["index"] == 1 and hits[0][0]["score"] == pytest.approx(1.0, abs=1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing cut, nothing said
        embed(str(minilm_dir), [SHORT])


@QUIET
def test_the_directorys_pooling_module_is_used(minilm_dir, tmp_path, capsys):
    folder = copy_of(minilm_dir, tmp_path)
    pooling = folder / "1_Pooling" / "config.json"
    config = json.loads(pooling.read_text())
    pooling.write_text(json.dumps({**config, "pooling_mode_mean_tokens": False, "pooling_mode_cls_token": True}))
    expected = reference(folder, [SHORT, LONG])
    got = embed(folder, [SHORT, LONG])
    assert cosine(got, expected).min() > 0.9999
    with pytest.warns(UserWarning, match=f"^pooling mean replaces the cls pooling of {pooling}; "
                                         "the vectors are not sentence-transformers' for this folder$"):
        chosen = embed(folder, [SHORT], pooling="mean")  # an explicit choice wins, said once
    assert cosine(chosen, expected[:1]).item() < 0.99
    capsys.readouterr()
    cli, _ = cli_vectors(capsys, "--model", folder, SHORT)  # the command follows the folder too
    assert cosine(cli, expected[:1]).item() > 0.9999

    pooling.write_text(json.dumps({**config, "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": True}))
    with pytest.raises(BertkitError, match="1_Pooling/config.json: pooling mode max is not one bertkit has"):
        embed(folder, [SHORT])
    with pytest.warns(UserWarning, match="pooling mean replaces the max pooling of"):
        assert embed(folder, [SHORT], pooling="mean").shape == (1, 384)


@QUIET
def test_a_fine_tuned_directory_embeds_at_its_task_length(minilm_dir, tmp_path):
    model = bertkit.from_pretrained(minilm_dir)
    plain = bertkit.from_pretrained(minilm_dir)
    plain.companion_files = {}
    plain.save_pretrained(tmp_path / "tuned")  # no sentence-transformers files: task.json's length
    model.save_pretrained(tmp_path / "tuned-st")  # its sentence-transformers length (256) wins
    for folder in ("tuned", "tuned-st"):
        (tmp_path / folder / "task.json").write_text(json.dumps({"max_length": 32}))
    with pytest.warns(UserWarning, match="longer than 32 tokens"):
        got = embed(tmp_path / "tuned", [LONG])
    assert torch.allclose(got, embed(model, [LONG], max_length=32), atol=1e-6)
    assert not torch.allclose(got, embed(model, [LONG], max_length=64), atol=1e-3)
    from sentence_transformers import SentenceTransformer

    reference = torch.from_numpy(SentenceTransformer(str(tmp_path / "tuned-st"), device="cpu").encode([LONG]))
    assert torch.allclose(embed(tmp_path / "tuned-st", [LONG]), reference, atol=1e-5)


@pytest.mark.parametrize("length", [-5, 0, 513])
def test_a_bad_max_length_is_one_error_line(length, minilm_dir, capsys):
    message = f"max length must be between 1 and the model's maximum of 512 tokens, got {length}"
    assert main(["embed", "--model", str(minilm_dir), "--max-length", str(length), SHORT]) == 2
    assert one_error(capsys).endswith(message)
    with pytest.raises(BertkitError, match=message):
        embed(bertkit.from_pretrained(minilm_dir), [SHORT], max_length=length)
    assert main(["embed", "--model", str(minilm_dir), "--max-length", "2", SHORT]) == 2
    assert "leaves no room for text beside the special tokens" in one_error(capsys)


def test_save_pretrained_onto_a_file_is_one_error_line(minilm_dir, tmp_path):
    model = bertkit.build("mini-bert")
    taken = tmp_path / "taken"
    taken.write_text("a file")
    with pytest.raises(BertkitError, match=f"^{taken}: a file, not a folder"):
        model.save_pretrained(taken)
    with pytest.raises(BertkitError, match=f"^{taken / 'sub'}: {taken} is a file, so no folder can be made"):
        model.save_pretrained(taken / "sub")
    assert taken.read_text() == "a file"


@QUIET
def test_a_roberta_model_embeds_a_long_text_at_its_real_maximum(minilm_dir):
    """RoBERTa's position table has two rows more than it takes tokens (fairseq's padding offset):
    a long text is cut to what the model takes, not to the table's size (which failed)."""
    tokenizer = bertkit.load_tokenizer(minilm_dir)
    config = bertkit.PRESETS["roberta-base"].config.replace(
        num_layers=1, hidden_size=32, num_heads=2, intermediate_size=32, max_positions=66,
        vocab_size=tokenizer.vocab_size, pad_token_id=1)
    model = bertkit.build(config)
    model.tokenizer = tokenizer
    assert model.backbone.embeddings.max_length == 64
    assert torch.equal(embed(model, [LONG]), embed(model, [LONG], max_length=64))


@QUIET
def test_dense_modules_after_pooling_run_as_in_sentence_transformers(minilm_dir, tmp_path, capsys):
    folder = copy_of(minilm_dir, tmp_path)
    add_dense(folder, "2_Dense", 384, 96, 0)  # tanh by default
    add_dense(folder, "3_Dense", 96, 48, 1, bias=False, use_residual=True,
              activation_function="torch.nn.modules.activation.GELU")
    expected = reference(folder, [SHORT, LONG])
    got = embed(folder, [SHORT, LONG])
    assert got.shape == (2, 48) and (got - expected).abs().max() < 1e-5
    raw = embed(folder, [SHORT, LONG], normalize=False)  # the folder's Normalize module left out
    assert (cosine(raw, expected) > 0.99999).all() and not torch.allclose(raw.norm(dim=-1), torch.ones(2))
    assert embed(folder, []).shape == (0, 48)
    hits = search(str(folder), [SHORT], [LONG, SHORT], top_k=1)
    assert hits[0][0]["index"] == 1
    capsys.readouterr()
    cli, _ = cli_vectors(capsys, "--model", folder, SHORT)
    assert (cli - expected[:1]).abs().max() < 1e-5


@pytest.mark.parametrize("change, message", [
    (lambda f: (f / "2_Dense" / "config.json").write_text(json.dumps(
        {"in_features": 384, "out_features": 8, "activation_function": "os.system"})),
     "activation_function 'os.system' is not a torch.nn module bertkit can make"),
    (lambda f: (f / "2_Dense" / "config.json").write_text(json.dumps({"in_features": 384, "out_features": 9})),
     "linear.bias has shape (8,), expected (9,)"),
    # sizes no memory holds: the file's shapes are checked first (48 GB were asked for, then the error blamed
    # --batch-size)
    (lambda f: (f / "2_Dense" / "config.json").write_text(json.dumps({"in_features": 384, "out_features": 10**11})),
     "linear.bias has shape (8,), expected (100000000000,)"),
    (lambda f: (f / "modules.json").write_text(json.dumps(
        json.loads((f / "modules.json").read_text()) + [{"path": "x", "type": "sentence_transformers.models.LSTM"}])),
     "module type 'sentence_transformers.models.LSTM' is not one bertkit runs"),
])
def test_sentence_transformers_modules_bertkit_cannot_run_are_one_error(change, message, minilm_dir, tmp_path):
    folder = copy_of(minilm_dir, tmp_path)
    add_dense(folder, "2_Dense", 384, 8, 0)
    change(folder)
    with pytest.raises(BertkitError, match=re.escape(message)):
        embed(folder, [SHORT])


@QUIET
def test_sentence_transformers_6_files_prompts_and_normalization_are_followed(minilm_dir, tmp_path):
    # sentence-transformers 6 writes pooling_mode (a string) and keeps the length as the
    # tokenizer's model_max_length; a default prompt goes before every text; without a Normalize
    # module the vectors stay raw. A Model loaded from the folder embeds as the folder does.
    folder = copy_of(minilm_dir, tmp_path)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(
        {"embedding_dimension": 384, "pooling_mode": "cls", "include_prompt": True}))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"do_lower_case": False}))
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**tokenizer_config, "model_max_length": 16}))
    (folder / "config_sentence_transformers.json").write_text(json.dumps(
        {"prompts": {"query": "query: ", "document": ""}, "default_prompt_name": "query"}))
    modules = json.loads((folder / "modules.json").read_text())
    (folder / "modules.json").write_text(json.dumps([m for m in modules if not m["type"].endswith("Normalize")]))
    texts = [SHORT, LONG, "The film was great."]
    expected = reference(folder, texts)
    assert not torch.allclose(expected.norm(dim=-1), torch.ones(3))
    for source in (folder, bertkit.from_pretrained(folder)):
        assert (embed(source, texts) - expected).abs().max() < 1e-4
    bertkit.from_pretrained(folder).save_pretrained(tmp_path / "copy")  # the length is saved back
    assert (reference(tmp_path / "copy", texts) - expected).abs().max() < 1e-5
    pooling = json.loads((folder / "1_Pooling" / "config.json").read_text())
    for mode in ("mean", "cls"):  # CLS: sentence-transformers masks [CLS] with the prompt and pools the next token
        (folder / "1_Pooling" / "config.json").write_text(json.dumps({**pooling, "pooling_mode": mode,
                                                                     "include_prompt": False}))
        with pytest.raises(BertkitError, match=r"leaves the prompt's tokens out \(include_prompt false\)"):
            embed(folder, texts)
    add_dense(folder, "2_Dense", 384, 8, 0)  # listed before the last module, here the Pooling
    with pytest.raises(BertkitError, match="a Dense module before the Pooling runs on every token"):
        embed(folder, texts, pooling="mean")


def test_do_lower_case_lowercases_texts_before_a_cased_tokenizer(minilm_dir, tmp_path):
    """sentence_bert_config.json's do_lower_case: sentence-transformers lowercases the texts itself
    (here in front of a tokenizer made case-sensitive, so the difference shows)."""
    folder = copy_of(minilm_dir, tmp_path)
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    tokenizer["normalizer"]["lowercase"] = False
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "do_lower_case": False}))
    settings = json.loads((folder / "sentence_bert_config.json").read_text())
    texts = ["The FILM Was GREAT", "Utterly Boring"]
    lowered = embed(folder, [t.lower() for t in texts])
    for lower in (False, True):
        (folder / "sentence_bert_config.json").write_text(json.dumps({**settings, "do_lower_case": lower}))
        got = embed(folder, texts)
        assert (got - reference(folder, texts)).abs().max() < 1e-5
        assert ((got - lowered).abs().max() < 1e-6) == lower  # the tokenizer alone keeps case


def test_a_tokenizer_whose_model_input_names_omit_token_types_embeds_alike(minilm_dir, tmp_path):
    """Its calls return no token_type_ids (as transformers' do); embedding asks for them."""
    folder = copy_of(minilm_dir, tmp_path)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    names = {"model_input_names": ["input_ids", "attention_mask"]}  # (as ModernBERT's say)
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, **names}))
    texts = ["The film was great", "Utterly boring"]
    assert (embed(folder, texts) - reference(folder, texts)).abs().max() < 1e-5


@QUIET
def test_a_loaded_sentence_transformers_folder_saves_back_whole(minilm_dir, tmp_path):
    """from_pretrained keeps sentence-transformers' files (settings, Pooling, Dense, Normalize) and
    save_pretrained writes them back: the copy embeds as the original, in bertkit and in
    sentence-transformers (without them a long text was cut at 512 tokens, cosine 0.77)."""
    folder = copy_of(minilm_dir, tmp_path)
    add_dense(folder, "2_Dense", 384, 32, 0)
    copy = tmp_path / "copy"
    bertkit.from_pretrained(folder).save_pretrained(copy)
    assert (copy / "2_Dense" / "model.safetensors").read_bytes() == (folder / "2_Dense" / "model.safetensors").read_bytes()
    expected = reference(folder, [LONG, SHORT])
    for got in (embed(copy, [LONG, SHORT]), reference(copy, [LONG, SHORT])):
        assert got.shape == (2, 32) and (got - expected).abs().max() < 1e-5


@pytest.mark.parametrize("name", ["dot", "euclidean", "manhattan"])
def test_search_ranks_by_the_folders_similarity_function_as_sentence_transformers(minilm_dir, tmp_path, name):
    from sentence_transformers import SentenceTransformer

    folder = copy_of(minilm_dir, tmp_path)  # without its Normalize module, so the functions disagree
    modules = json.loads((folder / "modules.json").read_text())
    (folder / "modules.json").write_text(json.dumps([m for m in modules if not m["type"].endswith("Normalize")]))
    (folder / "config_sentence_transformers.json").write_text(json.dumps({"similarity_fn_name": name}))
    corpus = ["A space opera with great effects.", "A dull courtroom drama.", "Cats sleep all day.",
              "The rocket left the planet at dawn.", "An orchestra played Mozart."]
    queries = ["a film about space travel", "a story about pets"]
    st = SentenceTransformer(str(folder), device="cpu")
    scores = st.similarity(st.encode(queries, convert_to_tensor=True), st.encode(corpus, convert_to_tensor=True))
    expected = scores.topk(3, dim=1)
    hits = search(folder, queries, corpus, top_k=3)
    assert [[h["index"] for h in row] for row in hits] == expected.indices.tolist()
    assert torch.allclose(torch.tensor([[h["score"] for h in row] for row in hits]), expected.values,
                          rtol=1e-4, atol=1e-4)


def test_named_prompts_and_search_prompts_as_sentence_transformers_gives_them(minilm_dir, tmp_path, capsys):
    # e5-style prompts with no default: encode(prompt_name=...), encode_query and encode_document
    # (which take "query" and "document", empty where the model names none) put them before the texts
    from sentence_transformers import SentenceTransformer

    folder = copy_of(minilm_dir, tmp_path)
    (folder / "config_sentence_transformers.json").write_text(json.dumps(
        {"prompts": {"query": "query: ", "passage": "passage: "}, "default_prompt_name": None}))
    st = SentenceTransformer(str(folder), device="cpu")
    corpus = ["A space opera with great effects.", "A dull courtroom drama.", "Cats sleep all day."]
    queries = ["a film about space travel", "a story about pets"]
    expected = torch.as_tensor(st.encode(queries, prompt_name="query"))
    assert (embed(folder, queries, prompt_name="query") - expected).abs().max() < 1e-5
    assert (embed(folder, queries) - torch.as_tensor(st.encode(queries))).abs().max() < 1e-5  # no default prompt
    scores = st.similarity(st.encode_query(queries, convert_to_tensor=True),
                           st.encode_document(corpus, convert_to_tensor=True))
    hits = search(folder, queries, corpus, top_k=3)
    got = torch.zeros_like(scores)
    for row, found in enumerate(hits):
        for h in found:
            got[row, h["index"]] = h["score"]
    assert torch.allclose(got, scores, atol=1e-5)
    assert (embed(folder, corpus, prompt_name="passage") - torch.as_tensor(st.encode(corpus, prompt_name="passage"))
            ).abs().max() < 1e-5
    with pytest.raises(BertkitError, match=r"no prompt named 'doc' \(its prompts: 'query', 'document', 'passage'\)"):
        embed(folder, queries, prompt_name="doc")
    vectors, _ = cli_vectors(capsys, "--model", str(folder), "--prompt-name", "query", *queries)
    assert (vectors - expected).abs().max() < 1e-5
    assert main(["embed", "--model", str(folder), "--prompt-name", "query", "--query", "space", SHORT]) == 2
    assert "--prompt-name is for embedding" in one_error(capsys)


def test_an_unknown_similarity_function_is_one_error_line(minilm_dir, tmp_path, capsys):
    folder = copy_of(minilm_dir, tmp_path)
    (folder / "config_sentence_transformers.json").write_text(json.dumps({"similarity_fn_name": "jaccard"}))
    assert main(["embed", "--model", str(folder), "--query", "space", SHORT, "Another text."]) == 2
    assert one_error(capsys).endswith("config_sentence_transformers.json: similarity_fn_name 'jaccard' is not "
                                      "one of cosine, dot, euclidean, manhattan")


def test_search_results_name_each_texts_line_in_the_input_file(minilm_dir, tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"  # empty lines are skipped, so an index alone would point one line off
    corpus.write_text("A film about the sea.\n\nA recipe for bread.\n\n\nA documentary about space travel.\n")
    assert main(["embed", "--model", str(minilm_dir), "--input", str(corpus), "--query", "rockets and astronauts",
                 "--top-k", "3"]) == 0
    hits = json.loads(capsys.readouterr().out.splitlines()[0])["results"]
    lines = corpus.read_text().splitlines()
    assert sorted(h["line"] for h in hits) == [1, 3, 6]
    assert all(lines[h["line"] - 1] == h["text"] for h in hits)
    assert hits[0]["text"] == "A documentary about space travel."
    assert main(["embed", "--model", str(minilm_dir), "--input", str(corpus)]) == 0  # and so does each vector
    assert [json.loads(line)["line"] for line in capsys.readouterr().out.splitlines()] == [1, 3, 6]
    corpus.write_text('A film about the sea.\n\n{"id": "space", "text": "A documentary about space travel."}\n')
    assert main(["embed", "--model", str(minilm_dir), "--input", str(corpus), "--query", "rockets"]) == 0
    hits = json.loads(capsys.readouterr().out)["results"]
    assert [(h.get("id"), h["line"]) for h in hits] == [("space", 3), (None, 1)]  # an input's id, as embed gives


def test_a_saved_copy_keeps_only_the_modules_own_files(minilm_dir, tmp_path):
    # a module folder was copied whole: a file dropped beside a module's config, or every file of
    # a module folder that links out of the model folder, ended up in every saved copy
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize

    folder = st_folder(minilm_dir, tmp_path / "st", after=[Normalize()])
    (folder / "1_Pooling" / "notes.txt").write_text("not the module's")
    bertkit.from_pretrained(folder).save_pretrained(tmp_path / "copy")
    saved = {str(p.relative_to(tmp_path / "copy")) for p in (tmp_path / "copy").rglob("*") if p.is_file()}
    assert {"1_Pooling/config.json", "2_Normalize/config.json"} <= saved and "1_Pooling/notes.txt" not in saved
    texts = ["a film about the sea", "bread"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = SentenceTransformer(str(folder), device="cpu").encode(texts)
    assert (embed(tmp_path / "copy", texts) - torch.from_numpy(reference)).abs().max() < 1e-5
    elsewhere = tmp_path / "elsewhere"
    shutil.move(folder / "2_Normalize", elsewhere)
    (elsewhere / "id_rsa").write_text("a private key")
    (folder / "2_Normalize").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(BertkitError, match="2_Normalize: a link to .*elsewhere, outside the model folder"):
        bertkit.from_pretrained(folder)
    # ... and so does a file of one, or of the folder itself (the key itself was copied into the save)
    (folder / "2_Normalize").unlink()
    shutil.move(elsewhere, folder / "2_Normalize")
    bertkit.from_pretrained(folder)
    config = (folder / "sentence_bert_config.json").read_text()
    (folder / "sentence_bert_config.json").unlink()
    (tmp_path / "id_rsa").write_text("a private key")
    (folder / "sentence_bert_config.json").symlink_to(tmp_path / "id_rsa")
    with pytest.raises(BertkitError, match="sentence_bert_config.json: a link to .*id_rsa, outside the model folder"):
        bertkit.from_pretrained(folder)
    # the Hub's cache links each file of a snapshot into the repo's blobs/: read as before
    repo = tmp_path / "hub" / "models--someone--st"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / "abc123").write_text(config)
    (folder / "sentence_bert_config.json").unlink()
    snapshot = repo / "snapshots" / ("0" * 40)
    snapshot.parent.mkdir()
    shutil.move(folder, snapshot)
    (snapshot / "sentence_bert_config.json").symlink_to(repo / "blobs" / "abc123")
    assert bertkit.from_pretrained(snapshot).companion_files["sentence_bert_config.json"] == config.encode()


@pytest.mark.parametrize("gzipped", [False, True])
def test_input_from_a_pipe_is_read_once(gzipped, minilm_dir, tmp_path, capsys):
    # `--input <(cmd)` names a pipe (/dev/fd/63): it was "no such file", and the gzip check read
    # its start before the lines were read
    import gzip
    import os
    import threading

    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    data = "great film\nbad one\n".encode()

    def write():
        with open(pipe, "wb") as f:
            f.write(gzip.compress(data) if gzipped else data)

    writer = threading.Thread(target=write, daemon=True)  # (left blocked if the pipe is never read)
    writer.start()
    assert main(["embed", "--model", str(minilm_dir), "--input", str(pipe)]) == 0
    writer.join()
    assert [json.loads(line)["text"] for line in capsys.readouterr().out.splitlines()] == ["great film", "bad one"]


def test_gzip_on_standard_input_is_read_as_its_text(minilm_dir, monkeypatch, capsys):
    import gzip
    import io

    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(gzip.compress(b"great film\nbad one\n"))))
    assert main(["embed", "--model", str(minilm_dir), "--input", "-"]) == 0
    assert [json.loads(line)["text"] for line in capsys.readouterr().out.splitlines()] == ["great film", "bad one"]
    # damaged, it is one line, as a damaged gzip file is (files read it the same way)
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(gzip.compress(b"great film\n")[:12])))
    assert main(["embed", "--model", str(minilm_dir), "--input", "-"]) == 2
    assert capsys.readouterr().err.startswith("bertkit: error: standard input: damaged gzip data (")


def test_input_lines_are_split_at_newlines_alone(minilm_dir, tmp_path, capsys):
    # form feeds (PDF text), U+2028, \v, \x1c and a lone \r sit inside lines: str.splitlines()
    # made eight inputs of these three lines, and cut a valid JSON line holding a raw U+2028
    texts = ["one\rtwo", "three\u2028four", "five\vsix\fseven\x1cend"]
    plain, jsonl = tmp_path / "lines.txt", tmp_path / "lines.jsonl"
    plain.write_text("\r\n".join(texts) + "\r\n", newline="")
    jsonl.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts), newline="")
    for source in (plain, jsonl):
        assert main(["embed", "--model", str(minilm_dir), "--input", str(source)]) == 0
        assert [json.loads(line)["text"] for line in capsys.readouterr().out.split("\n") if line] == texts


@QUIET
def test_a_folder_keeping_its_transformer_in_a_subfolder_loads_and_saves_as_sentence_transformers_does(
        minilm_dir, tmp_path):
    old = tmp_path / "old"  # the layout before sentence-transformers 2: the model's files in 0_Transformer/
    inner = old / "0_Transformer"
    inner.mkdir(parents=True)
    for f in minilm_dir.iterdir():
        if f.is_file() and f.name not in ("modules.json", "config_sentence_transformers.json", "README.md"):
            shutil.copy(f, inner / f.name)
    shutil.copytree(minilm_dir / "1_Pooling", old / "1_Pooling")
    shutil.copy(minilm_dir / "config_sentence_transformers.json", old)
    modules = json.loads((minilm_dir / "modules.json").read_text())
    modules[0]["path"] = "0_Transformer"
    (old / "modules.json").write_text(json.dumps(modules))
    (inner / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 32, "do_lower_case": False}))
    (old / "config.json").write_text(json.dumps({"__version__": "0.4.1"}))  # what those versions wrote at the top
    texts = [SHORT, LONG]
    expected = reference(old, texts)  # cut at the subfolder's 32 tokens: a length of its own, not the 256 default
    assert (cosine(expected, reference(minilm_dir, texts)) < 0.999).any()
    assert torch.allclose(embed(str(old), texts), expected, atol=1e-5)
    model = bertkit.from_pretrained(old)
    assert torch.allclose(embed(model, texts), expected, atol=1e-5)
    model.save_pretrained(tmp_path / "saved")  # written in the current layout, which sentence-transformers reads
    assert json.loads((tmp_path / "saved" / "modules.json").read_text())[0]["path"] == ""
    assert not (tmp_path / "saved" / "0_Transformer").exists()
    assert torch.allclose(reference(tmp_path / "saved", texts), expected, atol=1e-5)


def test_truncate_dim_keeps_the_dimensions_sentence_transformers_keeps(minilm_dir, tmp_path, capsys):
    """truncate_dim (SentenceTransformer(..., truncate_dim=8) saves it): encode, encode_query /
    encode_document and so search keep the first 8 dimensions, cut after every module, Normalize
    too (the cut vectors are not unit length); normalize_embeddings normalizes after the cut."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Dense, Normalize

    folder = st_folder(minilm_dir, tmp_path / "st", after=[Dense(32, 16, activation_function=torch.nn.Tanh()),
                                                           Normalize()], truncate_dim=8)
    st = SentenceTransformer(str(folder), device="cpu")
    texts = [SHORT, LONG, "The film was great.", "Rockets and stars."]
    expected = torch.as_tensor(st.encode(texts))
    assert expected.shape == (4, 8) and (expected.norm(dim=-1) < 0.99).all()
    with pytest.warns(UserWarning, match="longer than 48 tokens"):
        assert (embed(folder, texts) - expected).abs().max() < 1e-5
        assert (embed(bertkit.from_pretrained(folder), texts) - expected).abs().max() < 1e-5
        unit = torch.as_tensor(st.encode(texts, normalize_embeddings=True))
        assert (embed(folder, texts, normalize=True) - unit).abs().max() < 1e-5
        assert embed(folder, texts, normalize=False).shape == (4, 8)
    capsys.readouterr()
    cli, _ = cli_vectors(capsys, "--model", folder, *texts[2:])
    assert (cli - expected[2:]).abs().max() < 1e-5

    (folder / "config_sentence_transformers.json").write_text(json.dumps(  # dot: the cut vectors' lengths count
        {**json.loads((folder / "config_sentence_transformers.json").read_text()), "similarity_fn_name": "dot"}))
    st = SentenceTransformer(str(folder), device="cpu")
    queries, corpus = ["a film about space travel", "a dull story"], texts[2:] + ["A dull courtroom drama."]
    scores = st.similarity(st.encode_query(queries, convert_to_tensor=True),
                           st.encode_document(corpus, convert_to_tensor=True))
    hits = search(folder, queries, corpus, top_k=3)
    got = torch.tensor([[h["score"] for h in row] for row in hits])
    assert [[h["index"] for h in row] for row in hits] == scores.topk(3, dim=1).indices.tolist()
    assert torch.allclose(got, scores.topk(3, dim=1).values, atol=1e-5)
    assert main(["embed", "--model", str(folder), "--query", queries[0], "--top-k", "1", *corpus]) == 0
    best = json.loads(capsys.readouterr().out)["results"][0]
    assert best["index"] == hits[0][0]["index"] and best["score"] == pytest.approx(hits[0][0]["score"], abs=1e-6)

    (folder / "config_sentence_transformers.json").write_text(json.dumps({"truncate_dim": 0}))
    assert main(["embed", "--model", str(folder), SHORT]) == 2
    assert one_error(capsys).endswith("config_sentence_transformers.json: truncate_dim must be a positive whole "
                                      "number, got 0")


@QUIET
def test_a_transformer_in_a_subfolder_is_the_model_even_beside_one_at_the_top(minilm_dir, tmp_path):
    """modules.json's Transformer path names the folder sentence-transformers loads the model from,
    here enc/ (another model, cut at 16 tokens as its own files say) although the top holds a
    whole model too; it is loaded, embedded and saved back as that one."""
    folder = st_folder(minilm_dir, tmp_path / "st", seed=0)
    other = st_folder(minilm_dir, tmp_path / "other", seed=1, max_seq_length=16)
    texts = [SHORT, LONG]
    top = reference(folder, texts)
    (folder / "enc").mkdir()
    for name in ("config.json", "model.safetensors", "sentence_bert_config.json", "tokenizer.json",
                 "tokenizer_config.json"):
        shutil.copy(other / name, folder / "enc" / name)
    modules = json.loads((folder / "modules.json").read_text())
    modules[0]["path"] = "enc"
    (folder / "modules.json").write_text(json.dumps(modules))
    expected = reference(folder, texts)
    assert (expected - reference(other, texts)).abs().max() < 1e-5 and (cosine(expected, top) < 0.99).all()
    assert (embed(folder, texts) - expected).abs().max() < 1e-5
    model = bertkit.from_pretrained(folder)
    assert (embed(model, texts) - expected).abs().max() < 1e-5
    model.save_pretrained(tmp_path / "saved")  # the current layout: the model at the top, path ""
    assert json.loads((tmp_path / "saved" / "modules.json").read_text())[0]["path"] == ""
    assert not (tmp_path / "saved" / "enc").exists()
    for got in (reference(tmp_path / "saved", texts), embed(tmp_path / "saved", texts)):
        assert (got - expected).abs().max() < 1e-5


def test_module_types_are_the_ones_sentence_transformers_resolves_not_just_their_last_name(
        minilm_dir, tmp_path, capsys):
    """sentence-transformers imports a module by its whole type: its own under the names it has
    written (models.Normalize before 5.4, base.modules.normalize.Normalize in 6.2 ...), and a
    class of someone else's (my_package.layers.Normalize) only as trusted custom code, which
    bertkit refuses rather than running its own Normalize in its place."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling
    from sentence_transformers.util.misc import import_module_class

    folder = st_folder(minilm_dir, tmp_path / "st", after=[Normalize()])
    modules = json.loads((folder / "modules.json").read_text())
    texts = [SHORT, "The film was great."]
    expected = reference(folder, texts)
    (folder / "modules.json").write_text(json.dumps(  # as sentence-transformers before 5.4 wrote them
        [{**m, "type": f"sentence_transformers.models.{m['type'].rpartition('.')[2]}"} for m in modules]))
    assert (reference(folder, texts) - expected).abs().max() < 1e-6
    assert (embed(folder, texts) - expected).abs().max() < 1e-5

    for entry, written in ((-1, "my_package.layers.Normalize"), (0, "my_package.Transformer")):
        custom = [dict(m) for m in modules]
        custom[entry]["type"] = written
        (folder / "modules.json").write_text(json.dumps(custom))
        with pytest.raises(ValueError, match="not part of Sentence Transformers"):
            SentenceTransformer(str(folder), device="cpu")
        message = f"{folder}/modules.json: module type '{written}' is custom code, not a sentence-transformers module"
        with pytest.raises(BertkitError, match=re.escape(message)):
            embed(folder, texts)
        capsys.readouterr()  # sentence-transformers' loading bars
        assert main(["embed", "--model", str(folder), SHORT]) == 2
        assert message in one_error(capsys)

    from bertkit.interop.hf import ST_MODULE_TYPES

    classes = {"Transformer": Transformer, "Pooling": Pooling, "Dense": Dense, "Normalize": Normalize}
    for written, kind in ST_MODULE_TYPES.items():  # each spelling bertkit takes is that module in sentence-transformers
        assert import_module_class(written, str(folder)) is classes[kind], written


def test_a_modules_json_without_a_pooling_module_is_refused_as_sentence_transformers_fails_on_it(
        minilm_dir, tmp_path, capsys):
    """Transformer alone gives sentence-transformers token vectors but no sentence vector (encode
    fails): bertkit does not invent one (mean, unnormalized, as it did) unless pooling is asked
    for, which it then follows with a warning."""
    from sentence_transformers import SentenceTransformer

    folder = st_folder(minilm_dir, tmp_path / "st")
    modules = json.loads((folder / "modules.json").read_text())
    (folder / "modules.json").write_text(json.dumps(modules[:1]))
    texts = [SHORT, "The film was great."]
    st = SentenceTransformer(str(folder), device="cpu")
    with pytest.raises(KeyError, match="sentence_embedding"):
        st.encode(texts)
    message = f"{folder}/modules.json lists no Pooling module, so sentence-transformers makes no sentence vector"
    with pytest.raises(BertkitError, match=re.escape(message)):
        embed(folder, texts)
    with pytest.raises(BertkitError, match=re.escape(message)):
        search(folder, ["a film"], texts)
    capsys.readouterr()
    assert main(["embed", "--model", str(folder), SHORT]) == 2
    assert message in one_error(capsys)
    with pytest.warns(UserWarning, match=re.escape(f"pooling mean pools a model whose {folder}/modules.json lists "
                                                   "no Pooling module")):
        got = embed(folder, texts, pooling="mean")
    tokens = st.encode(texts, output_value="token_embeddings")  # each text's real tokens
    assert (got - torch.stack([t.mean(0) for t in tokens])).abs().max() < 1e-5
