"""Pseudo-queries from a corpus without labels: sentences, titles, passages; seeded, capped, read through the
project's corpus readers (a BEIR folder, jsonl with titles, plain text)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from espresso_export.core.errors import ValidationError
from espresso_export.data import read_retrieval
from espresso_export.data.pseudo_queries import (
    METHODS, Documents, pseudo_queries, read_documents_of, split_sentences,
)

DBPEDIA = Path(__file__).resolve().parents[3] / "shared" / "data" / "retrieval" / "dbpedia-5k"
RECORDS = [
    {"_id": "a", "title": "Alpha", "text": "Alpha is the first letter of the Greek alphabet. It has the value one "
                                           "in the Greek system of numerals."},
    {"_id": "b", "title": "Beta", "text": "Beta is a letter."},
    {"_id": "c", "title": "Gamma", "text": "Gamma is the third letter of the alphabet. 3 is its value as a "
                                           "numeral in ancient Greek. It is used in physics."},
    {"_id": "d", "title": "", "text": "A passage without a title has two sentences here. The second one is long "
                                      "enough as well."},
]


@pytest.fixture
def beir(tmp_path) -> Path:
    folder = tmp_path / "toy"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RECORDS), encoding="utf-8")
    (folder / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "first greek letter"}) + "\n",
                                          encoding="utf-8")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\ta\t1\n", encoding="utf-8")
    return folder


def test_split_sentences():
    assert split_sentences("One two. Three four! 5 is a digit? no split here. \"Quoted\" starts.") == [
        "One two.", "Three four!", "5 is a digit? no split here.", "\"Quoted\" starts."]
    assert split_sentences("Washington, D.C. is a city. e.g. this") == ["Washington, D.C. is a city. e.g. this"]


def test_a_beir_folder_reads_as_the_labelled_set_does(beir):
    passages = read_documents_of(beir)
    assert passages.texts == read_retrieval(beir).docs
    assert passages.texts[0].startswith("Alpha Alpha is the first letter")
    assert passages.titles == ["Alpha", "Beta", "Gamma", ""]


def test_each_method_by_hand(beir):
    passages = read_documents_of(beir)
    titles = pseudo_queries(passages, "title", limit=10)
    assert sorted(titles.texts) == ["Alpha", "Beta", "Gamma"]  # the fourth record has no title
    assert all(passages.titles[o] == t for t, o in zip(titles.texts, titles.origins))
    sentences = pseudo_queries(passages, "sentence", limit=10)
    assert sorted(sentences.origins) == [0, 2, 3]  # "Beta is a letter." is one sentence: no query from it
    for text, origin in zip(sentences.texts, sentences.origins):
        assert text in passages.texts[origin] and text != passages.texts[origin]
        title = passages.titles[origin]
        assert len(text.split()) >= 5 and not (title and text.startswith(f"{title} {title}"))  # from the body
    whole = pseudo_queries(passages, "passage", limit=10)
    assert sorted(whole.texts) == sorted(passages.texts)
    assert [whole.texts[i] for i in range(4)] == [passages.texts[o] for o in whole.origins]


def test_the_origin_is_excluded_unless_kept(beir):
    passages = read_documents_of(beir)
    queries = pseudo_queries(passages, "passage", limit=3)
    assert queries.exclude == queries.origins and len(queries) == 3
    assert pseudo_queries(passages, "passage", limit=3, keep_origin=True).exclude == [-1, -1, -1]


def test_seeded_and_capped():
    passages = Documents("many", [f"Passage number {i} talks about topic {i}. It has a second sentence about "
                                 f"item {i}." for i in range(500)], [f"Title {i}" for i in range(500)])
    for method in METHODS:
        first = pseudo_queries(passages, method, seed=7)
        assert len(first) == 200  # the default cap
        assert first == pseudo_queries(passages, method, seed=7)
        assert first.origins != pseudo_queries(passages, method, seed=8).origins
        assert len(set(first.origins)) == 200
    assert len(pseudo_queries(passages, "title", limit=17)) == 17


def test_files_and_what_they_cannot_give(tmp_path):
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in RECORDS + RECORDS[:1]), encoding="utf-8")
    passages = read_documents_of(jsonl)
    assert len(passages.texts) == 4  # the repeated record is read once, as read_corpus reads it
    assert passages.titles == ["Alpha", "Beta", "Gamma", ""]
    txt = tmp_path / "docs.txt"
    txt.write_text("First line here. With a second sentence of words.\nAnother line.\n", encoding="utf-8")
    plain = read_documents_of(txt)
    assert plain.texts == ["First line here. With a second sentence of words.", "Another line."]
    assert plain.titles is None
    with pytest.raises(ValidationError, match="no titles"):
        pseudo_queries(plain, "title")
    with pytest.raises(ValidationError, match="no sentence pseudo-query"):
        pseudo_queries(Documents("short", ["Too short. Also."]), "sentence")
    with pytest.raises(ValidationError, match="unknown pseudo-query method"):
        pseudo_queries(plain, "question")
    with pytest.raises(ValidationError, match="at least 1"):
        pseudo_queries(plain, "passage", limit=0)


@pytest.mark.skipif(not DBPEDIA.is_dir(), reason="shared data not present (../shared/data)")
def test_dbpedia_gives_every_method():
    passages = read_documents_of(DBPEDIA)
    assert len(passages.texts) == 5000 and passages.titles is not None
    for method in METHODS:
        assert len(pseudo_queries(passages, method)) == 200
