"""``exporting.shapes``: the exporters' shape arithmetic replaced by constant reshape targets, and the guard."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from espresso_export.exporting.shapes import _same_outputs, static_reshapes  # noqa: E402


def _attention_view_graph():
    """``x[b, s, 8] * 2 -> view(b, s, 2, 4) -> transpose -> view back(b, s, 8)``, each view's target computed
    from ``Shape`` as torch.onnx writes it, plus a reshape to the shape the tensor already has."""
    from onnx import TensorProto, helper, numpy_helper

    mk = helper.make_node
    inits = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
             (("i0", 0), ("i1", 1), ("axes", [0]), ("heads", [2]), ("hd", [4]), ("width", [8]))]
    inits.append(numpy_helper.from_array(np.array(2.0, np.float32), "two"))
    nodes = [
        mk("Cast", ["input_ids"], ["xf"], to=TensorProto.FLOAT),
        mk("Unsqueeze", ["xf", "minus1"], ["x3"]),
        mk("Mul", ["x3", "row"], ["x"]),  # [b, s, 8]
        mk("Mul", ["x", "two"], ["y"]),
        mk("Shape", ["y"], ["shape"]),
        mk("Gather", ["shape", "i0"], ["b"], axis=0),
        mk("Gather", ["shape", "i1"], ["s"], axis=0),
        mk("Unsqueeze", ["b", "axes"], ["b1"]),
        mk("Unsqueeze", ["s", "axes"], ["s1"]),
        mk("Concat", ["b1", "s1", "heads", "hd"], ["split_shape"], axis=0),
        mk("Reshape", ["y", "split_shape"], ["heads4"]),  # [b, s, 2, 4]
        mk("Transpose", ["heads4"], ["t"], perm=[0, 2, 1, 3]),
        mk("Shape", ["t"], ["tshape"]),
        mk("Reshape", ["t", "tshape"], ["t_same"]),  # a reshape to the shape it has
        mk("Transpose", ["t_same"], ["back4"], perm=[0, 2, 1, 3]),
        mk("Concat", ["b1", "s1", "width"], ["merge_shape"], axis=0),
        mk("Reshape", ["back4", "merge_shape"], ["sentence_embedding"]),
    ]
    inits.append(numpy_helper.from_array(np.array([-1], np.int64), "minus1"))
    inits.append(numpy_helper.from_array(np.arange(1, 9, dtype=np.float32), "row"))
    graph = helper.make_graph(
        nodes, "views",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"])],
        [helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", "sequence", 8])],
        inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run(proto, ids):
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"input_ids": ids})[0]


def test_shape_chains_become_constant_targets_with_the_same_outputs():
    proto = _attention_view_graph()
    original = onnx.ModelProto()
    original.CopyFrom(proto)
    result = static_reshapes(proto)
    assert result == {"constant_targets": 2, "dropped": 1, "nodes_removed": 9}
    ops = Counter(n.op_type for n in proto.graph.node)
    assert not ops["Shape"] and not ops["Gather"] and not ops["Concat"] and ops["Reshape"] == 2
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in proto.graph.initializer}
    targets = [inits[n.input[1]].tolist() for n in proto.graph.node if n.op_type == "Reshape"]
    assert targets == [[0, 0, 2, 4], [0, 0, 8]]  # 0 copies the input's batch and sequence lengths
    rng = np.random.default_rng(1)
    for batch, seq in ((1, 1), (4, 9), (9, 4)):
        ids = rng.integers(0, 50, (batch, seq))
        np.testing.assert_array_equal(_run(proto, ids), _run(original, ids))


def test_the_guard_refuses_a_rewrite_that_changes_outputs():
    from onnx import numpy_helper

    proto = _attention_view_graph()
    static_reshapes(proto)
    good = proto.SerializeToString()
    wrong = onnx.ModelProto()
    wrong.CopyFrom(proto)
    merge = [n for n in wrong.graph.node if n.op_type == "Reshape"][-1]
    wrong.graph.initializer.append(numpy_helper.from_array(np.array([0, 8, -1], np.int64), "wrong_target"))
    merge.input[1] = "wrong_target"  # a target a wrongly merged symbol could give: [b, 8, s], not [b, s, 8]
    assert _same_outputs(good, good, ["input_ids"])
    assert not _same_outputs(good, wrong.SerializeToString(), ["input_ids"])
    assert not _same_outputs(good, good, ["input_ids", "pixel_values"])  # inputs it cannot feed: not rewritten


def test_exported_graph_has_static_targets_and_records_them(tiny_bert, tmp_path):
    from espresso_export import export

    out = tmp_path / "onnx"
    export(tiny_bert, out)  # validated against PyTorch, as every export
    info = json.loads((out / "export.json").read_text())
    assert info["static_reshapes"]["constant_targets"] > 0 and info["static_reshapes"]["nodes_removed"] > 0
    graph = onnx.load(str(out / "onnx" / "model.onnx"), load_external_data=False).graph
    inits = {i.name for i in graph.initializer}
    attention = [n for n in graph.node if n.op_type == "Reshape" and "attention" in n.name]
    assert attention and all(n.input[1] in inits for n in attention)


def test_a_graph_shape_inference_cannot_complete_is_kept_and_leaves_no_file(tmp_path, monkeypatch):
    """onnxruntime's symbolic shape inference saves the model into the working folder when it cannot complete
    (an operator it does not know): the graph is kept as it is, and the user's folder stays empty."""
    from onnx import TensorProto, helper

    mk = helper.make_node
    nodes = [mk("Mystery", ["input_ids"], ["y"], domain="example.unknown"), mk("Shape", ["y"], ["s"]),
             mk("Reshape", ["y", "s"], ["sentence_embedding"])]
    graph = helper.make_graph(nodes, "unknown-op",
                              [helper.make_tensor_value_info("input_ids", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, None)])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("example.unknown", 1)])
    before = proto.SerializeToString()
    monkeypatch.chdir(tmp_path)
    assert static_reshapes(proto) == {"constant_targets": 0, "dropped": 0, "nodes_removed": 0}
    assert proto.SerializeToString() == before
    assert list(tmp_path.iterdir()) == []
