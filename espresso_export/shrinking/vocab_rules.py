"""What each tokenizer model needs kept to still segment any input (docs/commands/prune-vocab.md).

One function per tokenizer model (WordPiece, BPE, Unigram) names the fallback
tokens; :func:`close_merges` adds, for BPE, the parts every kept token is merged from.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from espresso_export.core.errors import UnsupportedModelError
from espresso_export.model.vocabulary import model_vocab

SUPPORTED = ("WordPiece", "BPE", "Unigram")
_BYTE_FALLBACK = [f"<0x{b:02X}>" for b in range(256)]


def model_type(tj: dict) -> str:
    """The tokenizer model's type; refuses one pruning does not support."""
    kind = (tj.get("model") or {}).get("type")
    if kind not in SUPPORTED:
        raise UnsupportedModelError(
            f"cannot prune a {kind or 'unknown'} tokenizer; supported tokenizer models: {', '.join(SUPPORTED)}"
        )
    return kind


def _single_char(token: str, prefixes: Sequence[str] = (), suffixes: Sequence[str] = ()) -> bool:
    core = token
    for p in prefixes:
        if p and core.startswith(p) and len(core) > len(p):
            core = core[len(p):]
            break
    for s in suffixes:
        if s and core.endswith(s) and len(core) > len(s):
            core = core[: -len(s)]
            break
    return len(core) == 1


def _reachable_wordpiece(backend, token: str, prefix: str) -> bool:
    """Can WordPiece ever produce this single-character token? Not when the normalizer changes the character
    (upper case in an uncased vocabulary, accents it strips), nor, for its ``##`` form, when the pre-tokenizer
    always makes the character a word of its own (punctuation, CJK ideographs). Dropping unreachable tokens
    changes no tokenization at all."""

    def words(text: str) -> list[str]:
        if backend.normalizer is not None:
            text = backend.normalizer.normalize_str(text)
        if backend.pre_tokenizer is None:
            return text.split()
        return [w for w, _ in backend.pre_tokenizer.pre_tokenize_str(text)]

    if token.startswith(prefix) and len(token) > len(prefix):
        char = token[len(prefix):]
        return words("a" + char) == ["a" + char]
    return words(token) == [token]


def _byte_fallback(model: dict, vocab: dict[str, int]) -> set[str]:
    """The ``<0xNN>`` tokens of a byte-fallback model (none otherwise)."""
    return {t for t in _BYTE_FALLBACK if t in vocab} if model.get("byte_fallback") else set()


def _wordpiece_fallback(tj: dict, vocab: dict[str, int]) -> set[str]:
    from tokenizers import Tokenizer

    prefix = tj["model"].get("continuing_subword_prefix") or "##"
    backend = Tokenizer.from_str(json.dumps(tj))
    return {t for t in vocab if _single_char(t, (prefix,)) and _reachable_wordpiece(backend, t, prefix)}


def _bpe_fallback(tj: dict, vocab: dict[str, int]) -> set[str]:
    model = tj["model"]
    prefix = model.get("continuing_subword_prefix") or ""
    suffix = model.get("end_of_word_suffix") or ""
    return {t for t in vocab if _single_char(t, (prefix,), (suffix,))} | _byte_fallback(model, vocab)


def _unigram_fallback(tj: dict, vocab: dict[str, int]) -> set[str]:
    model = tj["model"]
    pieces = model["vocab"]
    keep = {p for p, _ in pieces if len(p) == 1} | _byte_fallback(model, vocab)
    if pieces:
        keep.add(min(pieces, key=lambda ps: ps[1])[0])  # min score -> the unknown-token penalty
    return keep


_FALLBACKS = {"WordPiece": _wordpiece_fallback, "BPE": _bpe_fallback, "Unigram": _unigram_fallback}


def fallback_tokens(tj: dict) -> set[str]:
    """The tokens the tokenizer falls back on for input it has not seen (see the :mod:`.pruning` docstring)."""
    return _FALLBACKS[tj["model"]["type"]](tj, model_vocab(tj))


def merge_pairs(model: dict) -> list[tuple[str, str]]:
    """A BPE model's merges as ``(left, right)`` pairs, in rank order (either serialisation)."""
    out = []
    for m in model.get("merges") or []:
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        out.append((a, b))
    return out


def merged(a: str, b: str, prefix: str) -> str:
    """The token the merge ``(a, b)`` produces: ``b`` loses its continuing-subword prefix."""
    return a + (b[len(prefix):] if prefix and b.startswith(prefix) else b)


def close_merges(tj: dict, kept: set[str]) -> set[str]:
    """BPE: add, recursively, both parts of every merge that produces a kept token."""
    model = tj["model"]
    if model["type"] != "BPE":
        return kept
    prefix = model.get("continuing_subword_prefix") or ""
    producers: dict[str, list[tuple[str, str]]] = {}
    for a, b in merge_pairs(model):
        producers.setdefault(merged(a, b, prefix), []).append((a, b))
    kept = set(kept)
    todo = list(kept)
    while todo:
        for a, b in producers.get(todo.pop(), ()):
            for part in (a, b):
                if part not in kept:
                    kept.add(part)
                    todo.append(part)
    return kept
