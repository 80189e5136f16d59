"""How ``auto`` encodes and times a candidate: its unit vectors of the sample (at the search's ``--amp`` and
``--device``), the source's one pass that also gives every first-layers cut, and a candidate's speed against the
source's, both in float32 on the CPU (what the answer is deployed as)."""

from __future__ import annotations

import statistics
import time

import numpy as np

from espresso_export.core.vectors import l2_normalised
from espresso_export.searching.scoring import Sample, Vectors

# texts per forward pass when scoring: large enough to keep a CPU's cores busy on short texts, small enough that
# a batch of long documents stays within a laptop's memory at the source's width (verify's --batch-size default)
ENCODE_BATCH = 64
TIMED_TEXTS = 32  # one batch a candidate's speed is timed on against the source's (time_ratio)
TIMED_ROUNDS = 3  # rounds taking turns, after a warm-up round: the ratio of the medians
FULL = ("off", "cpu")  # scoring: (--amp, --device) of the search's encoding passes


def scoring_precision(scoring: tuple[str, str]):
    """The autocast context of one encoding pass, ``scoring`` = (``--amp``, ``--device``): the precision the heals'
    teacher pass uses there. Entered per pass, never around a heal: torch clears autocast's cache of cast weights
    only when the outermost autocast region ends, so a training loop inside one would run its forward passes on
    the weights as they were cast at its first step."""
    from espresso_export.training.schedule import encoding_precision

    return encoding_precision(*scoring)


class StaticCandidate:
    """A static model folder as the search encodes it: by model2vec, on the CPU, as its users run it (no torch)."""

    depth = 0

    def __init__(self, folder) -> None:
        from espresso_export.model.static import load_static

        self.static = load_static(folder)

    @property
    def n_params(self) -> int:
        return int(self.static.embedding.size)

    def encode(self, texts: list[str], batch_size: int = ENCODE_BATCH) -> np.ndarray:
        # one process: model2vec forks workers past 10,000 texts, which a search's timing must not count
        return np.asarray(self.static.encode(list(texts), batch_size=batch_size, use_multiprocessing=False,
                                             show_progress_bar=False), dtype=np.float32)


def load_candidate(folder, device: str):
    """A candidate's folder in memory: a static model (:class:`StaticCandidate`), else a checkpoint on ``device``."""
    from espresso_export.model.static import is_static_folder

    if is_static_folder(folder):
        return StaticCandidate(folder)
    from espresso_export.model.checkpoint import load

    return placed(load(folder), device)


def placed(ckpt, device: str):
    """``ckpt`` with its model on ``device`` (where the search encodes: ``--device``)."""
    ckpt.model.to(device)
    return ckpt


def _encode(model, texts: list[str], batch_size: int) -> np.ndarray:
    from espresso_export.model.embed import encode

    if isinstance(model, StaticCandidate):
        return model.encode(texts, batch_size)
    return encode(model, texts, batch_size=batch_size)


def documents_vectors(ckpt, texts: list[str], scoring: tuple[str, str] = FULL) -> np.ndarray:
    """``ckpt``'s unit vectors of ``texts``, encoded as the search scores."""
    with scoring_precision(scoring):
        return l2_normalised(_encode(ckpt, texts, ENCODE_BATCH))


def timed_vectors(ckpt, sample: Sample, scoring: tuple[str, str] = FULL) -> tuple[Vectors, float]:
    """The model's vectors of the sample and its seconds per text (the documents' encoding)."""
    start = time.perf_counter()
    documents = documents_vectors(ckpt, sample.documents, scoring)
    per_text = (time.perf_counter() - start) / max(len(sample.documents), 1)
    queries, targets = (documents_vectors(ckpt, t, scoring) for t in (sample.queries.texts, sample.queries.targets))
    asked = documents_vectors(ckpt, sample.asked, scoring) if sample.asked else None
    return Vectors(queries, documents, targets, asked), per_text


def source_pass(ckpt, sample: Sample, depths: list[int], scoring: tuple[str, str] = FULL
                ) -> tuple[Vectors, float, dict[int, Vectors]]:
    """One pass of the source over the sample: its vectors, its seconds per text (the documents' encoding) and,
    from the same forward passes, the unit vectors of each cut to its first ``d`` of ``depths`` layers (the pooled
    states after layer ``d`` through the source's post modules renormalised: what shrink fits a head on). A cut
    that keeps the first layers is a prefix of the source, so rung 0 scores them all for the price of the
    source's own encoding."""
    with scoring_precision(scoring):
        start = time.perf_counter()
        documents = layer_vectors(ckpt, sample.documents, depths)
        per_text = (time.perf_counter() - start) / max(len(sample.documents), 1)
        queries, targets = (layer_vectors(ckpt, t, depths) for t in (sample.queries.texts, sample.queries.targets))
        asked = layer_vectors(ckpt, sample.asked, depths) if sample.asked else {}
    pick = lambda d: Vectors(queries[d], documents[d], targets[d], asked.get(d))
    return pick(ckpt.depth), per_text, {d: pick(d) for d in depths if d < ckpt.depth}


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


def time_ratio(source_ckpt, ckpt, texts: list[str], rounds: int = TIMED_ROUNDS) -> float:
    """Seconds per batch of ``ckpt`` over ``source_ckpt``'s on the same texts, both on the CPU in float32 (what
    the answer is deployed as, whatever the search encodes with): one warm-up batch each, then ``rounds`` rounds
    taking turns; the ratio of the medians (a shared machine's noise hits both alike)."""
    from espresso_export.model.embed import model_device

    sample = texts[:TIMED_TEXTS]
    times: dict[int, list[float]] = {0: [], 1: []}
    models = [m if isinstance(m, StaticCandidate) else m.model for m in (source_ckpt, ckpt)]
    devices = [None if isinstance(m, StaticCandidate) else model_device(m) for m in models]
    for r in range(rounds + 1):
        for i, model in enumerate((source_ckpt, ckpt)):
            if devices[i] is not None:
                models[i].to("cpu")  # a no-op on the CPU; from a GPU, one model at a time
            start = time.perf_counter()
            _encode(model, sample, len(sample))
            if r > 0:
                times[i].append(time.perf_counter() - start)
            if devices[i] is not None:
                models[i].to(devices[i])
    return statistics.median(times[1]) / max(statistics.median(times[0]), 1e-9)
