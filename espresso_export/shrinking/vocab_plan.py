"""Which token ids a pruned vocabulary keeps, and why: the plan, from corpus counts.

Reasons are counted in order (special, corpus, keep_file, fallback, then BPE
merge parts): an id kept for several reasons counts under the first one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from espresso_export.core.errors import ValidationError
from espresso_export.model.vocabulary import full_vocab
from espresso_export.shrinking.vocab_rules import close_merges, fallback_tokens, model_type


def check_keep_tokens(tokens: Sequence[str], vocab: dict[str, int], where: str | None = None) -> set[str]:
    """The ``--keep-file`` tokens, each written exactly as in the vocabulary (e.g. ``##ing``)."""
    missing = [t for t in tokens if t not in vocab]
    if missing:
        shown = ", ".join(repr(t) for t in missing[:5])
        raise ValidationError(
            f"{where or 'keep file'}: {len(missing)} line(s) are not tokens of the vocabulary "
            f"({shown}{', ...' if len(missing) > 5 else ''}); write tokens exactly as the tokenizer does "
            "(e.g. ##ing), one a line"
        )
    return set(tokens)


def check_limits(min_count: int, keep_top: int | None) -> None:
    if min_count < 1:
        raise ValidationError(f"--min-count must be at least 1, got {min_count}")
    if keep_top is not None and keep_top < 1:
        raise ValidationError(f"--keep-top must be at least 1, got {keep_top}")


@dataclass
class VocabPlan:
    """Which old ids survive, why, and how the corpus is covered."""

    tokenizer_type: str
    old_ids: list[int]  # new id -> old id
    vocab_before: int
    reasons: dict[str, int]  # reason -> ids kept for it (the first reason that applies: they sum to len(old_ids))
    corpus_tokens: int  # token occurrences on the corpus
    distinct_corpus_tokens: int
    covered_tokens: int  # corpus occurrences whose token is kept

    @property
    def coverage(self) -> float:
        return self.covered_tokens / self.corpus_tokens if self.corpus_tokens else 1.0


def _corpus_ids(counts, min_count: int, keep_top: int | None):
    """The ids seen at least ``min_count`` times, at most the ``keep_top`` most frequent."""
    import numpy as np

    eligible = np.flatnonzero(counts >= min_count)
    if keep_top is not None and len(eligible) > keep_top:
        order = np.argsort(-counts[eligible], kind="stable")  # ties: the lower id first
        eligible = eligible[order[:keep_top]]
    return {int(i) for i in eligible}


def _special_ids(tj: dict, id_of: dict[str, int], protect_below: int | None, config_ids: Iterable[int]) -> set[int]:
    """Added tokens, the config's token ids, the ids a position table counts from, and the unknown token."""
    special = {int(t["id"]) for t in tj.get("added_tokens") or []} | {int(i) for i in config_ids}
    if protect_below is not None:
        special |= set(range(protect_below + 1))
    unk = tj["model"].get("unk_token")
    if isinstance(unk, str) and unk in id_of:
        special.add(id_of[unk])
    if tj["model"]["type"] == "Unigram" and tj["model"].get("unk_id") is not None:
        special.add(int(tj["model"]["unk_id"]))
    return special


def plan(tj: dict, counts, *, min_count: int = 1, keep_top: int | None = None, keep_tokens: Iterable[str] = (),
         protect_below: int | None = None, config_ids: Iterable[int] = ()) -> VocabPlan:
    """Decide the kept ids from corpus ``counts`` (see :func:`~espresso_export.model.vocabulary.count_tokens`)."""
    check_limits(min_count, keep_top)
    kind = model_type(tj)
    id_of = full_vocab(tj)
    token_of = {i: t for t, i in id_of.items()}
    candidates = [
        ("special", _special_ids(tj, id_of, protect_below, config_ids)),
        ("corpus", _corpus_ids(counts, min_count, keep_top)),
        ("keep_file", {id_of[t] for t in keep_tokens}),
        ("fallback", {id_of[t] for t in fallback_tokens(tj)}),
    ]
    reasons: dict[str, int] = {}
    kept_ids: set[int] = set()
    for reason, ids in candidates:  # each id is counted under the first reason that keeps it
        new = {i for i in ids if i in token_of} - kept_ids
        reasons[reason] = len(new)
        kept_ids |= new
    closed = close_merges(tj, {token_of[i] for i in kept_ids})
    merge_parts = {id_of[t] for t in closed} - kept_ids
    reasons["merge_parts"] = len(merge_parts)
    kept_ids |= merge_parts
    old_ids = sorted(kept_ids)
    covered = int(counts[old_ids].sum()) if old_ids else 0
    return VocabPlan(
        tokenizer_type=kind, old_ids=old_ids, vocab_before=len(id_of), reasons=reasons,
        corpus_tokens=int(counts.sum()), distinct_corpus_tokens=int((counts > 0).sum()), covered_tokens=covered,
    )
