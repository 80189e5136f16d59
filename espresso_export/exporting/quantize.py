"""int8 and fp16 variants of an exported graph: the ``per-token`` int8 scheme.

onnxruntime's ``quantize_dynamic`` gives a whole batch one activation range, which a few outlier tokens and
channels stretch until most values share a handful of int8 steps. This scheme keeps onnxruntime's integer kernel
(``MatMulIntegerToFloat``, which takes a scale per token) and changes what is scaled:

1. SmoothQuant (:func:`.int8_calibration.smooth`) moves outlier input channels into the weights;
2. each token gets its own uint8 scale and zero point, computed at run time (:func:`_quantize_activation`);
3. weights are symmetric int8 per output column, 7 bits unless the CPU accumulates in 32 bits (VNNI);
4. embedding tables are int8, scaled per column and then per row (:func:`quantize_tables`);
5. a MatMul whose simulated int8 error stands out (:func:`.int8_calibration.sensitive`) keeps fp32 activations.

Pooling and the head stay fp32. :mod:`.int8_schemes` picks between this scheme and onnxruntime's own;
calibration is :mod:`.int8_calibration`, graph editing :mod:`.onnx_edit`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from espresso_export.core.errors import RuntimeFailure
from espresso_export.exporting.int8_calibration import (
    ACT_LEVELS, TABLE_MAX, WEIGHT_MAX, activation_ranges, matmul_errors, sensitive, smooth,
)
from espresso_export.exporting.onnx_edit import GraphEditor, head_nodes

log = logging.getLogger(__name__)

CONTRIB = "com.microsoft"  # onnxruntime's operator domain (MatMulIntegerToFloat)


@dataclass
class Int8Report:
    matmuls: int
    tables: int
    kept_fp32: list[str]
    smooth_alpha: float
    calibration_sentences: int
    weight_only: list[str]
    errors: dict[str, float]
    weight_bits: int = 7

    def to_dict(self) -> dict:
        return {
            "scheme": "per-token",
            "method": f"smoothquant + per-token dynamic uint8 activations + per-channel int{self.weight_bits} weights "
                      "+ int8 embedding tables (per column, then per row)",
            "matmuls_quantized": self.matmuls,
            "embedding_tables_quantized": self.tables,
            "kept_fp32": self.kept_fp32,
            "weight_only_int8": self.weight_only,
            "simulated_matmul_error": self.errors,
            "weight_bits": self.weight_bits,
            "activation": "uint8, per token, dynamic",
            "smooth_alpha": self.smooth_alpha,
            "calibration_sentences": self.calibration_sentences,
        }


def _quantize_activation(g: GraphEditor, act: str, width: int, p: str) -> list:
    """Nodes computing ``p+'q'`` (uint8, the shape of ``act``), ``p+'scale'`` and ``p+'offset'`` ([..., 1]) per token.

    ``offset`` is the zero point times the scale: what :func:`quantize_matmuls` subtracts (times the weights'
    column sums) to undo the zero point. The rounding, zero point and saturation are one ``QuantizeLinear``
    (per axis, on the tokens as rows); ``QuantizeLinear`` takes no scale per row of a 3-D tensor before opset
    21, hence the reshapes (which copy nothing).
    """
    from onnx import TensorProto, helper

    zero = g.shared("zero", np.float32(0.0))
    levels = g.shared("levels", np.float32(ACT_LEVELS))
    eps = g.shared("eps", np.float32(1e-8))
    rows = g.shared(f"rows_{width}", np.array([-1, width], np.int64))
    flat = g.shared("flat", np.array([-1], np.int64))
    mk = helper.make_node
    return [
        g.reduce("ReduceMax", act, p + "max0"),
        g.reduce("ReduceMin", act, p + "min0"),
        mk("Max", [p + "max0", zero], [p + "max"]),
        mk("Min", [p + "min0", zero], [p + "min"]),
        mk("Sub", [p + "max", p + "min"], [p + "range"]),
        mk("Div", [p + "range", levels], [p + "scale0"]),
        mk("Max", [p + "scale0", eps], [p + "scale"]),
        mk("Div", [p + "min", p + "scale"], [p + "zneg"]),
        mk("Neg", [p + "zneg"], [p + "zpos"]),
        mk("Round", [p + "zpos"], [p + "zp"]),
        mk("Mul", [p + "zp", p + "scale"], [p + "offset"]),
        mk("Cast", [p + "zp"], [p + "zp8"], to=TensorProto.UINT8),
        mk("Reshape", [act, rows], [p + "x2"]),
        mk("Reshape", [p + "scale", flat], [p + "scale1"]),
        mk("Reshape", [p + "zp8", flat], [p + "zp1"]),
        mk("QuantizeLinear", [p + "x2", p + "scale1", p + "zp1"], [p + "q2"], axis=0),
        mk("Shape", [act], [p + "shape"]),
        mk("Reshape", [p + "q2", p + "shape"], [p + "q"]),
    ]


def quantize_matmuls(g: GraphEditor, groups: dict[str, list], weight_only: set[str] = frozenset(),
                     weight_max: int = WEIGHT_MAX) -> int:
    """Replace each weight MatMul by an integer MatMul on per-token uint8 activations.

    ``MatMulIntegerToFloat`` (onnxruntime's contrib op, with a scale per token) multiplies the uint8 tokens by
    the int8 weights and scales the int32 sums to fp32 in the same kernel; the zero points are then undone
    with one ``Mul`` and one ``Sub``: ``(q - zp) W = q W - zp colsum(W)``. onnxruntime takes a zero point
    per tensor only, so it cannot do that part itself.

    MatMuls named in ``weight_only`` keep fp32 activations and compute: their weights are stored
    int8 (8 bits, per column) and dequantised by the graph, which costs no file size.
    """
    from onnx import helper

    mk = helper.make_node
    before: dict[str, list] = {}
    instead: dict[str, list] = {}
    count = 0
    for k, (act, nodes) in enumerate(groups.items()):
        p = f"espresso_q{k}_"
        for j, node in enumerate(nodes):
            w = g.array(node.input[1]).astype(np.float64)
            q = f"{p}{j}_"
            if node.name in weight_only:
                w_scale = np.maximum(np.abs(w).max(axis=0), 1e-12) / TABLE_MAX
                wq = np.clip(np.round(w / w_scale), -TABLE_MAX, TABLE_MAX).astype(np.int8)
                instead[node.name] = [
                    mk("DequantizeLinear", [g.add_init(q + "w8", wq), g.add_init(q + "w8scale", w_scale.astype(np.float32)),
                                            g.add_init(q + "w8zero", np.zeros(wq.shape[1], np.int8))],
                       [q + "wf"], axis=1),
                    mk("MatMul", [node.input[0], q + "wf"], [node.output[0]], name=node.name),
                ]
                continue
            if not any(n.name in before for n in nodes):  # quantise the activation once, before its first user
                before[node.name] = _quantize_activation(g, act, w.shape[0], p)
            w_scale = np.maximum(np.abs(w).max(axis=0), 1e-12) / weight_max
            wq = np.clip(np.round(w / w_scale), -weight_max, weight_max).astype(np.int8)
            wq_name = g.add_init(q + "w", wq)
            ws = g.add_init(q + "wscale", w_scale.astype(np.float32))
            # the zero point's share of each output column, in output units: colsum(W_int8) * w_scale
            col = g.add_init(q + "colscaled", (wq.astype(np.float64).sum(axis=0) * w_scale).astype(np.float32))
            instead[node.name] = [
                mk("MatMulIntegerToFloat", [p + "q", wq_name, p + "scale", ws], [q + "scaled"],
                   name=q + "MatMulIntegerToFloat", domain=CONTRIB),
                mk("Mul", [p + "offset", col], [q + "offset"]),
                mk("Sub", [q + "scaled", q + "offset"], [node.output[0]], name=q + "Sub"),
            ]
            count += 1
    g.replace_nodes(before, instead)
    if count:
        g.use_domain(CONTRIB, 1)
    return count


def quantize_tables(g: GraphEditor, exclude: set[str]) -> int:
    """Embedding lookups (Gather on a 2-D fp32 table, axis 0) -> int8 rows times a per-row scale."""
    from onnx import TensorProto, helper

    mk = helper.make_node
    instead: dict[str, list] = {}
    for k, node in enumerate(g.graph.node):
        if node.op_type != "Gather" or node.name in exclude or node.input[0] not in g.inits:
            continue
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        table = g.inits[node.input[0]]
        if axis != 0 or len(table.dims) != 2 or table.data_type != 1:
            continue
        if any(c.op_type != "Gather" for c in g.consumers.get(table.name, [])):
            continue
        t = g.array(table.name).astype(np.float64)
        # columns first (a few dimensions are large in every row), then each row gets its own scale
        cols = np.maximum(np.abs(t).max(axis=0), 1e-12)
        t = t / cols
        scale = np.maximum(np.abs(t).max(axis=1, keepdims=True), 1e-12) / TABLE_MAX
        tq = np.clip(np.round(t / scale), -TABLE_MAX, TABLE_MAX).astype(np.int8)
        p = f"espresso_t{k}_"
        q_name = g.shared(f"table_{table.name}", tq)
        s_name = g.shared(f"table_{table.name}_scale", scale.astype(np.float32))
        c_name = g.shared(f"table_{table.name}_columns", cols.astype(np.float32))
        instead[node.name] = [
            mk("Gather", [q_name, node.input[1]], [p + "rows"], axis=0),
            mk("Cast", [p + "rows"], [p + "rowsf"], to=TensorProto.FLOAT),
            mk("Gather", [s_name, node.input[1]], [p + "scale"], axis=0),
            mk("Mul", [p + "rowsf", p + "scale"], [p + "scaled"]),
            mk("Mul", [p + "scaled", c_name], [node.output[0]], name=p + "Mul"),
        ]
    g.replace_nodes({}, instead)
    return len(instead)


def quantize_int8(
    src: Path, dst: Path, feeds: list[dict], *, alpha: float, external_threshold: int,
    keep_fp32: tuple[str, ...] = (), weight_max: int = WEIGHT_MAX,
) -> Int8Report:
    """Write the int8 variant of ``src`` to ``dst`` (see the module docstring for the scheme).

    Nodes whose name contains one of ``keep_fp32`` stay fp32, as do pooling and the head.
    """
    from espresso_export.exporting.graph import load_model, needs_external_data, save_model

    proto = load_model(src)
    g = GraphEditor(proto)
    head = head_nodes(g.graph) | {n.name for n in g.graph.node if any(k in n.name for k in keep_fp32)}
    groups = g.weight_matmuls(exclude=head)
    errors: dict[str, float] = {}
    if groups and feeds:
        ranges, samples = activation_ranges(proto, list(groups), feeds, dst.parent)
        scales = smooth(g, groups, ranges, alpha) if alpha > 0 else {}
        errors = matmul_errors(g, groups, samples, scales, weight_max)
        groups = g.weight_matmuls(exclude=head)
    weight_only = sensitive(errors)
    n_matmuls = quantize_matmuls(g, groups, weight_only, weight_max)
    n_tables = quantize_tables(g, exclude=head)
    g.drop_unused_initializers()
    try:
        save_model(proto, dst, external=needs_external_data(proto, external_threshold))
    except (OSError, ValueError) as e:
        raise RuntimeFailure(f"cannot write {dst}: {e}") from e
    kept = sorted(n.name for n in proto.graph.node if n.op_type in ("MatMul", "Gemm") and n.name in head)
    log.info("int8: %d MatMuls, %d embedding tables quantised; %d head nodes kept fp32", n_matmuls, n_tables, len(kept))
    return Int8Report(matmuls=n_matmuls, tables=n_tables, kept_fp32=kept, smooth_alpha=alpha,
                      weight_only=sorted(weight_only), errors={k: round(v, 5) for k, v in errors.items()},
                      calibration_sentences=sum(len(next(iter(f.values()))) for f in feeds),
                      weight_bits=8 if weight_max > 63 else 7)


def convert_fp16(src: Path, dst: Path, *, external_threshold: int) -> None:
    """fp16 weights and compute with fp32 inputs/outputs (for GPU execution providers)."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    from espresso_export.exporting.graph import load_model, needs_external_data, save_model

    proto = convert_float_to_float16(load_model(src), keep_io_types=True, disable_shape_infer=True)
    save_model(proto, dst, external=needs_external_data(proto, external_threshold))
