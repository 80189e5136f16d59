"""Pseudo-queries made from a corpus itself, for label-free retrieval agreement when a user has no queries.

Three ways, each drawing its passages at random (seeded) up to a cap:

* ``sentence``: one sentence of a passage's body (at least ``MIN_WORDS`` words; the passage has another);
* ``title``: the passage's title (BEIR ``corpus.jsonl`` and other jsonl records with a ``title``);
* ``passage``: the passage itself, for passage-to-passage neighbours.

:func:`cloze_queries` makes known-item queries from titles or sentences (the query cut out of its passage)
for the label-free retention estimate of :mod:`espresso_export.verification.known_item`.

The index is the corpus as it is, one index for every query (the sentence is not cut out of its passage, so
the corpus' encodings are the ones the labelled evaluation and every other query use), and by default the
passage a query came from is left out of the results (:attr:`PseudoQueries.exclude`): otherwise every model
finds it first, for a passage trivially, and that free match says nothing about the rest of the ranking.
The query is searched against the other passages. ``keep_origin=True`` keeps it in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from espresso_export.core.errors import ValidationError
from espresso_export.data.corpus import corpus_texts, read_corpus
from espresso_export.data.retrieval_sets import read_retrieval

METHODS = ("sentence", "title", "passage")
LIMIT = 200  # pseudo-queries by default: enough for a tight interval, cheap to encode
MIN_WORDS = 5  # a sentence shorter than this is a fragment ("See below."), not a query
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")


@dataclass(frozen=True)
class Passages:
    """A corpus as an index holds it (a jsonl record's title in front of its text) and, where the records
    have them, each passage's title (empty for a record without one)."""

    name: str
    texts: list[str]
    titles: list[str] | None = None


@dataclass(frozen=True)
class PseudoQueries:
    method: str
    texts: list[str]
    origins: list[int]  # the position in the corpus of the passage each query was made from
    keep_origin: bool = False

    @property
    def exclude(self) -> list[int]:
        """Per query, the corpus position to leave out of its results (-1: none), as the searches take it."""
        return [-1] * len(self.origins) if self.keep_origin else list(self.origins)

    def __len__(self) -> int:
        return len(self.texts)


def _corpus_file(folder: Path) -> Path | None:
    return next((folder / n for n in ("corpus.jsonl", "corpus.jsonl.gz") if (folder / n).is_file()), None)


def _titles(path: Path, texts: list[str]) -> list[str] | None:
    """Each of ``texts``' titles from the jsonl file they were read from (None: not jsonl, or no titles)."""
    if not path.name.endswith((".jsonl", ".jsonl.gz")):
        return None
    try:
        _, raw = corpus_texts(path)
        _, titles = corpus_texts(path, field="title")
    except ValidationError:  # a record without a title field
        return None
    by_text: dict[str, str] = {}
    for text, title in zip(raw, titles):
        by_text.setdefault(text.strip(), title.strip())
    found = [by_text.get(t, "") for t in texts]
    return found if any(found) else None


def read_passages(spec: str | Path, *, field: str | None = None) -> Passages:
    """A BEIR folder (its corpus, as :func:`read_retrieval` reads it: in that set's document order) or a
    corpus file (:func:`read_corpus`: distinct non-empty texts), with titles where the records have them."""
    path = Path(str(spec)).expanduser()
    if path.is_dir():
        texts = read_retrieval(path).docs
        corpus = _corpus_file(path)
        return Passages(path.name, texts, None if corpus is None else _titles(corpus, texts))
    texts = read_corpus(str(spec), field=field).sentences
    return Passages(path.name, texts, _titles(path, texts) if path.is_file() and field is None else None)


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text``: split after . ! ? where the next word starts with a capital or a digit."""
    return [s.strip() for s in _SENTENCE_END.split(text.strip()) if s.strip()]


def _sentence_of(text: str, rng: np.random.Generator) -> str | None:
    sentences = split_sentences(text)
    usable = [s for s in sentences if len(s.split()) >= MIN_WORDS]
    if len(sentences) < 2 or not usable:
        return None  # a one-sentence passage would be its own query: the passage method
    return usable[int(rng.integers(len(usable)))]


def passage_body(passages: Passages, i: int) -> str:
    """A passage's text without the title the index puts in front of it (sentences are taken from the body)."""
    text, title = passages.texts[i], passages.titles[i].strip() if passages.titles else ""
    return text[len(title):].strip() if title and text.startswith(title + " ") else text


def _title_of(passages: Passages, i: int) -> str | None:
    title = passages.titles[i].strip() if passages.titles else ""
    return title if title and title != passages.texts[i].strip() else None


def pseudo_queries(passages: Passages, method: str, *, limit: int = LIMIT, seed: int = 0,
                   keep_origin: bool = False) -> PseudoQueries:
    """At most ``limit`` pseudo-queries by ``method`` from passages drawn at random (``seed``); passages that
    give none (no title, a single sentence) are skipped. The same inputs give the same queries."""
    if method not in METHODS:
        raise ValidationError(f"unknown pseudo-query method {method!r}: use one of {', '.join(METHODS)}")
    if limit < 1:
        raise ValidationError(f"the number of pseudo-queries must be at least 1, got {limit}")
    if method == "title" and not passages.titles:
        raise ValidationError(f"{passages.name} has no titles (jsonl records with a 'title' field): "
                              "use the sentence or passage pseudo-queries")
    rng = np.random.default_rng(seed)
    texts: list[str] = []
    origins: list[int] = []
    seen: set[str] = set()
    for i in rng.permutation(len(passages.texts)).tolist():
        if method == "passage":
            query = passages.texts[i]
        elif method == "title":
            query = _title_of(passages, i)
        else:
            query = _sentence_of(passage_body(passages, i), rng)
        if query is None or query in seen:
            continue
        seen.add(query)
        texts.append(query)
        origins.append(i)
        if len(texts) == limit:
            break
    if not texts:
        raise ValidationError(f"{passages.name}: no {method} pseudo-query could be made "
                              f"(sentences need {MIN_WORDS}+ words in passages of two or more sentences)")
    return PseudoQueries(method, texts, origins, keep_origin)


@dataclass(frozen=True)
class ClozeQueries:
    """Known-item pseudo-queries: each query's one relevant document is its own passage with the query cut out
    of it (``targets[i]`` replaces passage ``origins[i]`` in the index), so finding it takes meaning, not the
    query's words (the inverse cloze task of Lee et al., 2019, ORQA)."""

    method: str
    texts: list[str]
    origins: list[int]
    targets: list[str]

    def __len__(self) -> int:
        return len(self.texts)


def _cut_out(text: str, query: str) -> str:
    at = text.find(query)
    return " ".join((text[:at] + " " + text[at + len(query):]).split()) if at >= 0 else text


def _halves(passages: Passages, limit: int, seed: int) -> ClozeQueries:
    """Passages of one sentence each (short texts): the first half of a passage's words is the query, the second
    half its target (``2 x MIN_WORDS`` words at least)."""
    rng = np.random.default_rng(seed)
    texts, origins, targets = [], [], []
    for i in rng.permutation(len(passages.texts)).tolist():
        words = passages.texts[i].split()
        if len(words) < 2 * MIN_WORDS:
            continue
        cut = len(words) // 2
        texts.append(" ".join(words[:cut]))
        origins.append(i)
        targets.append(" ".join(words[cut:]))
        if len(texts) == limit:
            break
    if not texts:
        raise ValidationError(f"{passages.name}: no known-item query could be made (no title, no passage of two "
                              f"sentences, no text of {2 * MIN_WORDS}+ words)")
    return ClozeQueries("half", texts, origins, targets)


def _sentence_share(passages: Passages, sample: int = 200) -> float:
    n = min(sample, len(passages.texts))
    return sum(len(split_sentences(t)) >= 2 for t in passages.texts[:n]) / max(n, 1)


def cloze_queries(passages: Passages, method: str = "auto", *, limit: int = LIMIT, seed: int = 0) -> ClozeQueries:
    """:func:`pseudo_queries` by ``method`` (``title``, ``sentence`` or ``half``), each with its cloze target: for a
    title, the passage's body; for a sentence, the passage without it; for a half, the other half. ``auto``:
    sentences where most passages have two or more, else titles where the records have them, else halves.
    Sentences come first because their task is harder (the source itself misses some targets, while it finds a
    title's nearly always), so the score does not saturate near the source, where a target such as 97% sits, and
    errs low there rather than high."""
    if method == "auto":
        method = "sentence" if _sentence_share(passages) >= 0.5 else "title" if passages.titles else "half"
    if method == "half":
        return _halves(passages, limit, seed)
    if method not in ("title", "sentence"):
        raise ValidationError(f"known-item pseudo-queries are made from titles, sentences or halves, not {method!r}")
    made = pseudo_queries(passages, method, limit=limit, seed=seed)
    targets = [passage_body(passages, i) if method == "title" else _cut_out(passages.texts[i], q)
               for q, i in zip(made.texts, made.origins)]
    return ClozeQueries(method, made.texts, made.origins, targets)
