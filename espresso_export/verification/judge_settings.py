"""The settings of ``espresso-export judge`` (:mod:`espresso_export.verification.judge`), declared once for the API
and the CLI; light to import (the CLI reads them for ``--help``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from espresso_export.core.errors import ValidationError
from espresso_export.core.settings import setting

SHOWN_CHARS = 1200  # a document's characters shown to a person by default (the rest: "...", its length said)


@dataclass(frozen=True)
class JudgeSettings:
    """How ``judge`` fills the pairs; without ``qrels`` or ``command``, a person answers at the terminal."""

    qrels: Optional[str] = setting(
        None, path="file",
        help="Fill from labels you have: a qrels TSV (query_id, doc_id, relevance; a BEIR qrels file) or a filled "
             "judgments file. A pair of a labelled query missing from it is 0 (not relevant), as nDCG@10 reads "
             "labels; queries with no label stay unjudged.")
    command: Optional[str] = setting(
        None, help="Fill by running this program once per pair (no shell): the pair's JSON line on its stdin "
                   "(query, document, ids), a relevance on its stdout (0 not relevant, 1 relevant, 2 highly).")
    command_timeout: float = setting(120.0, min=1, help="Seconds a --command run may take before judge stops.")
    per_query: bool = setting(False, flags=("--per-query/--per-pair",),
                              help="Run --command once per query instead of once per pair: its stdin one JSON object "
                                   "(corpus, query_id, query, documents: a list of doc_id and document), its last "
                                   "lines one relevance each, in the documents' order (a judge that compares a "
                                   "query's documents together, in far fewer calls).")
    jobs: int = setting(1, min=1, help="--command runs at once, a query's pairs at a time (a judge behind an API "
                                       "answers several together).")
    queries: Optional[int] = setting(None, min=1, help="Stop after this many queries are fully judged (counting "
                                                       "those judged before).")
    shown_chars: int = setting(SHOWN_CHARS, min=50, help="Characters of a document shown at the terminal.")

    def __post_init__(self) -> None:
        if self.qrels and self.command:
            raise ValidationError("give --qrels or --command, not both: one judge fills a file at a time")
        if (self.jobs > 1 or self.per_query) and not self.command:
            raise ValidationError(f"{'--jobs' if self.jobs > 1 else '--per-query'} is for --command; give --command "
                                  "too")
        if self.jobs > 1 and self.per_query:
            raise ValidationError("--jobs runs a query's pairs at a time; with --per-query one run judges a query")
