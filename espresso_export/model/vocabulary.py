"""A tokenizer's vocabulary as data: its ``tokenizer.json``, token counts, and the pruning record.

Both ``prune-vocab`` (which decides what to keep) and ``verify`` (which measures
how much of its texts a pruned candidate's vocabulary still covers) read
vocabularies the same way; this module is that one reading, below both stages.

The pruning record is the ``vocab_pruning`` entry of a provenance chain
(``espresso.json``): the original vocabulary's hash and the kept ids as
``[first, last]`` runs of old ids, in new-id order.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from espresso_export.core.errors import UnsupportedModelError

PROVENANCE_KEY = "vocab_pruning"


# --- the tokenizer's JSON ---------------------------------------------------------------------------------


def tokenizer_json(tokenizer) -> dict:
    """The ``tokenizer.json`` document of a fast transformers tokenizer or a ``tokenizers.Tokenizer``."""
    backend = tokenizer if hasattr(tokenizer, "to_str") else getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise UnsupportedModelError("vocabulary pruning needs a fast tokenizer (tokenizer.json); this one has none")
    return json.loads(backend.to_str())


def model_vocab(tj: dict) -> dict[str, int]:
    """token -> id of the tokenizer's model (not the added tokens)."""
    model = tj["model"]
    if model["type"] == "Unigram":
        return {piece: i for i, (piece, _score) in enumerate(model["vocab"])}
    return dict(model["vocab"])


def full_vocab(tj: dict) -> dict[str, int]:
    vocab = model_vocab(tj)
    for t in tj.get("added_tokens") or []:
        vocab.setdefault(t["content"], int(t["id"]))
    return vocab


def vocab_sha256(tj: dict) -> str:
    """Hash of the vocabulary in id order: tells whether two tokenizers share one id space."""
    vocab = full_vocab(tj)
    text = "\n".join(f"{i}\t{t}" for t, i in sorted(vocab.items(), key=lambda kv: kv[1]))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def count_tokens(tj: dict, sentences: Sequence[str], *, lower: bool = False, batch: int = 4096):
    """Occurrences of every token id (no special tokens added) on ``sentences``: an int64 array."""
    import numpy as np
    from tokenizers import Tokenizer

    backend = Tokenizer.from_str(json.dumps(tj))
    backend.no_padding()
    backend.no_truncation()
    size = max(full_vocab(tj).values()) + 1
    counts = np.zeros(size, dtype=np.int64)
    for start in range(0, len(sentences), batch):
        chunk = [s.lower() if lower else s for s in sentences[start : start + batch]]
        ids = [e.ids for e in backend.encode_batch(chunk, add_special_tokens=False)]
        flat = np.fromiter((i for row in ids for i in row), dtype=np.int64)
        if flat.size:
            counts += np.bincount(flat, minlength=size)[:size]
    return counts


# --- the id map in the provenance -----------------------------------------------------------------------


def id_runs(ids: Sequence[int]) -> list[list[int]]:
    """Sorted ids as ``[first, last]`` runs of consecutive ids."""
    runs: list[list[int]] = []
    for i in ids:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return runs


def ids_from_runs(runs: Sequence[Sequence[int]]) -> list[int]:
    return [i for first, last in runs for i in range(first, last + 1)]


def find_pruning(provenance: dict | None) -> dict | None:
    """The vocabulary-pruning record of a provenance chain (this step or any parent), if any."""
    while provenance:
        if isinstance(provenance.get(PROVENANCE_KEY), dict):
            return provenance[PROVENANCE_KEY]
        provenance = provenance.get("parent")
    return None


def kept_old_ids(record: dict) -> list[int]:
    return ids_from_runs(record["id_map"]["old_id_runs"])


def coverage(tokenizer, texts: Sequence[str], record: dict, *, lower: bool = False) -> dict:
    """Fraction of the tokens ``tokenizer`` (the unpruned one) produces on ``texts`` that the pruning kept."""
    tj = tokenizer_json(tokenizer)
    if vocab_sha256(tj) != record.get("original_vocab_sha256"):
        return {"computed": False, "reason": "the source's vocabulary is not the one the candidate was pruned from"}
    import numpy as np

    counts = count_tokens(tj, list(texts), lower=lower)
    kept = np.asarray([i for i in kept_old_ids(record) if i < len(counts)], dtype=np.int64)
    total = int(counts.sum())
    covered = int(counts[kept].sum()) if kept.size else 0
    distinct = counts > 0
    return {"computed": True, "texts": len(texts), "tokens": total, "covered_tokens": covered,
            "coverage": covered / total if total else 1.0, "distinct_tokens": int(distinct.sum()),
            "distinct_covered": int(distinct[kept].sum()) if kept.size else 0,
            "vocab_size_before": record.get("vocab_size_before"), "vocab_size_after": record.get("vocab_size_after"),
            "pruning_corpus_coverage": record.get("corpus_coverage")}
