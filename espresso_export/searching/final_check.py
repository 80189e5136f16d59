"""The final check of an answer: ``verify`` against the source on all the documents, the user's queries and the
labelled sets (:func:`run_verify`), judged as the index will store the answer's vectors (:func:`verdict`): verify
gates the float vectors at full width, the answer may store narrower or smaller ones."""

from __future__ import annotations

from pathlib import Path

from espresso_export.core.evidence import undecided
from espresso_export.core.types import AutoObjective
from espresso_export.searching.context import Context
from espresso_export.searching.scoring import RESCORE, Score, cheapest, nested_widths
from espresso_export.verification.retrieval import labels_note


def run_verify(ctx: Context, export_dir: Path, form: Score, width: int):
    """verify against the source: the answer's stored form, or for bytes per vector every form (the search scored
    them on a sample; :func:`form_on_all_documents` chooses again on all the documents, where searching is
    cheap)."""
    from espresso_export.verification.verify import verify

    s = ctx.settings
    if s.objective is AutoObjective.BYTES_PER_VECTOR:
        dims = [d for d in nested_widths(width) if d < width]
        precision = list(dict.fromkeys(["float32", *s.precision]))
    else:
        dims = [form.dim] if form.dim < width else []
        precision = list(dict.fromkeys(["float32", form.precision]))
    return verify(str(export_dir), ctx.source, corpus=list(s.corpus), corpus_field=s.corpus_field,
                  queries=list(s.queries), retrieval=list(s.retrieval), sts=list(s.sts) or ["builtin"], dims=dims,
                  precision=precision, rescore=RESCORE if "binary" in precision else 0,
                  min_sts_retention=s.min_retention if s.sts else None,
                  min_retrieval_retention=s.min_retention if s.retrieval else None,
                  max_latency_ratio=s.max_latency_ratio, threads=s.threads, known_items=s.known_items,
                  corpus_queries=s.corpus_queries, seed=s.seed,
                  # judging the answer; with --judged-choice the judgments chose it (and its pairs are written)
                  judgments=s.judgments, write_judging=None if s.judged_choice else s.write_judging,
                  min_judged_retention=s.min_retention if s.judged_choice and s.judgments else None,
                  latency_budget=s.latency_budget,
                  progress=ctx.progress)


def _as_stored(report, target: float, form: Score, sts_gated: bool) -> list[str]:
    """Every labelled retrieval set (and STS set given with ``--sts``) judged again as the index will hold the
    vectors."""
    precision, dim, rescore = form.form
    described = f"{dim}-d {precision}" + (f", rescored {rescore}x" if rescore else "")
    vectors = report.vectors
    if vectors is None:
        return []
    missed = []
    for row in vectors.retrieval:
        for r in row.results:
            v = r.variant
            if (v.precision, v.dim, v.rescore) == form.form and r.retention is not None and r.retention < target:
                missed.append(f"nDCG@10 retention on {row.name} of the vectors as stored ({described}) = "
                              f"{r.retention:.3f}, needs >= {target:g}")
    for row in vectors.sts if sts_gated else []:
        if row.dim == dim and row.retention is not None and row.retention < target:
            missed.append(f"STS retention on {row.name} at {dim} dims = {row.retention:.3f}, needs >= {target:g}")
    return missed


def form_on_all_documents(report, target: float, precisions) -> Score | None:
    """The fewest bytes per vector of a stored form (binary: rescored, as searched) whose known-item retention
    keeps ``target`` on every corpus in full; None when none does."""
    found: dict[tuple, list] = {}
    for row in report.agreement:
        for r in row.results:
            v = r.variant
            if r.known_item and (v.precision != "binary" or v.rescore == RESCORE):
                found.setdefault((v.precision, v.dim, v.bytes_per_vector), []).append(r.known_item["retention"])
    forms = [Score(d, p, min(kept), bytes_per_vector=b) for (p, d, b), kept in found.items()]
    return cheapest(forms, target, precisions)


def _stored_known_item(row, form: Score, measure: str = "known_item") -> dict | None:
    """A corpus' known-item (or belief) retention with its documents stored as the answer stores them."""
    for r in row.results:
        if (r.variant.precision, r.variant.dim, r.variant.rescore) == form.form and getattr(r, measure):
            return getattr(r, measure)
    return getattr(row, measure)


def _deciding(row, form: Score) -> dict:
    """A corpus' estimate as the search's (:class:`~espresso_export.verification.known_item.Estimate`): its
    known-item retention, or the belief retention on the user's queries where that reads higher (``read`` says
    which)."""
    known, belief = _stored_known_item(row, form), _stored_known_item(row, form, "belief")
    if belief and belief["retention"] > known["retention"]:
        return {**belief, "read": f"the belief on your {belief['queries']} queries"}
    return {**known, "read": "known-item"}


def below_on_all(judged: dict) -> str:
    """The known-item retentions of a :func:`verdict` below the target, as a hint says them."""
    return ", ".join(f"{judged['known_item'][name]['retention']:.3f} on all of {name}"
                     for name in judged["known_item_below"])


def belief_lines(judged: dict) -> list[str]:
    """The belief retentions of a :func:`verdict` on the user's queries, as hints say them."""
    return [f"belief retention on your {b['queries']} queries of {name}: {b['retention']:.3f} (the estimate is the "
            "higher of it and the known-item retention)" for name, b in judged["belief"].items()]


def verdict(report, target: float, form: Score, sts_gated: bool, max_noise: float, *,
            known_item_gates: bool = True) -> dict:
    """verify's gate, each labelled set again for the vectors as stored, and the estimate on every corpus in full
    (the search scored a sample; :func:`_deciding`), also as stored: a corpus whose whole 95% interval lies below
    the target fails; one below it within its noise is noted. Not ``known_item_gates`` (the judgments chose):
    a known-item line below the target is reported (``not_gating``), never failed."""
    known = [(a.name, _deciding(a, form)) for a in report.agreement if a.known_item]
    missed, noted, reported = _as_stored(report, target, form, sts_gated), [], []
    unsure = {name: why for name, k in known if (why := undecided(k["queries"], k.get("ci95"), max_noise))}
    below = [name for name, k in known if k["retention"] < target or name in unsure]
    for name, k in known:
        iv = k.get("ci95")
        what = ("known-item retention" if k["read"] == "known-item"
                else f"belief retention on your {k['queries']} queries")
        if name in unsure:
            line = (f"{what} on all of {name} = {k['retention']:.3f}, undecided: {unsure[name]} (give "
                    "more documents, --corpus-queries, or --max-noise)")
        elif k["retention"] < target:
            line = (f"{what} on all of {name} = {k['retention']:.3f}, needs >= {target:g}"
                    + (f" (95% interval {iv[0]:.3f}-{iv[1]:.3f})" if iv else ""))
        else:
            continue
        if not known_item_gates:
            reported.append(line)
        elif name not in unsure and iv and iv[1] >= target:
            noted.append(line)
        else:
            missed.append(line)
    # on the user's own --queries: the estimate where it reads above the known-item retention (_deciding)
    belief = {a.name: _stored_known_item(a, form, "belief") for a in report.agreement if a.belief}
    labels = [f"labelled set {row.name}: {note}" for row in report.retrieval if (note := labels_note(row.source))]
    return {"passed": report.passed and not missed, "failed": [c.describe() for c in report.failed] + missed,
            "within_noise": noted, "not_gating": reported, "known_item": {name: k for name, k in known},
            "known_item_below": below, "belief": belief, "labels": labels}
