"""Editing an ONNX graph in place, for the int8 rewrite (:mod:`.quantize`).

:class:`GraphEditor` indexes a graph's initializers and consumers, adds
initializers with unique (or shared) names and splices new nodes in;
:func:`head_nodes` names the nodes that must stay fp32 (pooling and the head).
"""

from __future__ import annotations

import numpy as np

from espresso_export.runtime import EMBEDDING_OUTPUT, TOKEN_OUTPUT


class GraphEditor:
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

    def use_domain(self, domain: str, version: int) -> None:
        """Import an operator domain (e.g. onnxruntime's ``com.microsoft``) if the model does not yet."""
        if not any(o.domain == domain for o in self.proto.opset_import):
            from onnx import helper

            self.proto.opset_import.append(helper.make_opsetid(domain, version))

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
        drop_unused_initializers(self.graph)


def drop_unused_initializers(graph) -> None:
    """Remove the initializers no node reads."""
    used = {name for node in graph.node for name in node.input}
    keep = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(keep)


def drop_dead_nodes(graph) -> int:
    """Remove the nodes none of whose outputs is read by a node or is a graph output (repeatedly), then the
    initializers left unread; returns how many nodes went."""
    outputs = {o.name for o in graph.output}
    removed = 0
    while True:
        used = {i for n in graph.node for i in n.input} | outputs
        live = [n for n in graph.node if any(o in used for o in n.output)]
        if len(live) == len(graph.node):
            break
        removed += len(graph.node) - len(live)
        del graph.node[:]
        graph.node.extend(live)
    drop_unused_initializers(graph)
    return removed


def head_nodes(graph) -> set[str]:
    """Names of nodes that feed ``sentence_embedding`` but not ``last_hidden_state``: pooling and head."""
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
