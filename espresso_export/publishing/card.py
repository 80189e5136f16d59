"""The Hub model card: facts read from a model folder, rendered as README.md.

Everything is read without torch (:mod:`espresso_export.publishing.facts`: the folder,
:mod:`espresso_export.publishing.report_metrics`: a ``verify`` report). :func:`render_card` turns the
facts into YAML front matter (``library_name``, ``base_model``, ``pipeline_tag``, tags, ``model-index``;
:mod:`espresso_export.publishing.front_matter`) and a Markdown body: lineage, the verification tables,
usage for sentence-transformers, plain transformers and the ONNX runtime (model2vec, sentence-transformers
and the ONNX runtime for a static model), the vectors' widths and precisions,
intended use and limitations (:mod:`espresso_export.publishing.card_sections`,
:mod:`espresso_export.publishing.usage`, :mod:`espresso_export.publishing.vectors_section`).
"""

from __future__ import annotations

from espresso_export.publishing.card_sections import (
    intended_use_section, matryoshka_section, summary_table, verification_section,
)
from espresso_export.publishing.facts import ModelFacts
from espresso_export.publishing.front_matter import front_matter
from espresso_export.publishing.lineage_section import lineage_section
from espresso_export.publishing.model_ids import display_id
from espresso_export.publishing.usage import usage_section
from espresso_export.publishing.vectors_section import vectors_section


def render_card(facts: ModelFacts, repo_id: str) -> str:
    """The README.md for ``repo_id``: YAML front matter and Markdown body."""
    import yaml

    meta = yaml.safe_dump(front_matter(facts, repo_id), sort_keys=False, allow_unicode=True, width=1000)
    name = repo_id.split("/", 1)[1]
    origin = f"derived from {display_id(facts.source_id)}" if facts.source_id else "published"
    lines = ["---", meta.rstrip(), "---", "", f"# {name}", "", _opening(facts, origin), ""]
    lines += summary_table(facts)
    lines += lineage_section(facts)
    lines += verification_section(facts)
    lines += usage_section(facts, repo_id)
    lines += matryoshka_section(facts)
    lines += vectors_section(facts, repo_id)
    lines += intended_use_section(facts)
    return "\n".join(lines).rstrip() + "\n"


def _opening(facts: ModelFacts, origin: str) -> str:
    if facts.static is not None:
        healed = (f", healed on {facts.static.healed_on:,} texts against the source's vectors" if facts.static.healed
                  and facts.static.healed_on else "")
        return (f"A static sentence-embedding model ({facts.output_dim or '?'}-d embeddings): a token table in "
                f"[model2vec](https://github.com/MinishLab/model2vec)'s format, {origin} with espresso-export{healed}. "
                "No attention: a text's vector is the normalised mean of its tokens' rows.")
    return (f"A compact sentence-embedding model ({facts.layers if facts.layers is not None else '?'} layers, "
            f"{facts.output_dim or '?'}-d embeddings) {origin} with espresso-export.")
