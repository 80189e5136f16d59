"""The models ``auto`` tries: cuts of the source (a depth, a PCA head) and, when given, a smaller pretrained
student; how each is built plain (rung 0, no training), healed (distill on the healing texts, the teacher's
targets shared through one cache) and scored on the evaluation set."""

from __future__ import annotations

import copy
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from espresso_export.core.vectors import l2_normalised
from espresso_export.searching.evaluation import EvalSet, Scorer, Vectors

ENCODE_BATCH = 64
TIMED_TEXTS = 32  # one batch a candidate's speed is timed on against the source's (time_ratio)
CALIBRATION = 2000  # healing texts a plain cut's PCA head is fitted on when the searched documents are too few
CALIBRATION_FILE = "calibration-texts.txt"  # the searched documents, one per line: what a plain cut's head is fitted on


@dataclass
class Candidate:
    """One point of the search space and what was measured of it."""

    name: str  # "L3" (the source cut to 3 layers spread over it), "L3f" (its first 3 layers) or "student"
    depth: int
    layers: list[int] | None = None  # the source's layers a cut keeps
    student: str | None = None
    params: int = 0
    latency_ratio: float = 1.0  # seconds per text against the source's, encoded here side by side
    scores: dict[str, dict] = field(default_factory=dict)  # "plain" or "r1".. -> Score.to_dict() (+ texts)
    dropped: str | None = None  # why the search stopped healing it
    calibration: str | None = None  # a plain cut's PCA texts: CALIBRATION_FILE, or None for the healing texts

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Candidate:
        """A copy: a candidate read from the work folder's state gains stages (heals) that are steps of their own,
        never entries of the plain cut's recorded step."""
        return cls(**copy.deepcopy(d))

    def last(self) -> tuple[str, dict] | None:
        """The latest measured stage and its score (the longest heal)."""
        return next(((k, self.scores[k]) for k in reversed(list(self.scores))), None)


FULL = ("off", "cpu")  # scoring: (--amp, --device) of the search's encoding passes


def scoring_precision(scoring: tuple[str, str]):
    """The autocast context of one encoding pass, ``scoring`` = (``--amp``, ``--device``): the precision the heals'
    teacher pass uses there. Entered per pass, never around a heal: torch clears autocast's cache of cast weights
    only when the outermost autocast region ends, so a training loop inside one would run its forward passes on
    the weights as they were cast at its first step."""
    from espresso_export.training.schedule import encoding_precision

    return encoding_precision(*scoring)


def timed_vectors(ckpt, ev: EvalSet, scoring: tuple[str, str] = FULL) -> tuple[Vectors, float]:
    """The model's vectors of the evaluation set and its seconds per text (the passages' encoding)."""
    start = time.perf_counter()
    passages = documents_vectors(ckpt, ev.passages, scoring)
    per_text = (time.perf_counter() - start) / max(len(ev.passages), 1)
    queries, targets = (documents_vectors(ckpt, t, scoring) for t in (ev.cloze.texts, ev.cloze.targets))
    return Vectors(queries, passages, targets), per_text


def source_pass(ckpt, ev: EvalSet, depths: list[int], scoring: tuple[str, str] = FULL
                ) -> tuple[Vectors, float, dict[int, Vectors]]:
    """One pass of the source over the evaluation set: its vectors, its seconds per text (the passages'
    encoding) and, from the same forward passes, the unit vectors of each cut to its first ``d`` of ``depths``
    layers (the pooled states after layer ``d`` through the source's post modules renormalised: what shrink fits
    a head on). A cut that keeps the first layers is a prefix of the source, so rung 0 scores them all for the
    price of the source's own encoding."""
    with scoring_precision(scoring):
        start = time.perf_counter()
        passages = layer_vectors(ckpt, ev.passages, depths)
        per_text = (time.perf_counter() - start) / max(len(ev.passages), 1)
        queries, targets = (layer_vectors(ckpt, t, depths) for t in (ev.cloze.texts, ev.cloze.targets))
    own = Vectors(queries[ckpt.depth], passages[ckpt.depth], targets[ckpt.depth])
    return own, per_text, {d: Vectors(queries[d], passages[d], targets[d]) for d in depths if d < ckpt.depth}


def layer_vectors(ckpt, texts: list[str], depths: list[int]) -> dict[int, np.ndarray]:
    """``{d: unit vectors}`` of ``texts`` from one pass of the source: its own (key ``ckpt.depth``, through its post
    modules) and each first-``d``-layers cut's of ``depths`` (through them renormalised)."""
    import torch

    from espresso_export.model.embed import apply_post, encode_layers
    from espresso_export.model.post import renormalized

    states = encode_layers(ckpt, texts, sorted(set(depths) | {ckpt.depth}), batch_size=ENCODE_BATCH)
    base = renormalized(ckpt.post)
    return {d: l2_normalised(apply_post(torch.from_numpy(x), ckpt.post if d == ckpt.depth else base).numpy())
            for d, x in states.items()}


def work_depth(cand: Candidate, source_depth: int) -> float:
    """The candidate's cost per text in the source's layers, what the plan's :class:`.plan.Speed` scales by: a cut's
    depth; a student's measured time ratio times the source's depth (a student narrower than the source runs
    faster than its depth says, and a heal's speed measured on it must not set the cuts' estimates)."""
    if cand.student is None:
        return float(cand.depth)
    return cand.latency_ratio * source_depth


def placed(ckpt, device: str):
    """``ckpt`` with its model on ``device`` (where the search encodes: ``--device``)."""
    ckpt.model.to(device)
    return ckpt


def time_ratio(source_ckpt, ckpt, texts: list[str], rounds: int = 3) -> float:
    """Seconds per batch of ``ckpt`` over ``source_ckpt``'s on the same texts, both on the CPU in float32 (what
    the answer is deployed as, whatever the search encodes with): one warm-up batch each, then ``rounds`` rounds
    taking turns; the ratio of the medians (a shared machine's noise hits both alike)."""
    import statistics

    from espresso_export.model.embed import encode, model_device

    sample = texts[:TIMED_TEXTS]
    times: dict[int, list[float]] = {0: [], 1: []}
    devices = [model_device(m.model) for m in (source_ckpt, ckpt)]
    for r in range(rounds + 1):
        for i, model in enumerate((source_ckpt, ckpt)):
            model.model.to("cpu")  # a no-op on the CPU; from a GPU, one model at a time
            start = time.perf_counter()
            encode(model, sample, batch_size=len(sample))
            if r > 0:
                times[i].append(time.perf_counter() - start)
            model.model.to(devices[i])
    return statistics.median(times[1]) / max(statistics.median(times[0]), 1e-9)


def calibration_texts(ev: EvalSet) -> tuple[list[str], list[int]]:
    """The searched documents as a calibration file holds them (whitespace collapsed, each distinct text once, as
    ``read_sentences`` reads them back) and the positions in ``ev.passages`` of those kept."""
    seen: dict[str, int] = {}
    for i, t in enumerate(ev.passages):
        text = " ".join(t.split())
        if text and text not in seen:
            seen[text] = i
    return list(seen), list(seen.values())


def plain_cut(source, cand: Candidate, ev: EvalSet, *, dim: int, calibration: Path, fallback: Path, seed: int,
              source_ckpt, scoring: tuple[str, str] = FULL) -> Vectors:
    """Rung 0: the source cut to ``cand.layers`` (else ``cand.depth`` layers as shrink chooses them) with a PCA
    head, untrained (a student as it comes); fills in its layers, parameters and speed.

    The head is fitted on the searched documents' vectors the cut has just encoded (``calibration`` holds those
    texts, for the rebuild), so nothing is encoded twice: encoding is what rung 0 costs, and fitting the head on
    other texts would encode those too, at every depth. With no more documents than ``dim``, shrink fits it on
    :data:`CALIBRATION` of the healing texts (``fallback``) instead."""
    from espresso_export.model.checkpoint import load
    from espresso_export.model.embed import model_device
    from espresso_export.model.post import renormalized, with_head
    from espresso_export.shrinking.shrink import shrink

    texts, rows = calibration_texts(ev)
    device = model_device(source_ckpt.model)
    if cand.student is not None:
        ckpt = placed(load(cand.student), device)
        cand.depth = ckpt.depth
        vectors = timed_vectors(ckpt, ev, scoring)[0]
    elif len(texts) <= dim:
        cut = shrink(source, None, layers=cand.layers or cand.depth, dim=dim, calibration=str(fallback), seed=seed,
                     calibration_samples=CALIBRATION, progress=False)
        ckpt, cand.layers = placed(cut.checkpoint, device), list(cut.layers)
        vectors = timed_vectors(ckpt, ev, scoring)[0]
    else:
        cut = shrink(source, None, layers=cand.layers or cand.depth, progress=False)
        ckpt, cand.layers = placed(cut.checkpoint, device), list(cut.layers)
        base = renormalized(ckpt.post)  # unit vectors: what shrink fits a PCA head on
        ckpt.post = base
        vectors, head = headed(cand, timed_vectors(ckpt, ev, scoring)[0], rows, dim, calibration)
        ckpt.post = with_head(base, head)  # the model shrink builds from ``calibration``
    cand.params = int(ckpt.n_params)
    cand.latency_ratio = time_ratio(source_ckpt, ckpt, ev.passages)
    return vectors


def headed(cand: Candidate, unit: Vectors, rows: list[int], dim: int, calibration: Path):
    """A plain cut's vectors through the PCA head fitted on its unit vectors of the searched documents (rows
    ``rows`` of the passages), and that head (a Dense layer): the model shrink builds from ``calibration``."""
    from espresso_export.shrinking.heads import fit_pca

    pca = fit_pca(unit.passages[rows], dim)
    cand.calibration = calibration.name
    return Vectors(*(l2_normalised(pca.transform(x).astype(np.float32)) for x in unit.triple())), pca.as_dense()


def heal_settings(cand: Candidate, *, texts: int, heal_texts: int, heal_file: Path, dim: int, settings,
                  cache_dir: Path) -> dict[str, Any]:
    """distill's settings for healing ``cand`` on ``texts`` training texts (steps x batch size) of the
    ``heal_texts`` in ``heal_file``: what the search runs and what the recipe it writes rebuilds."""
    kw: dict[str, Any] = {"dim": dim, "corpus": [str(heal_file)], "batch_size": settings.batch_size,
                          "epochs": max(1, math.ceil(texts / max(heal_texts, 1))),
                          "max_steps": max(1, texts // settings.batch_size), "seed": settings.seed,
                          "heldout": 0, "device": settings.device, "cache_dir": str(cache_dir)}
    if settings.max_seq_len is not None:
        kw["max_seq_len"] = settings.max_seq_len
    if settings.amp != "auto":
        kw["amp"] = settings.amp
    if cand.student is not None:
        kw["student"] = cand.student
    else:
        kw["student_layers"] = list(cand.layers or [])
    return kw


def heal(source, cand: Candidate, folder: Path, run_dir: Path, kwargs: dict, *, progress: bool):
    """distill ``cand`` into ``folder`` (a stopped heal of the same settings resumes from its run folder)."""
    from espresso_export.distilling.run import distill
    from espresso_export.training.resume import read_checkpoint_meta
    from espresso_export.training.run_files import stopped_early

    resume = run_dir.is_dir() and (read_checkpoint_meta(run_dir) is not None or stopped_early(run_dir))
    return distill(source, folder, resume=resume, run_dir=run_dir, overwrite=True, progress=progress, **kwargs)


def healed_vectors(folder: Path, ev: EvalSet, scoring: tuple[str, str] = FULL) -> Vectors:
    from espresso_export.model.checkpoint import load

    return timed_vectors(placed(load(folder), scoring[1]), ev, scoring)[0]


def documents_vectors(ckpt, texts: list[str], scoring: tuple[str, str] = FULL) -> np.ndarray:
    """``ckpt``'s unit vectors of ``texts``, encoded as the search scores."""
    from espresso_export.model.embed import encode

    with scoring_precision(scoring):
        return l2_normalised(encode(ckpt, texts, batch_size=ENCODE_BATCH))


NESTED_WIDTHS = (32, 48, 64, 96, 128, 192, 256, 384, 512, 768)  # the stored widths tried, up to the head's


def nested_widths(dim: int) -> list[int]:
    return [d for d in NESTED_WIDTHS if d <= dim]


def head_width(dim: int, texts: int) -> int:
    """The widest PCA head ``texts`` distinct texts can fit, a PCA to k dims needing k + 1 of them: ``dim``, else the
    widest nested width below it that they fit (0: none). Every head of a search is fitted on the healing texts
    (a heal's targets; a plain cut's when the searched documents are too few) or on more texts than them."""
    if texts > dim:
        return dim
    return max((d for d in nested_widths(dim) if d < texts), default=0)


def variants(scorer: Scorer, vectors: Vectors, dims: list[int], precisions: list[str]) -> list[dict]:
    """Every (width, precision) the index could store, scored: the nested widths of a PCA head and each
    output precision."""
    width = vectors.queries.shape[1]
    out = []
    for k in sorted({d for d in dims if d < width} | {width}):
        for p in precisions:
            out.append(scorer.score(vectors, dim=k, precision=p).to_dict())
    return out


def cheapest_variant(found: list[dict], target: float, precisions=None) -> dict | None:
    """The fewest bytes per vector of a stored form keeping ``target`` (among ``precisions``, default all)."""
    ok = [v for v in found if v["retention"] >= target and (precisions is None or v["precision"] in precisions)]
    return min(ok, key=lambda v: (v["bytes_per_vector"], -v["retention"])) if ok else None


def cost(cand: Candidate, objective: str, stage: dict | None, target: float, precisions=None) -> float:
    """What the objective minimises, for ranking: the measured time ratio, the parameters, or the bytes per
    vector of the narrowest stored form that keeps the target (infinite when none does yet)."""
    if objective == "latency":
        return cand.latency_ratio
    if objective == "size":
        return float(cand.params)
    best = cheapest_variant((stage or {}).get("variants", []), target, precisions)
    return float(best["bytes_per_vector"]) if best else math.inf

