"""Corpora: the built-in imdb split (deterministic, disjoint, de-duplicated, train-only for
pre-training), file formats, streaming, and bad input named in one line."""

import csv
import gzip
import json
import subprocess
import sys
import warnings

import pytest

import bertkit
from bertkit.data import builtin, open_corpus, split_of, tokenize_corpus
from bertkit.data.corpora import BuiltinCorpus, DataWarning, ReadStats, clean_review, movie_reviews_csv, sentences


def _documents(corpus):
    return list(corpus.documents(ReadStats()))


@pytest.fixture(scope="module")
def imdb():
    return builtin("imdb")


def test_imdb_split_is_deduplicated_disjoint_and_follows_the_text_hash(imdb):
    # an independent count of the unique cleaned reviews, straight from the CSV
    with open(movie_reviews_csv(), encoding="utf-8", newline="") as f:
        rows = [clean_review(r["text"]) for r in csv.DictReader(f) if r["source"] == "imdb"]
    unique = set(rows)
    parts = {"train": imdb.train, "dev": imdb.dev, "test": imdb.test}
    texts = {name: [r.text for r in records] for name, records in parts.items()}
    assert sum(len(t) for t in texts.values()) == len(unique) == len(rows) - imdb.duplicates
    assert imdb.duplicates > 0 and imdb.conflicts == 0
    for name, t in texts.items():
        assert len(set(t)) == len(t), f"duplicates inside {name}"
        assert all(split_of(x) == name for x in t)
    assert not set(texts["train"]) & set(texts["dev"]) and not set(texts["train"]) & set(texts["test"])
    assert not set(texts["dev"]) & set(texts["test"])
    n = len(unique)
    assert abs(len(texts["train"]) / n - 0.8) < 0.01 and abs(len(texts["dev"]) / n - 0.1) < 0.01
    labels = [r.label for r in imdb.train]
    assert abs(sum(labels) / len(labels) - 0.5) < 0.02 and set(labels) == {0, 1}
    assert all("<br" not in r.text for r in imdb.train[:500])


def test_split_is_the_same_in_another_process_with_another_hash_seed(imdb):
    code = ("from bertkit.data import builtin; s = builtin('rotten-tomatoes'); i = builtin('imdb');"
            "print(len(i.train), len(i.dev), len(i.test), i.dev[0].text[:40], s.test[-1].text[:40], sep='|')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "12345", "PATH": ""}).stdout.strip()
    rt = builtin("rotten-tomatoes")
    assert out == "|".join(map(str, [len(imdb.train), len(imdb.dev), len(imdb.test), imdb.dev[0].text[:40],
                                     rt.test[-1].text[:40]]))


def test_pretraining_reads_the_train_split_only(imdb):
    docs = _documents(open_corpus("imdb"))
    assert docs == [r.text for r in imdb.train]
    assert _documents(BuiltinCorpus("imdb", "dev")) == [r.text for r in imdb.dev]
    with pytest.raises(bertkit.BertkitError, match="unknown built-in"):
        builtin("imdb-full")


def test_text_folder_jsonl_and_csv(tmp_path):
    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "a.txt").write_text("first doc line one.\nline two.\n\n\nsecond doc.\n")
    (folder / "b.txt").write_text("third doc\n")
    assert _documents(open_corpus(folder)) == ["first doc line one.\nline two.", "second doc.", "third doc"]
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text(json.dumps({"body": "one"}) + "\n\n" + json.dumps({"body": "two", "x": 1}) + "\n")
    assert _documents(open_corpus(jsonl, field="body")) == ["one", "two"]
    table = tmp_path / "d.csv"
    table.write_text('id,review\n1,"multi\nline, quoted"\n2,plain\n')
    assert _documents(open_corpus(table, field="review")) == ["multi\nline, quoted", "plain"]


def test_bad_input_is_one_line_naming_file_line_and_key(tmp_path):
    jsonl = tmp_path / "bad.jsonl"
    jsonl.write_text('{"text": "ok"}\n{"text": broken\n')
    with pytest.raises(bertkit.BertkitError, match=r"bad.jsonl, line 2: not valid JSON"):
        _documents(open_corpus(jsonl))
    jsonl.write_text('{"text": "ok"}\n\n{"body": "no text"}\n')
    with pytest.raises(bertkit.BertkitError, match=r"bad.jsonl, line 3: no field 'text' \(found: body\)"):
        _documents(open_corpus(jsonl))
    table = tmp_path / "bad.csv"
    table.write_text("a,b\n1,2\n")
    with pytest.raises(bertkit.BertkitError, match=r"bad.csv, line 1: no column 'text' \(columns: a, b\)"):
        _documents(open_corpus(table))
    with pytest.raises(bertkit.BertkitError, match="no such file"):
        open_corpus(tmp_path / "missing.txt")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(bertkit.BertkitError, match="has no files"):
        open_corpus(empty)


def test_empty_corpus_is_an_error_not_an_empty_cache(tmp_path, minilm_dir):
    blank = tmp_path / "blank.txt"
    blank.write_text("\n\n   \n\x01\x02\n")  # (NUL bytes would make it a binary file)
    tok = bertkit.load_tokenizer(minilm_dir)
    with pytest.raises(bertkit.BertkitError, match="blank.txt: the corpus is empty"):
        tokenize_corpus(open_corpus(blank), tok, cache_dir=tmp_path / "cache")
    assert not any((tmp_path / "cache" / "tokens").iterdir())


def test_undecodable_bytes_are_replaced_counted_and_reported(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("good line\n".encode() + "caf\xe9 cr\xe8me\n".encode("latin-1") + b"fine\n\n\xff\xfe doc two\n")
    stats = ReadStats()
    docs = list(open_corpus(path).documents(stats))
    assert docs == ["good line\ncaf\ufffd cr\ufffdme\nfine", "\ufffd\ufffd doc two"]
    assert stats.undecodable_lines == 2 and stats.first_undecodable == f"{path}:2"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stats.report(path.name)
    assert any(issubclass(w.category, DataWarning) and "2 line(s)" in str(w.message) for w in caught)


def test_hub_names_need_the_hub_extra(monkeypatch):
    corpus = open_corpus("wikitext:wikitext-103-raw-v1")
    assert (corpus.name, corpus.config, corpus.split) == ("wikitext", "wikitext-103-raw-v1", "train")
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets -> ImportError
    with pytest.raises(bertkit.BertkitError, match=r"pip install 'bertkit\[hub\]'"):
        _documents(corpus)


def test_a_byte_order_mark_is_dropped_and_gzip_is_read_as_its_text(tmp_path):
    text = tmp_path / "bom.txt"
    text.write_bytes(b"\xef\xbb\xbfone.\n\ntwo.\n")
    assert _documents(open_corpus(text)) == ["one.", "two."]
    table = tmp_path / "bom.csv"
    table.write_bytes(b"\xef\xbb\xbftext,label\nhello,1\n")  # Excel's UTF-8 CSV
    assert _documents(open_corpus(table)) == ["hello"]
    packed = tmp_path / "corpus.txt.gz"
    packed.write_bytes(gzip.compress(b"\xef\xbb\xbfone.\n\ntwo.\n"))
    assert _documents(open_corpus(packed)) == ["one.", "two."]
    packed = tmp_path / "rows.jsonl.gz"
    packed.write_bytes(gzip.compress(json.dumps({"text": "row"}).encode() + b"\n"))
    assert _documents(open_corpus(packed)) == ["row"]
    packed.write_bytes(gzip.compress((json.dumps({"text": "row"}) + "\n").encode() * 1000)[:-20])
    with pytest.raises(bertkit.BertkitError, match="rows.jsonl.gz: damaged gzip data"):
        _documents(open_corpus(packed))


def test_csv_corpus_quoting_errors_and_binary_headers_are_one_escaped_line(tmp_path):
    table = tmp_path / "q.csv"
    table.write_text('text\nfine\n"never closed\n' + "more\n" * 5)
    with pytest.raises(bertkit.BertkitError, match=r"q.csv, line 3: a quote opened in this row is never closed"):
        _documents(open_corpus(table))
    table.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(bertkit.BertkitError, match=r"q.csv, line 1: no column 'text'") as e:
        _documents(open_corpus(table))
    message = str(e.value)
    assert message.isprintable() and "\\x00" in message and len(message) < 200


def test_a_mistyped_path_says_so_as_well_as_naming_the_hub_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(bertkit.BertkitError) as e:
        _documents(open_corpus("pc/dirr"))
    assert str(e.value) == "pc/dirr: no such file or directory (if it names a Hugging Face data set: " \
                           "pip install 'bertkit[hub]')"


def test_sentences_split_lines_and_sentence_ends():
    assert sentences("One here. Two there!  Three?\nFour 3.5 five\n\n") == ["One here.", "Two there!", "Three?",
                                                                          "Four 3.5 five"]
    assert sentences("東京です。 大阪です。") == ["東京です。", "大阪です。"]
    assert sentences("   ") == []


WIKITEXT = ["", " = Valkyria Chronicles III = \n", "", " Senjō no Valkyria 3 is a role-playing game . It came out in 2011 . \n",
            "", " = = Gameplay = = \n", "", " The game is played in turns . Each turn is short . \n",
            " = Tower Building = \n", "", " The Tower Building is a skyscraper . \n"]


def test_a_hub_wikitext_article_is_one_document_without_its_headings(monkeypatch):
    import datasets

    def load_dataset(name, config=None, split=None, streaming=False):
        assert (name, config, split, streaming) == ("wikitext", "wikitext-103-raw-v1", "train", True)
        return datasets.Dataset.from_dict({"text": WIKITEXT}).to_iterable_dataset()

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    documents = _documents(open_corpus("wikitext:wikitext-103-raw-v1"))
    assert documents == ["Senjō no Valkyria 3 is a role-playing game . It came out in 2011 .\n"
                         "The game is played in turns . Each turn is short .",
                         "The Tower Building is a skyscraper ."]
    plain = ["one sentence per row.", "", " = Plot = ", "another row.", "a third."]  # not wikitext: rows
    monkeypatch.setattr(datasets, "load_dataset",
                        lambda *a, **k: datasets.Dataset.from_dict({"text": plain}).to_iterable_dataset())
    assert _documents(open_corpus("bookcorpus")) == ["one sentence per row.", " = Plot = ", "another row.", "a third."]


def test_an_unreadable_hub_corpus_stops_pretrain_before_a_tokenizer_is_trained(monkeypatch, tmp_path, capsys):
    from bertkit.cli import main

    monkeypatch.setitem(sys.modules, "datasets", None)
    assert main(["pretrain", "--corpus", "wikitext:wikitext-103-raw-v1", "--steps", "1", "--out",
                 str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "pip install 'bertkit[hub]'" in err and "tokenizer" not in err


def test_a_folder_is_read_file_by_file_by_kind_leaving_out_hidden_and_binary_files(tmp_path):
    folder = tmp_path / "corpus"
    for name, data in {".git/objects/ab/cdef": b"blob 12\x00tree", "__pycache__/m.cpython-311.pyc": b"\xa7\r\r\n",
                       "img.png": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "notes.txt": b"A note.\n\nAnother note.\n",
                       "sub/rows.jsonl": b'{"text": "a json row", "id": 1}\n',
                       "table.tsv": b'text\tlabel\nA "quoted" tsv row.\t1\n'}.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    with pytest.warns(DataWarning, match=r"corpus: skipped 1 file\(s\) that are not UTF-8 text .*img.png"):
        documents = _documents(open_corpus(folder))
    assert documents == ["A note.", "Another note.", "a json row", 'A "quoted" tsv row.']
    # what the folder reads decides what lies inside it for pretrain's --out check: not a hidden folder
    from bertkit.data.corpora import reads_into

    assert reads_into(folder, folder / "sub" / "run") and not reads_into(folder, folder / ".git" / "run")
    utf16 = tmp_path / "notepad.txt"
    utf16.write_bytes("A first line.\n\nA second.\n".encode("utf-16"))
    with pytest.raises(bertkit.BertkitError, match="notepad.txt: UTF-16 text .*save it as UTF-8"):
        _documents(open_corpus(utf16))


def test_a_folder_s_linked_folders_are_read_as_its_linked_files_are(tmp_path):
    """rglob skipped a linked folder without a word (a folder of links alone had "no files"); a link
    back up, or a second link to one folder, reads it once."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "far.txt").write_text("From a linked folder.\n")
    folder = tmp_path / "corpus"
    (folder / "real").mkdir(parents=True)
    (folder / "real" / "near.txt").write_text("From a real folder.\n")
    (folder / "linked").symlink_to(elsewhere, target_is_directory=True)
    (folder / "again").symlink_to(elsewhere, target_is_directory=True)
    (folder / "loop").symlink_to(folder, target_is_directory=True)
    assert sorted(_documents(open_corpus(folder))) == ["From a linked folder.", "From a real folder."]
    only_links = tmp_path / "links"
    only_links.mkdir()
    (only_links / "linked").symlink_to(elsewhere, target_is_directory=True)
    assert _documents(open_corpus(only_links)) == ["From a linked folder."]


def test_folders_whose_files_run_together_differ_in_fingerprint(tmp_path):
    """Names and bytes hashed back to back made these two folders one fingerprint, and so one token
    cache: the second read the first one's tokens. A folder moved elsewhere keeps its fingerprint."""
    for name, a, b in (("one", "the plot", "ts.txt"), ("two", "the plott", "s.txt")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "a.txt").write_text(f"the film was great.\n\n{a}")
        (tmp_path / name / b).write_text("the acting was bad.\n")
    assert open_corpus(tmp_path / "one").fingerprint() != open_corpus(tmp_path / "two").fingerprint()
    before = open_corpus(tmp_path / "one").fingerprint()
    (tmp_path / "one").rename(tmp_path / "moved")
    assert open_corpus(tmp_path / "moved").fingerprint() == before


def test_a_json_array_is_one_document_per_item(tmp_path):
    rows = [{"text": "a first doc. with two."}, {"text": "  "}, {"text": "second doc here.", "label": 1}]
    compact, pretty, strings = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    compact.write_text(json.dumps(rows))
    pretty.write_text(json.dumps(rows, indent=2))
    strings.write_text(json.dumps(["one string", "two strings"]))
    assert _documents(open_corpus(compact)) == _documents(open_corpus(pretty)) == ["a first doc. with two.",
                                                                                   "second doc here."]
    assert _documents(open_corpus(strings)) == ["one string", "two strings"]
    (tmp_path / "bad.json").write_text(json.dumps([{"text": "x"}, {"body": "y"}]))
    with pytest.raises(bertkit.BertkitError, match=r"bad.json, item 2 of the array: no field 'text' \(found: body\)"):
        _documents(open_corpus(tmp_path / "bad.json"))
    (tmp_path / "cut.json").write_text('[{"text": "x"},\n{"text": ')
    with pytest.raises(bertkit.BertkitError, match=r"cut.json, line 2: not valid JSON"):
        _documents(open_corpus(tmp_path / "cut.json"))
    (tmp_path / "object.json").write_text(json.dumps({"text": "x"}, indent=2))  # one object, pretty-printed
    with pytest.raises(bertkit.BertkitError,
                       match="line 1: not valid JSON .*read as JSON lines .* or as one JSON array"):
        _documents(open_corpus(tmp_path / "object.json"))
