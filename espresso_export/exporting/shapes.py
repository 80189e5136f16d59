"""Static reshape targets: the shape arithmetic the exporters leave in the graph, removed once at export.

``torch.onnx`` writes each ``view(batch, seq, heads, head_dim)`` of an attention block as ``Shape`` ->
``Gather`` -> ``Unsqueeze`` -> ``Concat`` -> ``Reshape``: many small nodes, each run on every call although
only the batch and sequence lengths vary; at batch 1 a node's dispatch costs about as much as its work. Where
onnxruntime's symbolic shape inference proves a ``Reshape``'s output shape in terms of its input's
(``[batch, seq, 384] -> [batch, seq, 12, 32]``), the target becomes a constant that ONNX's ``Reshape`` reads
the same way (``[0, 0, 12, 32]``: 0 copies the input's dimension, -1 takes what is left), a reshape to the
shape it already has is dropped, and the chains no longer used are removed.

Hand-written because onnxruntime's transformer optimiser (``FusionReshape``, part of O2) matches an older
exporter's pattern and its basic constant folding cannot fold a ``Shape`` of a dynamic input. The export's
parity check runs on the rewritten graph like on any other.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile

from espresso_export.exporting.onnx_edit import drop_dead_nodes

log = logging.getLogger(__name__)

CHECK_MAX_BYTES = 1 << 30  # graphs checked in memory (serialised twice); larger ones are left as exported


@contextlib.contextmanager
def _in_scratch_folder():
    """Run in a temporary working folder, removed after: onnxruntime's symbolic shape inference saves the whole
    model (weights too) as ``sym_shape_infer_temp.onnx`` in the working folder when it cannot complete, which
    would be the user's."""
    before = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="espresso-shapes-") as scratch:
        os.chdir(scratch)
        try:
            yield
        finally:
            os.chdir(before)


def _symbolic_shapes(proto) -> dict[str, list] | None:
    """``{tensor: [int or symbol, ...]}`` from onnxruntime's symbolic shape inference, or None where it fails."""
    try:  # auto_merge: the attention mask's broadcasts need it; _same_outputs checks what it assumed
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference  # needs sympy (torch has it)

        with _in_scratch_folder():
            inferred = SymbolicShapeInference.infer_shapes(proto, auto_merge=True)
    except Exception as e:  # it raises bare Exceptions on graphs it cannot complete
        log.info("static reshapes: symbolic shape inference failed (%s); the graph is kept as exported", e)
        return None
    shapes = {}
    graph = inferred.graph
    for vi in [*graph.value_info, *graph.input, *graph.output]:
        t = vi.type.tensor_type
        if t.HasField("shape"):
            shapes[vi.name] = [d.dim_param if d.HasField("dim_param") else d.dim_value if d.HasField("dim_value")
                               else None for d in t.shape.dim]
    return shapes


def _target(src: list, dst: list) -> list[int] | None:
    """The constant ``Reshape`` target taking a tensor of shape ``src`` to ``dst``, or None if not provable."""
    if any(d is None or d == "" for d in dst):
        return None
    out = []
    for i, d in enumerate(dst):
        if isinstance(d, int):
            out.append(d)
        elif i < len(src) and src[i] == d:
            out.append(0)
        else:
            out.append(-1)
    return out if out.count(-1) <= 1 else None


def _same_outputs(before: bytes, after: bytes, inputs: list[str]) -> bool:
    """True when the two serialised graphs give bit-identical outputs on token inputs whose batch and sequence
    lengths differ from each other and from call to call (symbolic inference merged some symbols: this checks
    what it assumed). False when the graph takes other inputs or a run fails."""
    import numpy as np
    import onnxruntime as ort

    if not set(inputs) <= {"input_ids", "attention_mask", "token_type_ids"}:
        return False
    options = ort.SessionOptions()
    options.log_severity_level = 3
    rng = np.random.default_rng(0)
    try:
        sessions = [ort.InferenceSession(g, options, providers=["CPUExecutionProvider"]) for g in (before, after)]
        for batch, seq in ((1, 1), (2, 7), (3, 5), (5, 3)):
            mask = np.ones((batch, seq), np.int64)
            mask[0, seq // 2 + 1:] = 0  # padding in one row
            feeds = {"input_ids": rng.integers(1, 100, (batch, seq)), "attention_mask": mask,
                     "token_type_ids": np.zeros((batch, seq), np.int64)}
            feeds = {k: v for k, v in feeds.items() if k in inputs}
            for a, b in zip(*(s.run(None, feeds) for s in sessions)):
                if a.shape != b.shape or not np.array_equal(a, b):
                    return False
    except Exception as e:  # onnxruntime raises its own exception types
        log.info("static reshapes: checking the rewritten graph failed (%s)", e)
        return False
    return True


def static_reshapes(proto) -> dict[str, int]:
    """Rewrite ``proto`` in place (see the module docstring); returns how many reshapes got a constant target,
    how many were dropped and how many nodes were removed in all. A graph whose rewritten form does not give
    bit-identical outputs on a few input shapes, or too large to check in memory, is kept as it is."""
    import numpy as np
    from onnx import numpy_helper

    unchanged = {"constant_targets": 0, "dropped": 0, "nodes_removed": 0}
    if proto.ByteSize() > CHECK_MAX_BYTES:
        return unchanged
    before = proto.SerializeToString()
    graph = proto.graph
    inits = {i.name for i in graph.initializer}
    shapes = _symbolic_shapes(proto)
    if shapes is None:
        return unchanged
    outputs = {o.name for o in graph.output}
    constant, dropped, rename = 0, 0, {}
    for node in graph.node:
        if node.op_type != "Reshape" or node.input[1] in inits:
            continue
        if any(a.name == "allowzero" and a.i for a in node.attribute):  # 0 would mean a zero-length dimension
            continue
        src, dst = shapes.get(node.input[0]), shapes.get(node.output[0])
        if src is None or dst is None or (target := _target(src, dst)) is None:
            continue
        if src == dst and node.output[0] not in outputs:
            rename[node.output[0]] = node.input[0]  # a reshape to the shape it has: its readers read its input
            dropped += 1
            continue
        name = f"{node.input[1]}_static"
        graph.initializer.append(numpy_helper.from_array(np.array(target, np.int64), name))
        inits.add(name)
        node.input[1] = name
        constant += 1
    for node in graph.node:
        for k, name in enumerate(node.input):
            while name in rename:
                name = rename[name]
            node.input[k] = name
    result = {"constant_targets": constant, "dropped": dropped, "nodes_removed": drop_dead_nodes(graph)}
    if constant + dropped and not _same_outputs(before, proto.SerializeToString(), [i.name for i in graph.input]):
        log.info("static reshapes: the rewritten graph's outputs differ; the graph is kept as exported")
        proto.ParseFromString(before)
        return unchanged
    log.info("static reshapes: %s", result)
    return result
