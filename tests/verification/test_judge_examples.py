"""The judge programs in ``examples/judges/`` run under ``espresso-export judge --command``: an LLM behind an
OpenAI-compatible endpoint (here a local server answering as a model would) and a cross-encoder (a tiny one)."""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from espresso_export.core.errors import RuntimeFailure
from espresso_export.verification.judge import judge

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "judges"
DOCS = {"d1": "apples grow on trees", "d2": "a recipe for apple pie", "d3": "the history of trains",
        "d4": "apple orchards in spring"}


def _pairs(path: Path) -> Path:
    rows = [("0", "d1"), ("0", "d2"), ("0", "d3"), ("1", "d3"), ("1", "d4")]
    path.write_text("".join(json.dumps({"corpus": "docs.jsonl", "query_id": q, "query": f"where do apples grow {q}",
                                        "doc_id": d, "document": DOCS[d], "relevance": None}) + "\n"
                            for q, d in rows), encoding="utf-8")
    return path


def _grade(passage: str) -> int:
    """The fake model's grade: 3 for orchards and trees, 2 for another apple text, 0 otherwise."""
    return 3 if ("trees" in passage or "orchards" in passage) else 2 if "apple" in passage else 0


class _Model(BaseHTTPRequestHandler):
    replies: list[str] = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        assert self.path == "/v1/chat/completions" and body["temperature"] == 0
        user = body["messages"][-1]["content"]
        passages = user.split("\n\nPassage")[1:]
        if len(passages) == 1:
            reply = f"Grade: {_grade(passages[0])}"
        else:
            reply = "Here are the grades:\n" + "\n".join(f"{i}: {_grade(p)}" for i, p in enumerate(passages, 1))
        if "trains" in user and "RAMBLE" in body["model"]:
            reply = "I cannot say."
        _Model.replies.append(reply)
        out = json.dumps({"choices": [{"message": {"role": "assistant", "content": reply}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


@pytest.fixture
def endpoint(monkeypatch):
    server = HTTPServer(("127.0.0.1", 0), _Model)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{server.server_port}/v1")
    monkeypatch.setenv("JUDGE_MODEL", "fake")
    yield
    server.shutdown()


def _read(path: Path) -> dict[tuple[str, str], float | None]:
    return {(p["query_id"], p["doc_id"]): p["relevance"] for p in map(json.loads, path.read_text().splitlines())}


@pytest.mark.parametrize("per_query", [False, True])
def test_the_llm_judge_maps_its_graded_replies_to_the_judges_scale(endpoint, tmp_path, per_query):
    pairs = _pairs(tmp_path / "pairs.jsonl")
    result = judge(pairs, command=f"{sys.executable} {EXAMPLES / 'llm_judge.py'}", per_query=per_query)
    # grades 3 -> 2, 2 -> 1, 0 -> 0
    assert _read(pairs) == {("0", "d1"): 2, ("0", "d2"): 1, ("0", "d3"): 0, ("1", "d3"): 0, ("1", "d4"): 2}
    assert result.complete == 2


def test_an_llm_reply_without_a_grade_stops_judge_naming_the_pair(endpoint, tmp_path, monkeypatch):
    pairs = _pairs(tmp_path / "pairs.jsonl")
    monkeypatch.setenv("JUDGE_MODEL", "RAMBLE")
    with pytest.raises(RuntimeFailure, match=r"document d3: exited 1 \(llm_judge: no grade .*I cannot say"):
        judge(pairs, command=f"{sys.executable} {EXAMPLES / 'llm_judge.py'}")
    assert _read(pairs)[("0", "d1")] == 2 and _read(pairs)[("0", "d3")] is None  # kept what was judged


@pytest.mark.slow  # about 20 s: sentence-transformers imported once a query
def test_the_cross_encoder_judge_grades_a_querys_documents_in_one_run(tiny_bert, tmp_path, monkeypatch):
    pytest.importorskip("sentence_transformers", reason="the cross-encoder judge needs sentence-transformers")
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    folder = tmp_path / "cross-encoder"
    AutoModelForSequenceClassification.from_pretrained(tiny_bert, num_labels=1).save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_bert).save_pretrained(folder)
    monkeypatch.setenv("JUDGE_MODEL", str(folder))
    monkeypatch.setenv("JUDGE_RELEVANT", "0")  # a sigmoid output is above 0: every pair relevant ...
    monkeypatch.setenv("JUDGE_HIGHLY", "2")  # ... and none above 2
    pairs = _pairs(tmp_path / "pairs.jsonl")
    result = judge(pairs, command=f"{sys.executable} {EXAMPLES / 'cross_encoder_judge.py'}", per_query=True)
    assert set(_read(pairs).values()) == {1} and result.complete == 2


def test_the_llm_judge_reads_the_grades_models_write():
    """One grade: the first 0-3 number ("2 (out of 3)" is a 2); several: "N: g" lines, "Passage N: grade g", markdown
    bold; a passage without a grade gives nothing (the run then exits 1, naming the reply)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("llm_judge", EXAMPLES / "llm_judge.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.grades("Grade: 3", 1) == [3] and module.grades("I would say 2 (out of 3).", 1) == [2]
    assert module.grades("**Passage 1**: 3\nPassage 2: grade 0\n3) 2", 3) == [3, 0, 2]
    assert module.grades("1: 3", 2) == [] and module.grades("no idea", 1) == []
