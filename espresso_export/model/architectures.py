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
    # position ids start after the padding index (RoBERTa, XLM-R, MPNet): pad_token_id + 1 rows are unusable
    padding_offset: bool = False


ARCHITECTURES: tuple[Architecture, ...] = (
    Architecture("BERT", ("bert",), "encoder.layer", "num_hidden_layers"),
    Architecture("RoBERTa / XLM-R", ("roberta", "xlm-roberta", "camembert"), "encoder.layer", "num_hidden_layers",
                 padding_offset=True),
    Architecture("MPNet", ("mpnet",), "encoder.layer", "num_hidden_layers", padding_offset=True),
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
    if arch is None and not model_type:
        raise UnsupportedModelError("config.json has no model_type (a transformers config names its family, e.g. "
                                    "\"model_type\": \"bert\"); supported model types: "
                                    + ", ".join(supported_model_types()))
    if arch is None:
        raise UnsupportedModelError(
            f"unsupported architecture {model_type!r}; supported model types: "
            + ", ".join(supported_model_types())
        )
    return arch


def refuse_custom_code(config: dict, where, *, trust_remote_code: bool, tokenizer_config: dict | None = None) -> None:
    """Refuse a checkpoint that brings its own code (``auto_map`` in ``config.json``) before anything loads it.

    Its ``model_type`` may name a stock family (Jina's BERT says ``bert``) while its code differs (ALiBi,
    a fused stack): loading it as the stock class would silently shrink and export a different model.
    Custom model code is never supported (slicing, export and validation know the stock classes only); a
    custom tokenizer runs only with ``--trust-remote-code``."""
    model_code = {k: v for k, v in (config.get("auto_map") or {}).items() if not k.startswith("AutoTokenizer")}
    tokenizer_code = "AutoTokenizer" in (config.get("auto_map") or {}) or \
        "auto_map" in (tokenizer_config or {})
    if model_code:
        entry = model_code.get("AutoModel") or next(iter(model_code.values()))
        entry = entry[0] if isinstance(entry, (list, tuple)) else entry
        flag = "" if trust_remote_code else "; its code runs only with --trust-remote-code, and even then"
        raise UnsupportedModelError(
            f"{where} is a custom architecture (model_type {config.get('model_type')!r} with its own code, "
            f"auto_map in config.json: {entry}){flag or ':'} custom architectures are not supported; supported "
            "model types: " + ", ".join(supported_model_types()))
    if tokenizer_code and not trust_remote_code:
        raise UnsupportedModelError(f"{where} has a custom tokenizer (auto_map: code from its repository); "
                                    "pass --trust-remote-code to run it")


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


def usable_positions(config, arch: Architecture) -> int | None:
    """How many tokens the model's position table can take (None: no table, e.g. rotary decoders).

    RoBERTa-style models number positions from ``pad_token_id + 1``, so ``max_position_embeddings - pad - 1``
    of them are usable (514 -> 512 for roberta-base); an input longer than this indexes past the table."""
    mpe = _max_positions(config)
    if mpe is None or arch.decoder:
        return None
    if arch.padding_offset:
        return mpe - int(getattr(config, "pad_token_id", None) or 0) - 1
    return mpe


def default_max_length(tokenizer, config, arch: Architecture, declared: int | None = None) -> int | None:
    """The longest input to tokenize to when the user gives none.

    ``declared`` is ``max_seq_length`` from ``sentence_bert_config.json``. Without it, sentence-transformers'
    rule (``Transformer.__init__``): the tokenizer's ``model_max_length`` capped at ``max_position_embeddings``.
    Either is then capped at :func:`usable_positions`, the positions the model can really take."""
    if declared:
        values = [int(declared)]
    else:
        tok_max = getattr(tokenizer, "model_max_length", None)
        tok_max = int(tok_max) if tok_max and int(tok_max) < 1_000_000 else None  # transformers' "no limit"
        values = [v for v in (tok_max, _max_positions(config)) if v]
    limit = usable_positions(config, arch)
    values += [limit] if limit else []
    return min(values) if values else None


def _max_positions(config) -> int | None:
    mpe = getattr(config, "max_position_embeddings", None)
    return int(mpe) if isinstance(mpe, int) and mpe > 0 else None  # xlnet-style -1: no limit
