"""Which int8 scheme an export writes, picked per CPU, and the fused dynamic scheme.

Two schemes, both with int8 embedding tables (:func:`.quantize.quantize_tables`) and pooling and the head in fp32:

``dynamic`` (``auto`` picks it where it passes its calibration check; opt-in: ``per-token`` is the default)
    onnxruntime's own ``quantize_dynamic``: per-channel int8 weights and one uint8 range per activation
    tensor, computed at run time and fused into one kernel per MatMul when the session loads. Weights use all
    8 bits where the CPU has VNNI (32-bit accumulation) and 7 bits (``reduce_range``) elsewhere, where AVX2's
    16-bit pair sums would saturate. MatMuls whose simulated error is largest stay fp32, one at a time, until
    the calibration sentences' embeddings are within :data:`CALIBRATION_MIN_COSINE` of the fp32 graph's. Its
    range covers the whole batch, so a text's vector depends on the other texts of its batch: why it is not
    the default.
``per-token``
    the scheme of :mod:`.quantize` (SmoothQuant, one uint8 range per token): the most faithful, and the
    slower one at large batches. ``auto`` uses it when ``dynamic`` cannot reach the calibration target within
    :data:`MAX_FALLBACK` fp32 MatMuls.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from espresso_export.core.errors import RuntimeFailure

log = logging.getLogger(__name__)

SCHEMES = ("auto", "dynamic", "per-token")
CALIBRATION_MIN_COSINE = 0.993  # a margin over the export gate's 0.99: validation runs other sentences
MAX_FALLBACK = 4  # fp32 MatMuls the dynamic scheme may keep before auto switches to per-token
VNNI_FLAGS = ("avx512_vnni", "avx_vnni")


def has_vnni(cpu: dict) -> bool:
    """True when ``cpu`` (:func:`espresso_export.core.cpu.int8_isa`) has 32-bit int8 dot products."""
    return any(cpu.get("flags", {}).get(f) for f in VNNI_FLAGS) or cpu.get("machine") in ("aarch64", "arm64")


def write_int8(src: Path, dst: Path, feeds: list[dict], *, scheme: str, alpha: float, external_threshold: int,
               cpu: dict, calibration_min_cosine: float = CALIBRATION_MIN_COSINE, portable: bool = False) -> dict:
    """Write the int8 variant of ``src`` with ``scheme`` (``auto`` picks); returns its export.json record.

    ``portable``: 7-bit weights whatever ``cpu`` has. A file with 8-bit weights is exact only where int8 products
    accumulate in 32 bits (VNNI); onnxruntime's AVX2 and wasm kernels saturate on it, and an exported file is
    served on other machines."""
    from espresso_export.exporting.int8_calibration import WEIGHT_MAX, WEIGHT_MAX_VNNI
    from espresso_export.exporting.quantize import quantize_int8

    vnni = has_vnni(cpu) and not portable
    if scheme in ("auto", "dynamic"):
        report = quantize_dynamic_fused(src, dst, feeds, reduce_range=not vnni, external_threshold=external_threshold,
                                        target=calibration_min_cosine, required=scheme == "dynamic")
        if report is not None:
            return report | {"picked_for_cpu": cpu.get("isa"), "portable": portable}
    report = quantize_int8(src, dst, feeds, alpha=alpha, external_threshold=external_threshold,
                           weight_max=WEIGHT_MAX_VNNI if vnni else WEIGHT_MAX).to_dict()
    if scheme == "auto":
        report["why"] = (f"the dynamic scheme stayed under {calibration_min_cosine} min cosine on the calibration "
                         f"sentences with {MAX_FALLBACK} MatMuls in fp32")
    return report | {"picked_for_cpu": cpu.get("isa"), "portable": portable}


def _ranked_matmuls(proto, feeds: list[dict], scratch: Path, reduce_range: bool) -> tuple[set[str], list[str], dict]:
    """Head nodes, weight MatMuls ranked by simulated error (worst first) and the errors."""
    from espresso_export.exporting.int8_calibration import (
        activation_ranges,
        matmul_errors,
    )
    from espresso_export.exporting.onnx_edit import GraphEditor, head_nodes

    g = GraphEditor(proto)
    head = head_nodes(g.graph)
    groups = g.weight_matmuls(exclude=head)
    if not groups or not feeds:
        return head, [], {}
    _, samples = activation_ranges(proto, list(groups), feeds, scratch)
    errors = matmul_errors(g, groups, samples, {}, 63 if reduce_range else 127, per_token=False)
    return head, sorted(errors, key=errors.get, reverse=True), errors


def quantize_dynamic_fused(src: Path, dst: Path, feeds: list[dict], *, reduce_range: bool, external_threshold: int,
                           target: float = CALIBRATION_MIN_COSINE, required: bool = False) -> dict | None:
    """The ``dynamic`` scheme (module docstring); None when it misses the calibration target (unless required)."""
    import onnx

    from espresso_export.core.metrics import cosine_rows
    from espresso_export.exporting.graph import load_model, needs_external_data
    from espresso_export.exporting.onnx_edit import GraphEditor
    from espresso_export.exporting.quantize import quantize_tables

    proto = load_model(src)
    head, ranked, errors = _ranked_matmuls(proto, feeds, dst.parent, reduce_range)
    g = GraphEditor(proto)
    tables = quantize_tables(g, exclude=head)
    g.drop_unused_initializers()
    external = needs_external_data(proto, external_threshold)
    reference = _embeddings(src, feeds)
    for k in range(min(MAX_FALLBACK, len(ranked)) + 1):
        copy = onnx.ModelProto()
        copy.CopyFrom(proto)
        _quantize_dynamic(copy, dst, [*head, *ranked[:k]], reduce_range, external)
        cosine = float(cosine_rows(reference, _embeddings(dst, feeds)).min()) if feeds else 1.0
        log.info("int8 dynamic, %d MatMuls fp32: calibration min cosine %.4f", k, cosine)
        if cosine >= target or (required and k == min(MAX_FALLBACK, len(ranked))):
            return {
                "scheme": "dynamic",
                "method": f"onnxruntime quantize_dynamic: per-channel int{7 if reduce_range else 8} weights, uint8 "
                          "activations with one range per tensor at run time (fused DynamicQuantizeMatMul), int8 "
                          "embedding tables (per column, then per row)",
                "matmuls_quantized": len(ranked) - k, "embedding_tables_quantized": tables,
                "kept_fp32": sorted(n.name for n in proto.graph.node if n.op_type in ("MatMul", "Gemm") and n.name in head),
                "fp32_fallback": ranked[:k],
                "simulated_matmul_error": {n: round(errors[n], 5) for n in ranked},
                "weight_bits": 7 if reduce_range else 8, "reduce_range": reduce_range,
                "activation": "uint8, per tensor, dynamic",
                "calibration_min_cosine": round(cosine, 5), "calibration_target": target,
                "calibration_sentences": sum(len(next(iter(f.values()))) for f in feeds),
            }
    for f in dst.parent.glob(dst.name + "*"):
        f.unlink()
    return None


def _quantize_dynamic(proto, dst: Path, exclude: list[str], reduce_range: bool, external: bool) -> None:
    from onnx import TensorProto
    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # the quantizer warns on the root logger about pre-processing on every call
    try:
        quantize_dynamic(proto, dst, per_channel=True, reduce_range=reduce_range, weight_type=QuantType.QInt8,
                         op_types_to_quantize=["MatMul"], nodes_to_exclude=exclude, use_external_data_format=external,
                         extra_options={"MatMulConstBOnly": True, "DefaultTensorType": TensorProto.FLOAT})
    except Exception as e:  # onnxruntime's quantizer raises assorted errors on graphs it does not understand
        raise RuntimeFailure(f"int8 quantisation of {dst.name} failed: {e.__class__.__name__}: {e}") from e
    finally:
        root.setLevel(level)


def _embeddings(path: Path, feeds: list[dict]) -> np.ndarray:
    import onnxruntime as ort

    from espresso_export.runtime import EMBEDDING_OUTPUT

    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    out = [session.run([EMBEDDING_OUTPUT], {k: v for k, v in f.items() if k in names})[0] for f in feeds]
    return np.concatenate(out) if out else np.zeros((0, 1), np.float32)

