"""What ``--time-budget`` covers: the whole command, the export and final check included.

A user gives a budget to fit the search into a slot (a CI job, a lunch break), so the command's wall time is what
it bounds. Once the source's pass has measured this machine's speed, the finish (the answer's export, verify on
all the documents, the card) is estimated and kept aside, rung 0 scores the plain cuts that fit (deepest first:
with no time to heal, only a cut that keeps the target untrained can answer), and the heals plan within the rest.
What no budget can skip (the source's pass, one depth's plain cuts, the finish) is said up front with the total
it makes when it is more than the budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from espresso_export.distilling.student import STUDENT_PCA_SAMPLES  # distill encodes these before training
from espresso_export.searching.auto_settings import AutoSettings

FINISH_FIXED = 15.0  # seconds: the ONNX export, its int8 weights and their validation, the card and the recipe
ANSWER_SHARE = 0.5  # the answer's encoding time as a share of the source's, before the answer is known
ALONE = 2.5  # a text encoded alone (verify times batch size 1) costs about this many times its share of a batch
STS_TEXTS = 3000  # texts per STS set given with --sts, about: an estimate, not read (STS-B's test split's size)
BUILTIN_STS_TEXTS = 340  # the shipped smoke set the final check reads when no --sts is given
TIMED_ROUND = 3  # verify's timed rounds at least per batch size, each every latency text through both models
JUDGED_PASSES = 2  # judged choice: the candidates' passes kept aside at most, in source passes (cheapest first)
TRAIN_COST = 3.0  # a training step on a text costs about 3 forward passes (forward, backward), until measured


@dataclass
class Speed:
    """Seconds per text of this machine, from the source's measured encoding; ``train_cost`` is replaced by what
    the first heal measured."""

    seconds_per_text: float  # the source's encoding, per text of the documents
    depth: int  # the source's layers
    train_cost: float = TRAIN_COST

    def encode(self, texts: int, depth: float) -> float:
        """Seconds to encode ``texts`` with a model costing ``depth`` of the source's layers per text
        (:func:`.candidates.work_depth`)."""
        return texts * self.seconds_per_text * max(depth, 1e-3) / self.depth

    def train(self, texts: int, depth: float) -> float:
        """A heal: the student's own PCA sample encoded once (distill's projection start), then the training."""
        return self.encode(min(texts, STUDENT_PCA_SAMPLES), depth) + self.train_cost * self.encode(texts, depth)

    def observe(self, texts: int, depth: float, seconds: float) -> None:
        """A heal of ``texts`` texts at ``depth`` layers took ``seconds`` (the teacher pass aside)."""
        rest = seconds - self.encode(min(texts, STUDENT_PCA_SAMPLES), depth)
        if texts > 0 and rest > 0:
            self.train_cost = max(1.0, rest / self.encode(texts, depth))


def _lines(path: Path) -> int:
    try:
        with open(path, "rb") as fh:
            return sum(1 for _ in fh)
    except OSError:
        return 0


def _labelled_texts(s: AutoSettings) -> int:
    """Texts the final check encodes for the labelled sets: each STS set's sentences, each retrieval set's corpus
    and queries (line counts of its files: cheap, and close enough for an estimate)."""
    texts = STS_TEXTS * len(s.sts) if s.sts else BUILTIN_STS_TEXTS
    for spec in s.retrieval:
        folder = Path(spec).expanduser()
        texts += _lines(folder / "corpus.jsonl") + _lines(folder / "queries.jsonl")
    return texts


def finish_seconds(s: AutoSettings, documents: int, speed: Speed) -> float:
    """The finish of one answer, estimated from the source's measured speed: the export encodes the search's
    sample twice (int8 and float32 kept or not); verify encodes every document, the final check's queries and
    their targets, and the labelled sets with the source and the answer, then times both models at each batch
    size (:mod:`espresso_export.verification.latency`, ``--latency-budget`` seconds of extra rounds each)."""
    from espresso_export.verification.verify_settings import declared_default

    queries = len(s.corpus) * 3 * min(s.corpus_queries, documents)  # agreement, known-item, their targets
    texts = documents + queries + _labelled_texts(s)
    verify = speed.encode(texts, speed.depth) * (1 + ANSWER_SHARE)
    timed = declared_default("latency_texts") * TIMED_ROUND
    sizes = declared_default("batch_sizes")
    latency = sum(speed.encode(timed + 3 * b, speed.depth) * (1 + ANSWER_SHARE) * (ALONE if b == 1 else 1)
                  + s.latency_budget for b in sizes)
    export = FINISH_FIXED + 2 * speed.encode(min(documents, s.sample_documents), speed.depth * ANSWER_SHARE)
    return export + verify + latency


def judged_seconds(s: AutoSettings, documents: int, speed: Speed) -> float:
    """``--judged-choice``: every document and the final check's queries encoded by the source, then by the
    candidates searched, cheapest first (with ``--write-judging`` every one the budget covers: about the cuts'
    layers over the source's, at most :data:`JUDGED_PASSES` passes of it; else about one); 0 without it."""
    if not s.judged_choice:
        return 0.0
    texts = documents + len(s.corpus) * min(s.corpus_queries, documents)
    depths = s.layers or range(1, speed.depth)
    candidates = min(2 * sum(depths) / speed.depth, JUDGED_PASSES) if s.write_judging else 1.0
    return (1 + candidates) * speed.encode(texts, speed.depth)


def cut_seconds(speed: Speed, depth: int, texts: int, overhead: float) -> float:
    """A plain cut in rung 0: ``texts`` encoded at ``depth`` layers, plus what the last cut cost beyond its
    encoding (building it, fitting its head, timing it against the source)."""
    return speed.encode(texts, depth) + overhead


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"
