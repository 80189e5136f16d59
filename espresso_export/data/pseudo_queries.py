"""Pseudo-queries made from a corpus itself, for label-free retrieval agreement when a user has no queries.

Three ways, each drawing its passages at random (seeded) up to a cap:

* ``sentence``: one sentence of a passage's body (at least ``MIN_WORDS`` words; the passage has another);
* ``title``: the passage's title (BEIR ``corpus.jsonl`` and other jsonl records with a ``title``);
* ``passage``: the passage itself, for passage-to-passage neighbours.

:func:`known_item_queries` makes known-item queries from titles, sentences or halves (the query cut out of its
passage) for the label-free retention estimate of :mod:`espresso_export.verification.known_item`.

:func:`choose_queries` is the one rule both ``verify --corpus`` and ``auto`` choose by, for every shape a corpus
has (titled records, passages of several sentences, one short text a line, CJK text, a few documents): the
first method in an order that suits the corpus which makes enough queries, else the one making most; none when
no method makes any (one word a line). Words are runs of non-space characters, and each character of Chinese
or Japanese text (written without spaces) on its own.

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
from espresso_export.data.retrieval_sets import read_beir_corpus

METHODS = ("sentence", "title", "passage")
KNOWN_ITEM_METHODS = ("sentence", "title", "half")
LIMIT = 200  # pseudo-queries by default: enough for a tight interval, cheap to encode
MIN_WORDS = 5  # a sentence shorter than this is a fragment ("See below."), not a query
ENOUGH = 10  # queries a method must make to be chosen (or the limit, if lower); else the one making most
# scripts written without spaces between words: each character is a word (CJK ideographs, kana)
_UNSPACED = "\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f\U00020000-\U0002ffff"
_WORD = re.compile(f"[{_UNSPACED}]|[^\\s{_UNSPACED}]+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])|(?<=[。！？])\s*(?=\S)|(?<=[.!?])(?=[" + _UNSPACED + "])")


@dataclass(frozen=True)
class Documents:
    """A corpus as an index holds it (a jsonl record's title in front of its text) and, where the records
    have them, each passage's title (empty for a record without one); ``duplicates``: texts dropped as repeats
    of earlier ones (each is kept once)."""

    name: str
    texts: list[str]
    titles: list[str] | None = None
    duplicates: int = 0


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


def _titles(path: Path, texts: list[str], field: str | None = None) -> list[str] | None:
    """Each of ``texts``' titles from the jsonl file they were read from (None: not jsonl, or no titles)."""
    if not path.name.endswith((".jsonl", ".jsonl.gz")):
        return None
    try:
        _, raw = corpus_texts(path, field=field)
        _, titles = corpus_texts(path, field="title")
    except ValidationError:  # a record without a title field
        return None
    by_text: dict[str, str] = {}
    for text, title in zip(raw, titles):
        by_text.setdefault(text.strip(), title.strip())
    found = [by_text.get(t, "") for t in texts]
    return found if any(found) else None


def _distinct(texts: list[str]) -> tuple[list[str], int]:
    kept = list(dict.fromkeys(texts))
    return kept, len(texts) - len(kept)


def read_documents_of(spec: str | Path, *, field: str | None = None) -> Documents:
    """A BEIR folder (its ``corpus.jsonl`` alone, in file order: no queries or qrels needed) or a corpus file
    (:func:`read_corpus`, ``field`` naming its jsonl field or csv column): distinct non-empty texts, with titles
    where the records have them and the count of repeated texts dropped."""
    path = Path(str(spec)).expanduser()
    if path.is_dir():
        texts, duplicates = _distinct(read_beir_corpus(path)[1])
        corpus = _corpus_file(path)
        return Documents(path.name, texts, None if corpus is None else _titles(corpus, texts), duplicates)
    read = read_corpus(str(spec), field=field)
    return Documents(path.name, read.sentences, _titles(path, read.sentences, field) if path.is_file() else None,
                    read.counts()["duplicates_dropped"])


def words(text: str) -> list[re.Match]:
    """The words of ``text``: runs of non-space characters, and each Chinese or Japanese character on its own."""
    return list(_WORD.finditer(text))


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text``: split after . ! ? where the next word starts with a capital or a digit, and after
    。！？ (and . ! ? before Chinese or Japanese text) without a space."""
    return [s.strip() for s in _SENTENCE_END.split(text.strip()) if s.strip()]


def _sentence_of(text: str, rng: np.random.Generator) -> str | None:
    sentences = split_sentences(text)
    usable = [s for s in sentences if len(words(s)) >= MIN_WORDS]
    if len(sentences) < 2 or not usable:
        return None  # a one-sentence passage would be its own query: the passage method
    return usable[int(rng.integers(len(usable)))]


def document_body(passages: Documents, i: int) -> str:
    """A passage's text without the title the index puts in front of it (sentences are taken from the body)."""
    text, title = passages.texts[i], passages.titles[i].strip() if passages.titles else ""
    return text[len(title):].strip() if title and text.startswith(title + " ") else text


def _title_of(passages: Documents, i: int) -> str | None:
    title = passages.titles[i].strip() if passages.titles else ""
    return title if title and title != passages.texts[i].strip() else None


def _half_of(text: str) -> tuple[str, str] | None:
    """A one-sentence text cut in two at its middle word (``2 x MIN_WORDS`` words at least): (query, target)."""
    found = words(text)
    if len(found) < 2 * MIN_WORDS:
        return None
    cut = found[len(found) // 2].start()
    return " ".join(text[:cut].split()), " ".join(text[cut:].split())


def _query_of(passages: Documents, i: int, method: str, rng: np.random.Generator, min_words: int) -> str | None:
    if method == "passage":
        text = passages.texts[i]
        return text if len(words(text)) >= min_words else None
    if method == "title":
        return _title_of(passages, i)
    if method == "half":
        half = _half_of(passages.texts[i])
        return None if half is None else half[0]
    return _sentence_of(document_body(passages, i), rng)


def _made(passages: Documents, method: str, limit: int, seed: int, min_words: int = 0) -> PseudoQueries:
    """At most ``limit`` queries by ``method`` from passages drawn at random (``seed``), each distinct; passages
    that give none (no title, a single sentence, too few words) skipped. May be empty."""
    rng = np.random.default_rng(seed)
    texts: list[str] = []
    origins: list[int] = []
    seen: set[str] = set()
    for i in rng.permutation(len(passages.texts)).tolist():
        query = _query_of(passages, i, method, rng, min_words)
        if query is None or query in seen:
            continue
        seen.add(query)
        texts.append(query)
        origins.append(i)
        if len(texts) == limit:
            break
    return PseudoQueries(method, texts, origins)


def pseudo_queries(passages: Documents, method: str, *, limit: int = LIMIT, seed: int = 0,
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
    made = _made(passages, method, limit, seed)
    if not made.texts:
        raise ValidationError(f"{passages.name}: no {method} pseudo-query could be made "
                              f"(sentences need {MIN_WORDS}+ words in passages of two or more sentences)")
    return PseudoQueries(method, made.texts, made.origins, keep_origin)


@dataclass(frozen=True)
class KnownItemQueries:
    """Known-item pseudo-queries: each query's one relevant document is its own passage with the query cut out
    of it (``targets[i]`` replaces passage ``origins[i]`` in the index), so finding it takes meaning, not the
    query's words (Lee et al., 2019, ORQA's inverse cloze task)."""

    method: str
    texts: list[str]
    origins: list[int]
    targets: list[str]

    def __len__(self) -> int:
        return len(self.texts)


def _cut_out(text: str, query: str) -> str:
    at = text.find(query)
    return " ".join((text[:at] + " " + text[at + len(query):]).split()) if at >= 0 else text


def _known_item_queries(passages: Documents, made: PseudoQueries) -> KnownItemQueries:
    """Each query's target: for a title, the passage's body; for a sentence, the passage without it; for a half
    (the first half of a text's words), the other half."""
    if made.method == "half":
        targets = [_half_of(passages.texts[i])[1] for i in made.origins]  # type: ignore[index]
    else:
        targets = [document_body(passages, i) if made.method == "title" else _cut_out(passages.texts[i], q)
                   for q, i in zip(made.texts, made.origins)]
    return KnownItemQueries(made.method, made.texts, made.origins, targets)


def _sentence_share(passages: Documents, sample: int = 200) -> float:
    n = min(sample, len(passages.texts))
    return sum(len(split_sentences(t)) >= 2 for t in passages.texts[:n]) / max(n, 1)


def _known_item_order(passages: Documents, share: float) -> list[str]:
    """Sentences where most passages have two or more (their task is harder: the source itself misses some
    targets, so the score does not saturate near the source, where a target such as 97% sits, and errs low there
    rather than high), else titles where the records have them, else halves of one-sentence texts."""
    first = ["sentence"] if share >= 0.5 else []
    return list(dict.fromkeys([*first, *(["title"] if passages.titles else []), "half", "sentence"]))


def _agreement_order(passages: Documents, share: float) -> list[tuple[str, int]]:
    """Titles where the records have them (the choice whose agreement followed labelled nDCG@10 retention best),
    else sentences where most passages have two or more, else the first half of one-sentence texts (as the known
    items are made: a query never a whole text, which auto may heal on), else each passage itself of
    ``MIN_WORDS``+ words (texts too short to halve)."""
    first = [("title", 0)] if passages.titles else []
    return list(dict.fromkeys([*first, *([("sentence", 0)] if share >= 0.5 else []), ("half", 0),
                               ("passage", MIN_WORDS), ("sentence", 0)]))


def _first_enough(passages: Documents, order: list[tuple[str, int]], limit: int, seed: int) -> PseudoQueries:
    """The first method of ``order`` making ``ENOUGH`` queries (or ``limit``), else the one making most (the
    earlier on a tie); empty when none makes any."""
    best = PseudoQueries(order[0][0], [], [])
    for method, min_words in order:
        made = _made(passages, method, limit, seed, min_words)
        if len(made) >= min(limit, ENOUGH):
            return made
        best = made if len(made) > len(best) else best
    return best


@dataclass(frozen=True)
class Chosen:
    """What :func:`choose_queries` made of a corpus: its agreement pseudo-queries and its known-item queries (None
    when none could be made, or none was asked), why none could be, and the repeated texts dropped."""

    agreement: PseudoQueries | None
    known_items: KnownItemQueries | None
    duplicates: int
    why_no_agreement: str | None = None
    why_no_known_items: str | None = None


def _check(method: str | None, allowed: tuple[str, ...], what: str) -> None:
    if method is not None and method != "auto" and method not in allowed:
        raise ValidationError(f"{what} are made from {', '.join(allowed)} (or auto), not {method!r}")


def choose_queries(passages: Documents, *, agreement: str | None = "auto", known_items: str | None = "auto",
                   limit: int = LIMIT, seed: int = 0, keep_origin: bool = False) -> Chosen:
    """The pseudo-queries of a corpus, by one rule for every command: at most ``limit`` agreement queries by
    ``agreement`` (a method of :data:`METHODS`; ``auto``, which may take ``half`` too; or None: the user's
    queries are searched instead) and
    known-item queries by ``known_items`` (:data:`KNOWN_ITEM_METHODS`, ``auto`` or None). ``auto`` takes the
    first method, in an order that suits the corpus (:func:`_agreement_order`, :func:`_known_item_order`), that
    makes :data:`ENOUGH` queries, else the one making most. Neither raises for a corpus that gives none: the
    caller says what to give."""
    _check(agreement, METHODS, "agreement pseudo-queries")
    _check(known_items, KNOWN_ITEM_METHODS, "known-item queries")
    if limit < 1:
        raise ValidationError(f"the number of pseudo-queries must be at least 1, got {limit}")
    share = _sentence_share(passages)
    made = None
    if agreement == "auto":
        made = _first_enough(passages, _agreement_order(passages, share), limit, seed)
    elif agreement is not None:
        made = _made(passages, agreement, limit, seed)
    found = None
    if known_items is not None:
        order = _known_item_order(passages, share) if known_items == "auto" else [known_items]
        found = _first_enough(passages, [(m, 0) for m in order], limit, seed)
    return Chosen(None if not made else PseudoQueries(made.method, made.texts, made.origins, keep_origin),
                  None if not found else _known_item_queries(passages, found), passages.duplicates,
                  None if agreement is None or made else _why(passages, agreement),
                  None if known_items is None or found else _why(passages, known_items, known=True))


def _why(passages: Documents, method: str, *, known: bool = False) -> str:
    if method == "title" and not passages.titles:
        return "the records have no titles"
    if method == "auto" and known:
        return f"no title, no passage of two sentences, no text of {2 * MIN_WORDS}+ words"
    if method == "auto":
        return f"no title, no sentence or text of {MIN_WORDS}+ words"  # half of a text needs twice as many
    return {"sentence": f"no passage of two or more sentences of {MIN_WORDS}+ words",
            "half": f"no text of {2 * MIN_WORDS}+ words", "title": "no title differs from its text",
            "passage": "no passage"}[method]


def known_item_queries(passages: Documents, method: str = "auto", *, limit: int = LIMIT, seed: int = 0) -> KnownItemQueries:
    """Known-item queries by ``method`` (``title``, ``sentence``, ``half`` or ``auto``), each with its target (the document with the query cut out):
    :func:`choose_queries`' rule; a corpus that gives none is refused."""
    chosen = choose_queries(passages, agreement=None, known_items=method, limit=limit, seed=seed)
    if chosen.known_items is None:
        raise ValidationError(f"{passages.name}: no known-item query could be made ({chosen.why_no_known_items})")
    return chosen.known_items
