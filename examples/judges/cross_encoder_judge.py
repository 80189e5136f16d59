"""A relevance judge for `espresso-export judge --command`: a cross-encoder (sentence-transformers), which reads
the query and the document together and so judges more closely than either embedding model it compares.

    export JUDGE_MODEL=cross-encoder/ms-marco-MiniLM-L6-v2   # the default; any CrossEncoder folder or Hub id
    espresso-export judge pairs.jsonl --per-query --command "python examples/judges/cross_encoder_judge.py"

With ``--per-query`` it scores a query's documents in one batch (one model load a query; per pair it loads the
model for every pair). It prints one relevance a line: 2 at or above ``JUDGE_HIGHLY`` (default 0.9), 1 at or
above ``JUDGE_RELEVANT`` (default 0.5), else 0, on the model's output after its activation (a probability for
the ms-marco cross-encoders). These thresholds are not calibrated by this project: check a few of its grades
against your own, and set them for your model and documents.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    from sentence_transformers import CrossEncoder

    item = json.load(sys.stdin)
    docs = [d["document"] for d in item["documents"]] if "documents" in item else [item["document"]]
    model = CrossEncoder(os.environ.get("JUDGE_MODEL", "cross-encoder/ms-marco-MiniLM-L6-v2"))
    scores = model.predict([(item["query"], d) for d in docs], show_progress_bar=False)
    relevant, highly = float(os.environ.get("JUDGE_RELEVANT", "0.5")), float(os.environ.get("JUDGE_HIGHLY", "0.9"))
    print("\n".join(str(2 if s >= highly else 1 if s >= relevant else 0) for s in map(float, scores)))


if __name__ == "__main__":
    main()
