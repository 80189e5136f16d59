"""int8 and fp16 variants of an exported graph: the ``per-token`` int8 scheme.

:mod:`.int8_schemes` picks, per CPU and model, between this scheme and onnxruntime's fused dynamic one
(faster at large batches); this module also provides the int8 embedding tables both use.

onnxruntime's stock ``quantize_dynamic`` scales each activation tensor with
one min/max for the whole batch. Transformer activations have a few tokens
(and channels) far larger than the rest, so most values land in a handful of
int8 steps; on all-mpnet-base-v2 cut to 4 layers with a PCA-128 head that gave
a min cosine of 0.95-0.96 against fp32. The int8 scheme here keeps onnxruntime's
fast integer kernel (``MatMulIntegerToFloat``: the integer product and its scaling
back to fp32 in one kernel, which takes a scale per token) and changes what is scaled:

1. **SmoothQuant** (alpha 0.5): per input channel ``j`` of each MatMul,
   ``s_j = max|x_j|^a / max|W_j|^(1-a)`` measured on calibration sentences;
   the graph computes ``(x / s) @ (s W)``, moving outlier channels into the weights.
2. **Per-token activations**: each token's vector gets its own uint8 scale, computed at run time (an
   outlier token no longer flattens the others), divided out by one ``Div`` and rounded by one
   ``QuantizeLinear``. Activations about as negative as positive (a LayerNorm's output, the attention's
   context) are symmetric, ``round(x / s) + 128``, and the kernel undoes the 128 itself; one-sided ones (the
   GELU's output) keep the token's full range, ``round((x - min) / s)``, and ``min`` times the weights' column
   sums is added after the product (a ``Mul`` and an ``Add``). Which is which is measured on the calibration
   sentences (:func:`.int8_calibration.symmetric_activations`).
3. **Per-channel 7-bit weights**: symmetric, one scale per output column. 7 bits keep
   uint8 x int8 products from saturating the 16-bit sums of AVX2 CPUs without VNNI;
   where the export runs on a VNNI CPU (32-bit accumulation) all 8 bits are used.
4. **int8 embedding tables**: each column is first divided by its max (a few
   dimensions are large in every row), then each row gets its own scale; the
   lookup gathers int8 rows and their scales and multiplies the column scales back.
   Scaling by rows alone cost 0.005 of min cosine on the mpnet cut.

5. **Sensitive MatMuls**: each MatMul's int8 error is simulated on calibration
   rows; one more than 1.5x the median keeps fp32 activations and compute, its
   weights stored int8 (8 bits, per column) and dequantised by the graph.

Pooling and the head (every node that feeds only ``sentence_embedding``) stay fp32.

Calibration (ranges, SmoothQuant, the simulated error) is in :mod:`.int8_calibration`, the graph-editing
helpers in :mod:`.onnx_edit`; this module rewrites the MatMuls and embedding tables and writes the file.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from espresso_export.core.errors import RuntimeFailure
from espresso_export.exporting.int8_calibration import (
    ACT_EPS,
    ACT_LEVELS,
    SYMMETRIC_MAX,
    SYMMETRIC_TOLERANCE,
    TABLE_MAX,
    WEIGHT_MAX,
    activation_ranges,
    matmul_errors,
    sensitive,
    smooth,
    symmetric_activations,
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
    symmetric: int = 0  # activations quantised symmetrically (zero point 128)
    affine: int = 0  # activations with a range per token (min to max)

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
            "activations_symmetric": self.symmetric,
            "activations_affine": self.affine,
            "smooth_alpha": self.smooth_alpha,
            "calibration_sentences": self.calibration_sentences,
        }


def _quantize_activation(g: GraphEditor, act: str, p: str, symmetric: bool) -> list:
    """Nodes computing ``p+'q'`` (uint8, the shape of ``act``) and ``p+'scale'`` ([..., 1]) per token, and for an
    affine activation ``p+'low'`` ([..., 1]), each token's minimum.

    Each token is divided by its own scale in one broadcast ``Div`` and rounded and saturated by a
    ``QuantizeLinear`` with scale 1 (``QuantizeLinear`` takes no scale per row of a 3-D tensor before opset 21;
    scale and zero point per axis on a 2-D reshape cost five more small ops per activation, which at batch 1
    took longer than the integer product itself). Symmetric: ``round(x / s) + 128``, ``s = max|x| / 127``
    (the integer kernel undoes the zero point 128 itself). Affine: ``round((x - low) / s)``,
    ``s = (max - low) / 255``; :func:`quantize_matmuls` adds ``low`` times the weights' column sums back.
    """
    from onnx import helper

    one = g.shared("one", np.float32(1.0))
    eps = g.shared("eps", np.float32(ACT_EPS))
    mk = helper.make_node
    if symmetric:
        return [
            mk("Abs", [act], [p + "abs"]),
            g.reduce("ReduceMax", p + "abs", p + "max"),
            mk("Mul", [p + "max", g.shared("inv_sym", np.float32(1.0 / SYMMETRIC_MAX))], [p + "scale0"]),
            mk("Max", [p + "scale0", eps], [p + "scale"]),
            mk("Div", [act, p + "scale"], [p + "x"]),
            mk("QuantizeLinear", [p + "x", one, g.shared("zp_sym", np.uint8(SYMMETRIC_MAX + 1))], [p + "q"]),
        ]
    return [
        g.reduce("ReduceMax", act, p + "max"),
        g.reduce("ReduceMin", act, p + "low"),
        mk("Sub", [p + "max", p + "low"], [p + "range"]),
        mk("Mul", [p + "range", g.shared("inv_levels", np.float32(1.0 / ACT_LEVELS))], [p + "scale0"]),
        mk("Max", [p + "scale0", eps], [p + "scale"]),
        mk("Sub", [act, p + "low"], [p + "shifted"]),
        mk("Div", [p + "shifted", p + "scale"], [p + "x"]),
        mk("QuantizeLinear", [p + "x", one, g.shared("zp_zero", np.uint8(0))], [p + "q"]),
    ]


def quantize_matmuls(g: GraphEditor, groups: dict[str, list], weight_only: set[str] = frozenset(),
                     weight_max: int = WEIGHT_MAX, symmetric: set[str] = frozenset()) -> int:
    """Replace each weight MatMul by an integer MatMul on per-token uint8 activations.

    ``MatMulIntegerToFloat`` (onnxruntime's contrib op, with a scale per token) multiplies the uint8 tokens by
    the int8 weights and scales the int32 sums to fp32 in the same kernel. Activations named in ``symmetric``
    have the zero point 128, which the kernel subtracts; the others are affine per token (one zero point per
    token, which the kernel cannot take), and their minimum's share is added back after the product with one
    ``Mul`` and one ``Add``: ``x W = s (q W) + low colsum(W)``. The MatMul's bias ``Add`` stays a separate node:
    onnxruntime 1.32 multiplies ``MatMulIntegerToFloat``'s bias input by a per-row A scale (checked: the output
    was off by ``bias * (s - 1)``).

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
        sym = act in symmetric
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
                before[node.name] = _quantize_activation(g, act, p, sym)
            w_scale = np.maximum(np.abs(w).max(axis=0), 1e-12) / weight_max
            wq = np.clip(np.round(w / w_scale), -weight_max, weight_max).astype(np.int8)
            inputs = [p + "q", g.add_init(q + "w", wq), p + "scale", g.add_init(q + "wscale", w_scale.astype(np.float32))]
            if sym:
                instead[node.name] = [mk("MatMulIntegerToFloat", [*inputs, g.shared("zp_sym", np.uint8(SYMMETRIC_MAX + 1))],
                                         [node.output[0]], name=q + "MatMulIntegerToFloat", domain=CONTRIB)]
            else:
                # the token minimum's share of each output column: colsum(W_int8) * w_scale
                col = g.add_init(q + "colscaled", (wq.astype(np.float64).sum(axis=0) * w_scale).astype(np.float32))
                instead[node.name] = [
                    mk("MatMulIntegerToFloat", inputs, [q + "scaled"], name=q + "MatMulIntegerToFloat", domain=CONTRIB),
                    mk("Mul", [p + "low", col], [q + "low"]),
                    mk("Add", [q + "scaled", q + "low"], [node.output[0]], name=q + "Add"),
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
    keep_fp32: tuple[str, ...] = (), weight_max: int = WEIGHT_MAX, symmetric_tolerance: float = SYMMETRIC_TOLERANCE,
) -> Int8Report:
    """Write the int8 variant of ``src`` to ``dst`` (see the module docstring for the scheme).

    Nodes whose name contains one of ``keep_fp32`` stay fp32, as do pooling and the head. ``symmetric_tolerance``
    0 keeps every activation affine (:func:`~.int8_calibration.symmetric_activations`).
    """
    from espresso_export.exporting.graph import (
        load_model,
        needs_external_data,
        save_model,
    )

    proto = load_model(src)
    g = GraphEditor(proto)
    head = head_nodes(g.graph) | {n.name for n in g.graph.node if any(k in n.name for k in keep_fp32)}
    groups = g.weight_matmuls(exclude=head)
    errors: dict[str, float] = {}
    symmetric: set[str] = set()
    if groups and feeds:
        ranges, samples = activation_ranges(proto, list(groups), feeds, dst.parent)
        scales = smooth(g, groups, ranges, alpha) if alpha > 0 else {}
        if symmetric_tolerance > 0:
            symmetric = symmetric_activations(g, groups, samples, scales, weight_max, symmetric_tolerance)
        errors = matmul_errors(g, groups, samples, scales, weight_max, symmetric=symmetric)
        symmetric = {groups[a][0].input[0] for a in symmetric}  # smoothing renamed the activations it divides
        groups = g.weight_matmuls(exclude=head)
    weight_only = sensitive(errors)
    n_matmuls = quantize_matmuls(g, groups, weight_only, weight_max, symmetric)
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
                      weight_bits=8 if weight_max > 63 else 7, symmetric=len(symmetric & set(groups)),
                      affine=len(set(groups) - symmetric))


def convert_fp16(src: Path, dst: Path, *, external_threshold: int) -> None:
    """fp16 weights and compute with fp32 inputs/outputs (for GPU execution providers)."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    from espresso_export.exporting.graph import (
        load_model,
        needs_external_data,
        save_model,
    )

    proto = convert_float_to_float16(load_model(src), keep_io_types=True, disable_shape_infer=True)
    save_model(proto, dst, external=needs_external_data(proto, external_threshold))
