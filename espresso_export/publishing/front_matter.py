"""The card's YAML front matter: ``library_name``, ``license``, ``base_model``, ``pipeline_tag``, tags and
``model-index`` (benchmark sets only: the built-in smoke set stays in the card's body).

The Hub reads these fields (search filters, the model tree, the evaluation widget), so they come only
from facts of the folder and the verify report, never from free text.
"""

from __future__ import annotations

import re
from typing import Any

from espresso_export.publishing.facts import ModelFacts
from espresso_export.publishing.model_ids import short_id
from espresso_export.publishing.report_metrics import CardMetrics


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "set"


def _tags(facts: ModelFacts) -> list[str]:
    tags = ["espresso-export", "sentence-transformers", "feature-extraction", "sentence-similarity"]
    if facts.static is not None:
        tags[1:1] = ["model2vec", "static-embeddings", "embeddings"]
    if facts.onnx is not None:
        tags.append("onnx")
    if facts.head:
        tags.append(f"{facts.head}-head")
    steps = {s.get("step") for s in facts.lineage}
    if "shrink" in steps:
        tags.append("layer-pruning")
    if "distill" in steps:
        tags.append("distillation")
    if facts.ese:
        tags.append("ese")
    if facts.matryoshka_dims:
        tags.append("matryoshka")
    return tags


_STS_TASK = {"type": "semantic-similarity", "name": "Semantic Similarity"}
_RETRIEVAL_TASK = {"type": "information-retrieval", "name": "Information Retrieval"}


def _metric(kind: str, value: float, name: str) -> dict:
    return {"type": kind, "value": round(value, 4), "name": name}


def _result(task: dict, dataset: str, values: list[dict]) -> dict:
    return {"task": dict(task), "dataset": {"name": dataset, "type": _slug(dataset)}, "metrics": values}


def _model_index(repo_id: str, metrics: CardMetrics) -> list[dict]:
    against = f"vs {short_id(metrics.source)}"
    results = []
    for s in metrics.sts:
        if s.candidate is None or s.smoke or s.subset:  # a smoke set or a subset is not the benchmark's result
            continue
        values = [_metric("spearman_cosine", s.candidate / 100, "Spearman (cosine)")]
        if s.retention is not None:
            values.append(_metric("spearman_cosine_retention", s.retention, f"Spearman retention {against}"))
        results.append(_result(_STS_TASK, s.name, values))
    for r in metrics.retrieval:
        if r.candidate_mrr is None or r.smoke:  # as the STS smoke set: in the card's body, not the model-index
            continue
        values = [_metric("cosine_mrr@10", r.candidate_mrr, "MRR@10 (cosine)")]
        if r.candidate_ndcg is not None:
            values.append(_metric("cosine_ndcg@10", r.candidate_ndcg, "nDCG@10 (cosine)"))
        if r.candidate_recall_100 is not None:
            values.append(_metric("cosine_recall@100", r.candidate_recall_100, "Recall@100 (cosine)"))
        if r.ndcg_retention is not None:
            values.append(_metric("cosine_ndcg@10_retention", r.ndcg_retention, f"nDCG@10 retention {against}"))
        if r.candidate_recall is not None:
            values.append(_metric("cosine_recall@10", r.candidate_recall, "Recall@10 (cosine)"))
        if r.mrr_retention is not None:
            values.append(_metric("cosine_mrr@10_retention", r.mrr_retention, f"MRR@10 retention {against}"))
        results.append(_result(_RETRIEVAL_TASK, r.name, values))
    return [{"name": repo_id, "results": results}] if results else []


def front_matter(facts: ModelFacts, repo_id: str) -> dict:
    library = "model2vec" if facts.static is not None else "sentence-transformers"  # model2vec's own cards say so
    meta: dict[str, Any] = {"library_name": library, "pipeline_tag": "sentence-similarity"}
    if facts.license:
        meta["license"] = facts.license
    if facts.base_model:
        meta["base_model"] = facts.base_model
    meta["tags"] = _tags(facts)
    if facts.matryoshka_dims:
        meta["matryoshka_dimensions"] = facts.matryoshka_dims
    if facts.metrics is not None:
        index = _model_index(repo_id, facts.metrics)
        if index:
            meta["model-index"] = index
    return meta
