"""How much of a corpus a model reads: texts past its window are counted as the model tokenises them, and
`verify --corpus` says so when enough of a corpus is cut."""

from __future__ import annotations

import random
from pathlib import Path

from tiny_models import _WORDS

from espresso_export.model.checkpoint import load
from espresso_export.model.window import LIMIT, WindowCut, token_lengths, window_cut
from espresso_export.verification.verify import verify


def _texts(n: int, words: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(_WORDS, k=words)) for _ in range(n)]


def test_lengths_are_the_models_own_and_the_cut_counts_texts_past_the_window(tiny_bert):
    ckpt = load(str(tiny_bert))
    texts = _texts(6, 20, 1) + _texts(3, 300, 2)
    lengths = token_lengths(ckpt.tokenizer, texts)
    by_model = [len(ids) for ids in ckpt.tokenizer(texts, truncation=False)["input_ids"]]
    assert lengths.tolist() == by_model  # special tokens included, nothing truncated
    cut = window_cut(ckpt.tokenizer, ckpt.max_seq_length, texts)
    assert (cut.window, cut.texts, cut.longer, cut.longest) == (ckpt.max_seq_length, 9, 3, max(by_model))
    assert cut.worth_saying and WindowCut.of(cut.to_dict()) == cut
    assert cut.line("the documents").startswith(f"33% of the documents are longer than the source's window of "
                                                f"{ckpt.max_seq_length} tokens")
    assert window_cut(ckpt.tokenizer, None, texts) is None  # a static model reads every token
    assert window_cut(ckpt.tokenizer, 8, []) is None and WindowCut.of({}) is None


def test_a_large_corpus_is_measured_on_a_seeded_sample(tiny_bert):
    ckpt = load(str(tiny_bert))
    texts = _texts(LIMIT // 2, 1, 3) + _texts(LIMIT // 2 + 500, 5, 3)  # 3 tokens with [CLS] and [SEP], and 7
    first = window_cut(ckpt.tokenizer, 4, texts)
    assert first.texts == LIMIT and first == window_cut(ckpt.tokenizer, 4, texts)
    assert 0 < first.share < 1 and "(a sample of 2,000)" in first.line("x")


def test_verify_notes_a_corpus_the_sources_window_cuts(tiny_bert, tmp_path: Path):
    docs = tmp_path / "docs.txt"
    docs.write_text("\n".join(_texts(30, 12, 4) + _texts(10, 300, 5)) + "\n", encoding="utf-8")
    report = verify(tiny_bert, tiny_bert, corpus=[str(docs)], sts_limit=40, batch_sizes=[], threads=1, cache=False)
    said = [n for n in report.notes if "longer than the source's window" in n]
    assert len(said) == 1 and said[0].startswith("25% of the documents of docs.txt")
    short = tmp_path / "short.txt"
    short.write_text("\n".join(_texts(40, 12, 6)) + "\n", encoding="utf-8")
    report = verify(tiny_bert, tiny_bert, corpus=[str(short)], sts_limit=40, batch_sizes=[], threads=1, cache=False)
    assert not any("window" in n for n in report.notes)
