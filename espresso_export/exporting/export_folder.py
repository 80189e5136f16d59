"""The export folder's layout: one folder that every common runtime loads as it is.

::

    OUT/
      onnx/model.onnx              fp32                     (sentence-transformers, optimum, TEI, transformers.js fp32)
      onnx/model_quantized.onnx    our int8 (--quantize int8; transformers.js "q8", its CPU/wasm default)
      onnx/model_fp16.onnx         fp16 (--quantize fp16; transformers.js "fp16")
      onnx/model[_quantized]_O2.onnx   graph-optimised variants (--optimize)
      openvino/openvino_model.xml, openvino/openvino_model_qint8_quantized.xml
                                   OpenVINO IR (--format onnx,openvino; exporting/openvino.py)
      config.json                  hidden_size, num_hidden_layers (TEI, optimum, transformers.js);
                                   matryoshka_dimensions with --dims (vLLM)
      tokenizer.json, tokenizer_config.json (model_max_length = the export's maximum length)
      modules.json, sentence_bert_config.json, config_sentence_transformers.json,
      1_Pooling/, 2_Dense/, 3_Normalize/   the sentence-transformers modules (pooling and head)
      export.json                  what espresso-export wrote and checked (OnnxEncoder reads it), with the nested
                                   widths and the vectors' int8 ranges per width (exporting/vectors.py)

Every graph has the same outputs, in this order:

* ``sentence_embedding`` - the final vector (pooling, head, L2 norm inside the graph). fastembed takes the
  first output; TEI uses an output of this name when present; ``OnnxEncoder`` reads it.
* ``last_hidden_state`` - the encoder's token embeddings. optimum's ``ORTModelForFeatureExtraction`` (and so
  sentence-transformers' ``backend="onnx"``) and the transformers.js feature-extraction pipeline read this
  name and pool it themselves with the folder's own modules.

and its inputs are exactly what the model's tokenizer returns (see :func:`.graph.graph_inputs`).

The names are the ones those libraries look for (sentence-transformers ``backend="onnx"`` globs
``onnx/model*.onnx``; transformers.js maps ``dtype`` to ``onnx/model{,_quantized,_fp16}.onnx``), so nothing
is converted at load time. Export folders written before this layout (``model.onnx``, ``model_int8.onnx`` at
the top, output ``token_embeddings``) still load in ``OnnxEncoder``: it reads the names from ``export.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

from espresso_export.core.types import Optimize, Quantize
from espresso_export.model.checkpoint import Checkpoint
from espresso_export.core.files import write_json
from espresso_export.model.save import save_st_modules
from espresso_export.runtime import TOKENIZER_FILE

ONNX_DIR = "onnx"
LAYOUT_VERSION = 2  # 1: model*.onnx at the top, outputs sentence_embedding + token_embeddings
_PRECISION_SUFFIX = {Quantize.NONE: "", Quantize.INT8: "_quantized", Quantize.FP16: "_fp16"}
TOKENIZER_CONFIG = "tokenizer_config.json"


def onnx_file_name(quantize: Quantize, optimize: Optimize) -> str:
    """``onnx/model[_quantized|_fp16][_O1|_O2|_O3].onnx``, relative to the export folder."""
    level = "" if optimize is Optimize.NONE else f"_{optimize.value}"
    return f"{ONNX_DIR}/model{_PRECISION_SUFFIX[quantize]}{level}.onnx"


BASE_FILE = onnx_file_name(Quantize.NONE, Optimize.NONE)


def write_loader_files(ckpt: Checkpoint, folder: Path, *, modules_written: bool) -> None:
    """The files beside the graphs that the runtimes read: tokenizer, config and the sentence-transformers
    modules (unless the safetensors folder already wrote them), with ``model_max_length`` set."""
    (folder / ONNX_DIR).mkdir(exist_ok=True)
    if not modules_written:
        ckpt.tokenizer.save_pretrained(str(folder))
        ckpt.config.save_pretrained(str(folder))
        save_st_modules(ckpt, folder, post=ckpt.post)
    _set_model_max_length(folder / TOKENIZER_CONFIG, ckpt.max_seq_length)


def _set_model_max_length(path: Path, length: int | None) -> None:
    """fastembed and transformers.js truncate at ``model_max_length`` (fastembed at ``max_length`` when that is
    smaller: transformers 5 writes the tokenizer file's own truncation there): make both the export's length."""
    if not length:
        return
    config = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    config["model_max_length"] = int(length)
    if "max_length" in config:
        config["max_length"] = int(length)
    write_json(path, config)


def loader_files_present(folder: Path) -> list[str]:
    """The layout's files missing from ``folder`` (empty when complete)."""
    needed = [BASE_FILE, "config.json", TOKENIZER_FILE, TOKENIZER_CONFIG, "modules.json"]
    return [name for name in needed if not (folder / name).is_file()]
