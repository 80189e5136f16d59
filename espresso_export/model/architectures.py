"""Per-family facts, as data: where the layer stack lives and what counts layers.

One entry per model family; slicing, training and export read these instead
of special-casing model types in code.
"""

from __future__ import annotations

from dataclasses import dataclass

from espresso_export.core.errors import UnsupportedModelError


@dataclass(frozen=True)
class Architecture:
    family: str
    model_types: tuple[str, ...]
    layers_path: str  # attribute path from the AutoModel to its nn.ModuleList of blocks
    depth_field: str  # config field holding the number of layers
    hidden_field: str = "hidden_size"
    decoder: bool = False  # causal self-attention by default
    final_norm: str | None = None  # a norm applied after the last block, if any
    # per-layer config lists that must be sliced with the layers
    per_layer_fields: tuple[str, ...] = ()


ARCHITECTURES: tuple[Architecture, ...] = (
    Architecture("BERT", ("bert",), "encoder.layer", "num_hidden_layers"),
    Architecture("RoBERTa / XLM-R", ("roberta", "xlm-roberta", "camembert"), "encoder.layer", "num_hidden_layers"),
    Architecture("MPNet", ("mpnet",), "encoder.layer", "num_hidden_layers"),
    Architecture("DistilBERT", ("distilbert",), "transformer.layer", "n_layers", hidden_field="dim"),
    Architecture("ELECTRA", ("electra",), "encoder.layer", "num_hidden_layers"),
    Architecture("DeBERTa-v2/v3", ("deberta-v2",), "encoder.layer", "num_hidden_layers"),
    Architecture("Qwen2", ("qwen2",), "layers", "num_hidden_layers", decoder=True, final_norm="norm",
                 per_layer_fields=("layer_types", "espresso_attention")),
    Architecture("Qwen3", ("qwen3",), "layers", "num_hidden_layers", decoder=True, final_norm="norm",
                 per_layer_fields=("layer_types", "espresso_attention")),
    Architecture("Llama", ("llama",), "layers", "num_hidden_layers", decoder=True, final_norm="norm",
                 per_layer_fields=("layer_types", "espresso_attention")),
    Architecture("Mistral", ("mistral",), "layers", "num_hidden_layers", decoder=True, final_norm="norm",
                 per_layer_fields=("layer_types", "espresso_attention")),
)

_BY_TYPE = {t: a for a in ARCHITECTURES for t in a.model_types}


def supported_model_types() -> list[str]:
    return sorted(_BY_TYPE)


def for_model_type(model_type: str | None) -> Architecture:
    """The registry entry for a config's ``model_type``, or a clear refusal."""
    arch = _BY_TYPE.get(model_type or "")
    if arch is None:
        raise UnsupportedModelError(
            f"unsupported architecture {model_type!r}; supported model types: "
            + ", ".join(supported_model_types())
        )
    return arch


def get_attr_path(obj, path: str):
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def set_attr_path(obj, path: str, value) -> None:
    *parents, last = path.split(".")
    for part in parents:
        obj = getattr(obj, part)
    setattr(obj, last, value)


def depth(config, arch: Architecture) -> int:
    return int(getattr(config, arch.depth_field))


def hidden_size(config, arch: Architecture) -> int:
    return int(getattr(config, arch.hidden_field))
