"""``prune-vocab`` of a static model folder: the table is the whole model, so pruning it keeps the rows of the
tokens a corpus uses (plus specials and fallbacks) and renumbers model2vec's ``tokenizer.json`` with the same plan
as a transformer's vocabulary (:mod:`.vocab_plan`, :mod:`.vocab_rebuild`). The corpus's texts encode exactly as
before (with ``min_count`` 1 and no ``keep_top``); a text with a removed token is read in smaller pieces.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from espresso_export import __version__
from espresso_export.core.files import atomic_output, write_json
from espresso_export.model.checkpoint import PROVENANCE_FILE
from espresso_export.model.static import load_static
from espresso_export.model.vocabulary import PROVENANCE_KEY, count_tokens, full_vocab, tokenizer_json, vocab_sha256
from espresso_export.shrinking.vocab_plan import check_keep_tokens, plan
from espresso_export.shrinking.vocab_rebuild import rebuild_tokenizer_json
from espresso_export.shrinking.vocab_rules import model_type


def _pruned_model(model, old_ids: list[int], new_tj: dict):
    from model2vec import StaticModel
    from tokenizers import Tokenizer

    weights = None if model.weights is None else np.asarray(model.weights)[old_ids]
    return StaticModel(vectors=np.asarray(model.embedding)[old_ids], tokenizer=Tokenizer.from_str(json.dumps(new_tj)),
                       config=model.config, normalize=model.normalize, base_model_name=model.base_model_name,
                       language=model.language, weights=weights, max_length=model.max_length)


def _provenance(folder: Path, record: dict) -> dict:
    path = folder / PROVENANCE_FILE
    previous = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    prov = {"espresso_version": __version__, "step": "prune-vocab", "source": {"id": str(folder)},
            PROVENANCE_KEY: record}
    for key in ("dim", "pooling", "healed"):
        if key in previous:
            prov[key] = previous[key]
    if previous:
        prov["parent"] = previous
    return prov


def prune_static(folder, output, request, *, overwrite: bool):
    """Prune the static model in ``folder`` to ``request``'s corpus (a ``PruneRequest``); returns a ``PruneResult``."""
    from espresso_export.shrinking.pruning import PruneResult, PruneStats, coverage_hint

    folder = Path(folder).expanduser().resolve()
    model = load_static(folder)
    if model.token_mapping is not None:
        from espresso_export.core.errors import ValidationError

        raise ValidationError("a vocabulary-quantised static model (a token map) cannot be pruned")
    tj = tokenizer_json(model.tokenizer)
    model_type(tj)
    keep = check_keep_tokens(request.keep_lines, full_vocab(tj), request.keep_file)
    counts = count_tokens(tj, request.corpus.sentences)
    vocab_plan = plan(tj, counts, min_count=request.min_count, keep_top=request.keep_top, keep_tokens=keep)
    pruned = _pruned_model(model, vocab_plan.old_ids, rebuild_tokenizer_json(tj, vocab_plan.old_ids))
    stats = PruneStats(plan=vocab_plan, original_vocab_sha256=vocab_sha256(tj),
                       embedding_params_before=int(model.embedding.size),
                       embedding_params_after=int(pruned.embedding.size))
    corpus = {"sources": [s.spec for s in request.corpus.sources], "sentences": len(request.corpus),
              "sha256": request.corpus.sha256}
    record = stats.provenance(corpus, min_count=request.min_count, keep_top=request.keep_top,
                              keep_file=request.keep_file)
    p = vocab_plan
    result = PruneResult(
        output=None, source=str(folder), tokenizer=p.tokenizer_type, vocab_before=p.vocab_before,
        vocab_after=len(p.old_ids), params_before=stats.embedding_params_before,
        params_after=stats.embedding_params_after, embedding_params_before=stats.embedding_params_before,
        embedding_params_after=stats.embedding_params_after, corpus_sentences=len(request.corpus),
        corpus_tokens=p.corpus_tokens, distinct_corpus_tokens=p.distinct_corpus_tokens, coverage=p.coverage,
        kept_because=p.reasons, hints=coverage_hint(p.coverage))
    if output is not None:
        with atomic_output(output, overwrite=overwrite, inputs=[folder]) as tmp:
            pruned.save_pretrained(tmp)
            write_json(tmp / PROVENANCE_FILE, _provenance(folder, record))
        result.output = Path(output).expanduser().resolve()
        result.vocab_files = ["tokenizer.json"]
    result.checkpoint = pruned
    return result
