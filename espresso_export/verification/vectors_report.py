"""The report's part for ``--corpus``, ``--precision`` and ``--dims``: the measured rows and their tables
(:class:`~espresso_export.verification.report.Section` rows, rendered like the others)."""

from __future__ import annotations

from dataclasses import dataclass, field

from espresso_export.core.formatting import byte_size, number
from espresso_export.runtime.precision import SCALAR
from espresso_export.verification.corpus_agreement import AgreementRow
from espresso_export.verification.vector_measures import VectorRetrievalRow, WidthStsRow

AGREEMENT_LEGEND = ("agree@10: share of the source's top 10 in the candidate's top 10; nDCG@10: the source's "
                    "ranks as graded relevance; rec@100: share of the source's top 10 in the candidate's first 100")
HEADERS = ("vectors", "B/vec", "index")


@dataclass
class VectorReport:
    """The candidate's vectors in other stored forms: labelled retrieval per form, STS per width, and where the
    int8/uint8 ranges of each width came from."""

    retrieval: list[VectorRetrievalRow] = field(default_factory=list)
    sts: list[WidthStsRow] = field(default_factory=list)
    ranges: dict[str, str] = field(default_factory=dict)  # width -> origin

    def to_dict(self) -> dict:
        return {"ranges": self.ranges, "retrieval": [r.to_dict() for r in self.retrieval],
                "sts": [r.to_dict() for r in self.sts]}


def _ranges_note(ranges: dict[str, str], precisions) -> list[str]:
    if not ranges or not any(p in SCALAR for p in precisions):
        return []
    return ["int8/uint8 ranges: " + "; ".join(f"{dim}-d {origin}" for dim, origin in ranges.items())]


def _agreement_section(row: AgreementRow, ranges: dict[str, str]):
    from espresso_export.verification.report import Section

    repeated = f", {row.duplicates:,} duplicates dropped" if row.duplicates else ""
    title = (f"agreement with the source's ranking: {row.name} ({row.passages:,} passages{repeated}, {row.queries} "
             f"{row.queries_from})")
    known = row.known_item is not None
    headers = (*HEADERS, "agree@10", "nDCG@10", "rec@100", *(("known-item",) if known else ()))
    if not row.finite:
        return Section(title, headers, [(row.results[0].variant.label, "", "", "NaN", "NaN", "NaN")],
                       ["a model's vectors hold NaN or inf: no agreement is defined"])
    rows = []
    for r in row.results:
        means = r.agreement.means()
        rows.append((r.variant.label, str(r.variant.bytes_per_vector), byte_size(r.index_bytes),
                     *(f"{v:.4f}" for v in means.values()),
                     *((f"{r.known_item['retention']:.3f}" if r.known_item else "",) if known else ())))
    main = row.results[0]
    ci = [f"{shown} {iv[0]:.3f}-{iv[1]:.3f}" for shown, iv in zip(("agreement@10", "nDCG@10", "recall@100"),
                                                                   main.agreement.intervals().values())
          if iv is not None]
    notes = [f"95% interval over the {row.queries} queries (bootstrap), {main.variant.label}: " + ", ".join(ci)] \
        if ci else []
    if row.no_known_items:
        notes.insert(0, f"no known-item retention: no known-item query could be made ({row.no_known_items})")
    if row.known_item is not None:
        k, iv = row.known_item, row.known_item.get("ci95")
        notes.insert(0, f"known-item retention ({k['method']}, {k['queries']} queries): {k['retention']:.3f}"
                        + (f" [{iv[0]:.3f}-{iv[1]:.3f}]" if iv else "") + ": the estimate of labelled nDCG@10 "
                        "retention on these documents (auto's score); per form in the last column (its int8 ranges "
                        "fitted on the corpus)")
    if row.belief is not None:
        b, iv = row.belief, row.belief.get("ci95")
        notes.insert(0, f"belief retention on your {b['queries']} queries: {b['retention']:.3f}"
                        + (f" [{iv[0]:.3f}-{iv[1]:.3f}]" if iv else "") + ": the higher of the source's own belief "
                        "(softmax of 20 x cosine) read from the queries' side and from the documents' side, no "
                        "labels; auto's estimate is the higher of it and the known-item retention; see "
                        "docs/commands/verify.md")
    return Section(title, headers, rows, [*notes, AGREEMENT_LEGEND,
                                          *_ranges_note(ranges, [r.variant.precision for r in row.results])])


def _retrieval_section(row: VectorRetrievalRow, ranges: dict[str, str]):
    from espresso_export.verification.report import Section

    rows = [(r.variant.label, str(r.variant.bytes_per_vector), byte_size(r.index_bytes), f"{r.ndcg_at_10:.4f}",
             number(r.retention, ".4f"), f"{r.recall_at_100:.4f}") for r in row.results]
    return Section(f"retrieval by stored vectors: {row.name} (source nDCG@10 {row.source_ndcg_at_10:.4f})",
                   (*HEADERS, "nDCG@10", "retention", "rec@100"), rows,
                   ["retention: of the source's nDCG@10 (float32, full width)",
                    *_ranges_note(ranges, [r.variant.precision for r in row.results])])


def vector_sections(agreement: list[AgreementRow], vectors: VectorReport | None) -> list:
    """The tables, in the order measured: each corpus' agreement, each retrieval set per form, STS per width."""
    from espresso_export.verification.report import Section

    ranges = vectors.ranges if vectors else {}
    out = [_agreement_section(row, ranges) for row in agreement]
    if vectors is None:
        return out
    out += [_retrieval_section(row, ranges) for row in vectors.retrieval]
    if vectors.sts:
        out.append(Section("STS at truncated widths (renormalised)",
                           ("set", "width", "candidate", "source", "retention"),
                           [(r.name, str(r.dim), f"{r.candidate:.2f}", f"{r.source:.2f}", number(r.retention, ".4f"))
                            for r in vectors.sts]))
    return out
