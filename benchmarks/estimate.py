"""Benchmark ``auto``'s label-free estimate (issue 51): known-item retention beside labelled nDCG@10 retention, per
kind of candidate, on labelled collections, to find a bias by kind and test what removes it.

    python benchmarks/estimate.py --collection dbpedia-5k          # ~20 min on the 2-core machine
    python benchmarks/estimate.py --collection business-reports-by-report   # its questions judged by report
    python benchmarks/estimate.py --collection stsb-train-dev      # built here from STS-B train+dev (never test)
    python benchmarks/estimate.py --collection snli-entailment     # built here from SNLI dev+test

The source is all-MiniLM-L6-v2. The candidates, as ``auto`` builds them: plain cuts (``L1``..``L5``: shrink,
spread layers, untrained; ``L1f``..``L5f``: the first layers, ``--plain-first``), healed cuts (distill on healing
texts of ``--heal-texts`` texts, ``auto``'s settings), each healed twice: on ``auto``'s healing texts as they are
chosen now (``held-out``: the documents no known-item query was cut out of) and ``transductive`` (every
document, each query's text cut out of its own: the heal sees the estimate's targets as it sees the labelled
queries' documents, and never a query; ``--extra-transductive`` depths too); int8 / binary vectors and int8
weights of them; heals with a narrower head (``--narrow-heals``: a learned 256-d or 128-d projection).
The estimate is exactly ``auto``'s: its sample (``--sample-documents``, ``--sample-queries``, known
items by ``auto``'s rule) scored with ``searching.scoring.Scorer``, and the same queries over every document
(what decides once a candidate keeps the target on the sample). Beside it, the belief estimate
(``verification.known_item.belief_known_item``: the known item drawn from the source's softmax belief, scale 20,
fixed before any label was read) on the sample's known-item queries (``belief_sample``) and on the collection's
own queries with their labels unused (``belief_queries``: what a user's ``--queries`` give). The labels only judge: the collection's queries
and relevance give the labelled retention (mean candidate nDCG@10 over mean source nDCG@10, paired bootstrap 95%).

``snli-entailment``: 500 entailed hypotheses of SNLI dev+test as queries, every distinct premise a document, a
query's premise its relevant document. ``stsb-train-dev``: each distinct sentence1 of STS-B train+dev with a pair scored >= 4 is a query; every distinct
sentence2 is a document; a query's relevant documents are its pairs scored >= 4 (``data.retrieval_from_sts``).
Results: ``benchmarks/results/estimate-COLLECTION.json`` and a markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import random
import re
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from _labelled import MISLABELLED, SAME_DOCUMENTS, collection
from _models import CACHE, minilm

from espresso_export.core.cpu import cpu_model, int8_isa, usable_cores
from espresso_export.core.metrics import ratio_interval
from espresso_export.core.vectors import l2_normalised
from espresso_export.data import read_retrieval, sentences_sha256
from espresso_export.runtime.precision import CalibrationRanges, search_at
from espresso_export.verification.known_item import followed, known_item_index, source_belief
from espresso_export.searching.asked import at_most, joined_positions, joined_sample
from espresso_export.searching.scoring import (
    Scorer,
    Vectors,
    draw_sample,
    read_documents,
)

WORK = CACHE / "estimate"
EXTRA_HEALS = ["1@2000", "3@2000", "5@2000", "2@500", "4@500"]  # held-out heals beyond --heal-layers: depths, lengths
EXTRA_TRANSDUCTIVE = [1, 3, 5]  # transductive heals beyond --heal-layers (with their int8 weights): 5 of each kind
EXTRA_STATIC = ["256@2000", "128@2000", "384@500", "256@500"]  # held-out static heals beyond --static-dim: widths, lengths
EXTRA_STATIC_PLAIN = [256, 128, 64, 32]  # model2vec's distillations beyond --static-dim: widths
EXTRA_STATIC_TRANSDUCTIVE = EXTRA_STATIC  # transductive static heals beyond --static-dim: the held-out ones' settings
NARROW = ["1@256", "2@256", "3@256", "4@256", "2@128"]  # held-out heals of DEPTH layers with a learned DIM-d head
BATCH = 32  # auto's default heal batch size


class Encoder:
    """A checkpoint's unit vectors of named text lists, cached on disk per model key and texts."""

    def __init__(self, key: str, ckpt=None, onnx: Path | None = None, static: Path | None = None) -> None:
        self.key, self.ckpt, self.onnx, self.static = key, ckpt, onnx, static

    def __call__(self, name: str, texts: list[str]) -> np.ndarray:
        path = WORK / "vectors" / self.key / f"{name}-{sentences_sha256(texts)[:16]}.npy"
        if path.is_file():
            return np.load(path)
        start = time.perf_counter()
        if self.onnx is not None:
            from espresso_export.runtime import OnnxEncoder

            rows = l2_normalised(OnnxEncoder(self.onnx).encode(texts))
        elif self.static is not None:
            from espresso_export.searching.encoding import StaticCandidate

            rows = l2_normalised(StaticCandidate(self.static).encode(texts))
        else:
            from espresso_export.model.embed import encode

            rows = l2_normalised(encode(self.ckpt, texts, batch_size=64))
        print(f"  {self.key} {name}: {len(texts)} texts in {time.perf_counter() - start:.0f} s", flush=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, rows)
        return rows


def top10(queries: np.ndarray, docs: np.ndarray, precision: str = "float32") -> np.ndarray:
    """The top 10, the documents stored at ``precision`` (int8 ranges fitted on them; binary rescored 4x, as
    ``auto`` searches)."""
    ranges = CalibrationRanges.fit(docs) if precision == "int8" else None
    return search_at(queries, docs, 10, precision=precision, ranges=ranges,
                     rescore_factor=4 if precision == "binary" else 0).ranked


def labelled(data, queries: np.ndarray, docs: np.ndarray, precision: str = "float32") -> np.ndarray:
    """nDCG@10 per evaluated query, the documents stored at ``precision``."""
    return data.per_query_scores(top10(queries, docs, precision), data.evaluated_queries)[:, 2]


def belief(src: tuple, cand: tuple, precision: str) -> dict:
    """The belief estimate (``verification.known_item.followed``): ``src``/``cand`` are each model's (queries,
    documents); the source's belief reaches over its top 100; binary rescored 4x, as ``auto`` searches."""
    found = followed(source_belief(*src), *cand, precision=precision, rescore=4 if precision == "binary" else 0)
    ci = found.interval()
    return {"retention": round(found.retention, 4), "ci95": None if ci is None else [round(x, 4) for x in ci]}


def healing_files(c: Collection, scheme: str, texts: int) -> Path:
    """``texts`` healing texts. ``held-out``: ``auto``'s own choice (``searching.healing_texts``, called as ``auto``
    calls it: the documents no sample query was cut out of, then their sentences). ``transductive``: every
    document, each known-item query (the sample's and the final check's) cut out of its own, then their sentences;
    never a query the estimate or the final check asks."""
    import shutil
    import tempfile

    from espresso_export.data.pseudo_queries import document_body
    from espresso_export.searching.auto_settings import AutoSettings
    from espresso_export.searching.healing_texts import (
        _document_sentences,
        checked_queries,
        healing_texts,
    )
    from espresso_export.searching.work import Work

    out = WORK / "healing" / f"{c.key}-{scheme}-{texts}.txt"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    s = AutoSettings(corpus=[str(c.folder)], max_texts=texts, time_budget="1000h", seed=0,
                     sample_documents=c.args.sample_documents, sample_queries=c.args.sample_queries,
                     corpus_queries=c.args.check_queries)
    if scheme == "held-out":
        with tempfile.TemporaryDirectory() as tmp:
            found = healing_texts(c.documents, c.sample, s, 1e-6, Work(Path(tmp), {"steps": {}}))
            shutil.copyfile(found["file"], out)
        return out
    asked = checked_queries(s) | {" ".join(q.split()) for q in c.sample.queries.texts}
    where = {d: i for i, d in enumerate(c.documents.texts)}
    cut = {where[c.sample.documents[o]]: t for o, t in zip(c.sample.queries.origins, c.sample.queries.targets)}
    cut.update(zip(c.every.origins, c.every.targets))
    rng = random.Random(0)
    order = list(range(len(c.documents.texts)))
    rng.shuffle(order)
    own = [" ".join(cut.get(i, c.documents.texts[i]).split()) for i in order]
    n_doc = min(len(own), texts)
    bodies = [document_body(c.documents, i) for i in order[n_doc:] + order[:n_doc]]
    sentences = _document_sentences(bodies, texts - n_doc, rng, skip=asked)
    chosen = [t for t in dict.fromkeys(own[:n_doc] + sentences) if t and t not in asked]
    out.write_text("\n".join(chosen) + "\n", encoding="utf-8")
    return out


def heal(source: Path, layers: int, corpus: Path, texts: int, seed: int) -> Path:
    """``auto``'s heal of a ``layers``-layer spread cut on ``texts`` texts of ``corpus`` (distill, built once)."""
    from espresso_export.distilling.run import distill

    out = WORK / "heals" / f"{corpus.stem}-L{layers}"
    if (out / "config.json").is_file():
        return out
    lines = len(corpus.read_text(encoding="utf-8").splitlines())
    distill(str(source), out, student_layers=layers, corpus=[str(corpus)], batch_size=BATCH, dim=384,
            epochs=max(1, math.ceil(texts / max(lines, 1))), max_steps=max(1, texts // BATCH), seed=seed,
            heldout=0, overwrite=True, progress=False, cache_dir=str(WORK / "teacher-cache"))
    return out


def narrow_heal(source: Path, layers: int, dim: int, corpus: Path, texts: int, seed: int) -> Path:
    """The source cut to ``layers`` healed with a learned ``dim``-d head on ``texts`` texts of ``corpus``, built once
    (given as ``--student`` with the teacher's own weights, which distill heals at its healing defaults)."""
    from espresso_export.distilling.run import distill

    out = WORK / "hpd" / f"{corpus.stem}-L{layers}-d{dim}"
    if (out / "config.json").is_file():
        return out
    lines = len(corpus.read_text(encoding="utf-8").split("\n")) - 1
    distill(str(source), out, student=str(source), student_layers=layers, corpus=[str(corpus)], batch_size=BATCH,
            dim=dim, epochs=max(1, math.ceil(texts / max(lines, 1))), max_steps=max(1, texts // BATCH), seed=seed,
            heldout=0, overwrite=True, progress=False, cache_dir=str(WORK / "teacher-cache"))
    return out


def static(source: Path, corpus: Path | None, dim: int, seed: int) -> Path:
    """``auto``'s static candidate: model2vec's distillation of ``source`` (``corpus`` None), or it healed on every
    text of ``corpus`` (distill ``--student static``, built once)."""
    from espresso_export.distilling.run import distill

    out = WORK / "static" / (f"{corpus.stem}-d{dim}" if corpus else f"plain-d{dim}")
    if (out / "espresso.json").is_file():
        return out
    kw = {"corpus": [str(corpus)], "heldout": 0, "cache_dir": str(WORK / "teacher-cache")} if corpus else {}
    distill(str(source), out, student="static", dim=dim, seed=seed, overwrite=True, progress=False, **kw)
    return out


class Collection:
    """A labelled collection as both the estimate and the labels see it, and every candidate's vectors of it."""

    def __init__(self, args, folder: Path) -> None:
        from espresso_export.data.pseudo_queries import choose_queries

        self.args, self.folder, self.name = args, folder, args.collection
        self.key = SAME_DOCUMENTS.get(self.name, self.name)  # heals and vectors are the documents', shared
        sample_documents, sample_queries, check_queries = args.sample_documents, args.sample_queries, args.check_queries
        self.data = read_retrieval(folder)
        self.documents = read_documents([str(folder)])
        n = len(self.documents.texts)
        self.sample = draw_sample(self.documents, size=sample_documents, queries=min(sample_queries, max(10, n // 2)),
                                  seed=0, method="auto")
        # the final check's known-item queries (verify --corpus on all the documents, auto's --corpus-queries)
        self.every = choose_queries(self.documents, agreement=None, known_items="auto", limit=check_queries,
                                    seed=0).known_items
        self.texts = list(dict.fromkeys(self.data.docs + self.documents.texts))
        self.position = {t: i for i, t in enumerate(self.texts)}
        # the set's own queries given to auto as --queries (searching.asked): at most 100, drawn as auto draws them
        self.asked = at_most(list(dict.fromkeys(self.data.queries[i] for i in self.data.evaluated_queries)), 0)
        self.asked_sample = None

    def join(self, source: Encoder) -> None:
        """auto's sample with the set's queries: each one's top documents outside the sample joined to it, by the
        source (``searching.asked``)."""
        rows = source("docs", self.texts)
        others = rows[[self.position[t] for t in self.sample.others]]
        joined = joined_positions(source("asked", self.asked), others) if self.sample.others else []
        self.asked_sample = joined_sample(self.sample, joined, self.asked)

    def vectors(self, enc: Encoder) -> dict:
        rows = enc("docs", self.texts)
        at = lambda texts: rows[[self.position[t] for t in texts]]
        s, a = self.sample, self.asked_sample
        out = {"labelled_docs": at(self.data.docs),
               "queries": enc("queries", [self.data.queries[i] for i in self.data.evaluated_queries]),
               "sample": Vectors(enc("known-item-queries", s.queries.texts), at(s.documents),
                                 enc("known-item-targets", s.queries.targets)),
               "others": at(s.others)}
        if a is not None:
            out["asked"] = Vectors(out["sample"].queries, at(a.documents), out["sample"].targets, enc("asked", a.asked))
            out["asked_others"] = at(a.others)
        return out


def measure(c: Collection, src: dict, cand: dict, precision: str = "float32") -> dict:
    """The estimate on the sample and over every document (the sample's queries), and the labelled retention."""
    est = Scorer(c.sample, src["sample"]).score(cand["sample"], precision=precision)
    every = c.sample.with_others()
    whole = lambda v: Vectors(v["sample"].queries, np.vstack([v["sample"].documents, v["others"]]),
                              v["sample"].targets)
    est_all = Scorer(every, whole(src)).score(whole(cand), precision=precision) if c.sample.others else est
    s_ndcg = labelled(c.data, src["queries"], src["labelled_docs"])
    c_ndcg = labelled(c.data, cand["queries"], cand["labelled_docs"], precision)
    ci = ratio_interval(c_ndcg, s_ndcg)
    index = lambda v: (v["sample"].queries, known_item_index(v["sample"].documents, c.sample.queries.origins,
                                                             v["sample"].targets))
    on_sample = belief(index(src), index(cand), precision)
    on_queries = belief((src["queries"], src["labelled_docs"]), (cand["queries"], cand["labelled_docs"]), precision)
    # as auto scores with the set's queries given as --queries: on its sample with their documents joined, then on
    # every document (the higher of the known-item read and the belief on those queries)
    joined = c.asked_sample
    asked = Scorer(joined, src["asked"]).score(cand["asked"], precision=precision)
    whole_asked = lambda v: Vectors(v["asked"].queries, np.vstack([v["asked"].documents, v["asked_others"]]),
                                    v["asked"].targets, v["asked"].asked)
    asked_all = (Scorer(joined.with_others(), whole_asked(src)).score(whole_asked(cand), precision=precision)
                 if joined.others else asked)
    return {"belief_sample": on_sample["retention"], "belief_sample_ci95": on_sample["ci95"],
            "belief_queries": on_queries["retention"], "belief_queries_ci95": on_queries["ci95"],
            "estimate_sample": est.retention, "estimate_sample_ci95": est.ci95, "estimate_all": est_all.retention,
            "estimate_all_ci95": est_all.ci95, "asked_read_sample": asked.asked, "asked_read_all": asked_all.asked,
            "estimate_asked_sample": asked.retention, "estimate_asked_sample_ci95": asked.ci95,
            "estimate_asked_all": asked_all.retention, "estimate_asked_all_ci95": asked_all.ci95, "labelled": round(float(c_ndcg.mean() / s_ndcg.mean()), 4),
            "labelled_ci95": None if ci is None else [round(x, 4) for x in ci],
            "source_ndcg": round(float(s_ndcg.mean()), 4)}


def candidates(args, c: Collection, source: Path):
    """(kind, name, encoder, precision) of every candidate, built on first use."""
    from espresso_export.model.checkpoint import load
    from espresso_export.shrinking.shrink import shrink

    for d in args.plain:
        yield "plain", f"L{d}", lambda d=d: Encoder(f"minilm-L{d}", shrink(str(source), None, layers=d,
                                                                              progress=False).checkpoint), "float32"
    for d in args.plain_first:  # auto's other plain cuts: the source's first layers
        yield "plain", f"L{d}f", lambda d=d: Encoder(f"minilm-L{d}f", shrink(
            str(source), None, layers=d, select="first", progress=False).checkpoint), "float32"
    healed = {}
    for scheme in ("held-out", "transductive"):
        corpus = healing_files(c, scheme, args.heal_texts)
        for d in args.heal_layers:
            healed[(scheme, d)] = lambda d=d, corpus=corpus: heal(source, d, corpus, args.heal_texts, 0)
            name = f"L{d} healed {args.heal_texts} ({scheme})"
            yield f"healed-{scheme}", name, lambda k=(scheme, d): Encoder(
                f"{c.key}-{k[0]}-{args.heal_texts}-L{k[1]}", load(healed[k]())), "float32"
    for item in args.extra_heals:  # more held-out heals (auto's scheme): other depths and heal lengths
        d, texts = (int(x) for x in item.split("@"))
        corpus = healing_files(c, "held-out", texts)
        built = lambda d=d, corpus=corpus, texts=texts: heal(source, d, corpus, texts, 0)
        key = f"{c.key}-held-out-{texts}-L{d}"
        yield "healed-held-out", f"L{d} healed {texts} (held-out)", lambda key=key, built=built: Encoder(
            key, load(built())), "float32"
        for p in ("int8", "binary"):
            yield f"{p}-vectors", f"L{d} healed {texts} (held-out), {p} vectors", lambda key=key, built=built: Encoder(
                key, load(built())), p
    if args.static:
        dim = args.static_dim
        yield "static-plain", f"static d{dim}", lambda: Encoder(f"static-plain-d{dim}",
                                                               static=static(source, None, dim, 0)), "float32"
        for scheme in ("held-out", "transductive"):
            corpus = healing_files(c, scheme, args.heal_texts)
            built = lambda corpus=corpus: static(source, corpus, dim, 0)
            key = f"{c.key}-{scheme}-{args.heal_texts}-static-d{dim}"
            yield f"static-{scheme}", f"static d{dim} healed {args.heal_texts} ({scheme})", \
                lambda key=key, built=built: Encoder(key, static=built()), "float32"
            for p in ("int8", "binary"):
                yield f"static-{p}-vectors", f"static d{dim} healed ({scheme}), {p} vectors", \
                    lambda key=key, built=built: Encoder(key, static=built()), p
        for width in args.extra_static_plain:  # model2vec's distillation at other widths
            yield "static-plain", f"static d{width}", lambda width=width: Encoder(
                f"static-plain-d{width}", static=static(source, None, width, 0)), "float32"
        for item in args.extra_static_transductive:  # transductive static heals: other widths and lengths
            width, texts = (int(x) for x in item.split("@"))
            corpus = healing_files(c, "transductive", texts)
            yield "static-transductive", f"static d{width} healed {texts} (transductive)", \
                lambda key=f"{c.key}-transductive-{texts}-static-d{width}", corpus=corpus, width=width: Encoder(
                    key, static=static(source, corpus, width, 0)), "float32"
        for item in args.extra_static:  # more held-out static heals (auto's scheme): other widths and lengths
            width, texts = (int(x) for x in item.split("@"))
            corpus = healing_files(c, "held-out", texts)
            built = lambda corpus=corpus, width=width: static(source, corpus, width, 0)
            key = f"{c.key}-held-out-{texts}-static-d{width}"
            yield "static-held-out", f"static d{width} healed {texts} (held-out)", \
                lambda key=key, built=built: Encoder(key, static=built()), "float32"
            for p in ("int8", "binary"):
                yield f"static-{p}-vectors", f"static d{width} healed {texts} (held-out), {p} vectors", \
                    lambda key=key, built=built: Encoder(key, static=built()), p
    for item in args.narrow_heals:  # heals with a narrower head on auto's healing texts (held-out)
        d, dim = (int(x) for x in item.split("@"))
        corpus = healing_files(c, "held-out", args.heal_texts)
        built = lambda d=d, dim=dim, corpus=corpus: narrow_heal(source, d, dim, corpus, args.heal_texts, 0)
        yield "healed-narrow", f"L{d} healed {args.heal_texts}, {dim}-d head (held-out)", \
            lambda key=f"{c.key}-held-out-{args.heal_texts}-hpd-L{d}-d{dim}", built=built: Encoder(key, load(built())), \
            "float32"
    for scheme, d in healed:
        for p in ("int8", "binary"):
            yield f"{p}-vectors", f"L{d} healed ({scheme}), {p} vectors", lambda k=(scheme, d): Encoder(
                f"{c.key}-{k[0]}-{args.heal_texts}-L{k[1]}", load(healed[k]())), p
    corpus = healing_files(c, "transductive", args.heal_texts)
    for d in args.extra_transductive:  # more transductive heals: other depths (their int8 weights below)
        healed[("transductive", d)] = lambda d=d, corpus=corpus: heal(source, d, corpus, args.heal_texts, 0)
        yield "healed-transductive", f"L{d} healed {args.heal_texts} (transductive)", lambda k=("transductive", d): \
            Encoder(f"{c.key}-{k[0]}-{args.heal_texts}-L{k[1]}", load(healed[k]())), "float32"
    for scheme, d in healed:
        yield "int8-weights", f"L{d} healed ({scheme}), int8 weights", lambda k=(scheme, d): Encoder(
            f"{c.key}-{k[0]}-{args.heal_texts}-L{k[1]}-int8", onnx=_int8(healed[k]())), "float32"


def _int8(model: Path) -> Path:
    from espresso_export.exporting.export import export

    out = model.with_name(model.name + "-int8")
    if not (out / "export.json").is_file():
        export(model, out, quantize="int8")
    return out


def _ints(text: str) -> list[int]:
    """A comma-separated list of counts ("" for none)."""
    return [int(x) for x in text.split(",") if x]


def _items(text: str) -> list[str]:
    """A comma-separated list of items such as DEPTH@TEXTS ("" for none)."""
    return [x for x in text.split(",") if x]


def main() -> None:
    from espresso_export.model.checkpoint import load
    from espresso_export.model.threads import fixed_threads

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--collection", default="dbpedia-5k")
    ap.add_argument("--plain", default="1,2,3,4,5", type=_ints)
    ap.add_argument("--plain-first", default="1,2,3,4,5", type=_ints)
    ap.add_argument("--heal-layers", default="2,4", type=_ints)
    ap.add_argument("--heal-texts", type=int, default=2000)
    ap.add_argument("--sample-documents", type=int, default=2000)
    ap.add_argument("--sample-queries", type=int, default=200)
    ap.add_argument("--check-queries", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--static", action=argparse.BooleanOptionalAction, default=True,
                    help="static models (model2vec): plain, healed held-out and transductive, their vectors")
    ap.add_argument("--static-dim", type=int, default=384)
    ap.add_argument("--extra-heals", default=EXTRA_HEALS, type=_items,
                    help="more held-out heals as DEPTH@TEXTS items, e.g. 1@2000,3@2000,2@500 (kind healed-held-out)")
    ap.add_argument("--narrow-heals", default=NARROW, type=_items,
                    help="held-out heals with a narrower head as DEPTH@DIM items: DEPTH layers, a learned DIM-d head")
    ap.add_argument("--extra-transductive", default=EXTRA_TRANSDUCTIVE, type=_ints,
                    help="more transductive heals, by depth (with their int8 weights), e.g. 1,3,5")
    ap.add_argument("--extra-static-plain", default=EXTRA_STATIC_PLAIN, type=_ints,
                    help="model2vec's distillation at more widths, e.g. 256,128 (kind static-plain)")
    ap.add_argument("--extra-static-transductive", default=EXTRA_STATIC_TRANSDUCTIVE,
                    type=_items,
                    help="more transductive static heals as WIDTH@TEXTS items (kind static-transductive)")
    ap.add_argument("--extra-static", default=EXTRA_STATIC, type=_items,
                    help="more held-out static heals as WIDTH@TEXTS items (kind static-held-out)")
    ap.add_argument("--only", default=None,
                    help="only the candidates whose 'kind: name' this regex finds (e.g. '^static'); the results "
                         "file keeps its other rows")
    args = ap.parse_args()
    started = time.perf_counter()
    c = Collection(args, collection(args.collection))
    print(f"{args.collection}: {len(c.documents.texts):,} documents, sample {len(c.sample.documents):,} with "
          f"{len(c.sample.queries)} known-item queries ({c.sample.queries.method}); "
          f"{len(c.data.evaluated_queries)} labelled queries", flush=True)
    source = minilm()
    with fixed_threads(args.threads or usable_cores()):
        source_encoder = Encoder("minilm", load(str(source)))
        c.join(source_encoder)
        src = c.vectors(source_encoder)
        rows = []
        for kind, name, build, precision in candidates(args, c, source):
            if args.only and not re.search(args.only, f"{kind}: {name}"):
                continue
            row = {"kind": kind, "candidate": name, "precision": precision, **measure(c, src, c.vectors(build()),
                                                                                     precision)}
            row["error_sample"] = round(row["estimate_sample"] - row["labelled"], 4)
            row["error_all"] = round(row["estimate_all"] - row["labelled"], 4)
            for w in ("sample", "queries"):
                row[f"error_belief_{w}"] = round(row[f"belief_{w}"] - row["labelled"], 4)
            for w in ("asked_sample", "asked_all"):
                row[f"error_{w}"] = round(row[f"estimate_{w}"] - row["labelled"], 4)
            rows.append(row)
            print(f"| {kind} | {name} | {row['estimate_sample']:.3f} | {row['estimate_all']:.3f} | "
                  f"{row['labelled']:.3f} {row['labelled_ci95']} | {row['error_sample']:+.3f} | "
                  f"{row['error_all']:+.3f} | {row['belief_sample']:.3f} | {row['belief_queries']:.3f} | "
                  f"{row['estimate_asked_sample']:.3f} | {row['estimate_asked_all']:.3f} |", flush=True)
    path = HERE / "results" / f"estimate-{args.collection}.json"
    if args.only and path.is_file():  # the other kinds' rows kept from the last full run
        measured = {r["candidate"] for r in rows}
        rows = [r for r in json.loads(path.read_text())["rows"] if r["candidate"] not in measured] + rows
    out = {"benchmark": "estimate", "date": date.today().isoformat(), "collection": args.collection,
           "machine": {"cpu": cpu_model(), "int8_isa": int8_isa(), "cores": usable_cores(),
                       "python": platform.python_version()},
           "command": "python benchmarks/estimate.py " + " ".join(sys.argv[1:]), "settings": vars(args),
           "documents": len(c.documents.texts), "sample": c.sample.to_dict(),
           "labelled_queries": len(c.data.evaluated_queries), "rows": rows,
           "by_kind": by_kind(rows), "seconds": round(time.perf_counter() - started)}
    path.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(out["by_kind"], indent=1))
    print(f"wrote {path}")
    print(f"wrote {write_error_table()}")


def write_error_table() -> Path:
    """``espresso_export/resources/estimate_error.json`` from every ``results/estimate-*.json``: per collection
    and kind, the mean and range of ``auto``'s estimate's error (the sample's known-item retention minus the
    labels), which ``auto.json`` and the card state beside an estimate
    (:mod:`espresso_export.verification.estimate_error`)."""
    collections, dates = {}, set()
    for f in sorted((HERE / "results").glob("estimate-*.json")):
        r = json.loads(f.read_text(encoding="utf-8"))
        if r["collection"] in MISLABELLED:
            continue
        dates.add(r["date"])
        kinds: dict[str, list[dict]] = {}
        for row in r["rows"]:
            kinds.setdefault(row["kind"], []).append(row)
        spread = lambda e: {"mean_error": round(float(np.mean(e)), 4), "min_error": min(e), "max_error": max(e)}
        collections[r["collection"]] = {
            "labelled_queries": r["labelled_queries"], "documents": r["documents"],
            "kinds": {k: {"n": len(rows), **spread([x["error_sample"] for x in rows]),
                          "with_queries": spread([x["error_asked_sample"] for x in rows])}
                      for k, rows in kinds.items()}}
    out = {"source": "sentence-transformers/all-MiniLM-L6-v2", "date": max(dates),
           "command": "python benchmarks/estimate.py --collection C", "collections": collections}
    path = HERE.parent / "espresso_export" / "resources" / "estimate_error.json"
    path.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    return path


WAYS = ("sample", "all", "belief_sample", "belief_queries", "asked_sample", "asked_all")


def by_kind(rows: list[dict]) -> dict:
    """Mean error (estimate minus labels) and mean absolute error per kind, on the sample and over every document."""
    kinds: dict[str, list[dict]] = {}
    for r in rows:
        kinds.setdefault(r["kind"], []).append(r)
    return {k: {"n": len(rs), **{f"mean_error_{w}": round(float(np.mean([r[f"error_{w}"] for r in rs])), 4)
                                 for w in WAYS},
                **{f"mean_abs_error_{w}": round(float(np.mean([abs(r[f"error_{w}"]) for r in rs])), 4)
                   for w in WAYS}} for k, rs in kinds.items()}


if __name__ == "__main__":
    main()
