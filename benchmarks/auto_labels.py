"""Every candidate an ``auto`` search built, judged by a labelled set: is its answer the cheapest that keeps the
target by the labels? (issue 51: "no slower than the cheapest candidate the search built that keeps it by the
labels").

    espresso-export auto MINILM --corpus D/retrieval/dbpedia-5k/corpus.jsonl --retrieval D/retrieval/dbpedia-5k \\
        --min-retention 0.95 --objective latency --time-budget 30m --keep-work -o OUT
    python benchmarks/auto_labels.py OUT.auto-work D/retrieval/dbpedia-5k --target 0.95

The work folder (``--keep-work``) holds each heal (``heals/``) and, in ``auto-state.json``, each candidate's
estimate and measured time. Plain cuts are cut again from the source with the layers the state records (a cut is
deterministic). Each candidate's labelled nDCG@10 retention (float32, at full width, the paired bootstrap 95%
interval) is printed beside the search's estimate on its sample and its time ratio, cheapest first.
Results: ``benchmarks/results/auto-labels-NAME.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from _models import minilm
from estimate import Encoder, labelled

from espresso_export.core.cpu import cpu_model, int8_isa, usable_cores
from espresso_export.core.metrics import ratio_interval
from espresso_export.data import read_retrieval


def built(work: Path) -> list[dict]:
    """(name, kind, time ratio, the search's estimate, how to build it) of every candidate in ``work``."""
    steps = json.loads((work / "auto-state.json").read_text(encoding="utf-8"))["steps"]
    plain = {k[len("plain-"):]: v for k, v in steps.items() if k.startswith("plain-")}
    out = []
    for name, p in plain.items():
        score = p["scores"]["plain"]
        out.append({"candidate": f"{name} plain", "kind": "static-plain" if name == "static" else "plain",
                    "latency_ratio": p["latency_ratio"], "estimate": score["retention"], "layers": p["layers"],
                    "folder": str(work / "heals" / "static") if name == "static" else None})
    for key, score in steps.items():
        if not key.startswith("heal-"):
            continue
        name, texts = key[len("heal-"):].rsplit("-", 1)
        p = plain[name]
        out.append({"candidate": f"{name} healed on {int(texts):,} texts",
                    "kind": "static-healed" if name == "static" else "healed", "latency_ratio": p["latency_ratio"],
                    "estimate": score["retention"], "layers": p["layers"],
                    "folder": str(work / "heals" / key[len("heal-"):])})
    return sorted(out, key=lambda r: (r["latency_ratio"], -r["estimate"]))


def encoder(row: dict, source: Path, key: str) -> Encoder:
    from espresso_export.model.checkpoint import load
    from espresso_export.shrinking.shrink import shrink

    if row["kind"].startswith("static"):
        return Encoder(key, static=Path(row["folder"]))
    if row["folder"] is None:
        return Encoder(key, shrink(str(source), None, layers=row["layers"], progress=False).checkpoint)
    return Encoder(key, load(row["folder"]))


def main() -> None:
    from espresso_export.model.checkpoint import load
    from espresso_export.model.threads import fixed_threads

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("work", type=Path, help="an auto work folder (--keep-work)")
    ap.add_argument("labelled", type=Path, help="a BEIR folder of the same documents")
    ap.add_argument("--target", type=float, required=True, help="the run's --min-retention")
    ap.add_argument("--name", default=None, help="results file name (default: the BEIR folder's)")
    args = ap.parse_args()
    started = time.perf_counter()
    data = read_retrieval(args.labelled)
    queries = [data.queries[i] for i in data.evaluated_queries]
    name = args.name or args.labelled.name
    source = minilm()
    rows = built(args.work)
    with fixed_threads(usable_cores()):
        src = Encoder("minilm", load(str(source)))
        s_ndcg = labelled(data, src("queries", queries), src("docs", data.docs))
        for row in rows:
            key = f"auto-{name}-{row['candidate'].replace(' ', '-').replace(',', '')}"
            enc = encoder(row, source, key)
            c_ndcg = labelled(data, enc("queries", queries), enc("docs", data.docs))
            ci = ratio_interval(c_ndcg, s_ndcg)
            row["labelled"] = round(float(c_ndcg.mean() / s_ndcg.mean()), 4)
            row["labelled_ci95"] = None if ci is None else [round(x, 4) for x in ci]
            row["keeps_target_by_labels"] = row["labelled"] >= args.target
            print(f"| {row['candidate']} | x{row['latency_ratio']:.3f} | {row['estimate']:.3f} | "
                  f"{row['labelled']:.3f} {row['labelled_ci95']} |", flush=True)
    keeping = [r for r in rows if r["keeps_target_by_labels"]]
    out = {"benchmark": "auto-labels", "date": date.today().isoformat(), "work": str(args.work),
           "labelled": str(args.labelled), "target": args.target, "labelled_queries": len(queries),
           "machine": {"cpu": cpu_model(), "int8_isa": int8_isa(), "cores": usable_cores()},
           "command": "python benchmarks/auto_labels.py " + " ".join(sys.argv[1:]),
           "cheapest_keeping_by_labels": keeping[0]["candidate"] if keeping else None, "rows": rows,
           "seconds": round(time.perf_counter() - started)}
    path = HERE / "results" / f"auto-labels-{name}.json"
    path.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"cheapest keeping {args.target} by the labels: {out['cheapest_keeping_by_labels']}; wrote {path}")


if __name__ == "__main__":
    main()
