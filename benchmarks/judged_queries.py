"""How many judged queries `auto --judged-choice` needs: its choice on a random few of the choosing half's queries,
judged on the other half's labels.

A split (``judged_split.py split``) and the work folder of a search on it (``--keep-work``):

    python benchmarks/judged_queries.py OUT.auto-work S --target 0.85 --name dbpedia-5k

Half A's qrels play the judge, as ``judged_split.py fill`` makes them (a pair without a grade is 0): every candidate
the search built (``auto_labels.built``; for each cut the heal the estimate read best, as ``judged_order`` takes it;
the untrained static model never answers) gets its labelled nDCG@10 on each of A's judged queries beside the
source's. For ``n`` queries, ``--draws`` random subsets of A's: the choice is the cheapest candidate (by its time
ratio) whose retention on the subset keeps the target, by two rules: the mean (what ``auto`` does) and the lower
bound of the paired bootstrap 95% interval. Each rule's share of subsets choosing nothing, choosing a candidate
half B's labels read below the target, and below it by more than their own noise (0.05); and the 10th percentile
of the chosen candidates' retention on half B. Beside them, the mean rule on the first ``n`` queries needing fewest
pairs (the union of every candidate's top 10 and the source's), the order pairs files once had: each candidate's
retention on them, and what they chose. Results: ``benchmarks/results/judged-queries-NAME-TARGET.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from _models import minilm
from auto_labels import built, encoder
from estimate import Encoder, labelled, top10

from espresso_export.core.cpu import cpu_model, int8_isa, usable_cores
from espresso_export.core.metrics import ratio_interval
from espresso_export.data import read_retrieval

NOISE = 0.05  # a retention over 20-40 judged queries is known to about this: below the target by more is a miss


def half_a(split: Path, corpus: Path) -> Path:
    """Half A as a BEIR folder beside the split (the corpus linked, A's queries and qrels)."""
    out = split / "A"
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    if not (out / "corpus.jsonl").exists():
        (out / "corpus.jsonl").symlink_to(corpus.resolve())
    (out / "queries.jsonl").write_text((split / "A-queries.jsonl").read_text(encoding="utf-8"), encoding="utf-8")
    (out / "qrels" / "test.tsv").write_text((split / "A-qrels.tsv").read_text(encoding="utf-8"), encoding="utf-8")
    return out


def answerable(rows: list[dict]) -> list[dict]:
    """Per cut, the heal the search's estimate read best (a plain cut if no heal reads better), cheapest first;
    the untrained static model never answers."""
    best: dict[str, dict] = {}
    for r in rows:
        if r["kind"] == "static-plain":
            continue
        cut = r["candidate"].split(" ")[0]
        if cut not in best or r["estimate"] > best[cut]["estimate"]:
            best[cut] = r
    return sorted(best.values(), key=lambda r: (r["latency_ratio"], -r["estimate"]))


def choose(rows: list[dict], picked: np.ndarray, source: np.ndarray, target: float, rule: str) -> dict | None:
    for r in rows:
        c = r["a_ndcg"][picked]
        if rule == "mean":
            kept = c.mean() / source[picked].mean() >= target
        else:
            ci = ratio_interval(c, source[picked], resamples=500)
            kept = ci is not None and ci[0] >= target
        if kept:
            return r
    return None


def main() -> None:
    from espresso_export.model.checkpoint import load
    from espresso_export.model.threads import fixed_threads

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("work", type=Path, help="an auto work folder (--keep-work) of a search on the split")
    ap.add_argument("split", type=Path, help="judged_split.py's folder: A-queries.jsonl, A-qrels.tsv, B/")
    ap.add_argument("--target", type=float, required=True)
    ap.add_argument("--name", required=True, help="the collection's name, for the results file")
    ap.add_argument("--sizes", default="5,10,15,20", type=lambda t: [int(x) for x in t.split(",")])
    ap.add_argument("--draws", type=int, default=200)
    ap.add_argument("--vectors", default=None, help="the cache key prefix of these candidates' vectors, when "
                    "auto_labels.py encoded the same work folder's (its auto-NAME); default judged-NAME")
    args = ap.parse_args()
    started = time.perf_counter()
    b = read_retrieval(args.split / "B")
    a = read_retrieval(half_a(args.split, args.split / "B" / "corpus.jsonl"))
    source = minilm()
    rows = answerable(built(args.work))
    with fixed_threads(usable_cores()):
        src = Encoder("minilm", load(str(source)))
        docs = src("docs", b.docs)
        s_top = top10(src("queries", [a.queries[i] for i in a.evaluated_queries]), docs)
        s_a = a.per_query_scores(s_top, a.evaluated_queries)[:, 2]
        s_b = labelled(b, src("queries", [b.queries[i] for i in b.evaluated_queries]), docs)
        for row in rows:
            key = f"{args.vectors or 'judged-' + args.name}-{row['candidate'].replace(' ', '-').replace(',', '')}"
            enc = encoder(row, source, key)
            c_docs = enc("docs", b.docs)
            row["a_top"] = top10(enc("queries", [a.queries[i] for i in a.evaluated_queries]), c_docs)
            row["a_ndcg"] = a.per_query_scores(row["a_top"], a.evaluated_queries)[:, 2]
            row["b_retention"] = float(labelled(b, enc("queries", [b.queries[i] for i in b.evaluated_queries]),
                                                c_docs).mean() / s_b.mean())
            print(f"  {row['candidate']}: x{row['latency_ratio']:.3f}, A {row['a_ndcg'].mean() / s_a.mean():.3f}, "
                  f"B {row['b_retention']:.3f}", flush=True)
    keeping_b = [r["candidate"] for r in rows if r["b_retention"] >= args.target]
    judged = np.flatnonzero(s_a > 0)  # a query the source finds nothing for judges no ratio
    # fewest pairs first (every candidate here pooled): how that order reads the candidates, beside random draws
    pool = [len({*s_top[q].tolist(), *(d for r in rows for d in r["a_top"][q].tolist())}) for q in judged]
    fewest = judged[np.argsort(pool, kind="stable")]
    # pairs a judged query needs for the source and the cheapest k candidates (k = 1 .. all), a query on average
    staged = [round(float(np.mean([len({*s_top[q].tolist(), *(d for r in rows[:k] for d in r["a_top"][q].tolist())})
                                   for q in judged])), 1) for k in range(1, len(rows) + 1)]
    rng = random.Random(0)
    sizes = []
    for n in sorted({n for n in args.sizes if n < len(judged)} | {len(judged)}):
        out = {"queries": n}
        for rule in ("mean", "lower-bound"):
            picks = [choose(rows, np.array(rng.sample(list(judged), n)), s_a, args.target, rule)
                     for _ in range(args.draws if n < len(judged) else 1)]
            kept = np.array([p["b_retention"] for p in picks if p is not None])
            share = lambda hit: round(sum(map(hit, picks)) / len(picks), 3)
            out[rule] = {"none": share(lambda p: p is None),
                         "below": share(lambda p: p is not None and p["b_retention"] < args.target),
                         "below_by_noise": share(lambda p: p is not None and p["b_retention"] < args.target - NOISE),
                         "b_retention_p10": round(float(np.percentile(kept, 10)), 4) if len(kept) else None,
                         "chosen": {c: share(lambda p, c=c: p is not None and p["candidate"] == c)
                                    for c in dict.fromkeys(p["candidate"] for p in picks if p is not None)}}
        first = choose(rows, fewest[:n], s_a, args.target, "mean")
        out["fewest_pairs_first"] = {"chosen": first and first["candidate"],
                                     "b_retention": first and round(first["b_retention"], 4),
                                     "pairs": int(np.sort(pool)[:n].sum()),
                                     "a_retention": {r["candidate"]: round(float(r["a_ndcg"][fewest[:n]].mean()
                                                                                / s_a[fewest[:n]].mean()), 4)
                                                     for r in rows}}
        sizes.append(out)
        print(json.dumps(out), flush=True)
    record = {"benchmark": "judged-queries", "date": date.today().isoformat(), "work": str(args.work),
              "split": str(args.split), "target": args.target, "draws": args.draws,
              "a_queries_judged": int(len(judged)), "b_queries": len(b.evaluated_queries),
              "machine": {"cpu": cpu_model(), "int8_isa": int8_isa(), "cores": usable_cores()},
              "command": "python benchmarks/judged_queries.py " + " ".join(sys.argv[1:]),
              "keeping_by_b": keeping_b, "pairs_a_query_up_to_each_candidate": staged,
              "candidates": [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()
                              if k in ("candidate", "latency_ratio", "estimate", "b_retention")}
                             | {"a_retention": round(float(r["a_ndcg"].mean() / s_a.mean()), 4)} for r in rows],
              "sizes": sizes, "seconds": round(time.perf_counter() - started)}
    path = HERE / "results" / f"judged-queries-{args.name}-{args.target:g}.json"
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
