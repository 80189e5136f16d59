"""Calibration for the int8 rewrite (:mod:`.quantize`): activation ranges, SmoothQuant, simulated error.

The calibration sentences run through a probe copy of the graph that also
outputs every MatMul's activation input; their per-channel ranges give the
SmoothQuant scales, and a sample of their rows the simulated int8 error of each
MatMul (the sensitive ones keep fp32 activations). The constants are the int8
scheme's, shared with the graph rewrite.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np

from espresso_export.exporting.onnx_edit import GraphEditor

ACT_LEVELS = 255.0  # uint8 activations
WEIGHT_MAX = 63  # 7-bit symmetric weights: saturation-free on AVX2 (u8 * s8 pairs fit int16)
WEIGHT_MAX_VNNI = 127  # 8-bit: VNNI accumulates u8 * s8 products in 32 bits, nothing saturates
TABLE_MAX = 127  # embedding tables: int8, per row
SCALE_CLIP = (1e-2, 1e2)
# a MatMul whose simulated int8 error is this many times the median keeps fp32 activations (int8 weights only)
SENSITIVE_FACTOR = 1.5


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


def smooth(g: GraphEditor, groups: dict[str, list], ranges: dict[str, np.ndarray], alpha: float) -> dict[str, np.ndarray]:
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


def fake_int8(x: np.ndarray, w: np.ndarray, weight_max: int = WEIGHT_MAX, per_token: bool = True) -> np.ndarray:
    """``x @ w`` as the int8 graph computes it: uint8 ``x`` (per token, or one range for all rows),
    symmetric per-column ``w`` with ``weight_max`` levels each side."""
    axis = 1 if per_token else None
    lo = np.minimum(x.min(axis=axis, keepdims=True), 0)
    hi = np.maximum(x.max(axis=axis, keepdims=True), 0)
    sx = np.maximum((hi - lo) / ACT_LEVELS, 1e-8)
    zp = np.round(-lo / sx)
    xq = (np.clip(np.round(x / sx) + zp, 0, ACT_LEVELS) - zp) * sx
    sw = np.maximum(np.abs(w).max(axis=0), 1e-12) / weight_max
    return xq @ (np.clip(np.round(w / sw), -weight_max, weight_max) * sw)


def matmul_errors(g: GraphEditor, groups: dict[str, list], samples: dict[str, np.ndarray],
                  scales: dict[str, np.ndarray], weight_max: int = WEIGHT_MAX, per_token: bool = True) -> dict[str, float]:
    """Relative output error of each weight MatMul under int8, on calibration rows (after smoothing)."""
    errors = {}
    for act, nodes in groups.items():
        if act not in samples:
            continue
        x = samples[act].astype(np.float64) / scales.get(act, 1.0)
        for node in nodes:
            w = g.array(node.input[1]).astype(np.float64)
            y = x @ w
            errors[node.name] = float(np.linalg.norm(fake_int8(x, w, weight_max, per_token) - y) / max(np.linalg.norm(y), 1e-12))
    return errors


def sensitive(errors: dict[str, float], factor: float = SENSITIVE_FACTOR) -> set[str]:
    """MatMuls whose int8 error is more than ``factor`` times the median: they get int8 weights only."""
    if not errors:
        return set()
    median = float(np.median(list(errors.values())))
    return {name for name, e in errors.items() if e > factor * median}
