"""The user's own queries in the search (``--queries``, no labels): every candidate is also scored by how closely
it follows the source's belief on them (:func:`~espresso_export.verification.known_item.followed`), and its
estimate is the higher of that and its known-item read (:class:`~espresso_export.verification.known_item.Estimate`).

Over a random sample the user's queries lose most of their relevant documents, and the belief read then falls
with the sample's size. So each query's top :data:`ASKED_DEPTH` among the documents outside the random sample (by
the source, from one pass over them) join the sample: the source's top :data:`ASKED_DEPTH` over all the documents
are then all in it. That pass is the source's vectors of the documents outside the sample, which the scoring on
all the documents (:mod:`.all_documents`) reads from the work folder instead of computing them again.
"""

from __future__ import annotations

import random

import numpy as np

from espresso_export.core.vectors import l2_normalised
from espresso_export.runtime.precision import search_at
from espresso_export.searching.auto_settings import AutoSettings
from espresso_export.searching.encoding import documents_vectors
from espresso_export.searching.scoring import Sample
from espresso_export.searching.work import Work

ASKED_QUERIES = 100  # the user's queries scored on: a seeded sample of more
ASKED_DEPTH = 10  # each one's top documents outside the random sample join it
ASKED_STEP = "your-queries"
OTHERS_FILE = "source-other-documents.npy"  # the source's unit vectors of the documents not in the sample


def read_asked(s: AutoSettings) -> list[str]:
    """The distinct texts of every ``--queries`` file, at most :data:`ASKED_QUERIES` (a seeded sample)."""
    from espresso_export.data.corpus import read_corpus

    return at_most(list(dict.fromkeys(t for spec in s.queries for t in read_corpus(spec).sentences)), s.seed)


def at_most(texts: list[str], seed: int) -> list[str]:
    """At most :data:`ASKED_QUERIES` of ``texts``, a seeded sample in their order."""
    if len(texts) <= ASKED_QUERIES:
        return texts
    return [texts[i] for i in sorted(random.Random(seed).sample(range(len(texts)), ASKED_QUERIES))]


def with_asked(sample: Sample, s: AutoSettings, model, work: Work) -> Sample:
    """``sample`` with the user's queries, and the documents they need from outside it (appended, so the
    known-item queries' origins still point at theirs); unchanged without ``--queries``. The documents joined
    are recorded in the work folder, so a continued search draws the same sample without the source's pass."""
    if not s.queries:
        return sample
    asked = read_asked(s)
    found = work.done(ASKED_STEP)
    if found is None:
        others = documents_vectors(model.get(), sample.others, s.scoring) if sample.others else None
        joined = [] if others is None else joined_positions(documents_vectors(model.get(), asked, s.scoring), others)
        if others is not None:
            save_others(work, np.delete(others, joined, axis=0))
        found = work.put(ASKED_STEP, {"queries": len(asked), "joined": joined})
    return joined_sample(sample, found["joined"], asked)


def joined_sample(sample: Sample, joined: list[int], asked: list[str]) -> Sample:
    """``sample`` with the documents at positions ``joined`` of its others appended, and the user's queries."""
    taken = set(joined)
    return Sample(sample.documents + [sample.others[i] for i in joined], sample.queries, sample.held_out,
                  [d for i, d in enumerate(sample.others) if i not in taken], sample.duplicates, asked)


def joined_positions(asked: np.ndarray, others: np.ndarray) -> list[int]:
    """Positions in ``others`` of every query's top :data:`ASKED_DEPTH` there, in order."""
    top = search_at(l2_normalised(asked), others, min(ASKED_DEPTH, len(others))).ranked
    return sorted({int(i) for i in top.ravel() if i >= 0})


def save_others(work: Work, vectors: np.ndarray) -> None:
    """The source's vectors of the documents outside the sample, saved whole or not at all
    (:func:`~espresso_export.model.cache.atomic_file`)."""
    from espresso_export.model.cache import atomic_file

    def write(tmp) -> None:
        with open(tmp, "wb") as fh:  # a file object: np.save would append ".npy" to a temp name
            np.save(fh, vectors)

    atomic_file(work.path(OTHERS_FILE), write)
