"""``export`` of a static model folder (:mod:`espresso_export.model.static`): a self-contained ONNX graph.

The graph takes ``input_ids`` and ``attention_mask`` (int64, ``(batch, tokens)``) and outputs
``sentence_embedding``: the rows of the tokens gathered from the table, the unknown token and padding masked out,
summed, and L2-normalised (the mean model2vec takes has the same direction). ``--quantize int8`` stores the table
as int8 with one float scale per row, dequantised in the graph; ``fp16`` stores it in float16, cast up after the
gather. The tokeniser is model2vec's own ``tokenizer.json``; ``export.json`` tells :class:`OnnxEncoder` to add no
special tokens and to cut each text to model2vec's character limit first, so it reads a text as model2vec does.
Each file is checked against model2vec's own vectors before the folder is renamed into place.

``--dims`` declares nested widths and stores int8/uint8 ranges for each, as for any model. They are exact for a
table a PCA reduced (``config.json`` ``apply_pca``: model2vec's PCA of the token rows, or the PCA of the healed
sentence vectors ``distill --student static`` ends with): a text's vector is a weighted sum of rows, so its first k
coordinates are those of the k-d model's. A table without a PCA gets the hint to check each width with ``verify``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from espresso_export import __version__
from espresso_export.core.errors import GateFailedError
from espresso_export.core.files import atomic_output, check_output, write_json
from espresso_export.core.types import Optimize, Quantize
from espresso_export.exporting.export_folder import ONNX_DIR, onnx_file_name
from espresso_export.exporting.export_settings import ExportSettings
from espresso_export.exporting.validate import MIN_COSINE
from espresso_export.exporting.vectors import calibration_sentences, nested_widths, vector_calibration
from espresso_export.model.checkpoint import PROVENANCE_FILE
from espresso_export.model.static import load_static, table, tokenizer_facts
from espresso_export.runtime import EXPORT_FILE, TOKENIZER_FILE, OnnxEncoder, graph_bytes

OPSET = 17
EMBEDDING_OUTPUT = "sentence_embedding"
NO_CHAR_LIMIT = 1_000_000  # max_seq_length recorded for a model without max_length (model2vec's seq_length)


def _table_nodes(rows: np.ndarray, quantize: Quantize) -> tuple[list, list]:
    """Initialisers and nodes that turn ``input_ids`` into float32 rows ``rows_f`` (batch, tokens, dim)."""
    from onnx import TensorProto, helper, numpy_helper

    if quantize is Quantize.INT8:
        scale = np.maximum(np.abs(rows).max(axis=1), 1e-12) / 127.0
        codes = np.clip(np.rint(rows / scale[:, None]), -127, 127).astype(np.int8)
        inits = [numpy_helper.from_array(codes, "table_int8"),
                 numpy_helper.from_array(scale.astype(np.float32), "table_scale")]
        nodes = [helper.make_node("Gather", ["table_int8", "input_ids"], ["codes"]),
                 helper.make_node("Cast", ["codes"], ["codes_f"], to=TensorProto.FLOAT),
                 helper.make_node("Gather", ["table_scale", "input_ids"], ["scales"]),
                 helper.make_node("Unsqueeze", ["scales", "last_axis"], ["scales_3d"]),
                 helper.make_node("Mul", ["codes_f", "scales_3d"], ["rows_f"])]
        return inits, nodes
    if quantize is Quantize.FP16:
        inits = [numpy_helper.from_array(rows.astype(np.float16), "table_fp16")]
        nodes = [helper.make_node("Gather", ["table_fp16", "input_ids"], ["rows_h"]),
                 helper.make_node("Cast", ["rows_h"], ["rows_f"], to=TensorProto.FLOAT)]
        return inits, nodes
    return [numpy_helper.from_array(rows.astype(np.float32), "table")], [
        helper.make_node("Gather", ["table", "input_ids"], ["rows_f"])]


def static_graph(rows: np.ndarray, unk_token_id: int | None, quantize: Quantize = Quantize.NONE):
    """The ONNX model of a static table (see the module docstring)."""
    from onnx import TensorProto, helper, numpy_helper

    inits, table_nodes = _table_nodes(np.asarray(rows, dtype=np.float32), quantize)
    inits += [numpy_helper.from_array(np.array([-1], dtype=np.int64), "last_axis"),
              numpy_helper.from_array(np.array([1], dtype=np.int64), "token_axis"),
              numpy_helper.from_array(np.array(-1 if unk_token_id is None else unk_token_id, dtype=np.int64), "unk"),
              numpy_helper.from_array(np.array(1e-12, dtype=np.float32), "eps")]
    nodes = table_nodes + [
        helper.make_node("Equal", ["input_ids", "unk"], ["is_unk"]),
        helper.make_node("Not", ["is_unk"], ["known"]),
        helper.make_node("Cast", ["known"], ["known_f"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["mask_f", "known_f"], ["keep"]),
        helper.make_node("Unsqueeze", ["keep", "last_axis"], ["keep_3d"]),
        helper.make_node("Mul", ["rows_f", "keep_3d"], ["kept"]),
        helper.make_node("ReduceSum", ["kept", "token_axis"], ["summed"], keepdims=0),
        helper.make_node("ReduceL2", ["summed"], ["norm"], axes=[1], keepdims=1),
        helper.make_node("Add", ["norm", "eps"], ["norm_eps"]),
        helper.make_node("Div", ["summed", "norm_eps"], [EMBEDDING_OUTPUT]),
    ]
    dim = int(rows.shape[1])
    graph = helper.make_graph(
        nodes, "static_embedding",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "tokens"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "tokens"])],
        [helper.make_tensor_value_info(EMBEDDING_OUTPUT, TensorProto.FLOAT, ["batch", dim])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="espresso-export", producer_version=__version__)
    model.ir_version = min(model.ir_version, 9)  # onnxruntime releases of 2024 read IR 9
    return model


def _manifest(folder: Path, model, files: list[dict], widths: list[int]) -> dict:
    facts = tokenizer_facts(model)
    provenance = None
    if (folder / PROVENANCE_FILE).is_file():
        provenance = json.loads((folder / PROVENANCE_FILE).read_text(encoding="utf-8"))
    tok = model.tokenizer
    pad = tok.padding["pad_id"] if tok.padding else 0
    return {
        "format_version": 2, "espresso_version": __version__,
        "architecture": {"family": "static", "model_type": "model2vec"},
        "dims": {"hidden": int(model.dim), "embedding": int(model.dim)}, "pooling": "mean", "post": [],
        "normalize": True, "similarity_fn_name": "cosine", "include_prompt": True,
        "max_seq_length": facts["max_length"] or NO_CHAR_LIMIT, "do_lower_case": False,
        "tokenizer": {"file": TOKENIZER_FILE, "pad_token_id": int(pad or 0), "padding_side": "right",
                      "add_special_tokens": False, "char_limit": facts["char_limit"]},
        "inputs": ["input_ids", "attention_mask"], "outputs": [EMBEDDING_OUTPUT], "opset": OPSET,
        "exporter": "static", "static_reshapes": False,
        "default_file": _default_file(files), "files": files, "nested_widths": widths,
        "validated": all(f.get("validation", {}).get("passed") for f in files),
        "source": {"id": str(folder), "path": str(folder)}, "provenance": provenance,
    }


def width_hints(model, widths: list[int]) -> list[str]:
    """What the summary says about declared widths of a static table: nothing when a PCA reduced it (its first k
    columns are the PCA at k, so a truncated vector is the k-d model's), a ``verify --dims`` hint otherwise."""
    if len(widths) < 2 or (model.config or {}).get("apply_pca") not in (None, False):
        return []
    dims = ",".join(map(str, widths[1:]))
    return [(f"note: --dims {dims}: the static table was not reduced by a PCA (config.json apply_pca is null), so "
             "its leading dimensions were not fitted to stand alone: check each width with `espresso-export verify "
             f"EXPORT --against SOURCE --dims {dims}`")]


def _default_file(files: list[dict]) -> str:
    """The smallest file: for a table, int8 and fp16 cost nothing in speed (a gather is a gather)."""
    return min(files, key=lambda f: f.get("bytes", 0))["file"]


def _validate(tmp: Path, files: list[dict], reference: np.ndarray, texts: list[str], settings: ExportSettings) -> None:
    failed = []
    for f in files:
        need = settings.min_cosine.get(f["quantization"], MIN_COSINE[Quantize(f["quantization"])])
        got = OnnxEncoder(tmp, f["file"]).encode(texts)
        cos = (got * reference).sum(axis=1)
        live = np.linalg.norm(reference, axis=1) > 0  # an empty text is the zero vector in both
        low = float(cos[live].min()) if live.any() else 1.0
        f["validation"] = {"passed": low >= need, "min_cosine": round(low, 6), "texts": len(texts),
                           "max_abs_diff": float(np.abs(got - reference).max()) if len(texts) else 0.0,
                           "thresholds": {"min_cosine": need}, "against": "model2vec StaticModel.encode"}
        if low < need:
            failed.append(f"{f['file']}: min cosine {low:.5f} < {need}")
    if failed:
        raise GateFailedError(f"export validation failed, nothing written ({'; '.join(failed)})")


def export_static(folder: str | Path, output: str | Path, settings: ExportSettings):
    """Write the export folder of the static model in ``folder``; returns an ``ExportResult``."""
    from espresso_export.exporting.export import ExportResult

    start = time.perf_counter()
    folder = Path(folder).expanduser().resolve()
    check_output(output, overwrite=settings.overwrite, inputs=[folder])
    model = load_static(folder)
    rows = table(model)
    widths = nested_widths(int(model.dim), settings.dims)
    result = ExportResult(output=Path(output).expanduser().resolve(), source=str(folder), formats=["onnx"],
                          dim=int(model.dim), pooling="mean", max_seq_length=int(model.max_length or 0))
    result.hints += width_hints(model, widths)
    if settings.optimize.value != "none" or settings.openvino or settings.safetensors:
        result.hints.append("note: a static model exports one ONNX graph: --optimize, openvino and safetensors "
                            "do not apply (the model folder is already model2vec's safetensors)")
    texts = calibration_sentences(settings.calibration_samples)
    reference = np.asarray(model.encode(texts), dtype=np.float32)
    with atomic_output(output, overwrite=settings.overwrite, inputs=[folder]) as tmp:
        _write_files(tmp, folder, model, rows, settings, widths, result, reference, texts)
    result.seconds = time.perf_counter() - start
    return result


def _write_files(tmp: Path, folder: Path, model, rows, settings: ExportSettings, widths, result, reference,
                 texts) -> None:
    import onnx

    (tmp / ONNX_DIR).mkdir()
    model.tokenizer.save(str(tmp / TOKENIZER_FILE))
    files = []
    for q in dict.fromkeys([Quantize.NONE, settings.quantize]):
        name = onnx_file_name(q, Optimize.NONE)
        onnx.save(static_graph(rows, model.unk_token_id, q), str(tmp / name))
        files.append({"file": name, "quantization": q.value, "optimization": "none", "external_data": False,
                      "bytes": graph_bytes(tmp / name)})
    write_json(tmp / EXPORT_FILE, _manifest(folder, model, files, widths))
    if settings.validate:
        _validate(tmp, files, reference, texts, settings)
    else:
        result.hints.append("warning: --no-validate: the ONNX files were not compared with model2vec's vectors")
    manifest = _manifest(folder, model, files, widths)
    manifest["validated"] = settings.validate and manifest["validated"]
    manifest["vector_calibration"] = vector_calibration(tmp, manifest["default_file"], widths)
    write_json(tmp / EXPORT_FILE, manifest)
    result.files, result.default_file, result.validated = files, manifest["default_file"], manifest["validated"]
    result.nested_widths = widths
