"""``espresso-export judge``: the pairs verify wrote filled at the terminal, from a qrels file or by a program, each
answer saved at once, and the file then read by ``verify --judgments``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from espresso_export.cli.app import main
from espresso_export.core.errors import RuntimeFailure, ValidationError
from espresso_export.verification.judge import judge
from espresso_export.verification.judging import read_judgments


def _pairs(path: Path) -> Path:
    """Three queries (2, 3 and 2 pairs), nothing judged, as --write-judging writes them."""
    rows = [("0", "d1"), ("0", "d2"), ("1", "d1"), ("1", "d3"), ("1", "d4"), ("2", "d5"), ("2", "d6")]
    path.write_text("".join(json.dumps({"corpus": "docs.jsonl", "query_id": q, "query": f"query {q}", "doc_id": d,
                                        "document": f"text of {d}", "relevance": None}) + "\n" for q, d in rows),
                    encoding="utf-8")
    return path


def _read(path: Path) -> dict[tuple[str, str], float | None]:
    return {(p["query_id"], p["doc_id"]): p["relevance"] for p in map(json.loads, path.read_text().splitlines())}


def test_qrels_fill_the_labelled_queries_and_leave_the_others(tmp_path):
    pairs = _pairs(tmp_path / "pairs.jsonl")
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\n0\td2\t2\n1\td3\t1\n1\td9\t1\n", encoding="utf-8")
    result = judge(pairs, qrels=str(qrels))
    assert _read(pairs) == {("0", "d1"): 0, ("0", "d2"): 2, ("1", "d1"): 0, ("1", "d3"): 1, ("1", "d4"): 0,
                            ("2", "d5"): None, ("2", "d6"): None}
    assert (result.judged_now, result.complete, result.queries) == (5, 2, 3)
    assert result.hints == [f"2 of 3 queries fully judged: give {pairs} to verify or auto with --judgments; 1 more "
                            "can be judged by running judge again"]
    judged = read_judgments(pairs)
    assert judged.grades("docs.jsonl", "0", "query 0") == {"d1": 0.0, "d2": 2.0}
    assert [p.name for p in tmp_path.iterdir()] == [p.name for p in tmp_path.iterdir() if not p.name.startswith(".")]


def test_a_program_judges_each_pair_and_a_failing_one_keeps_what_was_judged(tmp_path):
    pairs = _pairs(tmp_path / "pairs.jsonl")
    script = tmp_path / "judge.py"
    script.write_text("import json, sys\np = json.load(sys.stdin)\nassert 'relevance' not in p\n"
                      "if p['doc_id'] == 'd5': sys.exit('no answer for ' + p['query'])\n"
                      "print('thinking...')\nprint(1 if p['doc_id'] in ('d1', 'd4') else 0)\n", encoding="utf-8")
    command = f"{sys.executable} {script}"
    with pytest.raises(RuntimeFailure, match=r"--command on query 2, document d5: exited 1 \(no answer for query 2\)"):
        judge(pairs, command=command)
    assert _read(pairs) == {("0", "d1"): 1, ("0", "d2"): 0, ("1", "d1"): 1, ("1", "d3"): 0, ("1", "d4"): 1,
                            ("2", "d5"): None, ("2", "d6"): None}
    script.write_text("import sys\nsys.stdin.read()\nprint('2')\n", encoding="utf-8")
    result = judge(pairs, command=command)
    assert result.judged_now == 2 and result.complete == 3 and result.judge == f"command {command}"
    assert _read(pairs)[("2", "d5")] == 2
    script.write_text("print('very relevant')\n", encoding="utf-8")
    with pytest.raises(RuntimeFailure, match='printed "very relevant", not a relevance'):
        judge(_pairs(tmp_path / "again.jsonl"), command=command)


def test_a_person_answers_skips_and_stops_and_the_next_run_continues(tmp_path):
    pairs = _pairs(tmp_path / "pairs.jsonl")
    shown: list[str] = []
    answers = iter(["1", "high", "0", "s", "2", "q"])
    result = judge(pairs, ask=lambda prompt: next(answers), show=shown.append)
    # query 0: 1, then "high" asked again, 0; query 1: skipped at its first pair; query 2: 2, then q
    assert _read(pairs) == {("0", "d1"): 1, ("0", "d2"): 0, ("1", "d1"): None, ("1", "d3"): None, ("1", "d4"): None,
                            ("2", "d5"): 2, ("2", "d6"): None}
    assert result.stopped == "stopped by the judge" and result.complete == 1
    assert any(s.startswith("\nquery 1 of 3 (0 fully judged; 0 pairs judged in 0.0 min):\nquery 0") for s in shown)
    assert any(s.startswith("\nquery 3 of 3 (1 fully judged; 2 pairs judged in ") for s in shown)
    assert any("text of d2" in s for s in shown) and "  a number at least 0 (0, 1, 2), s or q" in shown
    answers = iter(["1", "0", "0"])  # the next run asks only what is open, and stops after 2 complete queries
    result = judge(pairs, ask=lambda prompt: next(answers), show=shown.append, queries=2)
    assert result.stopped == "2 queries judged (--queries)" and result.complete == 2
    assert _read(pairs)[("1", "d4")] == 0 and _read(pairs)[("2", "d6")] is None
    ended = judge(pairs, ask=lambda prompt: (_ for _ in ()).throw(EOFError()), show=shown.append)
    assert ended.stopped == "the input ended" and ended.judged_now == 0


def test_the_command_line_judges_and_refuses_two_judges(tmp_path, capsys):
    pairs = _pairs(tmp_path / "pairs.jsonl")
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("0\td1\t1\n1\td1\t1\n2\td6\t1\n", encoding="utf-8")
    assert main(["judge", str(pairs), "--qrels", str(qrels), "--command", "cat"]) == 2
    assert "give --qrels or --command, not both" in capsys.readouterr().err
    assert main(["judge", str(tmp_path / "none.jsonl")]) == 2
    assert main(["judge", str(pairs), "--qrels", str(qrels), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["queries_complete"] == 3 and out["judged_now"] == 7 and out["judge"] == f"qrels {qrels}"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"query_id": "0", "doc_id": "d1"}\n', encoding="utf-8")
    assert main(["judge", str(bad), "--qrels", str(qrels)]) == 2
    assert f"{bad}:1: not a pair as --write-judging writes it" in capsys.readouterr().err


def test_verify_reads_what_judge_filled(tiny_bert, tiny_cut, tmp_path):
    """verify writes the pairs, a program judges them, verify gives the judged retention over every query."""
    import random

    from tiny_models import _WORDS

    from espresso_export.verification.verify import verify

    rng = random.Random(3)
    docs, queries = tmp_path / "docs.jsonl", tmp_path / "queries.txt"
    docs.write_text("".join(json.dumps({"_id": f"doc{i}", "text": " ".join(rng.choices(_WORDS, k=8))}) + "\n"
                            for i in range(30)), encoding="utf-8")
    queries.write_text("".join(" ".join(rng.choices(_WORDS, k=4)) + "\n" for _ in range(6)), encoding="utf-8")
    pairs = tmp_path / "pairs.jsonl"
    quick = {"sts_limit": 40, "batch_sizes": [], "threads": 1, "cache": False}
    verify(tiny_cut, tiny_bert, corpus=[str(docs)], queries=[str(queries)], write_judging=str(pairs), **quick)
    script = tmp_path / "judge.py"
    script.write_text("import json, sys\np = json.load(sys.stdin)\nprint(int(p['doc_id'][3:]) % 2)\n")
    result = judge(pairs, command=f"{sys.executable} {script}")
    assert result.complete == result.queries == 6
    report = verify(tiny_cut, tiny_bert, corpus=[str(docs)], queries=[str(queries)], judgments=str(pairs), **quick)
    (row,) = report.judged
    assert (row.judged, row.skipped) == (6, 0) and row.retention is not None


def test_a_program_judges_a_querys_pairs_several_at_a_time(tmp_path):
    """--jobs 3: the runs overlap (each waits for a file the others write), every pair is judged, and --jobs
    without --command is refused."""
    pairs = _pairs(tmp_path / "pairs.jsonl")
    script = tmp_path / "judge.py"
    script.write_text(
        "import json, sys, time, pathlib\np = json.load(sys.stdin)\n"
        f"seen = pathlib.Path({str(tmp_path / 'seen')!r})\nseen.mkdir(exist_ok=True)\n"
        "(seen / (p['query_id'] + p['doc_id'])).touch()\n"
        "deadline = time.time() + 20\n"
        "while p['query_id'] == '1' and len(list(seen.glob('1*'))) < 3 and time.time() < deadline:\n"
        "    time.sleep(0.05)\n"
        "print(len(list(seen.glob('1*'))) if p['query_id'] == '1' else 0)\n", encoding="utf-8")
    result = judge(pairs, command=f"{sys.executable} {script}", jobs=3)
    assert result.complete == 3
    assert [v for (q, _), v in _read(pairs).items() if q == "1"] == [3, 3, 3]  # all three ran at once
    with pytest.raises(ValidationError, match="--jobs is for --command"):
        judge(pairs, jobs=2)
    failing = tmp_path / "failing.py"  # one run of query 1 fails: the two others' answers are kept
    failing.write_text("import json, sys\np = json.load(sys.stdin)\nsys.exit(1) if p['doc_id'] == 'd3' else print(1)\n",
                       encoding="utf-8")
    again = _pairs(tmp_path / "again.jsonl")
    with pytest.raises(RuntimeFailure, match="query 1, document d3: exited 1"):
        judge(again, command=f"{sys.executable} {failing}", jobs=2)
    assert [_read(again)[("1", d)] for d in ("d1", "d3", "d4")] == [1, None, 1]


def test_a_program_judges_a_querys_documents_in_one_run_with_per_query(tmp_path):
    """--per-query: one run a query, its documents in the file's order, one relevance a line (after any log line);
    too few lines stop judge naming the query, keeping the queries judged before."""
    pairs = _pairs(tmp_path / "pairs.jsonl")
    calls = tmp_path / "calls"
    script = tmp_path / "judge.py"
    script.write_text(
        "import json, sys\nq = json.load(sys.stdin)\n"
        f"open({str(calls)!r}, 'a').write(q['query_id'] + '\\n')\n"
        "print('ranking', len(q['documents']), 'documents for', q['query'])\n"
        "for d in q['documents']:\n    print(2 if d['document'].endswith(('d1', 'd5')) else 0)\n", encoding="utf-8")
    result = judge(pairs, command=f"{sys.executable} {script}", per_query=True)
    assert result.complete == 3 and result.judge.endswith("(per query)")
    assert calls.read_text().split() == ["0", "1", "2"]  # one run a query
    assert _read(pairs) == {("0", "d1"): 2, ("0", "d2"): 0, ("1", "d1"): 2, ("1", "d3"): 0, ("1", "d4"): 0,
                            ("2", "d5"): 2, ("2", "d6"): 0}
    script.write_text("import json, sys\nq = json.load(sys.stdin)\n"
                      "print('1\\n' * len(q['documents'])) if q['query_id'] != '1' else None\n", encoding="utf-8")
    again = _pairs(tmp_path / "again.jsonl")
    with pytest.raises(RuntimeFailure, match=r"--per-query on query 1: printed 0 line\(s\) for 3 documents"):
        judge(again, command=f"{sys.executable} {script}", per_query=True)
    assert [v for (q, _), v in _read(again).items() if q == "0"] == [1, 1]  # the first query kept, alone
    with pytest.raises(ValidationError, match="with --per-query one run judges a query"):
        judge(again, command="cat", per_query=True, jobs=2)
