"""How far the label-free known-item estimate (:mod:`.known_item`) has read from labelled nDCG@10 retention, per
kind of model, on the labelled collections it was measured on: what ``auto.json`` and the model card state beside
an estimate, so nobody takes it for a labelled retention.

The table ships as ``resources/estimate_error.json``; ``benchmarks/estimate.py`` writes it from its results
(``benchmarks/results/estimate-*.json``), one row per collection and kind: the mean and the range of the error
(estimate minus labels) over that kind's candidates there. A kind never measured has no row, and is said so.
"""

from __future__ import annotations

import json
from functools import cache

RESOURCE = "estimate_error.json"
REFERENCE = "benchmarks/README.md#estimate-by-kind"
# what each measured kind is, in words a report prints
KINDS = {
    "plain": "plain cuts",
    "healed-held-out": "healed cuts",
    "healed-narrow": "healed cuts with a 256-d or 128-d head",
    "int8-vectors": "healed cuts' int8 vectors",
    "binary-vectors": "healed cuts' binary vectors",
    "int8-weights": "healed cuts' int8 weights",
    "static-plain": "untrained static models",
    "static-held-out": "healed static models",
    "static-int8-vectors": "healed static models' int8 vectors",
    "static-binary-vectors": "healed static models' binary vectors",
}


@cache
def table() -> dict:
    """The shipped table: ``{"source", "date", "command", "collections": {name: {"labelled_queries", "kinds":
    {kind: {"n", "mean_error", "min_error", "max_error"}}}}}`` (empty when it is missing)."""
    from espresso_export.data.files import builtin_resource

    path = builtin_resource(RESOURCE)
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def kind_of(*, static: bool, cut: bool, healed: bool, precision: str = "float32") -> str | None:
    """The measured kind a model falls under (None: a kind never measured, such as a trained student)."""
    if not static and not cut:
        return None
    if not healed:
        return "static-plain" if static else ("plain" if precision == "float32" else None)
    stem = "static-" if static else ""
    if precision in ("int8", "binary"):
        return f"{stem}{precision}-vectors"
    return f"{stem}held-out" if static else "healed-held-out"


def kind_of_lineage(provenance: dict | None) -> str | None:
    """The measured kind of a model folder, read off its lineage (``espresso.json``, newest step first): the
    newest step that changed the weights decides (export and prune-vocab pass through). None for a fine-tuned
    model, a trained student or a folder without a lineage."""
    from espresso_export.model.static import STATIC_STUDENT

    step = provenance
    while isinstance(step, dict):
        if step.get("step") == "train":
            return None
        if step.get("step") == "distill":
            student = step.get("student") if isinstance(step.get("student"), dict) else {}
            if student.get("id") == STATIC_STUDENT:
                return kind_of(static=True, cut=False, healed=bool(step.get("healed")))
            return kind_of(static=False, cut="layers" in student, healed=True)
        if step.get("step") == "shrink":
            return kind_of(static=False, cut=True, healed=False)
        step = step.get("parent")
    return None


def measured_error(kind: str | None, *, with_queries: bool = False) -> dict:
    """The estimate's measured error for ``kind``: ``{"kind", "what", "estimate", "source", "date", "reference",
    "collections": [{"collection", "labelled_queries", "n", "mean_error", "min_error", "max_error"}]}``; the
    collections list is empty for a kind never measured. ``with_queries``: the estimate with the user's queries
    (the higher of the known-item read and the belief on them, :class:`~.known_item.Estimate`)."""
    t = table()
    rows = []
    for name, c in sorted(t.get("collections", {}).items()):
        found = c["kinds"].get(kind) if kind else None
        if found and with_queries:
            found = {"n": found["n"], **found["with_queries"]} if "with_queries" in found else None
        if found:
            rows.append({"collection": name, "labelled_queries": c["labelled_queries"],
                         **{k: v for k, v in found.items() if k != "with_queries"}})
    return {"kind": kind, "what": KINDS.get(kind or "", "this kind of model"),
            "estimate": "with your queries" if with_queries else "known-item", "source": t.get("source"),
            "date": t.get("date"), "reference": REFERENCE, "collections": rows}


def error_line(error: dict) -> str:
    """One line for a report: the range of the mean error over the collections, or that it was never measured."""
    rows = error["collections"]
    which = "the estimate's (with your queries)" if error.get("estimate") == "with your queries" else \
        "the known-item estimate's"
    if not rows:
        return f"{which} error was never measured for {error['what']}: it is no labelled retention"
    means = [r["mean_error"] for r in rows]
    lo, hi = min(means), max(means)
    span = f"{lo:+.3f}" if lo == hi else f"{lo:+.3f} to {hi:+.3f}"
    return (f"{which} measured error for {error['what']}: {span} (estimate minus labels, mean "
            f"per collection over {len(rows)} labelled collection(s); {error['reference']})")
