"""``auto --judged-choice`` judged on queries it never saw: a BEIR folder's queries split in two halves by position
(even: A, odd: B; with ``--alike`` queries with the same relevant documents stay on one side). Half A's qrels play the user's judge (a pair in them gets its grade, any other pair 0, the
convention labelled nDCG@10 uses); half B, a BEIR folder of its own, is the labelled set the final check judges
the answer on (``--retrieval``). Nothing of B chooses.

    python benchmarks/judged_split.py split D/retrieval/dbpedia-5k OUT/split
    espresso-export auto MINILM --corpus D/retrieval/dbpedia-5k/corpus.jsonl --queries OUT/split/A-queries.jsonl \\
        --retrieval OUT/split/B --judged-choice --write-judging OUT/split/pairs.jsonl --keep-work -o OUT/auto ...
    python benchmarks/judged_split.py fill OUT/split/pairs.jsonl OUT/split/A-qrels.tsv OUT/split/judged.jsonl
    espresso-export auto ... --judgments OUT/split/judged.jsonl --overwrite   (the same command otherwise)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def split(beir: Path, out: Path, alike: bool = False) -> None:
    """``alike``: queries with the same relevant documents (paraphrases of one question) stay on one side, the
    groups alternating in order of their first query; a query without labels is a group of its own."""
    queries = [json.loads(line) for line in (beir / "queries.jsonl").read_text(encoding="utf-8").splitlines()
               if line.strip()]
    lines = (beir / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()
    header, rows = lines[0], [line.split("\t") for line in lines[1:] if line.strip()]
    if alike:
        relevant: dict[str, set] = {}
        for r in rows:
            relevant.setdefault(r[0], set()).add(r[1])
        groups: dict = {}
        for q in queries:
            groups.setdefault(frozenset(relevant.get(q["_id"], ())) or q["_id"], []).append(q)
        order = list(groups.values())
        halves = {"A": [q for g in order[0::2] for q in g], "B": [q for g in order[1::2] for q in g]}
    else:
        halves = {"A": queries[0::2], "B": queries[1::2]}
    (out / "B" / "qrels").mkdir(parents=True, exist_ok=True)
    for name, half in halves.items():
        ids = {q["_id"] for q in half}
        qrels = header + "\n" + "".join("\t".join(r) + "\n" for r in rows if r[0] in ids)
        text = "".join(json.dumps(q, ensure_ascii=False) + "\n" for q in half)
        if name == "A":
            (out / "A-queries.jsonl").write_text(text, encoding="utf-8")
            (out / "A-qrels.tsv").write_text(qrels, encoding="utf-8")
        else:
            (out / "B" / "queries.jsonl").write_text(text, encoding="utf-8")
            (out / "B" / "qrels" / "test.tsv").write_text(qrels, encoding="utf-8")
    corpus = out / "B" / "corpus.jsonl"
    if not corpus.exists():
        corpus.symlink_to((beir / "corpus.jsonl").resolve())
    print(f"A: {len(halves['A'])} queries (they choose), B: {len(halves['B'])} (they judge) in {out}")


def fill(pairs: Path, qrels: Path, out: Path) -> None:
    grade = {}
    for line in qrels.read_text(encoding="utf-8").splitlines()[1:]:
        if line.strip():
            q, d, s = line.split("\t")
            grade[(q, d)] = float(s)
    filled, found = [], 0
    for line in pairs.read_text(encoding="utf-8").split("\n"):
        if not line.strip():
            continue
        p = json.loads(line)
        found += (p["query_id"], p["doc_id"]) in grade
        filled.append(json.dumps({**p, "relevance": grade.get((p["query_id"], p["doc_id"]), 0.0)}, ensure_ascii=False))
    out.write_text("\n".join(filled) + "\n", encoding="utf-8")
    print(f"{len(filled)} pairs filled: {found} graded in the qrels, {len(filled) - found} not (0)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("split", help="a BEIR folder's queries in two halves")
    s.add_argument("beir", type=Path)
    s.add_argument("out", type=Path)
    s.add_argument("--alike", action="store_true", help="queries with the same relevant documents on one side")
    f = sub.add_parser("fill", help="a --write-judging file filled from half A's qrels")
    f.add_argument("pairs", type=Path)
    f.add_argument("qrels", type=Path)
    f.add_argument("out", type=Path)
    args = parser.parse_args()
    split(args.beir, args.out, args.alike) if args.command == "split" else fill(args.pairs, args.qrels, args.out)


if __name__ == "__main__":
    main()
