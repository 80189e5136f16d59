"""distill's training text: sources mixed in stated shares, and the training length chosen from the corpus."""

from __future__ import annotations

import json

import numpy as np
import pytest

from espresso_export.core.errors import ValidationError
from espresso_export.data import read_corpus
from espresso_export.data.corpus import split_weight
from espresso_export.model.checkpoint import load
from espresso_export.distilling import distill
from espresso_export.distilling.inputs import prepare_corpus
from espresso_export.distilling.lengths import corpus_length

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture()
def two_sources(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.jsonl"
    a.write_text("".join(f"short sentence number {i}\n" for i in range(100)))
    b.write_text("".join(json.dumps({"text": f"passage {i}: " + "a longer text about a topic " * 2}) + "\n"
                         for i in range(100)))
    return a, b


def test_sources_mix_in_their_stated_shares(two_sources):
    a, b = two_sources
    # a can give 100 at 75% -> a mix of 133 at most (b gives its 25%: 33); no sentence repeats
    sentences, counts = prepare_corpus([f"{a}:0.75", f"{b}:0.25"], seed=0)
    assert [(m["spec"], m["share"], m["sentences"]) for m in counts["mix"]] == [(str(a), 0.75, 100), (str(b), 0.25, 33)]
    assert len(sentences) == len(set(sentences)) == 133 == counts["training_sentences"]
    assert sum(s.startswith("passage") for s in sentences) == 33
    capped, counts = prepare_corpus([f"{a}:3", f"{b}:1"], max_sentences=40, seed=0)  # shares need not sum to 1
    assert [m["sentences"] for m in counts["mix"]] == [30, 10] and len(capped) == 40
    assert prepare_corpus([f"{a}:3", f"{b}:1"], max_sentences=40, seed=0)[0] == capped  # seeded


def test_mix_specs_are_checked(two_sources, tmp_path):
    a, b = two_sources
    with pytest.raises(ValidationError, match="give every --corpus a share"):
        prepare_corpus([f"{a}:0.5", str(b)])
    with pytest.raises(ValidationError, match="must be a positive number"):
        read_corpus([f"{a}:-1"])
    assert split_weight("hf://owner/name:train") == ("hf://owner/name:train", None)  # a Hub split, not a share
    odd = tmp_path / "odd:0.5"
    odd.write_text("x\n")
    assert split_weight(str(odd)) == (str(odd), None)  # an existing file is taken whole
    assert split_weight("builtin:0.3") == ("builtin", 0.3)


def test_a_named_field_keeps_the_title_and_a_missing_one_names_the_fields(tmp_path):
    """`--corpus-field body` dropped the documents' titles (only `text` kept them), so healing saw other texts than
    search embeds; a missing field said only which was missing."""
    docs = tmp_path / "docs.jsonl"
    docs.write_text(json.dumps({"_id": "d1", "title": "Hugh Downs", "body": "An American broadcaster."}) + "\n")
    assert read_corpus([str(docs)], field="body").sentences == ["Hugh Downs An American broadcaster."]
    assert read_corpus([str(docs)], field="title").sentences == ["Hugh Downs"]
    with pytest.raises(ValidationError, match=r"docs\.jsonl:1: no 'text or .*' field \(the record has: _id, title, "
                                              r"body; name the text's field with docs\.jsonl#FIELD, or --corpus-field"):
        read_corpus([str(docs)])


def test_training_length_is_chosen_from_the_corpus(tiny_bert, two_sources):
    a, b = two_sources
    student = load(tiny_bert)
    texts = read_corpus([a, b]).sentences
    lengths = np.array([len(x) for x in student.tokenizer(texts)["input_ids"]])
    info = corpus_length(student, texts, 99.0)
    assert info["chosen"] == min(student.max_seq_length, 8 * int(np.ceil(np.percentile(lengths, 99) / 8)))
    assert lengths.max() <= info["chosen"] < student.max_seq_length and info["longest_tokens"] == lengths.max()
    short = corpus_length(student, texts, 50.0)  # the median is a short sentence: a length well below the passages
    assert short["chosen"] < info["chosen"] and short["truncated_share"] == pytest.approx(np.mean(lengths > short["chosen"]))
    capped = corpus_length(student, ["word " * 2000], 99.0)
    assert capped["chosen"] == student.max_seq_length  # never beyond the positions the student is used at


def test_distill_trains_at_the_chosen_length_on_the_mix(tiny_bert, two_sources, tmp_path):
    a, b = two_sources
    result = distill(str(tiny_bert), tmp_path / "out", dim=8, corpus=[f"{a}:0.5", f"{b}:0.5"], student_layers=2,
                     batch_size=16, epochs=1, max_steps=2, heldout=0, cache_dir=tmp_path / "cache", seed=0)
    mix, lengths = result.corpus["mix"], result.corpus["lengths"]
    assert [m["sentences"] for m in mix] == [100, 100] and result.corpus["training_sentences"] == 200
    prov = json.loads((tmp_path / "out" / "espresso.json").read_text())
    assert prov["training"]["max_seq_len"] == lengths["chosen"] > 16  # the passages' length, not 64 or 128
    assert prov["corpus"]["mix"] == mix
    fixed = distill(str(tiny_bert), None, dim=8, corpus=[str(a)], student_layers=2, batch_size=16, epochs=1,
                    max_steps=1, heldout=0, cache_dir=tmp_path / "cache", seed=0, max_seq_len=24,
                    run_dir=tmp_path / "r2")
    assert "lengths" not in fixed.corpus and fixed.train is not None
