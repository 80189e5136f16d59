"""Every shape a corpus has is read as it is and given queries by one rule (``choose_queries``): titled records,
passages, one short text a line (plain and gzipped), Chinese text, one word a line, five documents, repeats, a
BEIR folder without qrels; and a JSON Lines text that is not a string is refused with its file and line."""

from __future__ import annotations

import gzip
import json

import pytest
from corpus_shapes import NOT_TEXT, short_lines, write_not_text, write_shape

from espresso_export.core.errors import ValidationError
from espresso_export.data import read_corpus, read_retrieval
from espresso_export.data.pseudo_queries import (
    MIN_WORDS,
    Documents,
    choose_queries,
    known_item_queries,
    read_documents_of,
    split_sentences,
    words,
)

# shape -> (agreement method, known-item method); None: none can be made
CHOSEN = {
    "titled": ("title", "title"),
    "passages": ("sentence", "sentence"),
    "lines": ("half", "half"),
    "lines-gz": ("half", "half"),
    "cjk": ("half", "half"),
    "cjk-many": ("half", "half"),
    "words": (None, None),
    "five": ("half", "half"),
    "beir-no-qrels": ("title", "title"),
}


@pytest.mark.parametrize("shape", list(CHOSEN))
def test_one_rule_chooses_queries_for_every_shape(tmp_path, shape):
    passages = read_documents_of(write_shape(shape, tmp_path))
    chosen = choose_queries(passages, limit=50, seed=0)
    agreement, known = CHOSEN[shape]
    assert (chosen.agreement.method if chosen.agreement else None) == agreement
    assert (chosen.known_items.method if chosen.known_items else None) == known
    if agreement is None:
        assert chosen.why_no_agreement and chosen.why_no_known_items  # said, for the command to name what to give
    for query, origin in zip(chosen.agreement.texts if chosen.agreement else [], chosen.agreement.origins
                             if chosen.agreement else []):
        assert query in passages.texts[origin]
    if chosen.known_items is not None:
        for query, origin, target in zip(chosen.known_items.texts, chosen.known_items.origins,
                                         chosen.known_items.targets):
            assert query and target and query not in target


def test_one_short_text_a_line_gives_halves_and_shorter_texts_themselves():
    passages = Documents("lines.txt", list(dict.fromkeys(short_lines())))
    chosen = choose_queries(passages, limit=200, seed=0)
    assert chosen.agreement.method == "half" and chosen.agreement.exclude == chosen.agreement.origins
    assert chosen.agreement.texts == chosen.known_items.texts  # one rule: the same halves, searched two ways
    short = Documents("titles", [" ".join(t.split()[:7]) for t in passages.texts])  # product titles: 6-7 words
    made = choose_queries(short, limit=200, seed=0)
    assert made.agreement.method == "passage" and made.known_items is None and "10+ words" in made.why_no_known_items
    assert all(len(short.texts[i].split()) >= MIN_WORDS for i in made.agreement.origins)
    half = chosen.known_items
    assert half.method == "half" and len(half) == sum(len(t.split()) >= 2 * MIN_WORDS for t in passages.texts)
    for query, origin, target in zip(half.texts, half.origins, half.targets):
        assert f"{query} {target}" == passages.texts[origin]
    # the known-item rule alone is the same one
    assert known_item_queries(passages, "auto", limit=200, seed=0) == half


def test_repeated_texts_are_dropped_and_counted(tmp_path):
    for shape, repeats in (("lines", 20), ("lines-gz", 20), ("cjk", 12)):
        passages = read_documents_of(write_shape(shape, tmp_path / shape))
        assert passages.duplicates == repeats and len(set(passages.texts)) == len(passages.texts)
        assert choose_queries(passages).duplicates == repeats


def test_chinese_text_is_split_by_characters_and_at_its_own_sentence_ends():
    assert [m.group() for m in words("我喜欢 iPhone 13 手机")] == ["我", "喜", "欢", "iPhone", "13", "手", "机"]
    assert split_sentences("我喜欢猫。猫很可爱！你呢？") == ["我喜欢猫。", "猫很可爱！", "你呢？"]
    assert split_sentences("One two. Three four! e.g. this") == ["One two.", "Three four! e.g. this"]
    assert [m.group() for m in words("a Latin word")] == ["a", "Latin", "word"]  # never split by characters
    text = "今天的天气非常好，我们去海边游泳吧。"
    half = known_item_queries(Documents("cjk", [text]), "auto").texts[0]
    assert text.startswith(half) and len(half) == len(text) // 2


def test_one_word_a_line_gives_no_query_and_says_why(tmp_path):
    passages = read_documents_of(write_shape("words", tmp_path))
    chosen = choose_queries(passages)
    assert chosen.agreement is None and chosen.known_items is None
    assert f"{MIN_WORDS}+ words" in chosen.why_no_agreement
    with pytest.raises(ValidationError, match="no known-item query could be made"):
        known_item_queries(passages)


def test_a_method_asked_for_is_kept_or_none():
    passages = Documents("lines", list(dict.fromkeys(short_lines())))
    chosen = choose_queries(passages, agreement="sentence", known_items="title")
    assert chosen.agreement is None and chosen.known_items is None
    assert "two or more sentences" in chosen.why_no_agreement and "no titles" in chosen.why_no_known_items
    none = choose_queries(passages, agreement=None, known_items=None)  # the user's queries, no known items asked
    assert none.agreement is None and none.why_no_agreement is None and none.why_no_known_items is None
    assert choose_queries(passages, agreement="passage").agreement.method == "passage"


def test_a_beir_folder_without_qrels_reads_as_a_corpus_but_not_as_a_labelled_set(tmp_path):
    folder = write_shape("beir-no-qrels", tmp_path)
    passages = read_documents_of(folder)
    assert len(passages.texts) == 60 and passages.titles and all(passages.titles)
    with pytest.raises(ValidationError, match="qrels"):
        read_retrieval(folder)
    (folder / "queries.jsonl").unlink()
    assert read_documents_of(folder).texts == passages.texts  # the documents alone are a corpus
    (folder / "corpus.jsonl").unlink()
    with pytest.raises(ValidationError, match="no corpus.jsonl"):
        read_documents_of(folder)


@pytest.mark.parametrize("kind", list(NOT_TEXT))
def test_a_text_that_is_not_a_string_is_refused_with_its_file_and_line(tmp_path, kind):
    path = write_not_text(kind, tmp_path)
    with pytest.raises(ValidationError) as err:
        read_corpus(path)
    message = str(err.value)
    assert f"{path}:2" in message and "'text'" in message and "\n" not in message
    with pytest.raises(ValidationError, match=f"{path.name}:2"):
        read_documents_of(path)


def test_a_title_that_is_not_a_string_is_refused_and_null_is_an_empty_text(tmp_path):
    titled = tmp_path / "t.jsonl"
    titled.write_text('{"title": NaN, "text": "the dog runs"}\n')
    with pytest.raises(ValidationError, match=r"t.jsonl:1: the 'title' field holds NaN"):
        read_corpus(titled)
    nulls = tmp_path / "n.jsonl"
    nulls.write_text('{"text": "the dog runs"}\n{"text": null}\n{"text": "a cat sleeps"}\n')
    corpus = read_corpus(nulls)
    assert corpus.sentences == ["the dog runs", "a cat sleeps"] and corpus.counts()["empty_dropped"] == 1


def test_a_beir_corpus_text_that_is_not_a_string_is_refused(tmp_path):
    folder = write_shape("beir-no-qrels", tmp_path)
    lines = (folder / "corpus.jsonl").read_text().splitlines()
    lines[3] = json.dumps({"_id": "x", "title": "a title", "text": 3.5})
    (folder / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValidationError, match=r"corpus.jsonl:4: the 'text' field holds the number 3.5"):
        read_documents_of(folder)


def test_gzipped_lines_read_as_the_plain_ones(tmp_path):
    plain = read_documents_of(write_shape("lines", tmp_path))
    packed = write_shape("lines-gz", tmp_path)
    assert gzip.decompress(packed.read_bytes()).decode() == (tmp_path / "lines.txt").read_text()
    assert read_documents_of(packed).texts == plain.texts and read_documents_of(packed).duplicates == plain.duplicates
