"""The verify report as the card reads it, through one adapter.

:func:`parse_report` is the only place that knows the JSON field names of a ``verify`` report
(``VerifyReport.to_dict()``, written by ``verify --json FILE``); adapt it here if the schema changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from espresso_export.core.errors import ValidationError


@dataclass(frozen=True)
class StsMetric:
    name: str
    pairs: int | None
    candidate: float | None  # Spearman x100
    source: float | None
    retention: float | None
    smoke: bool
    subset: bool = False  # measured on --sts-limit pairs of the set, not the whole set


@dataclass(frozen=True)
class LatencyMetric:
    batch_size: int
    candidate_ms: float | None  # ms per batch: the median round's (verify's table); p50 of batches in old reports
    source_ms: float | None
    ratio: float | None  # candidate / source time of the same round, median over rounds (what the gate decides on)
    speedup: float | None  # candidate / source sentences per second
    reasons: tuple[str, ...] = ()  # why verify did not trust this measurement (empty: trusted)
    candidate_per_s: float | None = None  # texts a second (absent from older reports)


@dataclass(frozen=True)
class RetrievalMetric:
    name: str
    index: str | None
    queries: int | None
    docs: int | None
    candidate_mrr: float | None
    source_mrr: float | None
    mrr_retention: float | None
    candidate_recall: float | None
    source_recall: float | None
    candidate_ndcg: float | None = None  # nDCG@10, recall@100: absent from older reports
    source_ndcg: float | None = None
    ndcg_retention: float | None = None
    candidate_recall_100: float | None = None
    source_recall_100: float | None = None
    recall_100_retention: float | None = None
    smoke: bool = False  # the built-in smoke set (older reports: named "builtin")


@dataclass(frozen=True)
class AgreementMetric:
    """Label-free agreement with the source's ranking on the user's corpus (``verify --corpus``)."""

    name: str
    passages: int | None
    queries: int | None
    queries_from: str | None  # the user's queries file, or how pseudo-queries were made
    agreement_at_10: float | None  # share of the source's top 10 in the candidate's top 10
    ndcg_at_10: float | None  # the source's ranking as graded relevance
    recall_at_100: float | None  # of the source's top 10
    agreement_ci95: tuple[float, float] | None = None
    variants: tuple[tuple[str, int | None, float | None], ...] = ()  # (precision and width, bytes/vector, agreement@10)
    known_item: dict | None = None  # retention, ci95, candidate/source nDCG@10, method: the retention-scale estimate
    belief: dict | None = None  # retention, ci95, queries: the belief retention on the user's own queries


@dataclass(frozen=True)
class GateCheck:
    name: str
    threshold: str
    value: float | None
    passed: bool


@dataclass
class CardMetrics:
    candidate: str  # what verify measured (a path is shown by its last component)
    candidate_kind: str | None
    candidate_path: str | None
    source: str
    threads: int | None
    size: dict[str, tuple[Any, Any, float | None]]  # label -> (candidate, source, ratio)
    candidate_dim: int | None
    sts: list[StsMetric] = field(default_factory=list)
    latency: list[LatencyMetric] = field(default_factory=list)
    retrieval: list[RetrievalMetric] = field(default_factory=list)
    agreement: list[AgreementMetric] = field(default_factory=list)
    gate: list[GateCheck] = field(default_factory=list)
    gate_passed: bool | None = None
    version: str | None = None
    candidate_file: str | None = None  # the graph verify ran, for an export folder (onnx/model_quantized.onnx)
    judged: list[dict] = field(default_factory=list)  # per corpus: labelled nDCG@10 from the user's judgments


def _num(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _size(cand: dict, src: dict, ratios: dict) -> dict[str, tuple[Any, Any, float | None]]:
    return {
        "parameters": (cand.get("n_params"), src.get("n_params"), _num(ratios.get("n_params"))),
        "bytes on disk": (cand.get("disk_bytes"), src.get("disk_bytes"), _num(ratios.get("disk_bytes"))),
        "bytes per vector": (cand.get("bytes_per_vector"), src.get("bytes_per_vector"),
                             _num(ratios.get("bytes_per_vector"))),
    }


def _sts(report: dict) -> list[StsMetric]:
    return [StsMetric(name=str(s.get("name", "sts")), pairs=s.get("pairs"), candidate=_num(s.get("candidate_spearman")),
                      source=_num(s.get("source_spearman")), retention=_num(s.get("retention")),
                      smoke=bool(s.get("smoke_set")), subset=s.get("subset_of") is not None)
            for s in (report.get("sts") or {}).get("sets", [])]


def _batch_ms(stats: dict | None) -> float | None:
    stats = stats or {}
    return _num((stats.get("round_ms") or {}).get("median", stats.get("p50_ms")))


def _latency(lat: dict) -> list[LatencyMetric]:
    """Reports before the latency ratio was recorded give their p50 figures (what their gate used)."""
    return [LatencyMetric(batch_size=int(b.get("batch_size", 0)), candidate_ms=_batch_ms(b.get("candidate")),
                          source_ms=_batch_ms(b.get("source")), ratio=_num(b.get("latency_ratio", b.get("p50_ratio"))),
                          speedup=_num(b.get("throughput_ratio")), reasons=tuple(b.get("reasons") or ()),
                          candidate_per_s=_num((b.get("candidate") or {}).get("sentences_per_s")))
            for b in lat.get("batches", [])]


def _retrieval_row(r: dict) -> RetrievalMetric:
    cand, src = r.get("candidate") or {}, r.get("source") or {}
    return RetrievalMetric(name=str(r.get("name", "retrieval")), index=r.get("index"), queries=r.get("queries"),
                           docs=r.get("docs"), candidate_mrr=_num(cand.get("mrr_at_10")),
                           source_mrr=_num(src.get("mrr_at_10")), mrr_retention=_num(r.get("mrr_retention")),
                           candidate_recall=_num(cand.get("recall_at_10")), source_recall=_num(src.get("recall_at_10")),
                           candidate_ndcg=_num(cand.get("ndcg_at_10")), source_ndcg=_num(src.get("ndcg_at_10")),
                           ndcg_retention=_num(r.get("ndcg_retention")),
                           candidate_recall_100=_num(cand.get("recall_at_100")),
                           source_recall_100=_num(src.get("recall_at_100")),
                           recall_100_retention=_num(r.get("recall_at_100_retention")),
                           smoke=bool(r.get("smoke_set", r.get("spec") == "builtin")))


def _retrieval(report: dict) -> list[RetrievalMetric]:
    return [_retrieval_row(r) for r in report.get("retrieval") or []]


def _interval(value) -> tuple[float, float] | None:
    ok = isinstance(value, (list, tuple)) and len(value) == 2 and all(_num(v) is not None for v in value)
    return (float(value[0]), float(value[1])) if ok else None


def _variant(v: dict) -> tuple[str, int | None, float | None]:
    label = f"{v.get('precision', '?')} {v.get('dim', '?')}-d" + (f" +rescore {v['rescore']}x" if v.get("rescore") else "")
    return label, v.get("bytes_per_vector"), _num(v.get("agreement_at_10"))


def _known_item(k) -> dict | None:
    if not isinstance(k, dict) or _num(k.get("retention")) is None:
        return None
    return {"retention": _num(k["retention"]), "ci95": _interval(k.get("ci95")), "method": str(k.get("method", "")),
            "candidate": _num(k.get("candidate_ndcg_at_10")), "source": _num(k.get("source_ndcg_at_10"))}


def _belief(b) -> dict | None:
    if not isinstance(b, dict) or _num(b.get("retention")) is None:
        return None
    return {"retention": _num(b["retention"]), "ci95": _interval(b.get("ci95")), "queries": b.get("queries")}


def _agreement_row(name: str, a: dict) -> AgreementMetric:
    variants = [v for v in a.get("variants") or [] if isinstance(v, dict)][1:]  # the first is float32, full width
    return AgreementMetric(name=str(a.get("name", name)), passages=a.get("passages"), queries=a.get("queries"),
                           queries_from=a.get("queries_from"), agreement_at_10=_num(a.get("agreement_at_10")),
                           ndcg_at_10=_num(a.get("ndcg_at_10")), recall_at_100=_num(a.get("recall_at_100")),
                           agreement_ci95=_interval((a.get("ci95") or {}).get("agreement_at_10")),
                           variants=tuple(_variant(v) for v in variants),
                           known_item=_known_item(a.get("known_item")), belief=_belief(a.get("belief")))


def _agreement(report: dict) -> list[AgreementMetric]:
    """``agreement``: a list of corpus rows (``verify --corpus``), or ``{corpus name: row}``."""
    found = report.get("agreement") or []
    rows = found.items() if isinstance(found, dict) else ((r.get("name", "corpus"), r) for r in found
                                                           if isinstance(r, dict))
    return [_agreement_row(str(name), row) for name, row in rows if isinstance(row, dict)]


def parse_report(report: dict) -> CardMetrics:
    """Read a ``verify`` report (``VerifyReport.to_dict()``, written by ``verify --json FILE``).

    The only place that knows the report's field names; adapt it here if the schema changes.
    """
    cand, src = report.get("candidate"), report.get("source")
    if not isinstance(cand, dict) or not isinstance(src, dict):
        raise ValidationError("not a verify report: no 'candidate' and 'source' objects (write one with "
                              "`espresso-export verify ... --json report.json`)")
    size = _size(cand, src, report.get("size_ratios") or {})
    sts = _sts(report)
    lat = report.get("latency") or {}
    latency = _latency(lat)
    retrieval = _retrieval(report)
    gate = report.get("gate") or {}
    checks = [GateCheck(name=str(c.get("name")), threshold=str(c.get("threshold")), value=_num(c.get("value")),
                        passed=bool(c.get("passed"))) for c in gate.get("checks", [])]
    return CardMetrics(
        candidate=str(cand.get("spec", "?")), candidate_kind=cand.get("kind"), candidate_path=cand.get("path"),
        source=str(src.get("spec", "?")), threads=lat.get("threads"), size=size, candidate_dim=cand.get("dim"),
        sts=sts, latency=latency, retrieval=retrieval, agreement=_agreement(report), gate=checks,
        gate_passed=bool(gate["passed"]) if checks and "passed" in gate else None,
        version=report.get("espresso_version"), candidate_file=cand.get("file"),
        judged=[j for j in report.get("judged") or [] if isinstance(j, dict) and _num(j.get("retention")) is not None],
    )


def metrics_from_report(report: Any, where: str) -> CardMetrics:
    """:func:`parse_report` with ``where`` (the report's file) named in every error."""
    if not isinstance(report, dict):
        raise ValidationError(f"{where} is not a verify report: expected a JSON object")
    try:
        return parse_report(report)
    except ValidationError as e:
        raise ValidationError(f"{where}: {e.message}") from e
    except (TypeError, ValueError, AttributeError) as e:
        raise ValidationError(f"{where} is not a verify report this version reads: {e}") from e
