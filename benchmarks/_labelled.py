"""The labelled collections the benchmarks judge on: the shared BEIR sets, and sets built here once into the cache
from shared data (``stsb-train-dev``, ``snli-entailment``, ``snli-neutral``, ``business-reports-by-report``)."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

from _models import CACHE, SHARED

HERE = Path(__file__).resolve().parent
BUILT_INTO = CACHE / "estimate" / "collections"


def collection(name: str) -> Path:
    """A BEIR folder: a shared one, or one built here once into the cache (``stsb-train-dev``, ``snli-entailment``)."""
    if name not in BUILT and name not in WRITTEN:
        return SHARED / "retrieval" / name
    out = BUILT_INTO / name
    if not (out / "qrels" / "test.tsv").is_file():
        WRITTEN[name](out) if name in WRITTEN else _write_beir(out, BUILT[name]())
    return out


def _write_beir(out: Path, data) -> None:
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    with open(out / "corpus.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"_id": i, "title": "", "text": d}) + "\n" for i, d in zip(data.doc_ids, data.docs))
    with open(out / "queries.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"_id": i, "text": q}) + "\n" for i, q in zip(data.query_ids, data.queries))
    with open(out / "qrels" / "test.tsv", "w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for q, docs in data.relevant.items():
            f.writelines(f"{q}\t{d}\t1\n" for d in sorted(docs))


def _snli(limit: int = 500, label: str = "entailment"):
    """Each of ``limit`` hypotheses of ``label`` (a seeded sample, one per premise) is a query; every distinct
    premise of SNLI dev+test is a document; a query's relevant document is its premise (entailment retrieval, or
    with ``neutral`` a hypothesis the premise neither entails nor contradicts)."""
    import gzip

    from espresso_export.data.retrieval_sets import RetrievalSet

    premises: dict[str, str] = {}
    entailed: dict[str, str] = {}
    with gzip.open(SHARED / "nli" / "snli-dev-test.tsv.gz", "rt", encoding="utf-8") as f:
        for line in f:
            premise, hypothesis, kind = line.rstrip("\n").split("\t")[:3]
            doc = premises.setdefault(premise, f"d{len(premises)}")
            if kind == label:
                entailed.setdefault(doc, hypothesis)
    chosen = sorted(random.Random(0).sample(sorted(entailed), min(limit, len(entailed))), key=lambda d: int(d[1:]))
    query_ids = [f"q{i}" for i in range(len(chosen))]
    return RetrievalSet(f"snli-{label}", query_ids, [entailed[d] for d in chosen], list(premises.values()),
                        list(premises), {q: frozenset([d]) for q, d in zip(query_ids, chosen)})


def _stsb():
    """Each distinct sentence1 of STS-B train+dev with a pair scored >= 4 is a query; every distinct sentence2 a
    document; the relevant documents are its pairs scored >= 4."""
    from espresso_export.data.retrieval_sets import retrieval_from_sts
    from espresso_export.data.sts_sets import StsPairs, read_sts

    pairs = [read_sts(str(SHARED / "stsb" / f"sts-{split}.csv")) for split in ("train", "dev")]
    merged = StsPairs("stsb-train-dev", *([x for p in pairs for x in getattr(p, f)]
                                          for f in ("sentence1", "sentence2", "scores")))
    return retrieval_from_sts(merged, min_score=4.0)


def _business_by_report(out: Path) -> None:
    """business-reports with each of its 50 questions judged by the report it was written from
    (``collections/business-reports-by-report.tsv``): every chunk of that report relevant, the shared set's own
    scheme. The shared qrels point 10 of their 11 judged questions at another report's chunks."""
    shared = SHARED / "retrieval" / "business-reports"
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    for name in ("corpus.jsonl", "queries.jsonl"):
        shutil.copyfile(shared / name, out / name)
    with open(shared / "corpus.jsonl", encoding="utf-8") as f:
        ids = [json.loads(line)["_id"] for line in f if line.strip()]
    rows = [line.split("\t")[:2] for line in (HERE / "collections" / "business-reports-by-report.tsv")
            .read_text(encoding="utf-8").splitlines() if line and not line.startswith(("#", "query-id"))]
    with open(out / "qrels" / "test.tsv", "w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for query, report in rows:
            chunks = [d for d in ids if d == report or d.startswith(report + "_chunk_")]
            assert chunks, f"no chunk of report {report} in the shared corpus"
            f.writelines(f"{query}\t{d}\t1\n" for d in chunks)


BUILT = {"stsb-train-dev": _stsb, "snli-entailment": _snli, "snli-neutral": lambda: _snli(label="neutral")}
WRITTEN = {"business-reports-by-report": _business_by_report}  # written whole, not from a RetrievalSet
# heals and candidate vectors are the documents', shared between collections of the same documents
# sets whose shared labels do not match their texts: left out of the error table and the plot
# (business-reports: its qrels point 10 of 11 judged questions at another report's chunks; -by-report judges)
MISLABELLED = {"business-reports"}
SAME_DOCUMENTS = {"snli-neutral": "snli-entailment", "business-reports-by-report": "business-reports"}
