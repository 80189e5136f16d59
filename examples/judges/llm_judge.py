"""A relevance judge for `espresso-export judge --command`: an LLM behind any OpenAI-compatible chat endpoint
(OpenAI, vLLM, Ollama, llama.cpp's server, ...). Standard library only.

    export OPENAI_API_KEY=...                       # not needed by most local servers
    export OPENAI_BASE_URL=http://localhost:11434/v1  # default https://api.openai.com/v1
    export JUDGE_MODEL=gpt-4o-mini                  # the model to ask
    espresso-export judge pairs.jsonl --command "python examples/judges/llm_judge.py" --jobs 4
    espresso-export judge pairs.jsonl --command "python examples/judges/llm_judge.py" --per-query

It reads one pair (``{"query": ..., "document": ...}``) or, with ``--per-query``, one query and its documents on
stdin, asks the model for a TREC-style grade of each document (0 unrelated, 1 related but no answer, 2 answers in
part, 3 the answer), and prints the judge's scale, one number a line: 0 for grades 0 and 1, 1 for 2, 2 for 3 (the
TREC Deep Learning convention counts grade 2 and up relevant). A reply without a grade exits 1 with the reply, so
`judge` stops and names the pair. ``JUDGE_SHOWN_CHARS`` (2,000) caps the characters of a document sent;
``JUDGE_TIMEOUT`` (60) the seconds a request may take. Check a few of its grades against your own before trusting
it.
"""

from __future__ import annotations

import json
import os
import re
import sys
import urllib.error
import urllib.request

SCALE = {0: 0, 1: 0, 2: 1, 3: 2}  # the model's 0-3 grade -> the judge's 0 (not relevant), 1 (relevant), 2 (highly)
# characters of a document sent (JUDGE_SHOWN_CHARS): a long chunk is judged on its start, as a reader skims it, and
# a query's 20-40 documents together (--per-query) stay within a small model's context
SHOWN = int(os.environ.get("JUDGE_SHOWN_CHARS", "2000"))

INSTRUCTIONS = """You judge search results. Given a search query and a passage, grade how well the passage answers
the query, on this scale:
3 = the passage is about the query and contains its answer
2 = the passage answers the query in part, or the answer is there but unclear
1 = the passage is on a related topic but does not answer the query
0 = the passage has nothing to do with the query
Judge the passage's content, not its style. Reply with the grade alone."""

MANY = """You judge search results. Given a search query and numbered passages, grade how well each passage
answers the query, on this scale:
3 = the passage is about the query and contains its answer
2 = the passage answers the query in part, or the answer is there but unclear
1 = the passage is on a related topic but does not answer the query
0 = the passage has nothing to do with the query
Judge each passage on its own content. Reply with one line per passage, in order, as "<number>: <grade>"."""


def ask(system: str, user: str) -> str:
    """The model's reply to one question (temperature 0)."""
    base = os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1").rstrip("/")
    body = {"model": os.environ.get("JUDGE_MODEL", "gpt-4o-mini"), "temperature": 0,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}
    request = urllib.request.Request(f"{base}/chat/completions", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json",
                                              "Authorization": f"Bearer {os.environ.get('OPENAI_API_KEY', 'none')}"})
    try:
        with urllib.request.urlopen(request, timeout=float(os.environ.get("JUDGE_TIMEOUT", "60"))) as response:
            return json.load(response)["choices"][0]["message"]["content"]
    except (urllib.error.URLError, OSError, KeyError, ValueError) as e:
        sys.exit(f"llm_judge: {base}/chat/completions failed: {e}")


def grades(reply: str, count: int) -> list[int]:
    """``count`` grades 0-3 from the reply: "<number>: <grade>" lines for several passages, one number for one."""
    reply = reply.replace("*", "")  # markdown bold around numbers
    if count == 1:
        found = re.search(r"\b[0-3]\b", reply)  # the first: "2 (out of 3)" is a 2
        return [int(found.group())] if found else []
    line = r"^\s*(?:passage\s*)?\[?(\d+)\]?\s*[:.)=-]\s*(?:grade\s*:?\s*)?([0-3])\b"  # "1: 3", "Passage 1: grade 3"
    by_number = {int(n): int(g) for n, g in re.findall(line, reply, re.M | re.I)}
    return [by_number[i] for i in range(1, count + 1)] if all(i in by_number for i in range(1, count + 1)) else []


def main() -> None:
    item = json.load(sys.stdin)
    if "documents" in item:  # --per-query: the query and all its documents, one question
        docs = [d["document"][:SHOWN] for d in item["documents"]]
        user = f"Query: {item['query']}\n\n" + "\n\n".join(f"Passage {i}: {d}" for i, d in enumerate(docs, 1))
        reply = ask(MANY, user)
    else:
        docs = [item["document"][:SHOWN]]
        reply = ask(INSTRUCTIONS, f"Query: {item['query']}\n\nPassage: {docs[0]}")
    found = grades(reply, len(docs))
    if not found:
        sys.exit(f"llm_judge: no grade for {len(docs)} passage(s) in the reply: {reply!r}")
    print("\n".join(str(SCALE[g]) for g in found))


if __name__ == "__main__":
    main()
