"""``prune-vocab``: keep only the vocabulary a domain uses.

After a cut, the word-embedding table is most of a small model. This module counts the token ids the model's own
tokenizer produces on a corpus, keeps those plus what the tokenizer needs to still segment any input (the rules
per tokenizer model: :mod:`.vocab_rules`, docs/commands/prune-vocab.md), and rebuilds a consistent model: the
embedding rows and config, the tokenizer files, and the provenance (what was kept and why, the id map).

With ``min_count=1`` and no ``keep_top`` the corpus encodes exactly as before: a removed token was never the match
WordPiece or BPE chose, nor part of Unigram's best segmentation. Other text falls back to shorter pieces.

The parts: :mod:`espresso_export.model.vocabulary` (reading, counting, the provenance record), :mod:`.vocab_plan`
(the decision), :mod:`.vocab_rebuild` (the renumbered tokenizer and table); here the request, the result and
:func:`prune_vocab`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from espresso_export import __version__
from espresso_export.core.errors import ValidationError
from espresso_export.data import read_corpus
from espresso_export.model.checkpoint import Checkpoint, load
from espresso_export.core.files import atomic_output, check_output
from espresso_export.model.save import save_checkpoint
from espresso_export.model.static import is_static_folder
from espresso_export.model.vocabulary import (
    PROVENANCE_KEY, count_tokens, full_vocab, id_runs, tokenizer_json, vocab_sha256,
)
from espresso_export.shrinking.vocab_plan import VocabPlan, check_keep_tokens, check_limits, plan
from espresso_export.shrinking.vocab_rebuild import (
    config_token_ids, position_padding_idx, rebuild_hf_tokenizer, rebuild_tokenizer_json, save_vocab_files,
    slice_embeddings,
)
from espresso_export.shrinking.vocab_rules import model_type

STEP = "prune-vocab"
CARRIED = ("ese", "head", "dim", "truncate_dim", "pooling")


# --- pruning a checkpoint in memory ---------------------------------------------------------------------------


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
                      protect_below=position_padding_idx(ckpt.model), config_ids=config_token_ids(ckpt.config))
    new_tj = rebuild_tokenizer_json(tj, vocab_plan.old_ids)
    tokenizer = rebuild_hf_tokenizer(ckpt.tokenizer, new_tj)
    before = ckpt.model.get_input_embeddings().weight.numel()
    original_sha = vocab_sha256(tj)
    slice_embeddings(ckpt.model, vocab_plan.old_ids)
    ckpt.tokenizer = tokenizer
    return PruneStats(plan=vocab_plan, original_vocab_sha256=original_sha, embedding_params_before=before,
                      embedding_params_after=ckpt.model.get_input_embeddings().weight.numel())


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
        from espresso_export.data import Corpus, open_text, text_lines

        check_limits(min_count, keep_top)
        if not isinstance(corpus, Corpus):
            if corpus is None or (not isinstance(corpus, (str, os.PathLike)) and not list(corpus)):
                raise ValidationError("vocabulary pruning needs a corpus: the texts whose tokens are kept")
            corpus = read_corpus(corpus, field=field, column=column)
        lines = []
        if keep_file is not None:
            lines = text_lines(open_text(Path(keep_file).expanduser()))
            lines = [ln for ln in lines if ln.strip()]
        return cls(corpus=corpus, min_count=min_count, keep_top=keep_top,
                   keep_file=str(keep_file) if keep_file is not None else None, keep_lines=lines)

    @classmethod
    def of(cls, s) -> PruneRequest:
        """From a step's ``prune_*`` settings (shrink's, and distill's, which are declared by them)."""
        return cls.read(s.prune_corpus, min_count=s.prune_min_count, keep_top=s.prune_keep_top,
                        keep_file=s.prune_keep_file)

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
    model is ``result.checkpoint``. A static model folder keeps the rows of the kept tokens
    (:mod:`.static_pruning`; ``result.checkpoint`` is then the pruned ``StaticModel``).
    """
    start = time.perf_counter()
    if output is not None:
        check_output(output, overwrite=overwrite, inputs=[model_dir, corpus, keep_file])
    request = PruneRequest.read(corpus, min_count=min_count, keep_top=keep_top, keep_file=keep_file, field=field,
                                column=column)
    if not isinstance(model_dir, Checkpoint) and is_static_folder(model_dir):  # the table is the whole model
        from espresso_export.shrinking.static_pruning import prune_static

        result = prune_static(model_dir, output, request, overwrite=overwrite)
        result.seconds = time.perf_counter() - start
        return result
    ckpt = model_dir if isinstance(model_dir, Checkpoint) else load(model_dir, trust_remote_code=trust_remote_code)
    params_before = ckpt.n_params  # with the Dense head, as shrink, verify and the card count
    weights_sha = ckpt.weights_sha256()
    stats, record = request.apply(ckpt)
    result = _result(ckpt, stats, params_before, corpus_sentences=len(request.corpus))
    ckpt.provenance = _provenance(ckpt, weights_sha, record)
    if output is not None:
        with atomic_output(output, overwrite=overwrite, inputs=[ckpt.path]) as tmp:
            save_checkpoint(ckpt, tmp, post=ckpt.post, provenance=ckpt.provenance)
            result.vocab_files = save_vocab_files(ckpt.tokenizer, tmp)
        result.output = Path(output).expanduser().resolve()
    result.seconds = time.perf_counter() - start
    result.checkpoint = ckpt
    return result


def _result(ckpt: Checkpoint, stats: PruneStats, params_before: int, *, corpus_sentences: int) -> PruneResult:
    p = stats.plan
    return PruneResult(
        output=None, source=ckpt.source, tokenizer=p.tokenizer_type, vocab_before=p.vocab_before,
        vocab_after=len(p.old_ids), params_before=params_before,
        params_after=ckpt.n_params,
        embedding_params_before=stats.embedding_params_before, embedding_params_after=stats.embedding_params_after,
        corpus_sentences=corpus_sentences, corpus_tokens=p.corpus_tokens,
        distinct_corpus_tokens=p.distinct_corpus_tokens, coverage=p.coverage, kept_because=p.reasons,
        hints=coverage_hint(p.coverage),
    )


def _provenance(ckpt: Checkpoint, weights_sha: str, record: dict) -> dict:
    """This step's provenance: the pruning record on top of the checkpoint's own chain."""
    previous = ckpt.provenance or {}
    provenance = {"espresso_version": __version__, "step": STEP,
                  "source": {"id": ckpt.source, "weights_sha256": weights_sha}, PROVENANCE_KEY: record}
    for key in CARRIED:  # facts later steps and the model card read from the newest step
        if previous.get(key):
            provenance[key] = previous[key]
    if previous:
        provenance["parent"] = previous
    return provenance
