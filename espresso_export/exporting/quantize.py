"""int8 and fp16 variants of an exported graph.

onnxruntime's stock ``quantize_dynamic`` scales each activation tensor with
one min/max for the whole batch. Transformer activations have a few tokens
(and channels) far larger than the rest, so most values land in a handful of
int8 steps; on all-mpnet-base-v2 cut to 4 layers with a PCA-128 head that gave
a min cosine of 0.95-0.96 against fp32. The int8 scheme here keeps the same
fast integer kernels (``MatMulInteger``) and changes what is scaled:

1. **SmoothQuant** (alpha 0.5): per input channel ``j`` of each MatMul,
   ``s_j = max|x_j|^a / max|W_j|^(1-a)`` measured on calibration sentences;
   the graph computes ``(x / s) @ (s W)``, moving outlier channels into the weights.
2. **Per-token activations**: each token's vector gets its own uint8 scale and
   zero point, computed at run time (an outlier token no longer flattens the others).
3. **Per-channel 7-bit weights**: symmetric, one scale per output column. 7 bits keep
   uint8 x int8 products from saturating the 16-bit sums of AVX2 CPUs without VNNI,
   so the same file is accurate on every x86 instruction set.
4. **int8 embedding tables**: each column is first divided by its max (a few
   dimensions are large in every row), then each row gets its own scale; the
   lookup gathers int8 rows and their scales and multiplies the column scales back.
   Scaling by rows alone cost 0.005 of min cosine on the mpnet cut.

5. **Sensitive MatMuls**: each MatMul's int8 error is simulated on calibration
   rows; one more than 1.5x the median keeps fp32 activations and compute, its
   weights stored int8 (8 bits, per column) and dequantised by the graph.

Pooling and the head (every node that feeds only ``sentence_embedding``) stay fp32.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from espresso_export.core.errors import RuntimeFailure
from espresso_export.runtime import EMBEDDING_OUTPUT, TOKEN_OUTPUT

log = logging.getLogger(__name__)

ACT_LEVELS = 255.0  # uint8 activations
WEIGHT_MAX = 63  # 7-bit symmetric weights: saturation-free on AVX2 (u8 * s8 pairs fit int16)
TABLE_MAX = 127  # embedding tables: int8, per row
SCALE_CLIP = (1e-2, 1e2)
# a MatMul whose simulated int8 error is this many times the median keeps fp32 activations (int8 weights only);
# on all-mpnet-base-v2 L4/d128 that is the first layer's FFN output projection (error 0.037 vs median 0.019)
SENSITIVE_FACTOR = 1.5


@dataclass
class Int8Report:
    matmuls: int
    tables: int
    kept_fp32: list[str]
    smooth_alpha: float
    calibration_sentences: int
    weight_only: list[str]
    errors: dict[str, float]

    def to_dict(self) -> dict:
        return {
            "method": "smoothquant + per-token dynamic uint8 activations + per-channel int7 weights "
                      "+ int8 embedding tables (per column, then per row)",
            "matmuls_quantized": self.matmuls,
            "embedding_tables_quantized": self.tables,
            "kept_fp32": self.kept_fp32,
            "weight_only_int8": self.weight_only,
            "simulated_matmul_error": self.errors,
            "weight_bits": 7,
            "activation": "uint8, per token, dynamic",
            "smooth_alpha": self.smooth_alpha,
            "calibration_sentences": self.calibration_sentences,
        }


class _Graph:
    """Small helpers to edit an ONNX graph in place: unique names and new initializers."""

    def __init__(self, proto) -> None:
        self.proto = proto
        self.graph = proto.graph
        self.inits = {t.name: t for t in self.graph.initializer}
        self.opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 17)
        self.consumers: dict[str, list] = {}
        for i, node in enumerate(self.graph.node):
            if not node.name:
                node.name = f"espresso_node_{i}"

            for name in node.input:
                self.consumers.setdefault(name, []).append(node)
        self._shared: dict[str, str] = {}

    def array(self, name: str) -> np.ndarray:
        from onnx import numpy_helper

        return numpy_helper.to_array(self.inits[name])

    def add_init(self, name: str, value) -> str:
        from onnx import numpy_helper

        tensor = numpy_helper.from_array(np.asarray(value), name)
        self.graph.initializer.append(tensor)
        self.inits[name] = tensor
        return name

    def shared(self, key: str, value) -> str:
        if key not in self._shared:
            self._shared[key] = self.add_init(f"espresso_q_{key}", value)
        return self._shared[key]

    def reduce(self, op: str, x: str, out: str):
        from onnx import helper

        if self.opset >= 18:
            return helper.make_node(op, [x, self.shared("axes_last", np.array([-1], np.int64))], [out], keepdims=1)
        return helper.make_node(op, [x], [out], keepdims=1, axes=[-1])

    def weight_matmuls(self, exclude: set[str]) -> dict[str, list]:
        """MatMul nodes with a 2-D fp32 weight used by that node only, grouped by activation input."""
        groups: dict[str, list] = {}
        for node in self.graph.node:
            if node.op_type != "MatMul" or node.name in exclude or node.input[1] not in self.inits:
                continue
            w = self.inits[node.input[1]]
            if len(w.dims) == 2 and w.data_type == 1 and len(self.consumers.get(w.name, [])) == 1:
                groups.setdefault(node.input[0], []).append(node)
        return groups

    def replace_nodes(self, before: dict[str, list], instead: dict[str, list]) -> None:
        """Insert ``before[name]`` ahead of the node ``name`` and swap ``instead[name]`` for it."""
        nodes = []
        for node in self.graph.node:
            nodes.extend(before.get(node.name, []))
            nodes.extend(instead.get(node.name, [node]))
        del self.graph.node[:]
        self.graph.node.extend(nodes)

    def drop_unused_initializers(self) -> None:
        used = {name for node in self.graph.node for name in node.input}
        keep = [t for t in self.graph.initializer if t.name in used]
        del self.graph.initializer[:]
        self.graph.initializer.extend(keep)


def head_nodes(graph) -> set[str]:
    """Names of nodes that feed ``sentence_embedding`` but not ``token_embeddings``: pooling and head."""
    producer = {out: node for node in graph.node for out in node.output}

    def ancestors(output: str) -> set[str]:
        seen: set[str] = set()
        stack = [output]
        while stack:
            node = producer.get(stack.pop())
            if node is None or node.name in seen:
                continue
            seen.add(node.name)
            stack.extend(node.input)
        return seen

    return ancestors(EMBEDDING_OUTPUT) - ancestors(TOKEN_OUTPUT)


def activation_ranges(
    proto, names: list[str], feeds: Iterable[dict], scratch: Path, sample_rows: int = 512,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Per-channel max |x| of the tensors ``names`` over the calibration feeds, and a sample of their rows."""
    import onnx
    import onnxruntime as ort

    from espresso_export.exporting.graph import needs_external_data, save_model

    probe = onnx.ModelProto()
    probe.CopyFrom(proto)
    for name in names:
        probe.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    path = scratch / "calibration.onnx"
    save_model(probe, path, external=needs_external_data(probe, 1_500_000_000))
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    ranges: dict[str, np.ndarray] = {}
    samples: dict[str, list[np.ndarray]] = {name: [] for name in names}
    for feed in feeds:
        real = feed["attention_mask"].reshape(-1).astype(bool)  # rows of real tokens, not padding
        for name, value in zip(names, session.run(names, feed)):
            rows = value.reshape(-1, value.shape[-1])
            m = np.abs(rows).max(axis=0)
            ranges[name] = m if name not in ranges else np.maximum(ranges[name], m)
            if rows.shape[0] == real.shape[0] and sum(len(r) for r in samples[name]) < sample_rows:
                samples[name].append(rows[real])
    del session
    for f in scratch.glob("calibration.onnx*"):
        f.unlink()
    return ranges, {n: np.concatenate(v)[:sample_rows] for n, v in samples.items() if v}


def smooth(g: _Graph, groups: dict[str, list], ranges: dict[str, np.ndarray], alpha: float) -> dict[str, np.ndarray]:
    """Divide each MatMul input by per-channel scales and multiply the weights' rows by them; returns the scales."""
    from onnx import helper, numpy_helper

    scales: dict[str, np.ndarray] = {}
    before: dict[str, list] = {}
    for k, (act, nodes) in enumerate(groups.items()):
        weights = [g.array(n.input[1]).astype(np.float64) for n in nodes]
        w_max = np.max([np.abs(w).max(axis=1) for w in weights], axis=0)
        s = np.maximum(ranges[act], 1e-5) ** alpha / np.maximum(w_max, 1e-5) ** (1 - alpha)
        s = np.clip(s, *SCALE_CLIP)
        scales[act] = s
        for n, w in zip(nodes, weights):
            g.inits[n.input[1]].CopyFrom(numpy_helper.from_array((w * s[:, None]).astype(np.float32), n.input[1]))
        inv = g.add_init(f"espresso_smooth_{k}_inv", (1.0 / s).astype(np.float32))
        out = f"espresso_smooth_{k}_x"
        before[nodes[0].name] = [helper.make_node("Mul", [act, inv], [out], name=f"espresso_smooth_{k}")]
        for n in nodes:
            n.input[0] = out
    g.replace_nodes(before, {})
    return scales


def fake_int8(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``x @ w`` as the int8 graph computes it: per-token uint8 ``x``, per-column 7-bit ``w``."""
    lo = np.minimum(x.min(axis=1, keepdims=True), 0)
    hi = np.maximum(x.max(axis=1, keepdims=True), 0)
    sx = np.maximum((hi - lo) / ACT_LEVELS, 1e-8)
    zp = np.round(-lo / sx)
    xq = (np.clip(np.round(x / sx) + zp, 0, ACT_LEVELS) - zp) * sx
    sw = np.maximum(np.abs(w).max(axis=0), 1e-12) / WEIGHT_MAX
    return xq @ (np.clip(np.round(w / sw), -WEIGHT_MAX, WEIGHT_MAX) * sw)


def matmul_errors(g: _Graph, groups: dict[str, list], samples: dict[str, np.ndarray],
                  scales: dict[str, np.ndarray]) -> dict[str, float]:
    """Relative output error of each weight MatMul under int8, on calibration rows (after smoothing)."""
    errors = {}
    for act, nodes in groups.items():
        if act not in samples:
            continue
        x = samples[act].astype(np.float64) / scales.get(act, 1.0)
        for node in nodes:
            w = g.array(node.input[1]).astype(np.float64)
            y = x @ w
            errors[node.name] = float(np.linalg.norm(fake_int8(x, w) - y) / max(np.linalg.norm(y), 1e-12))
    return errors


def sensitive(errors: dict[str, float], factor: float = SENSITIVE_FACTOR) -> set[str]:
    """MatMuls whose int8 error is more than ``factor`` times the median: they get int8 weights only."""
    if not errors:
        return set()
    median = float(np.median(list(errors.values())))
    return {name for name, e in errors.items() if e > factor * median}


def _quantize_activation(g: _Graph, act: str, p: str) -> list:
    """Nodes computing ``p+'q'`` (uint8), ``p+'scale'`` and ``p+'zp'`` ([..., 1]) for each token of ``act``."""
    from onnx import TensorProto, helper

    zero = g.shared("zero", np.float32(0.0))
    levels = g.shared("levels", np.float32(ACT_LEVELS))
    eps = g.shared("eps", np.float32(1e-8))
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
        mk("Div", [act, p + "scale"], [p + "xs"]),
        mk("Round", [p + "xs"], [p + "xr"]),
        mk("Add", [p + "xr", p + "zp"], [p + "xz"]),
        mk("Clip", [p + "xz", zero, levels], [p + "xc"]),
        mk("Cast", [p + "xc"], [p + "q"], to=TensorProto.UINT8),
    ]


def quantize_matmuls(g: _Graph, groups: dict[str, list], weight_only: set[str] = frozenset()) -> int:
    """Replace each weight MatMul by an integer MatMul on per-token uint8 activations.

    MatMuls named in ``weight_only`` keep fp32 activations and compute: their weights are stored
    int8 (8 bits, per column) and dequantised by the graph, which costs no file size.
    """
    from onnx import TensorProto, helper

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
                before[node.name] = _quantize_activation(g, act, p)
            w_scale = np.maximum(np.abs(w).max(axis=0), 1e-12) / WEIGHT_MAX
            wq = np.clip(np.round(w / w_scale), -WEIGHT_MAX, WEIGHT_MAX).astype(np.int8)
            wq_name = g.add_init(q + "w", wq)
            colsum = g.add_init(q + "colsum", wq.astype(np.float32).sum(axis=0))
            ws = g.add_init(q + "wscale", w_scale.astype(np.float32))
            instead[node.name] = [
                mk("MatMulInteger", [p + "q", wq_name], [q + "acc"], name=q + "MatMulInteger"),
                mk("Cast", [q + "acc"], [q + "accf"], to=TensorProto.FLOAT),
                mk("Mul", [p + "zp", colsum], [q + "offset"]),
                mk("Sub", [q + "accf", q + "offset"], [q + "centred"]),
                mk("Mul", [q + "centred", p + "scale"], [q + "rows"]),
                mk("Mul", [q + "rows", ws], [node.output[0]], name=q + "Mul"),
            ]
            count += 1
    g.replace_nodes(before, instead)
    return count


def quantize_tables(g: _Graph, exclude: set[str]) -> int:
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
    keep_fp32: tuple[str, ...] = (),
) -> Int8Report:
    """Write the int8 variant of ``src`` to ``dst`` (see the module docstring for the scheme).

    Nodes whose name contains one of ``keep_fp32`` stay fp32, as do pooling and the head.
    """
    from espresso_export.exporting.graph import load_model, needs_external_data, save_model

    proto = load_model(src)
    g = _Graph(proto)
    head = head_nodes(g.graph) | {n.name for n in g.graph.node if any(k in n.name for k in keep_fp32)}
    groups = g.weight_matmuls(exclude=head)
    errors: dict[str, float] = {}
    if groups and feeds:
        ranges, samples = activation_ranges(proto, list(groups), feeds, dst.parent)
        scales = smooth(g, groups, ranges, alpha) if alpha > 0 else {}
        errors = matmul_errors(g, groups, samples, scales)
        groups = g.weight_matmuls(exclude=head)
    weight_only = sensitive(errors)
    n_matmuls = quantize_matmuls(g, groups, weight_only)
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
                      calibration_sentences=sum(len(next(iter(f.values()))) for f in feeds))


def convert_fp16(src: Path, dst: Path, *, external_threshold: int) -> None:
    """fp16 weights and compute with fp32 inputs/outputs (for GPU execution providers)."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    from espresso_export.exporting.graph import load_model, needs_external_data, save_model

    proto = convert_float_to_float16(load_model(src), keep_io_types=True, disable_shape_infer=True)
    save_model(proto, dst, external=needs_external_data(proto, external_threshold))
