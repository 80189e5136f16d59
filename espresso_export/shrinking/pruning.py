"""``prune-vocab``: keep only the vocabulary a domain uses.

After a cut, the word-embedding table is most of a small model (all-MiniLM-L6-v2
at 3 layers: 11.7M of 17M parameters). This module counts the token ids the
model's own tokenizer produces on a corpus, keeps those plus everything the
tokenizer needs to still segment any input, and rebuilds a consistent model:

* the embedding rows, sliced with the id map ``new id -> old id`` (``config.vocab_size`` and the special
  token ids of the config follow);
* ``tokenizer.json`` (model vocabulary, merges, added tokens, post-processor and padding ids remapped) and
  the vocabulary files of the tokenizer's model (``vocab.txt``, ``vocab.json`` + ``merges.txt``);
* the provenance (``espresso.json``): what was kept and why, and the id map as old-id ranges.

Kept, whatever the corpus says:

=========  ============================================================================================
WordPiece  every special/added token, every single character and its ``##`` form (what an unseen word
           falls back on) that the tokenizer can produce at all (not ``##.`` or ``##東``: its pre-tokenizer
           makes punctuation and CJK ideographs words of their own)
BPE        every special/added token, every single-character symbol (for byte-level BPE: the 256
           byte symbols), ``<0xNN>`` byte-fallback tokens; then every token a kept token is merged from
           (recursively), and only the merges whose two parts and result are kept
Unigram    every special/added token, every single-character piece, byte-fallback pieces, and the
           lowest-scored piece (the unknown-token penalty is computed from it)
=========  ============================================================================================

Why the corpus is encoded exactly as before (with ``min_count=1`` and no ``keep_top``): WordPiece's greedy
longest match can only change if a removed token were a longer match than the one used, but then it would have
been used; BPE applies the lowest-ranked applicable merge, and every merge applied on a corpus word is kept while
the others only disappear; Unigram's best segmentation stays the best over a subset of pieces. Text the corpus
never showed is segmented as the original tokenizer would segment it with the removed tokens deleted from its
vocabulary: into shorter pieces, characters, or the unknown token.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from espresso_export import __version__
from espresso_export.model.checkpoint import Checkpoint, load
from espresso_export.data.readers import read_corpus
from espresso_export.core.errors import UnsupportedModelError, ValidationError
from espresso_export.model.layout import atomic_output, check_output, save_checkpoint

log = logging.getLogger(__name__)

SUPPORTED = ("WordPiece", "BPE", "Unigram")
STEP = "prune-vocab"
PROVENANCE_KEY = "vocab_pruning"
_CONFIG_TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "sep_token_id", "cls_token_id",
                     "unk_token_id", "mask_token_id", "decoder_start_token_id")
CARRIED = ("ese", "head", "dim", "truncate_dim", "pooling")
_BYTE_FALLBACK = [f"<0x{b:02X}>" for b in range(256)]


# --- the tokenizer's JSON ---------------------------------------------------------------------------------


def tokenizer_json(tokenizer) -> dict:
    """The ``tokenizer.json`` document of a fast transformers tokenizer or a ``tokenizers.Tokenizer``."""
    backend = tokenizer if hasattr(tokenizer, "to_str") else getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise UnsupportedModelError("vocabulary pruning needs a fast tokenizer (tokenizer.json); this one has none")
    return json.loads(backend.to_str())


def model_type(tj: dict) -> str:
    kind = (tj.get("model") or {}).get("type")
    if kind not in SUPPORTED:
        raise UnsupportedModelError(
            f"cannot prune a {kind or 'unknown'} tokenizer; supported tokenizer models: {', '.join(SUPPORTED)}"
        )
    return kind


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


def fallback_tokens(tj: dict) -> set[str]:
    """The tokens the tokenizer falls back on for input it has not seen (see the module docstring)."""
    from tokenizers import Tokenizer

    model = tj["model"]
    vocab = model_vocab(tj)
    kind = model["type"]
    if kind == "WordPiece":
        prefix = model.get("continuing_subword_prefix") or "##"
        backend = Tokenizer.from_str(json.dumps(tj))
        return {t for t in vocab if _single_char(t, (prefix,)) and _reachable_wordpiece(backend, t, prefix)}
    if kind == "BPE":
        prefix = model.get("continuing_subword_prefix") or ""
        suffix = model.get("end_of_word_suffix") or ""
        keep = {t for t in vocab if _single_char(t, (prefix,), (suffix,))}
        if model.get("byte_fallback"):
            keep |= {t for t in _BYTE_FALLBACK if t in vocab}
        return keep
    pieces = model["vocab"]
    keep = {p for p, _ in pieces if len(p) == 1}
    if model.get("byte_fallback"):
        keep |= {t for t in _BYTE_FALLBACK if t in vocab}
    if pieces:
        keep.add(min(pieces, key=lambda ps: ps[1])[0])  # min score -> the unknown-token penalty
    return keep


def _merge_pairs(model: dict) -> list[tuple[str, str]]:
    out = []
    for m in model.get("merges") or []:
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        out.append((a, b))
    return out


def close_merges(tj: dict, kept: set[str]) -> set[str]:
    """BPE: add, recursively, both parts of every merge that produces a kept token."""
    model = tj["model"]
    if model["type"] != "BPE":
        return kept
    prefix = model.get("continuing_subword_prefix") or ""
    producers: dict[str, list[tuple[str, str]]] = {}
    for a, b in _merge_pairs(model):
        b_core = b[len(prefix):] if prefix and b.startswith(prefix) else b
        producers.setdefault(a + b_core, []).append((a, b))
    kept = set(kept)
    todo = list(kept)
    while todo:
        for a, b in producers.get(todo.pop(), ()):
            for part in (a, b):
                if part not in kept:
                    kept.add(part)
                    todo.append(part)
    return kept


def _remap_processor(proc: dict | None, new_id: dict[int, int]) -> dict | None:
    if not proc:
        return proc
    kind = proc.get("type")
    if kind == "Sequence":
        proc["processors"] = [_remap_processor(p, new_id) for p in proc.get("processors", [])]
    elif kind == "TemplateProcessing":
        for spec in (proc.get("special_tokens") or {}).values():
            spec["ids"] = [new_id[i] for i in spec["ids"]]
    elif kind in ("RobertaProcessing", "BertProcessing"):
        for key in ("sep", "cls"):
            token, old = proc[key]
            proc[key] = [token, new_id[old]]
    return proc


def rebuild_tokenizer_json(tj: dict, old_ids: Sequence[int]) -> dict:
    """``tj`` restricted to ``old_ids`` (``old_ids[new id] = old id``), every id renumbered."""
    new_id = {old: new for new, old in enumerate(old_ids)}
    out = copy.deepcopy(tj)
    model = out["model"]
    if model["type"] == "Unigram":
        pieces = model["vocab"]
        model_ids = [i for i in old_ids if i < len(pieces)]
        model["vocab"] = [pieces[i] for i in model_ids]
        if model.get("unk_id") is not None:
            model["unk_id"] = new_id[model["unk_id"]]
    else:
        vocab = model["vocab"]
        model["vocab"] = {t: new_id[i] for t, i in sorted(vocab.items(), key=lambda kv: kv[1]) if i in new_id}
        if model["type"] == "BPE":
            kept = model["vocab"]
            prefix = model.get("continuing_subword_prefix") or ""
            merges = []
            for a, b in _merge_pairs(model):
                b_core = b[len(prefix):] if prefix and b.startswith(prefix) else b
                if a in kept and b in kept and a + b_core in kept:
                    merges.append([a, b])
            model["merges"] = merges
    for t in out.get("added_tokens") or []:
        t["id"] = new_id[int(t["id"])]
    out["post_processor"] = _remap_processor(out.get("post_processor"), new_id)
    padding = out.get("padding")
    if padding and padding.get("pad_id") is not None:
        padding["pad_id"] = new_id.get(padding["pad_id"], padding["pad_id"])
    return out


# --- what to keep -----------------------------------------------------------------------------------------


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


def plan(tj: dict, counts, *, min_count: int = 1, keep_top: int | None = None, keep_tokens: Iterable[str] = (),
         protect_below: int | None = None, config_ids: Iterable[int] = ()) -> VocabPlan:
    """Decide the kept ids from corpus ``counts`` (see :func:`count_tokens`)."""
    import numpy as np

    check_limits(min_count, keep_top)
    kind = model_type(tj)
    id_of = full_vocab(tj)
    token_of = {i: t for t, i in id_of.items()}
    eligible = np.flatnonzero(counts >= min_count)
    if keep_top is not None and len(eligible) > keep_top:
        order = np.argsort(-counts[eligible], kind="stable")  # ties: the lower id first
        eligible = eligible[order[:keep_top]]
    special = {int(t["id"]) for t in tj.get("added_tokens") or []} | {int(i) for i in config_ids}
    if protect_below is not None:
        special |= set(range(protect_below + 1))
    unk = tj["model"].get("unk_token")
    if isinstance(unk, str) and unk in id_of:
        special.add(id_of[unk])
    if kind == "Unigram" and tj["model"].get("unk_id") is not None:
        special.add(int(tj["model"]["unk_id"]))
    candidates = [
        ("special", special),
        ("corpus", {int(i) for i in eligible}),
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
    total = int(counts.sum())
    covered = int(counts[old_ids].sum()) if old_ids else 0
    return VocabPlan(
        tokenizer_type=kind, old_ids=old_ids, vocab_before=len(id_of), reasons=reasons, corpus_tokens=total,
        distinct_corpus_tokens=int((counts > 0).sum()), covered_tokens=covered,
    )


# --- applying the plan to a checkpoint ---------------------------------------------------------------------


def _remap_config_ids(config, new_id: dict[int, int]) -> None:
    for name in _CONFIG_TOKEN_IDS:
        value = getattr(config, name, None)
        if isinstance(value, int) and value in new_id:
            setattr(config, name, new_id[value])


def _config_ids(config) -> list[int]:
    return [v for v in (getattr(config, n, None) for n in _CONFIG_TOKEN_IDS) if isinstance(v, int) and v >= 0]


def _position_padding_idx(model) -> int | None:
    """RoBERTa/MPNet/XLM-R number positions from the pad id: that id must not move."""
    embeddings = getattr(model, "embeddings", None)
    idx = getattr(embeddings, "padding_idx", None)
    return idx if isinstance(idx, int) else None


def slice_embeddings(model, old_ids: Sequence[int]) -> None:
    """Keep the rows ``old_ids`` of the input embedding table, in that order; ``config.vocab_size`` follows."""
    import torch

    emb = model.get_input_embeddings()
    if not isinstance(emb, torch.nn.Embedding):
        raise UnsupportedModelError(f"cannot prune: the input embeddings are a {type(emb).__name__}, not nn.Embedding")
    rows = emb.num_embeddings
    if old_ids and max(old_ids) >= rows:
        raise UnsupportedModelError(f"the tokenizer has id {max(old_ids)} but the embedding table only {rows} rows")
    new_id = {old: new for new, old in enumerate(old_ids)}
    padding_idx = new_id.get(emb.padding_idx) if emb.padding_idx is not None else None
    table = torch.nn.Embedding(len(old_ids), emb.embedding_dim, padding_idx=padding_idx,
                               dtype=emb.weight.dtype, device=emb.weight.device)
    with torch.no_grad():
        table.weight.copy_(emb.weight[torch.as_tensor(list(old_ids), device=emb.weight.device)])
    model.set_input_embeddings(table)
    model.config.vocab_size = len(old_ids)
    _remap_config_ids(model.config, new_id)


def _rebuild_hf_tokenizer(tokenizer, new_tj: dict):
    """A tokenizer of the same class over ``new_tj``: saved, its tokenizer.json replaced, and loaded back."""
    from transformers import AutoTokenizer

    work = Path(tempfile.mkdtemp(prefix="espresso-prune-tok-"))
    try:
        tokenizer.save_pretrained(str(work))
        for f in work.iterdir():  # vocab files of the old vocabulary would contradict tokenizer.json
            if f.name not in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
                f.unlink()
        (work / "tokenizer.json").write_text(json.dumps(new_tj, ensure_ascii=False), encoding="utf-8")
        cfg_file = work / "tokenizer_config.json"
        cfg = json.loads(cfg_file.read_text(encoding="utf-8"))
        decoder = cfg.get("added_tokens_decoder")
        if decoder:
            by_content = {t["content"]: t["id"] for t in new_tj.get("added_tokens") or []}
            cfg["added_tokens_decoder"] = {str(by_content[v["content"]]): v for v in decoder.values()
                                           if v.get("content") in by_content}
        cfg.pop("vocab_file", None)
        cfg_file.write_text(json.dumps(cfg, indent=2), encoding="utf-8")
        return AutoTokenizer.from_pretrained(str(work))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _check_rebuilt(tokenizer, new_tj: dict) -> None:
    got = tokenizer_json(tokenizer)
    want_vocab, got_vocab = full_vocab(new_tj), full_vocab(got)
    if got_vocab != want_vocab:
        raise UnsupportedModelError(
            f"the rebuilt {type(tokenizer).__name__} does not keep the pruned vocabulary "
            f"({len(got_vocab)} tokens instead of {len(want_vocab)}); this tokenizer class cannot be pruned"
        )


@dataclass
class PruneStats:
    plan: VocabPlan
    original_vocab_sha256: str
    embedding_params_before: int
    embedding_params_after: int

    def provenance(self, corpus_record: dict, *, min_count: int, keep_top: int | None, keep_file: str | None) -> dict:
        p = self.plan
        return {
            "tokenizer": p.tokenizer_type,
            "vocab_size_before": p.vocab_before,
            "vocab_size_after": len(p.old_ids),
            "original_vocab_sha256": self.original_vocab_sha256,
            "corpus": corpus_record,
            "min_count": min_count,
            "keep_top": keep_top,
            "keep_file": keep_file,
            "kept_because": p.reasons,
            "corpus_tokens": p.corpus_tokens,
            "distinct_corpus_tokens": p.distinct_corpus_tokens,
            "corpus_coverage": round(p.coverage, 6),
            "id_map": {"format": "new id -> old id; the old ids kept, in new-id order, as [first, last] runs",
                       "old_id_runs": id_runs(p.old_ids)},
        }


def prune_checkpoint(ckpt: Checkpoint, sentences: Sequence[str], *, min_count: int = 1, keep_top: int | None = None,
                     keep_tokens: Iterable[str] = ()) -> PruneStats:
    """Prune ``ckpt`` in memory: its embedding table, config and tokenizer (see the module docstring)."""
    tj = tokenizer_json(ckpt.tokenizer)
    model_type(tj)
    if not sentences:
        raise ValidationError("the pruning corpus is empty: no sentences to count tokens on")
    counts = count_tokens(tj, sentences, lower=ckpt.do_lower_case)
    vocab_plan = plan(tj, counts, min_count=min_count, keep_top=keep_top, keep_tokens=keep_tokens,
                      protect_below=_position_padding_idx(ckpt.model), config_ids=_config_ids(ckpt.config))
    new_tj = rebuild_tokenizer_json(tj, vocab_plan.old_ids)
    tokenizer = _rebuild_hf_tokenizer(ckpt.tokenizer, new_tj)
    _check_rebuilt(tokenizer, new_tj)
    before = ckpt.model.get_input_embeddings().weight.numel()
    original_sha = vocab_sha256(tj)
    slice_embeddings(ckpt.model, vocab_plan.old_ids)
    ckpt.tokenizer = tokenizer
    return PruneStats(plan=vocab_plan, original_vocab_sha256=original_sha, embedding_params_before=before,
                      embedding_params_after=ckpt.model.get_input_embeddings().weight.numel())


def save_vocab_files(tokenizer, folder: Path) -> list[str]:
    """The vocabulary files of the tokenizer's model (vocab.txt; vocab.json + merges.txt), beside tokenizer.json."""
    backend = tokenizer.backend_tokenizer
    if json.loads(backend.to_str())["model"]["type"] == "Unigram":
        return []  # a sentencepiece .model cannot be written without sentencepiece; tokenizer.json is complete
    return [Path(f).name for f in backend.model.save(str(folder))]


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


# --- the command -------------------------------------------------------------------------------------------


@dataclass
class PruneResult:
    output: Path | None
    source: str
    tokenizer: str
    vocab_before: int
    vocab_after: int
    params_before: int
    params_after: int
    embedding_params_before: int
    embedding_params_after: int
    corpus_sentences: int
    corpus_tokens: int
    distinct_corpus_tokens: int
    coverage: float  # corpus token occurrences whose token is kept (1.0 with min_count=1, no keep_top)
    kept_because: dict[str, int] = field(default_factory=dict)
    vocab_files: list[str] = field(default_factory=list)
    seconds: float = 0.0
    hints: list[str] = field(default_factory=list)
    checkpoint: Any = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "checkpoint"}
        d["output"] = str(self.output) if self.output else None
        return d


@dataclass
class PruneRequest:
    """Validated pruning inputs, read before any model is loaded (a bad file fails fast)."""

    corpus: Any  # data.Corpus
    min_count: int = 1
    keep_top: int | None = None
    keep_file: str | None = None
    keep_lines: list[str] = field(default_factory=list)

    @classmethod
    def read(cls, corpus, *, min_count: int = 1, keep_top: int | None = None,
             keep_file: str | os.PathLike | None = None, field: str | None = None,
             column: str | None = None) -> PruneRequest:
        from espresso_export.data.readers import Corpus, _open_text

        check_limits(min_count, keep_top)
        if not isinstance(corpus, Corpus):
            if corpus is None or (not isinstance(corpus, (str, os.PathLike)) and not list(corpus)):
                raise ValidationError("vocabulary pruning needs a corpus: the texts whose tokens are kept")
            corpus = read_corpus(corpus, field=field, column=column)
        lines = []
        if keep_file is not None:
            lines = [ln.rstrip("\r\n") for ln in _open_text(Path(keep_file).expanduser()).splitlines()]
            lines = [ln for ln in lines if ln.strip()]
        return cls(corpus=corpus, min_count=min_count, keep_top=keep_top,
                   keep_file=str(keep_file) if keep_file is not None else None, keep_lines=lines)

    def check(self, ckpt: Checkpoint) -> set[str]:
        """Refuse an unsupported tokenizer or keep-file tokens it does not have; returns the tokens to keep.
        Called right after loading, before any long work."""
        tj = tokenizer_json(ckpt.tokenizer)
        model_type(tj)
        return check_keep_tokens(self.keep_lines, full_vocab(tj), self.keep_file)

    def apply(self, ckpt: Checkpoint) -> tuple[PruneStats, dict]:
        """Prune ``ckpt`` in memory; returns the statistics and the provenance record."""
        keep = self.check(ckpt)
        stats = prune_checkpoint(ckpt, self.corpus.sentences, min_count=self.min_count, keep_top=self.keep_top,
                                 keep_tokens=keep)
        corpus = {"sources": [s.spec for s in self.corpus.sources], "sentences": len(self.corpus),
                  "sha256": self.corpus.sha256}
        return stats, stats.provenance(corpus, min_count=self.min_count, keep_top=self.keep_top,
                                       keep_file=self.keep_file)


def coverage_hint(coverage: float) -> list[str]:
    if coverage >= 1.0:
        return []
    return [f"note: {100 * (1 - coverage):.2f}% of the corpus tokens were dropped (--min-count/--keep-top): "
            "the corpus sentences holding them are no longer encoded exactly as before"]


def prune_vocab(
    model_dir: str | os.PathLike | Checkpoint,
    output: str | os.PathLike | None,
    *,
    corpus,
    min_count: int = 1,
    keep_top: int | None = None,
    keep_file: str | os.PathLike | None = None,
    overwrite: bool = False,
    field: str | None = None,
    column: str | None = None,
    trust_remote_code: bool = False,
) -> PruneResult:
    """Keep only the vocabulary ``corpus`` uses (plus specials and fallbacks) and write the model to ``output``.

    ``corpus``: one spec or a list (txt, jsonl, csv/tsv, STS-B, parquet, ``builtin``, ``hf://owner/name``; see
    :func:`espresso_export.data.read_corpus`), or a :class:`~espresso_export.data.Corpus`. ``min_count``: keep
    tokens seen at least this often; ``keep_top``: at most this many corpus tokens (the most frequent);
    ``keep_file``: tokens to keep anyway, one a line. With ``output=None`` nothing is written and the pruned
    model is ``result.checkpoint``.
    """
    start = time.perf_counter()
    if output is not None:
        check_output(output, overwrite=overwrite, inputs=[model_dir])
    request = PruneRequest.read(corpus, min_count=min_count, keep_top=keep_top, keep_file=keep_file, field=field,
                                column=column)
    ckpt = model_dir if isinstance(model_dir, Checkpoint) else load(model_dir, trust_remote_code=trust_remote_code)
    params_before = sum(p.numel() for p in ckpt.model.parameters())
    weights_sha = ckpt.weights_sha256()
    stats, record = request.apply(ckpt)
    p = stats.plan
    result = PruneResult(
        output=None, source=ckpt.source, tokenizer=p.tokenizer_type, vocab_before=p.vocab_before,
        vocab_after=len(p.old_ids), params_before=params_before,
        params_after=sum(x.numel() for x in ckpt.model.parameters()),
        embedding_params_before=stats.embedding_params_before, embedding_params_after=stats.embedding_params_after,
        corpus_sentences=len(request.corpus), corpus_tokens=p.corpus_tokens,
        distinct_corpus_tokens=p.distinct_corpus_tokens, coverage=p.coverage, kept_because=p.reasons,
        hints=coverage_hint(p.coverage),
    )
    previous = ckpt.provenance or {}
    provenance = {"espresso_version": __version__, "step": STEP,
                  "source": {"id": ckpt.source, "weights_sha256": weights_sha}, PROVENANCE_KEY: record}
    for key in CARRIED:  # facts later steps and the model card read from the newest step
        if previous.get(key):
            provenance[key] = previous[key]
    if previous:
        provenance["parent"] = previous
    ckpt.provenance = provenance
    if output is not None:
        with atomic_output(output, overwrite=overwrite, inputs=[ckpt.path]) as tmp:
            save_checkpoint(ckpt, tmp, post=ckpt.post, provenance=provenance)
            result.vocab_files = save_vocab_files(ckpt.tokenizer, tmp)
        result.output = Path(output).expanduser().resolve()
    result.seconds = time.perf_counter() - start
    result.checkpoint = ckpt
    return result
