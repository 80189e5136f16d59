"""verify --write-judging and --judgments: the pairs a judge fills are exactly the union of both models' top 10s,
in an order set by the query ids, and the judged retention is the labelled nDCG@10 arithmetic done by hand."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from tiny_models import _WORDS

from espresso_export.cli.app import main
from espresso_export.core.errors import ValidationError
from espresso_export.verification.judging import judged_rows, query_order, read_judgments
from espresso_export.verification.verify import verify

QUICK = ["--sts-limit", "40", "--batch-sizes", "none", "--threads", "1", "--no-cache"]
API = {"sts_limit": 40, "batch_sizes": [], "threads": 1, "cache": False}


@pytest.fixture(scope="module")
def texts(tmp_path_factory) -> tuple[Path, Path]:
    """40 documents with ids (jsonl) and 8 queries (txt), of the tiny models' words."""
    rng = random.Random(7)
    root = tmp_path_factory.mktemp("judging")
    docs, queries = root / "docs.jsonl", root / "queries.txt"
    docs.write_text("".join(json.dumps({"_id": f"doc{i}", "text": " ".join(rng.choices(_WORDS, k=8)) + f" {i}"}) + "\n"
                            for i in range(40)), encoding="utf-8")
    queries.write_text("".join(" ".join(rng.choices(_WORDS, k=4)) + "\n" for _ in range(8)), encoding="utf-8")
    return docs, queries


def _top10(model: Path, queries: list[str], docs: list[str]) -> np.ndarray:
    """Each query's top 10 documents by cosine, computed here with numpy, apart from verify's faiss search."""
    from espresso_export.verification.embedders import open_embedder

    emb = open_embedder(model, threads=1)
    q, d = emb.encode(queries, batch_size=64), emb.encode(docs, batch_size=64)
    q, d = q / np.linalg.norm(q, axis=1, keepdims=True), d / np.linalg.norm(d, axis=1, keepdims=True)
    return np.argsort(-(q @ d.T), axis=1, kind="stable")[:, :10]


@pytest.fixture(scope="module")
def rankings(tiny_bert, tiny_cut, texts):
    docs, queries = texts
    doc_texts = [json.loads(line)["text"] for line in docs.read_text().splitlines()]
    query_texts = queries.read_text().splitlines()
    return _top10(tiny_bert, query_texts, doc_texts), _top10(tiny_cut, query_texts, doc_texts), query_texts, doc_texts


def test_write_judging_pools_only_the_union_of_both_top_10s_in_a_fixed_random_order(tiny_bert, tiny_cut, texts,
                                                                                     rankings, tmp_path):
    docs, queries = texts
    source, candidate, query_texts, doc_texts = rankings
    out = tmp_path / "pairs.jsonl"
    code = main(["verify", str(tiny_cut), "--against", str(tiny_bert), "--corpus", str(docs), "--queries",
                 str(queries), "--write-judging", str(out), "--json", str(tmp_path / "r.json"), *QUICK])
    assert code == 0
    pools = {q: sorted(set(source[q]) | set(candidate[q])) for q in range(len(query_texts))}
    assert any(len(p) > 10 for p in pools.values())  # the two models disagree: the union is more than one top 10
    # the queries in an order set by their ids alone (a fair sample when judging stops early), not by pool size
    order = sorted(pools, key=lambda q: query_order("docs.jsonl", str(q)))
    assert order != sorted(pools, key=lambda q: (len(pools[q]), q))
    expected = [{"corpus": "docs.jsonl", "query_id": str(q), "query": query_texts[q], "doc_id": f"doc{d}",
                 "document": doc_texts[d], "relevance": None} for q in order for d in pools[q]]
    assert [json.loads(line) for line in out.read_text().splitlines()] == expected
    note = json.loads((tmp_path / "r.json").read_text())["notes"][-1]
    assert note.startswith(f"{len(expected)} pairs of 8 queries to judge written to")
    # a file with nothing judged yet is replaced; one holding a judgment is kept (exit 2)
    assert main(["verify", str(tiny_cut), "--against", str(tiny_bert), "--corpus", str(docs), "--queries",
                 str(queries), "--write-judging", str(out), *QUICK]) == 0
    lines = out.read_text().splitlines()
    out.write_text("\n".join([lines[0].replace('"relevance": null', '"relevance": 1'), *lines[1:]]) + "\n")
    with pytest.raises(ValidationError, match="holds judgments"):
        verify(tiny_cut, tiny_bert, corpus=[str(docs)], write_judging=str(out), **API)


def _ndcg(ranked, grades) -> float:
    """nDCG@10 written out: gain = relevance, log2 discount, the ideal from the judged relevances."""
    dcg = sum(grades[d] / math.log2(i + 2) for i, d in enumerate(ranked[:10]))
    ideal = sorted(grades.values(), reverse=True)[:10]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def test_judgments_give_the_hand_computed_retention(tmp_path):
    """Three queries over six documents: q0 and q1 fully judged, q2 leaves document 5 (in the candidate's top 10)
    unjudged and is skipped. Extra fields are ignored; a judgment of another query text under q1's id is not used."""
    path = tmp_path / "filled.jsonl"
    judged = {("0", 0): 2, ("0", 1): 0, ("0", 2): 1, ("0", 3): 0, ("1", 3): 1, ("1", 4): 1, ("1", 5): 0,
              ("2", 0): 1, ("2", 2): 0, ("2", 4): 2, ("2", 5): None}
    lines = [{"corpus": "docs.txt", "query_id": q, "doc_id": str(d), "relevance": r, "note": "extra"}
             for (q, d), r in judged.items()]
    lines.append({"corpus": "docs.txt", "query_id": "1", "query": "another query", "doc_id": "5", "relevance": 2})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    data = SimpleNamespace(spec="docs.txt", name="docs.txt", passages=[f"d{i}" for i in range(6)],
                           queries=["q zero", "q one", "q two"], queries_spec=None)
    tops = (np.array([[0, 1, 2], [3, 4, 5], [0, 2, 4]]), np.array([[1, 0, 3], [3, 5, 4], [0, 2, 5]]))
    (row,) = judged_rows([data], [SimpleNamespace(tops=tops)], read_judgments(path))
    # q0: gains 2, 0, 1 (source) and 0, 2, 0 (candidate); ideal 2, 1 (document 3 judged 0)
    ideal0 = 2 / math.log2(2) + 1 / math.log2(3)
    source0 = (2 / math.log2(2) + 0 / math.log2(3) + 1 / math.log2(4)) / ideal0
    candidate0 = (0 / math.log2(2) + 2 / math.log2(3) + 0 / math.log2(4)) / ideal0
    # q1: gains 1, 1, 0 (source, the ideal too) and 1, 0, 1 (candidate)
    ideal1 = 1 / math.log2(2) + 1 / math.log2(3)
    source1, candidate1 = ideal1 / ideal1, (1 / math.log2(2) + 0 / math.log2(3) + 1 / math.log2(4)) / ideal1
    assert (row.judged, row.skipped) == (2, 1)
    assert row.source.tolist() == pytest.approx([source0, source1])
    assert row.candidate.tolist() == pytest.approx([candidate0, candidate1])
    assert row.retention == pytest.approx((candidate0 + candidate1) / (source0 + source1))  # 1.3993 / 1.9502
    assert row.to_dict()["retention"] == pytest.approx(0.7175, abs=1e-4)
    assert row.line().startswith("judged retention on docs.txt: 0.718 [") and row.line().endswith(
        ", 2 queries judged, 1 skipped")
    tsv = tmp_path / "qrels.tsv"  # the same judgments as a BEIR qrels file (a header, no corpus): the same numbers
    tsv.write_text("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{'' if r is None else r}\n"
                                                            for (q, d), r in judged.items()), encoding="utf-8")
    (again,) = judged_rows([data], [SimpleNamespace(tops=tops)], read_judgments(tsv))
    assert again.retention == pytest.approx(row.retention) and again.skipped == 1


def test_verify_reports_the_judged_retention_of_a_filled_file(tiny_bert, tiny_cut, texts, rankings, tmp_path):
    """The pairs verify wrote, filled by a rule (relevance: the document's number mod 3), one pair of the last
    query left empty: the retention over the others is the nDCG@10 computed here from numpy's rankings."""
    docs, queries = texts
    source, candidate, query_texts, _ = rankings
    pairs = tmp_path / "pairs.jsonl"
    verify(tiny_cut, tiny_bert, corpus=[str(docs)], queries=[str(queries)], write_judging=str(pairs), **API)
    filled = [{**p, "relevance": int(p["doc_id"][3:]) % 3} for p in map(json.loads, pairs.read_text().splitlines())]
    filled[-1]["relevance"] = None
    pairs.write_text("".join(json.dumps(p) + "\n" for p in filled), encoding="utf-8")
    report = verify(tiny_cut, tiny_bert, corpus=[str(docs)], queries=[str(queries)], judgments=str(pairs),
                    min_judged_retention=1.5, **API)
    skipped = int(filled[-1]["query_id"])
    kept = [q for q in range(len(query_texts)) if q != skipped]
    grades = [{d: d % 3 for d in set(source[q]) | set(candidate[q])} for q in kept]
    src = [_ndcg(source[q], g) for q, g in zip(kept, grades)]
    cand = [_ndcg(candidate[q], g) for q, g in zip(kept, grades)]
    (row,) = report.judged
    assert (row.judged, row.skipped) == (7, 1)
    assert row.retention == pytest.approx(sum(cand) / sum(src))
    (check,) = report.failed
    assert check.name == "judged retention on docs.jsonl" and check.value == pytest.approx(row.retention)
    assert report.to_dict()["judged"][0]["queries_judged"] == 7
    markdown = report.to_markdown()
    assert "### Judged retention: docs.jsonl (labelled nDCG@10 from your judgments, not an estimate)" in markdown
    assert f"judged retention on docs.jsonl: {row.retention:.3f} [" in markdown
    assert ", 7 queries judged, 1 skipped\n" in markdown


@pytest.mark.parametrize("line, message", [
    ('{"query_id": "0", "doc_id": "doc1", "relevance": "high"}', "relevance must be a number"),
    ('{"query_id": "0", "doc_id": "doc1", "relevance": -1}', "relevance must be a number"),
    ('{"query_id": "0", "relevance": 1}', "needs query_id, doc_id and relevance"),
    ('{"query_id": "0", "doc_id": "doc1", "relevance": 1', "not valid JSON"),
])
def test_a_malformed_judgments_line_is_refused_with_its_file_and_line(tiny_bert, texts, tmp_path, capsys, line,
                                                                      message):
    docs, _ = texts
    path = tmp_path / "filled.jsonl"
    path.write_text('{"query_id": "0", "doc_id": "doc0", "relevance": 2}\n' + line + "\n", encoding="utf-8")
    code = main(["verify", str(tiny_bert), "--against", str(tiny_bert), "--corpus", str(docs), "--judgments",
                 str(path), *QUICK])
    err = capsys.readouterr().err
    assert code == 2 and f"{path}:2" in err.replace("\n", "") and message in err.replace("\n", "")


def test_judging_needs_a_corpus_and_auto_takes_the_files(tmp_path):
    from espresso_export.searching.auto_settings import AutoSettings

    judged = tmp_path / "filled.jsonl"
    judged.write_text('{"query_id": "0", "doc_id": "0", "relevance": 1}\n', encoding="utf-8")
    with pytest.raises(ValidationError, match="give --corpus"):
        verify("a", "b", judgments=str(judged), **API)
    with pytest.raises(ValidationError, match="holds judgments"):  # before auto's search, not after it
        AutoSettings(corpus=["docs.jsonl"], write_judging=str(judged))
    assert AutoSettings(corpus=["docs.jsonl"], judgments=str(judged)).judgments == str(judged)


def test_pairs_with_line_separators_in_their_texts_read_back(tmp_path):
    """A document holding U+2028 (PDF extractions and web pages do) is written escaped, one pair a line for any
    reader, and the file reads back whole: as pairs nobody judged yet, and once filled as judgments."""
    from espresso_export.verification.judging import unjudged_file, write_pairs

    path = tmp_path / "pairs.jsonl"
    pairs = [{"corpus": "docs.jsonl", "query_id": "q", "query": "banks", "doc_id": f"d{i}",
              "document": f"part one\u2028part two\u2029{i}", "relevance": None} for i in range(2)]
    assert write_pairs(path, pairs) == "2 pairs of 1 queries"
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) == 2 and "\u2028" not in text
    assert unjudged_file(path)
    assert json.loads(text.splitlines()[0])["document"] == "part one\u2028part two\u20290"
    path.write_text(text.replace('"relevance": null', '"relevance": 1'), encoding="utf-8")
    assert not unjudged_file(path)
    assert sum(len(v) for v in read_judgments(path).by_query.values()) == 2


def test_a_judge_command_fills_the_pairs_and_verify_reads_them_in_the_same_run(tiny_bert, tiny_cut, texts, rankings,
                                                                               tmp_path):
    """--judge-command: the pairs written are filled by the program (here: a document is relevant when it is in
    the source's top 3) and the judged retention is reported and gated in one run, as --judgments would give it."""
    import sys

    docs, queries = texts
    source, candidate, query_texts, _ = rankings
    top3 = {str(q): {f"doc{d}" for d in source[q][:3]} for q in range(len(query_texts))}
    script = tmp_path / "top3.py"
    script.write_text("import json, sys\nq = json.load(sys.stdin)\ntop = " + json.dumps({k: sorted(v) for k, v in
                      top3.items()}) + "\nprint('\\n'.join('1' if d['doc_id'] in top[q['query_id']] else '0' "
                      "for d in q['documents']))\n", encoding="utf-8")
    out = tmp_path / "pairs.jsonl"
    report = verify(tiny_cut, tiny_bert, corpus=[str(docs)], queries=[str(queries)], write_judging=str(out),
                    judge_command=f"{sys.executable} {script}", judge_per_query=True, min_judged_retention=0.01, **API)
    (row,) = report.judged
    by_hand = []
    for q in range(len(query_texts)):  # every pair of the union of both top 10s judged: 1 in the source's top 3
        pool = {f"doc{d}" for d in (*source[q], *candidate[q])}
        grades = {d: 1.0 if d in top3[str(q)] else 0.0 for d in pool}
        by_hand.append((_ndcg([f"doc{d}" for d in candidate[q]], grades), _ndcg([f"doc{d}" for d in source[q]], grades)))
    assert row.judged == len(query_texts) and row.source.tolist() == pytest.approx([s for _, s in by_hand])
    assert row.candidate.tolist() == pytest.approx([c for c, _ in by_hand])
    assert any(f"pairs judged by {sys.executable}" in n for n in report.notes) and report.passed
    assert [c.name for c in report.checks] == ["judged retention on docs.jsonl"]
    with pytest.raises(ValidationError, match="--judge-command fills the pairs --write-judging FILE writes"):
        verify(tiny_cut, tiny_bert, corpus=[str(docs)], judge_command="judge.py", **API)
