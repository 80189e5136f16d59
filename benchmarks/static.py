"""Benchmark static models of all-MiniLM-L6-v2 (issue 52): model2vec's plain distillation beside ours healed on the
collection's documents (with and without the documents' words as tokens), against the source, on one collection.

    python benchmarks/static.py --collection dbpedia-5k          # ~15 min on the 2-core machine
    python benchmarks/static.py --collection business-reports-by-report   # labels: benchmarks/_labelled.py
    python benchmarks/static.py --collection dbpedia-5k --mpnet   # + a static all-mpnet-base-v2 (~15 min more)
    python benchmarks/static.py --collection dbpedia-5k --cuts 1,2  # + the source cut to 1 and 2 layers (~15 min)

Every static model is 256-d, built from the source in this process: ``plain`` is model2vec 0.10's ``distill``
(``build_static`` without texts); ``healed`` is ``build_static`` on the collection's documents as ``verify`` embeds
them ("title text"), its teacher pass included in its build time (a fresh teacher cache); ``healed+vocab`` adds
the documents' ``--vocabulary`` most frequent words the source's tokenizer lacks (the same teacher vectors, read
from that cache: its build time is without the teacher pass, stated). The labels only judge: labelled nDCG@10 per
query (the collection's queries and qrels), retention = mean candidate / mean source with a paired bootstrap 95%
interval (``core.metrics.ratio_interval``). Throughput: ``--speed-texts`` documents encoded at batch 1 and 32 by the
source (PyTorch, as ``verify`` runs it), by model2vec (the static folder) and by ``OnnxEncoder`` (its int8 export),
side by side in ``--repeats`` interleaved rounds, the model order alternating; the median and the spread
(min-max) of texts/s are reported. Bytes on disk: the folders as written. Results:
``benchmarks/results/static-COLLECTION.json`` (``-mpnet.json`` with ``--mpnet``) and a markdown table on stdout.

``--cuts 1,2`` adds the cheapest transformer cuts beside them, on the same documents: ``LN plain`` is the source
cut to N layers (``shrink --layers N``, no training, 384-d, as ``auto`` scores a cut in rung 0) and ``LN healed``
is that cut distilled on the documents as ``auto`` heals it (``distill(student_layers=N, corpus=DOCS, dim=384)``:
batch 32, one epoch, no held-out texts, the teacher pass in its build time, shared between the cuts through one
cache). Judged by the same labels; timed in the same interleaved rounds (PyTorch, as the source, and the healed
cut's int8 ONNX export through ``OnnxEncoder``); bytes on disk: the folder (fp32 safetensors) and the int8 graph.
The load average (1 min) is recorded at the start and the end (``load_average``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _labelled import collection  # noqa: E402
from _models import CACHE, minilm  # noqa: E402

from espresso_export.core.cpu import cpu_model, int8_isa, usable_cores  # noqa: E402
from espresso_export.core.metrics import ratio_interval  # noqa: E402
from espresso_export.core.vectors import l2_normalised  # noqa: E402
from espresso_export.data import read_retrieval, sentences_sha256  # noqa: E402
from espresso_export.runtime.precision import search_at  # noqa: E402

WORK = CACHE / "static"
DIM = 256
CUT_DIM = 384  # the source's width: a cut keeps it (auto's default)
CUT_BATCH = 32  # auto's heal batch size


def per_query_ndcg(data, queries: np.ndarray, docs: np.ndarray) -> np.ndarray:
    ranked = search_at(queries[data.evaluated_queries], docs, 10).ranked
    return data.per_query_scores(ranked, data.evaluated_queries)[:, 2]


def source_vectors(ckpt, data, name: str) -> tuple[np.ndarray, np.ndarray, float]:
    """The source's unit vectors of the documents and queries (kept in the cache), and the documents' encode time."""
    from espresso_export.model.embed import encode

    path = WORK / "vectors" / f"{name}-{sentences_sha256(data.docs + data.queries)[:16]}.npz"
    if path.is_file():
        z = np.load(path)
        return z["docs"], z["queries"], float(z["seconds"])
    start = time.perf_counter()
    docs = l2_normalised(encode(ckpt, data.docs, batch_size=32))
    seconds = time.perf_counter() - start
    queries = l2_normalised(encode(ckpt, data.queries, batch_size=32))
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, docs=docs, queries=queries, seconds=seconds)
    return docs, queries, seconds


def build(ckpt, data, out: Path, cache: Path, *, heal: bool, vocabulary: int) -> dict:
    from espresso_export.distilling.static import build_static

    start = time.perf_counter()
    result = build_static(ckpt, out, dim=DIM, sentences=data.docs if heal else None, cache_dir=str(cache),
                          static_vocabulary=vocabulary, overwrite=True)
    seconds = time.perf_counter() - start
    return {"folder": str(out), "build_seconds": round(seconds, 1), "teacher_seconds": result.teacher_seconds,
            "teacher_pass_reused": result.targets_cached, "distill_seconds": result.distill_seconds,
            "train": result.train and {k: result.train[k] for k in ("steps", "epochs", "seconds", "epoch_mean_loss")},
            "heldout": result.heldout, "tokens": result.vocabulary["tokens"],
            "corpus_words": result.vocabulary["corpus_words"]}


def build_cut(src_path: Path, data, root: Path, cache: Path, layers: int, *, heal: bool) -> dict:
    """The source cut to ``layers`` layers: plain (``shrink``, no training) or healed on the documents as ``auto``
    heals a cut (``distill`` with ``student_layers``, batch 32, one epoch, no held-out texts)."""
    from espresso_export.distilling.run import distill
    from espresso_export.shrinking.shrink import shrink

    out = root / f"L{layers}-{'healed' if heal else 'plain'}"
    start = time.perf_counter()
    if not heal:
        result = shrink(str(src_path), out, layers=layers, overwrite=True, progress=False)
        return {"folder": str(out), "build_seconds": round(time.perf_counter() - start, 1), "teacher_seconds": 0.0,
                "teacher_pass_reused": False, "layers": result.layers, "params": result.params_after}
    docs = root / "documents.jsonl"
    if not docs.is_file():  # one record a document, as verify embeds it ("title text"): newlines kept
        docs.write_text("".join(json.dumps({"text": d}) + "\n" for d in data.docs), encoding="utf-8")
    result = distill(str(src_path), out, student_layers=layers, corpus=[str(docs)], dim=CUT_DIM,
                     batch_size=CUT_BATCH, epochs=1, max_steps=max(1, len(data.docs) // CUT_BATCH), seed=0,
                     heldout=0, overwrite=True, progress=False, cache_dir=str(cache))
    return {"folder": str(out), "build_seconds": round(time.perf_counter() - start, 1),
            "teacher_seconds": round(result.teacher_seconds, 2), "teacher_pass_reused": result.targets_cached,
            "layers": result.layers, "params": result.params,
            "train": {k: result.train.get(k) for k in ("steps", "epochs", "seconds", "epoch_mean_loss")}}


def judge_cut(data, model: dict, base: np.ndarray, source_mean: float) -> dict:
    """A cut's labelled nDCG@10 retention, its documents encoded as the source's are (PyTorch, batch 32)."""
    from espresso_export.model.checkpoint import load
    from espresso_export.model.embed import encode

    ckpt = load(model["folder"])
    start = time.perf_counter()
    docs = l2_normalised(encode(ckpt, data.docs, batch_size=32))
    encode_seconds = time.perf_counter() - start
    scores = per_query_ndcg(data, l2_normalised(encode(ckpt, data.queries, batch_size=32)), docs)
    interval = ratio_interval(scores, base)
    return {"ndcg10": round(float(scores.mean()), 4), "retention": round(float(scores.mean()) / source_mean, 4),
            "interval_95": [round(x, 4) for x in interval] if interval else None,
            "encode_documents_seconds": round(encode_seconds, 2)}


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


def judge(data, model, base: np.ndarray, source_mean: float) -> dict:
    from model2vec import StaticModel

    m = StaticModel.from_pretrained(model["folder"], force_download=False)
    start = time.perf_counter()
    docs = m.encode(data.docs, use_multiprocessing=False)
    encode_seconds = time.perf_counter() - start
    scores = per_query_ndcg(data, l2_normalised(m.encode(data.queries, use_multiprocessing=False)), l2_normalised(docs))
    interval = ratio_interval(scores, base)
    return {"ndcg10": round(float(scores.mean()), 4), "retention": round(float(scores.mean()) / source_mean, 4),
            "interval_95": [round(x, 4) for x in interval] if interval else None,
            "encode_documents_seconds": round(encode_seconds, 2)}


def throughput(encoders: dict, texts: list[str], batch: int, repeats: int) -> dict:
    """texts/s of each encoder at ``batch``, ``repeats`` interleaved rounds (the order alternating each round)."""
    names = list(encoders)
    runs: dict[str, list[float]] = {n: [] for n in names}
    for n in names:  # one untimed pass each: imports, allocations, onnxruntime's first run
        encoders[n](texts[: max(batch, 8)], batch)
    for r in range(repeats):
        for n in (names if r % 2 == 0 else names[::-1]):
            start = time.perf_counter()
            encoders[n](texts, batch)
            runs[n].append(len(texts) / (time.perf_counter() - start))
    return {n: {"median": round(float(np.median(v)), 1), "min": round(min(v), 1), "max": round(max(v), 1),
                "runs": [round(x, 1) for x in v]} for n, v in runs.items()}


def speed(ckpt, folder: Path, export: Path, texts: list[str], repeats: int, *, statics: dict[str, Path] | None = None,
          cuts: dict[str, Path] | None = None, cut_exports: dict[str, Path] | None = None) -> dict:
    """texts/s at batch 1 and 32, every model in the same interleaved rounds: the source, the best static model
    (``folder``, and its int8 ``export``), the other ``statics`` (model2vec), the ``cuts`` (PyTorch, as the
    source runs) and the ``cut_exports`` (int8 ONNX, ``OnnxEncoder``)."""
    from model2vec import StaticModel

    from espresso_export.model.checkpoint import load
    from espresso_export.model.embed import encode
    from espresso_export.runtime import OnnxEncoder

    def static(path):
        m = StaticModel.from_pretrained(path, force_download=False)
        return lambda t, b: m.encode(t, batch_size=b, use_multiprocessing=False)

    def torch_model(path):
        c = load(str(path))
        return lambda t, b: encode(c, t, batch_size=b)

    def onnx_model(path):
        e = OnnxEncoder(path, threads=usable_cores())
        return lambda t, b: e.encode(t, batch_size=b)

    encoders = {
        "source (PyTorch)": lambda t, b: encode(ckpt, t, batch_size=b),
        "static (model2vec)": static(folder),
        "static (OnnxEncoder, int8)": onnx_model(export),
    }
    encoders.update({f"static {n} (model2vec)": static(p) for n, p in (statics or {}).items()})
    encoders.update({f"{n} (PyTorch)": torch_model(p) for n, p in (cuts or {}).items()})
    encoders.update({f"{n} (OnnxEncoder, int8)": onnx_model(p) for n, p in (cut_exports or {}).items()})
    return {str(b): throughput(encoders, texts, b, repeats) for b in (1, 32)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--collection", default="dbpedia-5k")
    ap.add_argument("--vocabulary", type=int, default=5000, help="corpus words added in healed+vocab")
    ap.add_argument("--speed-texts", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cuts", default="", help="comma-separated depths: also the source cut to each, plain and "
                    "healed on the documents as auto heals a cut (e.g. 1,2)")
    ap.add_argument("--mpnet", action="store_true", help="also a static model of all-mpnet-base-v2 healed on the "
                    "documents (a stronger teacher), judged against MiniLM's nDCG@10 (~15 min more)")
    args = ap.parse_args()
    depths = [int(d) for d in args.cuts.split(",") if d.strip()]

    import torch

    from espresso_export import export
    from espresso_export.model.checkpoint import load

    torch.set_num_threads(usable_cores())
    data = read_retrieval(collection(args.collection))
    src_path = minilm()
    ckpt = load(str(src_path))
    docs, queries, source_seconds = source_vectors(ckpt, data, args.collection)
    base = per_query_ndcg(data, queries, docs)
    out: dict = {"collection": args.collection, "documents": len(data.docs),
                 "labelled_queries": len(data.evaluated_queries), "source": "all-MiniLM-L6-v2",
                 "source_ndcg10": round(float(base.mean()), 4),
                 "source_encode_documents_seconds": round(source_seconds, 1), "dim": DIM,
                 "date": date.today().isoformat(), "cpu": cpu_model(), "isa": int8_isa(), "cores": usable_cores(),
                 "python": platform.python_version(), "torch": torch.__version__,
                 "load_average": {"start": load_average()}, "models": {}}
    with tempfile.TemporaryDirectory(prefix="static-bench-") as tmp:
        root, cache = Path(tmp), Path(tmp) / "teacher-cache"
        plan = {"plain": dict(heal=False, vocabulary=0), "healed": dict(heal=True, vocabulary=0),
                f"healed+vocab{args.vocabulary}": dict(heal=True, vocabulary=args.vocabulary)}
        for name, how in plan.items():
            print(f"building {name} ...", flush=True)
            model = build(ckpt, data, root / name, cache, **how)
            model.update(judge(data, model, base, float(base.mean())))
            model["bytes"] = folder_bytes(root / name)
            out["models"][name] = model
            print(f"  {name}: retention {model['retention']} {model['interval_95']}, built in "
                  f"{model['build_seconds']} s", flush=True)
        if args.mpnet:
            from _models import mpnet

            print("building mpnet healed ...", flush=True)
            teacher = load(str(mpnet()))
            model = build(teacher, data, root / "mpnet-healed", cache, heal=True, vocabulary=0)
            model.update(judge(data, model, base, float(base.mean())))
            model["bytes"] = folder_bytes(root / "mpnet-healed")
            out["models"]["mpnet-healed (vs MiniLM)"] = model
            print(f"  mpnet-healed: retention vs MiniLM {model['retention']} {model['interval_95']}", flush=True)
        own = [n for n in out["models"] if not n.startswith("mpnet")]
        best = max(own, key=lambda n: out["models"][n]["retention"])
        cuts, cut_exports = {}, {}
        for d in depths:
            for heal in (False, True):
                name = f"L{d} {'healed' if heal else 'plain'}"
                print(f"building {name} ...", flush=True)
                model = build_cut(src_path, data, root, cache, d, heal=heal)
                model.update(judge_cut(data, model, base, float(base.mean())))
                model["bytes"] = folder_bytes(Path(model["folder"]))
                cuts[name] = Path(model["folder"])
                if heal:
                    onnx = export(model["folder"], root / f"{name.replace(' ', '-')}-onnx", quantize="int8",
                                  timing_batches=[]).output
                    cut_exports[name] = onnx
                    model["bytes_int8_graph"] = next(f["bytes"] for f in json.loads(
                        (onnx / "export.json").read_text())["files"] if f["quantization"] == "int8")
                out["models"][name] = model
                print(f"  {name}: retention {model['retention']} {model['interval_95']}, built in "
                      f"{model['build_seconds']} s", flush=True)
        exported = export(root / best, root / "export", quantize="int8").output
        out["export"] = {"model": best, "bytes_int8_graph": next(
            f["bytes"] for f in json.loads((exported / "export.json").read_text())["files"] if f["quantization"] == "int8")}
        out["source_bytes"] = folder_bytes(src_path)
        texts = data.docs[: args.speed_texts]
        out["throughput_texts"] = len(texts)
        statics = {n: root / n for n in own if n != best} if depths else {}
        out["load_average"]["before_throughput"] = load_average()
        out["throughput"] = speed(ckpt, root / best, exported, texts, args.repeats, statics=statics, cuts=cuts,
                                  cut_exports=cut_exports)
        out["throughput_model"] = best
    out["load_average"]["end"] = load_average()
    path = HERE / "results" / f"static-{args.collection}{'-mpnet' if args.mpnet else ''}.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print_table(out)
    print(f"written: {path}")


def speed_keys(out: dict, name: str) -> list[str]:
    """The throughput entries of model ``name`` (none: not timed)."""
    keys = ["static (model2vec)", "static (OnnxEncoder, int8)"] if name == out.get("throughput_model") else \
        [f"static {name} (model2vec)", f"{name} (PyTorch)", f"{name} (OnnxEncoder, int8)"]
    return [k for k in keys if k in next(iter(out["throughput"].values()))]


def ratio(out: dict, batch: str, key: str) -> str:
    """``key``'s speed over the source's at ``batch``: the median of the per-round ratios (each round times both,
    interleaved) and their min-max."""
    rows = out["throughput"][batch]
    per_round = [a / b for a, b in zip(rows[key]["runs"], rows["source (PyTorch)"]["runs"])]
    return f"{np.median(per_round):.1f}x ({min(per_round):.1f}-{max(per_round):.1f})"


def print_table(out: dict) -> None:
    print(f"\n{out['collection']}: {out['documents']} documents, {out['labelled_queries']} labelled queries, "
          f"source nDCG@10 {out['source_ndcg10']}, source encodes the documents in "
          f"{out['source_encode_documents_seconds']} s; load average {out.get('load_average')}\n")
    print("| model | nDCG@10 retention [95%] | encoding the documents | built in | batch 32 vs source | "
          "batch 1 vs source | bytes |")
    print("|---|---|---|---|---|---|---|")
    for name, m in out["models"].items():
        iv = m["interval_95"]
        built = f"{m['build_seconds']} s" + (" (teacher pass reused)" if m["teacher_pass_reused"] else
                                             f" ({m['teacher_seconds']} s teacher pass)" if m["teacher_seconds"]
                                             else "")
        ratios = [", ".join(f"{k.split('(')[-1].rstrip(')')} {ratio(out, b, k)}" for k in speed_keys(out, name))
                  for b in ("32", "1")]
        size = f"{m['bytes']:,}" + (f"; int8 ONNX {m['bytes_int8_graph']:,}" if "bytes_int8_graph" in m else "")
        print(f"| {name} | {m['retention']} [{iv[0]}-{iv[1]}] | {m['encode_documents_seconds']} s | {built} | "
              f"{ratios[0]} | {ratios[1]} | {size} |")
    for batch, rows in out["throughput"].items():
        src = rows["source (PyTorch)"]["median"]
        cells = ", ".join(f"{n} {r['median']} ({r['min']}-{r['max']}), {r['median'] / src:.1f}x"
                          for n, r in rows.items())
        print(f"\nbatch {batch}, texts/s median (min-max) over the rounds: {cells}")


if __name__ == "__main__":
    main()
