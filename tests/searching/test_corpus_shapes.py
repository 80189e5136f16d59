"""``auto`` on every shape a corpus has, with the tiny BERT: the search's sample and its final check choose their
queries by verify's rule (one short text a line searches and is checked with halves), a corpus that gives none
is refused at once, the candidates' width falls to what the healing texts can fit, and every option a message
under ``auto`` names is one of its own."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from corpus_shapes import sentence, short_lines, write_shape

from espresso_export.cli.app import main
from espresso_export.searching.auto_settings import AutoSettings
from espresso_export.searching.candidates import head_width
from espresso_export.searching.healing_texts import checked_queries
from espresso_export.searching.scoring import draw_sample, read_documents
from espresso_export.verification.corpus_agreement import load_corpus

pytest.importorskip("faiss", reason="auto searches with faiss (pip install 'espresso-export[eval]')")

QUICK = ["--time-budget", "1s", "--threads", "1", "--layers", "1,2", "--latency-budget", "0"]
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]+")


def _auto_options() -> set[str]:
    """Every option the ``auto`` command has, as its Typer command declares them (settings and the rest)."""
    import typer

    from espresso_export.cli.app import _register, app

    _register()
    command = typer.main.get_command(app).commands["auto"]
    return {o for p in command.params for o in [*p.opts, *p.secondary_opts] if o.startswith("--")}


@pytest.fixture(scope="module")
def wide_bert(tmp_path_factory) -> Path:
    """The tiny BERT at 64 dims (nested widths 32, 48, 64): a corpus can have fewer healing texts than its width."""
    import torch
    from tiny_models import make_config, make_tokenizer
    from transformers import AutoModel

    folder = tmp_path_factory.mktemp("wide") / "bert"
    tokenizer = make_tokenizer()
    config = make_config("bert", len(tokenizer))
    config.hidden_size = 64
    torch.manual_seed(0)
    AutoModel.from_config(config).eval().save_pretrained(str(folder), safe_serialization=True)
    tokenizer.save_pretrained(str(folder))
    (folder / "README.md").write_text("---\nlicense: apache-2.0\n---\n# a tiny random model for tests\n")
    return folder


def _run(capsys, *args) -> tuple[int, str]:
    code = main(["auto", *map(str, args)])
    seen = capsys.readouterr()
    return code, seen.out + seen.err


def test_one_short_text_a_line_is_searched_and_checked_by_one_rule(tmp_path):
    lines = write_shape("lines", tmp_path)
    s = AutoSettings(corpus=[str(lines)], sample_documents=80, sample_queries=24)
    sample = draw_sample(read_documents(s.corpus), size=80, queries=24, seed=0)
    checked = load_corpus(str(lines), None, method="auto", limit=s.corpus_queries, seed=s.seed,
                          known_items=s.known_items)
    known = checked.known_item_queries
    assert sample.queries.method == known.method == "half" and sample.duplicates == checked.duplicates == 20
    assert checked.queries_from == "pseudo-queries (half, auto)"
    asked = checked_queries(s)  # what the healing texts leave out: both of the final check's kinds of query
    assert set(known.texts) <= asked and set(checked.queries) <= asked


def test_a_corpus_that_gives_no_query_is_refused_before_any_model_work(tmp_path, tiny_bert, capsys):
    out = tmp_path / "out"
    code, said = _run(capsys, tiny_bert, "--corpus", write_shape("words", tmp_path), "-o", out, *QUICK)
    assert code == 2 and len(said.strip().splitlines()) == 1 and "no known-item query" in said
    assert not list(tmp_path.rglob("source-vectors.npz")) and not out.exists()
    assert OPTION.findall(said) and set(OPTION.findall(said)) <= _auto_options()


def test_the_width_falls_to_the_widest_nested_width_the_texts_fit():
    assert head_width(384, 1000) == 384
    assert head_width(384, 300) == 256 and head_width(384, 257) == 256 and head_width(384, 256) == 192
    assert head_width(64, 60) == 48 and head_width(64, 20) == 0


def test_every_option_a_message_under_auto_names_is_its_own(tmp_path, tiny_bert, wide_bert, capsys):
    """A jsonl without a text field, one word a line, and one short text a line with fewer healing texts than the
    source's width (the default --dim cannot be fitted: the search narrows it and says so)."""
    options = _auto_options()
    assert {"--corpus", "--corpus-field", "--queries", "--sentences", "--dim"} <= options
    body = tmp_path / "body.jsonl"
    body.write_text("".join(json.dumps({"body": line}) + "\n" for line in short_lines()))
    said = []
    code, text = _run(capsys, tiny_bert, "--corpus", body, "-o", tmp_path / "a", *QUICK)
    assert code == 2 and "--corpus-field" in text
    said.append(text)
    code, text = _run(capsys, tiny_bert, "--corpus", write_shape("words", tmp_path), "-o", tmp_path / "b", *QUICK)
    assert code == 2
    said.append(text)
    lines = tmp_path / "lines.txt"  # 100 texts of 10+ words: 40 searched, each a query, 60 left to heal on
    rng = random.Random(5)
    lines.write_text("\n".join(dict.fromkeys(sentence(rng, 10, 14) for _ in range(100))) + "\n")
    out = tmp_path / "c"
    code, text = _run(capsys, wide_bert, "--corpus", lines, "--sample-documents", 40, "--sample-queries", 40, "-o", out,
                      *QUICK)
    assert code in (0, 3) and (out / "auto.json").is_file(), text
    assert "width: 48 dims, not 64" in " ".join(text.split())
    said.append(text)
    named = {o for text in said for o in OPTION.findall(text)}
    assert named and named <= options, sorted(named - options)


def test_corpus_field_is_read_by_the_search_and_its_final_check(tmp_path, tiny_bert, capsys):
    rng = random.Random(5)
    body = tmp_path / "body.jsonl"
    body.write_text("".join(json.dumps({"body": " ".join(sentence(rng, 6, 9).capitalize() + "." for _ in range(3))})
                            + "\n" for _ in range(150)))
    out = tmp_path / "out"
    code, said = _run(capsys, tiny_bert, "--corpus", body, "--corpus-field", "body", "--min-retention", "0.5",
                      "--sample-queries", "20", "--max-noise", "2", "-o", out, *QUICK)
    assert code in (0, 3) and (out / "auto.json").is_file(), said
