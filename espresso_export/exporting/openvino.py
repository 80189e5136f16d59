"""``export --format onnx,openvino``: OpenVINO IR of the validated ONNX graph, and its int8 form.

::

    OUT/openvino/openvino_model.xml (+ .bin)                  fp32: the ONNX graph as OpenVINO reads it
    OUT/openvino/openvino_model_qint8_quantized.xml (+ .bin)  int8 weights (--quantize int8)

The names are the ones sentence-transformers' ``backend="openvino"`` looks for (its default file, and the name
of its own int8 export); both files keep the ONNX graph's outputs (``sentence_embedding``, ``last_hidden_state``).

The int8 file is NNCF's weight compression (``nncf.compress_weights``, 8-bit asymmetric, one scale per output
channel); OpenVINO's CPU plugin quantises each MatMul's activations at run time in groups of
``DYNAMIC_QUANTIZATION_GROUP_SIZE`` values of a token. The group size is written into the file (``rt_info``
``runtime_options``), so every OpenVINO loader uses it: the largest of :data:`GROUP_SIZES` whose int8
embeddings of the calibration sentences stay within the calibration target of the fp32 graph's (larger groups
are faster and less faithful). A group never spans two tokens, so a text's vector does not depend on its batch.

Hand-written here: only the choice of the group size; the conversion is OpenVINO's, the compression NNCF's.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

import numpy as np

from espresso_export.core.errors import RuntimeFailure

log = logging.getLogger(__name__)

OPENVINO_DIR = "openvino"
FP32_FILE = f"{OPENVINO_DIR}/openvino_model.xml"
INT8_FILE = f"{OPENVINO_DIR}/openvino_model_qint8_quantized.xml"
GROUP_SIZES = (128, 64, 32)  # fastest first; OpenVINO's CPU default is 32
GROUP_OPTION = "DYNAMIC_QUANTIZATION_GROUP_SIZE"


def _save(model, path: Path) -> None:
    import openvino as ov

    path.parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(model, str(path), compress_to_fp16=False)  # fp16 storage would change the fp32 file's weights


def _embeddings(model, feeds: list[dict], group: int | None = None) -> np.ndarray:
    from espresso_export.runtime.openvino_session import compile_openvino
    from espresso_export.runtime import EMBEDDING_OUTPUT

    compiled = compile_openvino(model, {} if group is None else {GROUP_OPTION: group})
    request = compiled.create_infer_request()
    names = {i.get_any_name() for i in compiled.inputs}
    out = compiled.output(EMBEDDING_OUTPUT)
    return np.concatenate([request.infer({k: v for k, v in f.items() if k in names})[out] for f in feeds])


def write_openvino(folder: Path, onnx_fp32: Path, feeds: list[dict], *, int8: bool, target: float) -> list[dict]:
    """Write the OpenVINO files of ``onnx_fp32`` into ``folder``; returns their export.json entries."""
    import openvino as ov  # after require("openvino-export"), which keeps their usage reports off

    from espresso_export.core.metrics import cosine_rows

    core = ov.Core()
    try:
        model = core.read_model(str(onnx_fp32))
    except RuntimeError as e:  # OpenVINO raises RuntimeError for any graph it cannot convert
        raise RuntimeFailure(f"OpenVINO cannot read {onnx_fp32.name}: {str(e).splitlines()[0]}") from e
    _save(model, folder / FP32_FILE)
    files = [{"file": FP32_FILE, "quantization": "none", "optimization": "none", "runtime": "openvino"}]
    if not int8:
        return files
    import nncf

    nncf.set_log_level(logging.ERROR)  # its tables and progress bars would interleave with the export's own
    with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):  # a fresh read: NNCF edits its input
        compressed = nncf.compress_weights(core.read_model(str(onnx_fp32)), mode=nncf.CompressWeightsMode.INT8_ASYM)
    reference = _embeddings(model, feeds) if feeds else None
    tried: dict[int, float] = {}
    group = GROUP_SIZES[-1]  # without calibration sentences, OpenVINO's own default
    for size in GROUP_SIZES if feeds else ():
        tried[size] = round(float(cosine_rows(_embeddings(compressed, feeds, size), reference).min()), 5)
        log.info("openvino int8, activation groups of %d: calibration min cosine %.4f", size, tried[size])
        if tried[size] >= target:
            group = size
            break
    compressed.set_rt_info(str(group), ["runtime_options", GROUP_OPTION])
    _save(compressed, folder / INT8_FILE)
    files.append({
        "file": INT8_FILE, "quantization": "int8", "optimization": "none", "runtime": "openvino",
        "int8": {
            "scheme": "openvino",
            "method": "NNCF weight compression (int8 asymmetric, per output channel) + OpenVINO's dynamic "
                      f"activation quantisation in groups of {group} values of a token (set in the file)",
            "weight_bits": 8, "activation": f"int8, dynamic, groups of {group} per token",
            "group_size": group, "calibration_min_cosine": tried, "calibration_target": target,
            "calibration_sentences": sum(len(next(iter(f.values()))) for f in feeds),
        },
    })
    return files
