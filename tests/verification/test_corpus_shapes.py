"""``verify --corpus`` on every shape a corpus has, through the real CLI and the tiny BERT: one short text a line
(plain and gzipped), Chinese text, five documents and a BEIR folder without qrels are measured; one word a line
is refused naming --queries (and measured with them); a JSON Lines text that is not a string is refused with its
line; --corpus-field names a jsonl field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from corpus_shapes import NOT_TEXT, write_not_text, write_shape

from espresso_export.cli.app import main

pytest.importorskip("faiss", reason="verify --corpus searches with faiss (pip install 'espresso-export[eval]')")

QUICK = ["--sts-limit", "40", "--batch-sizes", "none", "--threads", "1", "--no-cache"]


def _verify(model: Path, corpus: Path, tmp_path: Path, *extra: str) -> tuple[int, dict]:
    out = tmp_path / "r.json"
    out.unlink(missing_ok=True)
    code = main(["verify", str(model), "--against", str(model), "--corpus", str(corpus), *extra, "--json", str(out),
                 *QUICK])
    return code, json.loads(out.read_text()) if out.exists() else {}


# shape -> (queries_from, known-item method, duplicates dropped)
MEASURED = {
    "lines": ("pseudo-queries (half, auto)", "known items by half", 20),
    "lines-gz": ("pseudo-queries (half, auto)", "known items by half", 20),
    "cjk": ("pseudo-queries (half, auto)", "known items by half", 12),
    "five": ("pseudo-queries (half, auto)", "known items by half", 0),
    "beir-no-qrels": ("pseudo-queries (title, auto)", "known items by title", 0),
    "passages": ("pseudo-queries (sentence, auto)", "known items by sentence", 0),
}


@pytest.mark.parametrize("shape", list(MEASURED))
def test_every_usable_shape_is_measured_and_says_what_it_chose(tiny_bert, tmp_path, shape):
    code, report = _verify(tiny_bert, write_shape(shape, tmp_path / "data"), tmp_path)
    assert code == 0
    row = report["agreement"][0]
    queries_from, method, duplicates = MEASURED[shape]
    assert row["queries_from"] == queries_from and row["known_item"]["method"] == method
    assert row["duplicates_dropped"] == duplicates and row["agreement_at_10"] == 1.0  # the source against itself


def test_the_table_names_the_duplicates_dropped(tiny_bert, tmp_path, capsys):
    code = main(["verify", str(tiny_bert), "--against", str(tiny_bert), "--corpus",
                 str(write_shape("lines", tmp_path)), *QUICK])
    assert code == 0
    assert "20 duplicates dropped" in " ".join(capsys.readouterr().out.split())


def test_one_word_a_line_is_refused_naming_queries_and_measured_with_them(tiny_bert, tmp_path, capsys):
    words = write_shape("words", tmp_path / "data")
    code, _ = _verify(tiny_bert, words, tmp_path)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "--queries" in err and "words.txt" in err
    queries = tmp_path / "q.txt"
    queries.write_text("the dog runs\na cat sleeps today\n")
    code, report = _verify(tiny_bert, words, tmp_path, "--queries", str(queries))
    row = report["agreement"][0]
    assert code == 0 and row["queries_from"] == "q.txt" and row["known_item"] is None
    assert "10+ words" in row["no_known_items"]


@pytest.mark.parametrize("kind", list(NOT_TEXT))
def test_a_text_that_is_not_a_string_is_refused_with_its_line(tiny_bert, tmp_path, capsys, kind):
    path = write_not_text(kind, tmp_path)
    code, _ = _verify(tiny_bert, path, tmp_path, "--agreement-from", "passage")  # queries the texts can give
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and f"{path.name}:2" in err


def test_corpus_field_names_the_text_field(tiny_bert, tmp_path, capsys):
    body = tmp_path / "body.jsonl"
    body.write_text("".join(json.dumps({"body": f"the dog runs fast in the city {i} and a cat sleeps today"}) + "\n"
                            for i in range(30)))
    code, _ = _verify(tiny_bert, body, tmp_path)
    err = capsys.readouterr().err
    assert code == 2 and "--corpus-field" in err
    code, report = _verify(tiny_bert, body, tmp_path, "--corpus-field", "body")
    assert code == 0 and report["agreement"][0]["passages"] == 30
