"""Static models: a token table, a mean of the rows of a text's tokens, a normalisation; no attention.

The on-disk format is model2vec's own (``StaticModel.save_pretrained``: ``model.safetensors`` with the table,
``tokenizer.json``, ``config.json`` with ``model_type: model2vec``, ``modules.json`` naming sentence-transformers'
``StaticEmbedding``), plus the project's ``espresso.json``. ``model2vec`` (the ``static`` extra) loads and encodes
it; this module only recognises such a folder and states how model2vec tokenises, which the ONNX export and the
torch-free runtime repeat exactly (:func:`tokenizer_facts`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from espresso_export.core.errors import ValidationError
from espresso_export.core.extras import require

STATIC_STUDENT = "static"  # ``distill --student static``: the student is a static model of the teacher
MODEL_TYPE = "model2vec"
TABLE_KEY = "embeddings"  # the table's name in model2vec's model.safetensors


def is_static_folder(path: str | os.PathLike) -> bool:
    """True when ``path`` is a folder holding a static model in model2vec's format."""
    config = Path(path).expanduser() / "config.json"
    if not config.is_file():
        return False
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(data, dict) and data.get("model_type") == MODEL_TYPE


def load_static(path: str | os.PathLike):
    """The ``model2vec.StaticModel`` of a static folder (the ``static`` extra)."""
    require("static")
    from model2vec import StaticModel

    folder = Path(path).expanduser()
    if not is_static_folder(folder):
        raise ValidationError(f"{folder} is not a static model folder (no config.json with model_type "
                              f"{MODEL_TYPE!r})")
    return StaticModel.from_pretrained(folder, force_download=False)


def char_limit(model) -> int | None:
    """How many characters of a text model2vec tokenises: it cuts each text to ``max_length`` times the median
    token length before tokenising (``StaticModel._encode_dispatch``); None without a ``max_length``."""
    return None if model.max_length is None else int(model.max_length) * int(model.median_token_length)


def tokenizer_facts(model) -> dict:
    """How model2vec turns a text into rows, as the export records it for the runtime: no special tokens, the
    text cut to :func:`char_limit` characters, then to ``max_length`` tokens, the unknown token dropped."""
    return {"add_special_tokens": False, "char_limit": char_limit(model),
            "max_length": None if model.max_length is None else int(model.max_length),
            "unk_token_id": model.unk_token_id}


def table(model):
    """The model's table as float32 rows, one per token (model2vec 0.10 saves float16 tables; an int8 table is
    scaled back by the saved weights, as model2vec encodes). Refuses vocabulary-quantised models (a token map)."""
    import numpy as np

    if model.token_mapping is not None:
        raise ValidationError("a vocabulary-quantised static model (a token map) is not supported; distil it "
                              "without vocabulary_quantization")
    rows = np.asarray(model.embedding, dtype=np.float32)
    if model.weights is not None:
        rows = rows * np.asarray(model.weights, dtype=np.float32)[:, None]
    return rows
