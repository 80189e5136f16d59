"""Readers split lines at "\n" (and "\r\n") only, drop a UTF-8 byte order mark, and let each corpus source name its
own field or column."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from espresso_export.core.errors import ValidationError
from espresso_export.data import (
    read_corpus,
    read_retrieval,
    read_sentences,
    read_sts,
    text_lines,
)

# characters str.splitlines() splits at, which JSON strings and sentences hold as ordinary characters
UNICODE_BREAKS = ["\u0085", "\u2028", "\u2029", "\u000b", "\u000c", "\u001c", "\u001d", "\u001e"]
SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"


@pytest.mark.parametrize("char", UNICODE_BREAKS, ids=[f"U+{ord(c):04X}" for c in UNICODE_BREAKS])
def test_a_unicode_line_break_inside_a_jsonl_string_or_a_text_line_is_part_of_it(tmp_path, char):
    docs = tmp_path / "docs.jsonl"
    docs.write_text(json.dumps({"text": f"first{char}passage"}, ensure_ascii=False) + "\n"
                    + json.dumps({"text": "second passage"}) + "\n", encoding="utf-8")
    assert read_corpus([docs]).sentences == [f"first{char}passage", "second passage"]
    txt = tmp_path / "s.txt"
    txt.write_text(f"one{char}sentence\r\ntwo\n", encoding="utf-8")
    assert read_sentences(txt) == [f"one{char}sentence", "two"]
    assert text_lines(f"a{char}b\r\nc\n") == [f"a{char}b", "c"]


def test_a_beir_folder_with_a_unicode_line_break_in_a_passage_reads(tmp_path):
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "title": "", "text": f"doc\u0085{i}"},
                                                          ensure_ascii=False) + "\n" for i in range(3)))
    (beir / "queries.jsonl").write_text(json.dumps({"_id": "q0", "text": "which\u2028doc"}, ensure_ascii=False) + "\n")
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td1\t1\n")
    found = read_retrieval(beir)
    assert len(found.docs) == 3 and any("\u0085" in d for d in found.docs)


def test_a_byte_order_mark_is_dropped(tmp_path):
    sts = tmp_path / "excel.csv"
    sts.write_text("\ufeffsentence1,sentence2,score\na dog,a puppy,4\na car,the sea,0.5\n", encoding="utf-8")
    assert read_sts(sts).scores == [4.0, 0.5]
    table = tmp_path / "corpus.csv"
    table.write_text("\ufefftext\nfirst row\n", encoding="utf-8")
    assert read_corpus([table]).sentences == ["first row"]
    txt = tmp_path / "s.txt"
    txt.write_text("\ufefffirst sentence\nsecond\n", encoding="utf-8")
    assert read_sentences(txt) == ["first sentence", "second"]
    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text("\ufeff" + json.dumps({"text": "first record"}) + "\n", encoding="utf-8")
    assert read_corpus([jsonl]).sentences == ["first record"]


@pytest.fixture
def mixed(tmp_path) -> dict[str, Path]:
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"body": f"passage {i}", "text": f"not this {i}"}) + "\n" for i in range(3)))
    plain = tmp_path / "plain.jsonl"
    plain.write_text(json.dumps({"text": "a plain record"}) + "\n")
    stsb = tmp_path / "sts-train.csv"
    stsb.write_text("main-captions\tMSRvid\t2012test\t0001\t5.000\tA plane is taking off.\tAn air plane is taking off.\n")
    notes = tmp_path / "notes.txt"
    notes.write_text("a note\n")
    return {"docs": docs, "plain": plain, "stsb": stsb, "notes": notes}


def test_each_source_names_its_own_field_and_the_global_one_applies_where_it_fits(mixed):
    c = read_corpus([f"{mixed['docs']}#body:0.7", f"{mixed['stsb']}:0.2", f"{mixed['notes']}:0.1"])
    assert c.sentences[:3] == ["passage 0", "passage 1", "passage 2"]
    assert "A plane is taking off." in c.sentences and "a note" in c.sentences
    assert [(s.kind, s.weight) for s in c.sources] == [("jsonl", 0.7), ("stsb", 0.2), ("txt", 0.1)]
    # the recipe's advice: --set distill.corpus_field=text with an STS-B source in the mix
    c = read_corpus([mixed["plain"], mixed["stsb"], mixed["notes"]], field="text")
    assert c.sentences[0] == "a plain record" and [s.kind for s in c.sources] == ["jsonl", "stsb", "txt"]
    # a global name applies to the sources that name none
    c = read_corpus([mixed["docs"], f"{mixed['plain']}#text"], field="body")
    assert c.sentences == ["passage 0", "passage 1", "passage 2", "a plain record"]


def test_a_field_no_source_has_is_still_an_error(mixed):
    with pytest.raises(ValidationError, match="no 'bdy' field"):
        read_corpus([mixed["docs"], mixed["stsb"]], field="bdy")
    with pytest.raises(ValidationError, match="no 'bdy' field"):
        read_corpus([f"{mixed['docs']}#bdy"])


@pytest.mark.skipif(not (SHARED / "stsb" / "sts-train.csv").is_file(), reason="shared data not found")
def test_a_recipe_source_names_its_own_field_and_keeps_its_share(tmp_path):
    from espresso_export.pipeline.recipes import parse_recipe

    stsb = shutil.copy(SHARED / "stsb" / "sts-train.csv", tmp_path / "sts-train.csv")
    (tmp_path / "docs.jsonl").write_text(json.dumps({"body": "a passage"}) + "\n")
    recipe = parse_recipe(f"source: m\nsteps:\n  - distill:\n      corpus: [docs.jsonl#body:0.4, {Path(stsb).name}:0.6]\n"
                          "      student_layers: 2\n      dim: 8\n", file="r.yaml", base=tmp_path)
    corpus = recipe.steps[0].config.corpus
    assert corpus == [f"{tmp_path / 'docs.jsonl'}#body:0.4", f"{tmp_path / 'sts-train.csv'}:0.6"]
    assert read_corpus(corpus).sentences[0] == "a passage" and read_corpus(corpus).sources[1].kind == "stsb"
