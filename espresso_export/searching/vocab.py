"""``auto``'s answer with its vocabulary pruned to the user's text (:func:`~espresso_export.shrinking.pruning.prune_vocab`):
the tokens of every document, as an index holds it, and of the healing texts. Each of those texts keeps its tokens
and so its vector; other text falls back as the tokenizer would without the removed tokens (verify reports the
share of its texts' tokens the vocabulary kept)."""

from __future__ import annotations

import shutil
from pathlib import Path

from espresso_export.core.files import write_text_atomic
from espresso_export.data.files import text_lines
from espresso_export.searching.context import Context
from espresso_export.searching.scoring import read_documents

VOCAB_FILE = "vocab-texts.txt"  # the texts whose tokens the answer keeps (beside the recipe, which prunes on it)


def vocab_texts(ctx: Context) -> Path:
    """Every document (titles in front, whitespace collapsed) and every healing text, each once: written once."""
    path = ctx.work.path(VOCAB_FILE)
    if not path.exists():
        s = ctx.settings
        documents = [" ".join(t.split()) for t in read_documents(s.corpus, field=s.corpus_field).texts]
        heal = text_lines(ctx.heal_file.read_text(encoding="utf-8"))
        write_text_atomic(path, "\n".join(t for t in dict.fromkeys(documents + heal) if t) + "\n")
    return path


def prune_answer(ctx: Context, folder: Path) -> dict:
    """Prune the model in ``folder`` in place; what it kept."""
    from espresso_export.shrinking.pruning import prune_vocab

    pruned = folder.with_name(folder.name + ".pruned")
    result = prune_vocab(folder, pruned, corpus=[str(vocab_texts(ctx))])
    shutil.rmtree(folder)
    pruned.rename(folder)
    return {k: getattr(result, k) for k in ("vocab_before", "vocab_after", "params_before", "params_after",
                                            "corpus_sentences")}


def describe(kept: dict) -> str:
    return (f"vocabulary pruned to the tokens of your documents and the healing texts: {kept['vocab_before']:,} -> "
            f"{kept['vocab_after']:,} tokens, {kept['params_before'] / 1e6:.1f}M -> {kept['params_after'] / 1e6:.1f}M "
            "parameters")
