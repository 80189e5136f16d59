"""The card's lineage section: one line per step of the folder's provenance (``espresso.json``), from the
original source to this folder: shrink, distill (a cut healed, an HPD student, a static table), train,
prune-vocab, export."""

from __future__ import annotations

from espresso_export import __version__
from espresso_export.core.types import Head
from espresso_export.data import BUILTIN
from espresso_export.model.static import STATIC_STUDENT
from espresso_export.model.vocabulary import PROVENANCE_KEY as PRUNING_KEY
from espresso_export.publishing.facts import ModelFacts
from espresso_export.publishing.model_ids import display_id, short_id


def _version(step: dict) -> str:
    return f"(espresso-export {step.get('espresso_version', '?')})"


def _shrink_line(step: dict) -> str:
    src = step.get("source") or {}
    depth = src.get("depth")
    layers = step.get("layers") or []
    text = (f"**shrink** {_version(step)}: kept {len(layers)} of "
            f"{depth if depth is not None else '?'} layers {layers} (select {step.get('select', '?')}), "
            f"{step.get('pooling', '?')} pooling, head `{step.get('head', '?')}` -> {step.get('dim', '?')}-d")
    cal = step.get("calibration")
    if isinstance(cal, dict) and step.get("head") == Head.PCA.value:
        ev = step.get("pca_explained_variance")
        corpus = "espresso-export's built-in corpus" if cal.get("source") == BUILTIN else f"`{short_id(str(cal.get('source')))}`"
        text += (f"; the PCA was fitted on {cal.get('size', '?')} calibration sentences ({corpus})"
                 + (f" and keeps {100 * ev:.1f}% of their variance" if ev else ""))
    return text + f"; seed {step.get('seed', '?')}"


def _train_line(step: dict) -> str:
    """What ``train`` did: the objective (ESE: its k and layer weights), the data, the training settings."""
    obj, data, train = step.get("objective") or {}, step.get("data") or {}, step.get("training") or {}
    what = (f"ESE (first {obj.get('compression_dim')} dims and every layer from {obj.get('layers_from')}, "
            f"{obj.get('loss')} loss, alpha {obj.get('alpha')}, beta {obj.get('beta')})" if step.get("ese")
            else f"fine-tuning ({obj.get('loss', '?')} loss)")
    text = f"**train** {_version(step)}: {what}"
    if data:
        text += f"; data: {data.get('examples', '?')} {data.get('kind', 'examples')} from `{short_id(str(data.get('name')))}`"
    settings = [f"{k} {train[k]}" for k in ("steps", "epochs", "batch_size", "lr", "seed") if train.get(k) is not None]
    if settings:
        text += f"; training: {', '.join(settings)}"
    best = step.get("best_eval")
    if isinstance(best, dict) and best.get("best") is not None:
        text += f"; best eval {best['best']:.2f}" + (f" (from {best['initial']:.2f})" if best.get("initial") is not None else "")
    return text


def _prune_line(step: dict) -> str:
    rec = step.get(PRUNING_KEY) or {}
    corpus = rec.get("corpus") or {}
    text = (f"**prune-vocab** {_version(step)}: vocabulary {rec.get('vocab_size_before', '?'):,} -> "
            f"{rec.get('vocab_size_after', '?'):,} tokens, those of a corpus")
    if isinstance(corpus.get("sentences"), int):
        text += f" of {corpus['sentences']:,} texts"
    if isinstance(rec.get("corpus_coverage"), (int, float)):
        text += f" ({100 * rec['corpus_coverage']:.2f}% of its tokens kept)"
    return text + f"; min count {rec.get('min_count', '?')}"


def _corpus_text(corpus: dict) -> str:
    """What distill trained on: the texts (not the distinct texts read: a mix or a cap keeps fewer), held out,
    and where they came from, with their shares in a mix."""
    trained = corpus.get("training_sentences") or corpus.get("capped_to") or corpus["sentences"]
    text = f"{trained:,} texts trained on"
    if corpus.get("heldout_sentences"):
        text += f" (+ {corpus['heldout_sentences']:,} held out)"
    if trained + (corpus.get("heldout_sentences") or 0) < corpus["sentences"]:
        text += f", of {corpus['sentences']:,} distinct"
    if corpus.get("mix"):
        text += " from " + ", ".join(f"`{short_id(str(m['spec']))}` ({100 * m['share']:g}%)" for m in corpus["mix"])
    elif corpus.get("sources"):
        text += " from " + ", ".join(f"`{short_id(str(src.get('spec')))}`" for src in corpus["sources"])
    return text


def _static_distill_line(step: dict) -> str:
    """``distill --student static``: model2vec's distillation of the teacher, healed on texts or not."""
    teacher, student, corpus = step.get("teacher") or {}, step.get("student") or {}, step.get("corpus") or {}
    text = (f"**distill** {_version(step)}: a static token table of {display_id(teacher.get('id'))} distilled with "
            f"model2vec at {step.get('dim', '?')}-d, {student.get('tokens', '?'):,} tokens"
            + (f" ({student['corpus_words']:,} words of the corpus added)" if student.get("corpus_words") else ""))
    if step.get("healed") and isinstance(corpus.get("sentences"), int):
        text += f"; healed against the teacher's vectors on a corpus: {_corpus_text(corpus)}"
        held = step.get("heldout") or {}
        if isinstance(held.get("mean_cosine_after"), (int, float)):
            text += (f"; held-out cosine to the teacher {held.get('mean_cosine_before', float('nan')):.3f} -> "
                     f"{held['mean_cosine_after']:.3f} on {held.get('texts', '?')} texts")
        train = step.get("training") or {}
        settings = [f"{k} {train[k]}" for k in ("steps", "epochs", "batch_size", "lr") if train.get(k) is not None]
        if settings:
            text += f"; training: {', '.join(settings)}"
    else:
        text += "; not healed (model2vec's distillation alone)"
    return text


def _distill_line(step: dict) -> str:
    teacher, student = step.get("teacher") or {}, step.get("student") or {}
    if student.get("id") == STATIC_STUDENT:
        return _static_distill_line(step)
    train = step.get("training") or {}
    corpus = step.get("corpus") or {}
    cut = str(student.get("id", "")).endswith("(cut)")
    text = (f"**distill** {_version(step)}: teacher "
            f"{display_id(teacher.get('id'))}, student {display_id(student.get('id')) if not cut else 'the cut teacher'}"
            + (f" (layers {student['layers']})" if student.get("layers") is not None else "")
            + f", {step.get('dim', '?')}-d, {step.get('pooling', '?')} pooling")
    if isinstance(corpus.get("sentences"), int):  # "sentences 79777, read 80739, empty_dropped 0, ..." read as keys
        text += f"; corpus: {_corpus_text(corpus)}"
    keys = ("steps", "epochs", "batch_size", "lr", "loss", "warmup", "max_seq_len", "seed")
    settings = [f"{k} {train[k]}" for k in keys if train.get(k) is not None]
    if settings:
        text += f"; training: {', '.join(settings)}"
    best = step.get("best_eval")
    if isinstance(best, dict) and best.get("best") is not None:
        sets = " and ".join(short_id(str(best[k])) for k in ("sts", "retrieval") if best.get(k))
        text += f"; best eval {best['best']:.2f} (from {best.get('initial', float('nan')):.2f}) on {sets}"
    return text


def _step_line(step: dict) -> str:
    kind = step.get("step", "step")
    if line := _STEP_LINES.get(kind):
        return line(step)
    scalars = [f"{k} {v}" for k, v in step.items()
               if k not in ("step", "parent", "espresso_version") and isinstance(v, (str, int, float, bool))
               and not (isinstance(v, str) and v.startswith(("/", "~")))]
    return f"**{kind}** {_version(step)}" + (f": {', '.join(scalars)}" if scalars else "")


_STEP_LINES = {"shrink": _shrink_line, "distill": _distill_line, "train": _train_line, "prune-vocab": _prune_line}


def lineage_section(facts: ModelFacts) -> list[str]:
    lines = ["## Lineage", ""]
    chain = facts.lineage
    if not chain:
        return lines + ["This folder has no `espresso.json`: it was not produced by espresso-export, so its "
                        "lineage is unknown.", ""]
    first = chain[0]
    src = first.get("source") if isinstance(first.get("source"), dict) else {}
    desc = display_id(facts.source_id)
    if src.get("depth") and src.get("hidden_size"):
        desc += f", {src['depth']} layers, {src['hidden_size']}-d"
    lines.append(f"1. source: {desc}" + (f", weights sha256 `{src['weights_sha256'][:12]}...`" if src.get("weights_sha256") else ""))
    lines += [f"{i}. {_step_line(step)}" for i, step in enumerate(chain, start=2)]
    lines.append(f"{len(chain) + 2}. published with `espresso-export push` ({__version__}); the full provenance is "
                 "in `espresso.json`.")
    return lines + [""]
