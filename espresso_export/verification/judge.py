"""Filling a ``--write-judging`` file (``espresso-export judge``): a person at the terminal, labels the user already
has (a qrels file), or any program the user runs as judge (an LLM or a cross-encoder behind a script).

The file is the one ``verify`` and ``auto`` wrote: JSON lines, one query-document pair each, grouped by query, the
queries in a random order fixed by their ids (so the first judged are a fair sample). Only pairs with
``relevance`` null are asked for; each answer is written back at once (atomically), so a judge who stops (``q``,
Ctrl-C, the end of the input) loses nothing and the next run continues where they stopped. A query counts once
all its pairs are judged: the judged retention reads only those.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from espresso_export.core.errors import NotFoundError, RuntimeFailure, ValidationError
from espresso_export.core.settings import resolve
from espresso_export.verification.judge_settings import JudgeSettings
from espresso_export.verification.judging import (
    FILLED,
    parse_relevance,
    read_judgments,
    write_pairs,
)


@dataclass
class JudgeResult:
    path: str
    judge: str  # "terminal", "qrels FILE" or "command CMD"
    pairs: int
    queries: int
    judged_now: int  # pairs given a relevance by this run
    complete: int  # queries whose every pair is judged
    seconds: float
    stopped: str = ""  # why the run stopped before every pair was judged, if it did
    hints: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"path": self.path, "judge": self.judge, "pairs": self.pairs, "queries": self.queries,
                "judged_now": self.judged_now, "queries_complete": self.complete, "seconds": round(self.seconds, 1),
                "stopped": self.stopped or None}


@dataclass
class _Pairs:
    path: Path
    rows: list[dict]

    @classmethod
    def read(cls, path: str | Path) -> _Pairs:
        from espresso_export.data.files import text_lines

        path = Path(path).expanduser()
        if not path.is_file():
            raise NotFoundError(f"pairs file not found: {path} (write it with --write-judging FILE)")
        rows = []
        for n, line in enumerate(text_lines(path.read_text(encoding="utf-8")), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                row = None
            if not isinstance(row, dict) or not {"query_id", "doc_id", FILLED} <= row.keys():
                raise ValidationError(f"{path}:{n}: not a pair as --write-judging writes it (a JSON line with "
                                      "query_id, doc_id and relevance)")
            grade = parse_relevance(row[FILLED], f"{path}:{n}")
            row[FILLED] = None if grade is None else _as_written(grade)
            rows.append(row)
        return cls(path, rows)

    def by_query(self) -> dict[tuple, list[dict]]:
        out: dict[tuple, list[dict]] = {}
        for row in self.rows:
            out.setdefault((row.get("corpus"), str(row["query_id"])), []).append(row)
        return out

    def judged(self) -> int:
        """Pairs with a relevance."""
        return sum(r[FILLED] is not None for r in self.rows)

    def complete(self) -> int:
        return sum(all(r[FILLED] is not None for r in rows) for rows in self.by_query().values())

    def save(self) -> None:
        write_pairs(self.path, self.rows)


def _as_written(grade: float) -> float | int:
    """A grade as a judge would type it: 1, not 1.0."""
    return int(grade) if grade.is_integer() else grade


def _from_qrels(pairs: _Pairs, qrels: str) -> None:
    """Grades from a qrels or judgments file; a labelled query's pair not in it is 0."""
    judgments = read_judgments(qrels)
    for (corpus, query_id), rows in pairs.by_query().items():
        grades = judgments.grades(corpus, query_id, rows[0].get("query"))
        if not grades:
            continue
        for row in rows:
            if row[FILLED] is None:
                row[FILLED] = _as_written(grades.get(str(row["doc_id"]), 0.0))


def _call(argv: list[str], payload: str, where: str, timeout: float) -> list[str]:
    """The program's stdout lines (non-empty) for ``payload`` on its stdin; a failure names ``where``."""
    try:
        done = subprocess.run(argv, input=payload + "\n", capture_output=True, text=True, timeout=timeout,
                              check=False)
    except FileNotFoundError:
        raise ValidationError(f"--command: {argv[0]} not found") from None
    except subprocess.TimeoutExpired:
        raise RuntimeFailure(f"{where}: no answer within {timeout:g} s (--command-timeout)") from None
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or [""])[-1][:200]
        raise RuntimeFailure(f"{where}: exited {done.returncode}" + (f" ({said})" if said else ""))
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def _grade(answer: str, where: str) -> float:
    try:
        grade = parse_relevance(answer, where)
    except ValidationError:
        grade = None
    if grade is None:
        raise RuntimeFailure(f"{where}: printed {json.dumps(answer[:80])}, not a relevance (a number >= 0 a line)")
    return grade


def _run_command(argv: list[str], row: dict, timeout: float) -> float:
    where = f"--command on query {row['query_id']}, document {row['doc_id']}"
    line = json.dumps({k: v for k, v in row.items() if k != FILLED}, ensure_ascii=False)
    return _grade((_call(argv, line, where, timeout)[-1:] or [""])[0], where)


def _per_query(pairs: _Pairs, rows: list[dict], argv: list[str], timeout: float) -> None:
    """One run judges a query's open pairs: the query and its documents in, one relevance a line out."""
    first = rows[0]
    where = f"--command --per-query on query {first['query_id']}"
    payload = json.dumps({"corpus": first.get("corpus"), "query_id": first["query_id"], "query": first.get("query"),
                          "documents": [{"doc_id": r["doc_id"], "document": r.get("document")} for r in rows]},
                         ensure_ascii=False)
    lines = _call(argv, payload, where, timeout)
    if len(lines) < len(rows):
        raise RuntimeFailure(f"{where}: printed {len(lines)} line(s) for {len(rows)} documents (one relevance a "
                             "line, in the documents' order)")
    grades = [_grade(line, where) for line in lines[-len(rows):]]
    for row, grade in zip(rows, grades):
        row[FILLED] = _as_written(grade)
    pairs.save()


def _by_command(pairs: _Pairs, rows: list[dict], argv: list[str], s: JudgeSettings) -> None:
    """One query's open pairs judged by the program, ``s.jobs`` runs at a time; what was answered is saved even
    when a run fails."""
    from concurrent.futures import ThreadPoolExecutor

    try:
        if s.jobs == 1:
            for row in rows:
                row[FILLED] = _as_written(_run_command(argv, row, s.command_timeout))
            return
        with ThreadPoolExecutor(min(s.jobs, len(rows))) as pool:
            futures = [(row, pool.submit(_run_command, argv, row, s.command_timeout)) for row in rows]
            failed = None
            for row, future in futures:
                try:
                    row[FILLED] = _as_written(future.result())
                except Exception as e:  # the first failure is raised once the others have answered
                    failed = failed or e
            if failed is not None:
                raise failed
    finally:
        pairs.save()


def _open(rows_by_query: dict[tuple, list[dict]]) -> Iterator[tuple[int, list[dict], list[dict]]]:
    """Each query with a pair not judged yet: its position among all queries, its pairs and its open ones."""
    for i, rows in enumerate(rows_by_query.values()):
        open_rows = [r for r in rows if r[FILLED] is None]
        if open_rows:
            yield i, rows, open_rows


def judge(path: str | Path, settings: JudgeSettings | None = None, /, *,
          ask: Callable[[str], str] | None = None, show: Callable[[str], None] | None = None,
          **kwargs) -> JudgeResult:
    """Fill the pairs file at ``path`` (see the module). ``settings``: a :class:`JudgeSettings` or its fields as
    keywords. ``ask``/``show``: how a person is asked and shown (the terminal by default: ``input`` and the error
    console, so ``--json`` output stays clean)."""
    s = resolve(JudgeSettings, settings, kwargs, call="judge")
    pairs = _Pairs.read(path)
    start, before = time.perf_counter(), pairs.judged()
    stopped = ""
    if s.qrels:
        kind = f"qrels {s.qrels}"
        _from_qrels(pairs, s.qrels)
        pairs.save()
    else:
        kind = (f"command {s.command}" + (" (per query)" if s.per_query else "")) if s.command else "terminal"
        stopped = _one_by_one(pairs, s, ask, show)
    by_query = pairs.by_query()
    result = JudgeResult(str(pairs.path), kind, len(pairs.rows), len(by_query),
                         pairs.judged() - before, pairs.complete(),
                         time.perf_counter() - start, stopped)
    result.hints.append(_next_step(result))
    return result


def _one_by_one(pairs: _Pairs, s: JudgeSettings, ask, show) -> str:
    """Every open pair in file order, by the command or a person; the file saved after each answer. Returns why it
    stopped early ("" when every pair is judged)."""
    from espresso_export.core.console import err_console

    argv = shlex.split(s.command) if s.command else None
    if argv is not None and not argv:
        raise ValidationError("--command is empty")
    show = show or (lambda text: err_console().print(text, markup=False, highlight=False, soft_wrap=True))
    ask = ask or (lambda prompt: err_console().input(prompt))  # stderr: stdout keeps the result (--json)
    by_query, started = pairs.by_query(), time.perf_counter()
    judged_before = pairs.judged()
    for i, rows, open_rows in _open(by_query):
        if s.queries is not None and pairs.complete() >= s.queries:
            return f"{s.queries} queries judged (--queries)"
        if argv is not None:
            if s.per_query:
                _per_query(pairs, open_rows, argv, s.command_timeout)
            else:
                _by_command(pairs, open_rows, argv, s)
            continue
        done = pairs.judged() - judged_before
        where = (f"query {i + 1} of {len(by_query)} ({pairs.complete()} fully judged; {done} pairs judged in "
                 f"{(time.perf_counter() - started) / 60:.1f} min)")
        said = _ask_query(pairs, rows[0], open_rows, where, s.shown_chars, ask, show)
        if said:
            return said
    return ""


def _ask_query(pairs: _Pairs, first: dict, open_rows: list[dict], where: str, chars: int, ask, show) -> str:
    """A person judges one query's open pairs. Returns why they stopped ("" when the query is done or skipped)."""
    show(f"\n{where}:\n{first.get('query', first['query_id'])}")
    for j, row in enumerate(open_rows, 1):
        text = str(row.get("document", ""))
        cut = text if len(text) <= chars else text[:chars] + f" ... ({len(text):,} characters)"
        show(f"\n  document {j} of {len(open_rows)} ({row['doc_id']}):\n  {cut}")
        while True:
            try:
                answer = ask("  relevance? 0 not, 1 relevant, 2 highly; s skip this query, q save and stop: ").strip()
            except EOFError:
                return "the input ended"
            if answer.lower() in ("q", "quit"):
                return "stopped by the judge"
            if answer.lower() in ("s", "skip"):
                return ""
            try:
                grade = parse_relevance(answer, "answer") if answer else None
            except ValidationError:
                grade = None
            if grade is not None:
                row[FILLED] = _as_written(grade)
                pairs.save()
                break
            show("  a number at least 0 (0, 1, 2), s or q")
    return ""


def _next_step(result: JudgeResult) -> str:
    if result.complete == 0:
        return f"no query fully judged yet in {result.path}: run judge again to continue"
    more = "" if result.complete >= result.queries else \
        f"; {result.queries - result.complete} more can be judged by running judge again"
    return (f"{result.complete} of {result.queries} queries fully judged: give {result.path} to verify or auto "
            f"with --judgments{more}")
