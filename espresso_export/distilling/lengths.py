"""The training length of ``distill``: ``--max-seq-len``, or chosen from the corpus.

A fixed short length would cut passages to their first sentences while the teacher's targets see them whole, so
the default is a percentile (``--length-percentile``) of the corpus's token lengths under the student's tokenizer,
rounded up to a multiple of 8 and capped at the student's own maximum length.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from espresso_export.model.checkpoint import Checkpoint
from espresso_export.model.window import seeded_sample, token_lengths

LENGTH_SAMPLE = 10_000


def corpus_length(student: Checkpoint, sentences: Sequence[str], percentile: float, seed: int = 0) -> dict:
    """The chosen length and how it was chosen (``chosen``, the percentile in tokens, the cap, the share cut)."""
    sample = seeded_sample(sentences, LENGTH_SAMPLE, seed, 11)
    lengths = token_lengths(student.tokenizer, sample, lower=student.do_lower_case)
    at = float(np.percentile(lengths, percentile))
    cap = int(student.max_seq_length or 512)
    chosen = min(cap, max(8, 8 * math.ceil(at / 8)))
    return {"chosen": chosen, "rule": f"p{percentile:g} of the corpus's token lengths, capped at {cap}",
            "percentile_tokens": round(at, 1), "longest_tokens": int(lengths.max()), "sampled": len(sample),
            "truncated_share": round(float(np.mean(lengths > chosen)), 4)}


def resolve_length(plan, student: Checkpoint, sentences: Sequence[str]):
    """``(plan with max_seq_len set, the length record or None)``: ``plan.max_seq_len`` when given, else from the
    corpus."""
    if plan.max_seq_len is not None:
        return plan, None
    info = corpus_length(student, sentences, plan.length_percentile, plan.seed)
    return replace(plan, max_seq_len=info["chosen"]), info
