"""A judge program for ``auto --judge-command`` / ``judge --command --per-query`` that answers from labels: the
user's judge played by a qrels file (a pair in it gets its grade, any other pair 0, as labelled nDCG@10 counts
it), so the one-command judged choice can be measured on a split (``judged_split.py``) without a person or an LLM.

    espresso-export auto MINILM ... --judged-choice --write-judging P.jsonl \\
        --judge-command "python benchmarks/qrels_judge.py S/A-qrels.tsv" --judge-per-query
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    grades: dict[tuple[str, str], str] = {}
    with open(sys.argv[1], encoding="utf-8") as f:
        for line in f:
            cells = line.rstrip("\n").split("\t")
            if len(cells) >= 3 and cells[2].strip().lstrip("-").isdigit():  # a header's "score" is skipped
                grades[(cells[0], cells[1])] = cells[2].strip()
    item = json.load(sys.stdin)
    docs = item["documents"] if "documents" in item else [item]
    print("\n".join(grades.get((item["query_id"], d["doc_id"]), "0") for d in docs))


if __name__ == "__main__":
    main()
