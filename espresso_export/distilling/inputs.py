"""Phase 1 of ``distill``: the training sentences, the pairs, the held-out split and the eval sets."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from espresso_export.core.errors import ValidationError
from espresso_export.core.types import CorpusSample
from espresso_export.data import Corpus, read_corpus, read_retrieval, read_sentence_pairs, read_sts, spread_subset
from espresso_export.distilling.plan import DistillPlan


@dataclass
class CorpusSplit:
    sentences: list[str]  # corpus sentences, then the pair sentences the corpus lacks
    counts: dict  # for the provenance
    pair_rows: np.ndarray | None  # (pairs, 2) sentence indices of the training pairs, or None without pairs
    held: np.ndarray  # sorted indices of the held-out sentences
    items: np.ndarray  # the other sentences' indices (the training items of a sentence loss)
    eval_pairs: Any  # the STS eval set, or None
    eval_retrieval: Any = None  # the retrieval eval set (a RetrievalSet), or None


def _capped(c: Corpus, max_sentences: int, sample: CorpusSample, seed: int) -> list[int]:
    """Indices of the ``max_sentences`` corpus sentences ``sample`` keeps, in corpus order."""
    if sample is CorpusSample.RANDOM:
        return sorted(random.Random(seed).sample(range(len(c.sentences)), max_sentences))
    keep: list[int] = []
    start = 0
    for src in c.sources:  # each source's sentences are one contiguous run of the corpus
        run = range(start, start + src.kept)
        start += src.kept
        room = max_sentences - len(keep)
        if room <= 0:
            break
        keep.extend(run if len(run) <= room else sorted(random.Random(seed).sample(run, room)))
    return keep


def _mixed(c: Corpus, max_sentences: int | None, seed: int) -> tuple[list[int], list[dict]]:
    """Indices of a mix of the sources in their stated shares (``spec:0.7``), in corpus order, and the mix.

    No sentence repeats: the total is the largest each source can fill at its share (then at most
    ``max_sentences``), and each source gives a seeded random subset of its sentences."""
    weights = [s.weight for s in c.sources]
    if any(w is None for w in weights):
        missing = [s.spec for s in c.sources if s.weight is None]
        raise ValidationError(f"give every --corpus a share (file:0.7) or none; no share for {', '.join(missing)}")
    shares = np.asarray(weights, dtype=np.float64) / sum(weights)
    kept = np.asarray([s.kept for s in c.sources], dtype=np.float64)
    total = float(np.min(kept / shares))
    if max_sentences is not None:
        total = min(total, float(max_sentences))
    if total < 1:
        empty = [s.spec for s in c.sources if s.kept == 0]
        raise ValidationError(f"the corpus mix is empty: {', '.join(empty)} adds no new sentence")
    keep: list[int] = []
    mix: list[dict] = []
    start = 0
    for src, share in zip(c.sources, shares):
        take = min(src.kept, int(round(share * total)))
        keep.extend(random.Random(seed).sample(range(start, start + src.kept), take))
        mix.append({"spec": src.spec, "share": round(float(share), 4), "sentences": take, "available": src.kept})
        start += src.kept
    return sorted(keep), mix


def prepare_corpus(corpus, *, field: str | None = None, column: str | None = None, max_sentences: int | None = None,
                   sample: CorpusSample | str = CorpusSample.RANDOM, augment_kinds: Sequence[str] = (),
                   augment_copies: int = 1, seed: int = 0) -> tuple[list[str], dict]:
    """The training sentences (deduplicated, optionally capped and augmented) and their counts."""
    c = corpus if isinstance(corpus, Corpus) else read_corpus(corpus, field=field, column=column)
    sentences = list(c.sentences)
    counts = c.counts()
    if any(s.weight is not None for s in c.sources):
        keep, counts["mix"] = _mixed(c, max_sentences, seed)
        sentences = [sentences[i] for i in keep]
    elif max_sentences is not None and len(sentences) > max_sentences:
        sentences = [sentences[i] for i in _capped(c, max_sentences, CorpusSample(sample), seed)]
        counts["capped_to"] = max_sentences
        counts["sample"] = CorpusSample(sample).value
    if augment_kinds:
        from espresso_export.data.augment import augment

        extra = augment(sentences, augment_kinds, copies=augment_copies, seed=seed)
        sentences += extra
        counts["augmented"] = len(extra)
    counts["training_sentences"] = len(sentences)
    return sentences, counts


def add_pair_sentences(sentences: list[str], pairs: Sequence[tuple[str, str]]) -> tuple[list[str], np.ndarray, int]:
    """``sentences`` extended by the pair sentences it lacks, the pairs as index rows, and how many were added."""
    sentences = list(sentences)
    pos = {t: i for i, t in enumerate(sentences)}
    before = len(sentences)
    rows = np.empty((len(pairs), 2), dtype=np.int64)
    for r, pair in enumerate(pairs):
        for c, text in enumerate(pair):
            i = pos.get(text)
            if i is None:
                i = pos[text] = len(sentences)
                sentences.append(text)
            rows[r, c] = i
    return sentences, rows, len(sentences) - before


def load_corpus(plan: DistillPlan) -> CorpusSplit:
    """Read the corpus and the pairs, hold out sentences, and read the STS eval set."""
    if plan.corpus is not None:
        sentences, counts = prepare_corpus(plan.corpus, field=plan.corpus_field, column=plan.corpus_column,
                                           max_sentences=plan.max_sentences, sample=plan.sample,
                                           augment_kinds=plan.augment, augment_copies=plan.augment_copies,
                                           seed=plan.seed)
    else:
        sentences, counts = [], {}
    pair_rows = None
    if plan.pairs is not None:
        pair_list, pair_counts = read_sentence_pairs(plan.pairs)
        sentences, pair_rows, added = add_pair_sentences(sentences, pair_list)
        counts.update(pairs=pair_counts, pair_sentences_added=added, training_sentences=len(sentences))
    split = _hold_out(sentences, counts, pair_rows, plan.heldout, plan.batch_size, plan.seed)
    split.eval_pairs = (spread_subset(read_sts(plan.eval_sts), plan.eval_limit, "--eval-limit")
                        if plan.eval_sts is not None else None)
    split.eval_retrieval = read_retrieval(plan.eval_retrieval) if plan.eval_retrieval is not None else None
    return split


def _hold_out(sentences: list[str], counts: dict, pair_rows: np.ndarray | None, heldout: int, batch_size: int,
              seed: int) -> CorpusSplit:
    """Hold out up to ``heldout`` sentences (a tenth at most); check that one training batch is left."""
    n_held = min(heldout, len(sentences) // 10)
    held = np.sort(np.random.default_rng([seed, 7]).choice(len(sentences), size=n_held, replace=False))
    items = np.setdiff1d(np.arange(len(sentences)), held)
    # what the student trained on, and what it was checked on: "295 sentences" counted the 29 held out
    counts["training_sentences"], counts["heldout_sentences"] = int(len(items)), int(n_held)
    if pair_rows is not None:  # train on the pairs with no held-out sentence
        pair_rows = pair_rows[~np.isin(pair_rows, held).any(axis=1)]
        counts["training_pairs"] = int(len(pair_rows))
        if len(pair_rows) < max(1, batch_size // 2):
            raise ValidationError(f"{len(pair_rows)} pairs are left for training after {n_held} held-out sentences, "
                                  f"fewer than one batch ({max(1, batch_size // 2)} pairs at --batch-size "
                                  f"{batch_size}); lower --batch-size or add pairs")
    elif len(items) < batch_size:
        raise ValidationError(f"the corpus has {len(sentences)} sentences ({len(items)} for training after "
                              f"{n_held} held out), fewer than one batch (--batch-size {batch_size}); "
                              "lower --batch-size or add sentences")
    return CorpusSplit(sentences=sentences, counts=counts, pair_rows=pair_rows, held=held, items=items,
                       eval_pairs=None)
