"""The model folder's files: the backbone, the sentence-transformers module chain and the provenance record.

An output is a standard sentence-transformers folder with the transformer at its root (``config.json``,
``model.safetensors``, tokenizer files, ``modules.json``, ``1_Pooling/``, the head's Dense/Normalize folders and
``espresso.json``), so ``SentenceTransformer(OUT)`` and ``AutoModel.from_pretrained(OUT)`` both load it without
this package. It is written into the temp folder :func:`espresso_export.core.files.atomic_output` gives.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from espresso_export.core.files import write_json
from espresso_export.core.types import Pooling
from espresso_export.model.checkpoint import (
    PROVENANCE_FILE,
    Checkpoint,
    DenseLayer,
    Normalize,
    PostModule,
)
from espresso_export.model.tokenizer_state import settle_tokenizer

ST_TYPES = {
    "Transformer": "sentence_transformers.models.Transformer",
    "Pooling": "sentence_transformers.models.Pooling",
    "Dense": "sentence_transformers.models.Dense",
    "Normalize": "sentence_transformers.models.Normalize",
}


def pooling_config(dim: int, mode: Pooling, *, include_prompt: bool = True) -> dict:
    """Pooling config in the key style every sentence-transformers release reads."""
    return {
        "word_embedding_dimension": dim,
        "pooling_mode_cls_token": mode is Pooling.CLS,
        "pooling_mode_mean_tokens": mode is Pooling.MEAN,
        "pooling_mode_max_tokens": mode is Pooling.MAX,
        "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": mode is Pooling.LAST_TOKEN,
        "include_prompt": include_prompt,
    }


def save_dense(layer: DenseLayer, folder: Path) -> None:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / "config.json", {
        "in_features": layer.in_features,
        "out_features": layer.out_features,
        "bias": layer.bias is not None,
        "activation_function": layer.activation,
    })
    tensors = {"linear.weight": layer.weight.detach().float().contiguous()}
    if layer.bias is not None:
        tensors["linear.bias"] = layer.bias.detach().float().contiguous()
    save_file(tensors, str(folder / "model.safetensors"))


def save_checkpoint(ckpt: Checkpoint, folder: Path, *, post: Sequence[PostModule], provenance: dict) -> None:
    """Write ``ckpt`` (backbone + tokenizer) with the given post modules as a sentence-transformers folder."""
    ckpt.model.save_pretrained(str(folder), safe_serialization=True)
    settle_tokenizer(ckpt)
    ckpt.tokenizer.save_pretrained(str(folder))
    save_st_modules(ckpt, folder, post=post)
    write_json(folder / PROVENANCE_FILE, provenance)


def save_st_modules(ckpt: Checkpoint, folder: Path, *, post: Sequence[PostModule]) -> None:
    """The sentence-transformers files around the backbone: module chain, Pooling, Dense and Normalize."""
    import torch
    import transformers

    write_json(folder / "sentence_bert_config.json", {
        "max_seq_length": ckpt.max_seq_length,
        "do_lower_case": ckpt.do_lower_case,
    })
    write_json(folder / "config_sentence_transformers.json", {  # the source's prompts and similarity, kept
        "__version__": {"transformers": transformers.__version__, "pytorch": torch.__version__},
        **ckpt.usage.to_config(),
    })
    modules = [{"idx": 0, "name": "0", "path": "", "type": ST_TYPES["Transformer"]}]
    pool_dir = folder / "1_Pooling"
    pool_dir.mkdir()
    write_json(pool_dir / "config.json", pooling_config(ckpt.hidden_size, ckpt.pooling,
                                                       include_prompt=ckpt.usage.include_prompt))
    modules.append({"idx": 1, "name": "1", "path": "1_Pooling", "type": ST_TYPES["Pooling"]})
    for idx, module in enumerate(post, start=2):
        kind = "Dense" if isinstance(module, DenseLayer) else "Normalize"
        name = f"{idx}_{kind}"
        if isinstance(module, DenseLayer):
            save_dense(module, folder / name)
        else:
            (folder / name).mkdir()
        modules.append({"idx": idx, "name": str(idx), "path": name, "type": ST_TYPES[kind]})
    write_json(folder / "modules.json", modules)


__all__ = ["Normalize", "pooling_config", "save_checkpoint", "save_dense", "save_st_modules"]
