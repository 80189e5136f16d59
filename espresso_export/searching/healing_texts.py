"""The texts every heal of a search trains on, chosen once: the documents no known-item query was cut out of,
then short texts of the user's domain (those documents' sentences) and ``--sentences``; never a query the final
check asks, so it never asks for a text a heal was trained on."""

from __future__ import annotations

import random

from espresso_export.core.errors import ValidationError
from espresso_export.data.pseudo_queries import Documents
from espresso_export.searching.auto_settings import DEFAULT_TEXTS, MIN_HEALING_TEXTS, AutoSettings
from espresso_export.searching.scoring import Sample
from espresso_export.searching.work import Work

TEACHER_SHARE = 0.25  # of the budget, at most, for the teacher's pass over the healing texts
TOO_FEW = 20  # fewer healing texts than this is no training set: refused, naming what to give
HEAL_FILE = "healing-texts.txt"


def healing_texts(documents: Documents, sample: Sample, s: AutoSettings, seconds_per_text: float, work: Work) -> dict:
    """The texts every heal trains on (chosen once): the documents no query was cut out of, then short texts: the
    sentences of those documents in ``--doc-sentences`` and ``--sentences`` in the rest; the documents take at
    most ``--doc-share`` when ``--sentences`` are given. As many as :data:`TEACHER_SHARE` of the budget's teacher
    pass allows, at most ``--max-texts``."""
    found = work.done("healing_texts")
    if found is not None:
        return found
    from espresso_export.data.corpus import read_corpus
    from espresso_export.data.pseudo_queries import document_body

    rng = random.Random(s.seed)
    order = [i for i in range(len(documents.texts)) if i not in sample.held_out]
    rng.shuffle(order)
    own = [" ".join(documents.texts[i].split()) for i in order]
    affordable = int(TEACHER_SHARE * s.budget_seconds / max(seconds_per_text, 1e-6))
    total = max(MIN_HEALING_TEXTS, min(s.max_texts or DEFAULT_TEXTS, affordable))
    general: list[str] = []
    if s.sentences:
        general = [" ".join(t.split()) for t in read_corpus(s.sentences).sentences]
        rng.shuffle(general)
    n_doc = min(len(own), total if not general else round(total * s.doc_share))
    short = total - n_doc
    # sentences of the documents not healed on whole come first (more of the user's domain)
    bodies = [document_body(documents, i) for i in order[n_doc:] + order[:n_doc]]  # the sentences queries come from
    cut = _document_sentences(bodies, short if not general else round(short * s.doc_sentences), rng,
                              skip=checked_queries(s))
    texts = [t for t in dict.fromkeys(own[:n_doc] + cut + general[:short - len(cut)]) if t]
    if len(texts) < TOO_FEW:
        raise ValidationError(f"only {len(texts)} healing texts: give more documents (--corpus) or --sentences")
    path = work.path(HEAL_FILE)
    path.write_text("\n".join(texts) + "\n", encoding="utf-8")
    return work.put("healing_texts", {"file": str(path), "texts": len(texts), "documents": n_doc,
                                      "document_sentences": len(cut),
                                      "sentences": max(0, len(texts) - n_doc - len(cut))})


def checked_queries(s: AutoSettings) -> set[str]:
    """The queries the final check (verify on every ``--corpus``) asks: each corpus loaded as verify loads it,
    its agreement queries and its known-item queries, whitespace-normalised as the healing texts hold them."""
    from espresso_export.verification.corpus_agreement import load_corpus

    found: set[str] = set()
    for spec, queries in zip(s.corpus, s.queries or [None] * len(s.corpus)):
        corpus = load_corpus(spec, queries, method="auto", limit=s.corpus_queries, seed=s.seed,
                             known_items=s.known_items, field=s.corpus_field)
        known = corpus.known_item_queries
        found.update(corpus.queries, known.texts if known is not None else ())
    return {" ".join(t.split()) for t in found}


def _document_sentences(documents: list[str], count: int, rng: random.Random, *, skip: set[str]) -> list[str]:
    """Up to ``count`` sentences of ``documents`` (in their order) long enough to be a known-item query (the
    pseudo-queries' rule), shuffled: short texts of the user's own domain, as a search's queries are."""
    from espresso_export.data.pseudo_queries import MIN_WORDS, split_sentences

    found: dict[str, None] = {}
    for doc in documents:
        if len(found) >= count:
            break
        parts = [" ".join(x.split()) for x in split_sentences(doc)]
        found.update((x, None) for x in parts if len(parts) > 1 and len(x.split()) >= MIN_WORDS and x not in skip)
    cut = list(found)[:count]
    rng.shuffle(cut)
    return cut
