"""Tensors made inside training and encode code are made where the model is.

A tensor factory without ``device=`` makes a CPU tensor; fed to a model or a loss on a GPU it fails
("index is on cpu, different from other tensors on cuda:0") or copies to the device on every step. CI has no
GPU, so this reads the code: every factory call in the training and encode packages names its device, is moved
at once (``.to(...)``, a ``Parameter`` the loop moves with its module), or its function says why the CPU is
meant (a ``# host: <why>`` comment in the function, before the call).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "espresso_export"
CHECKED = [*sorted((PACKAGE / "training").rglob("*.py")), *sorted((PACKAGE / "distilling").rglob("*.py")),
           *sorted((PACKAGE / "finetuning").rglob("*.py")), PACKAGE / "model" / "embed.py"]
FACTORIES = {"tensor", "as_tensor", "from_numpy", "arange", "zeros", "ones", "empty", "full", "eye", "rand", "randn",
             "randint", "randperm", "linspace", "LongTensor", "FloatTensor", "BoolTensor", "IntTensor", "Tensor"}


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _moved(call: ast.Call, parents: dict) -> bool:
    """``torch.x(...).to(...)``, ``.cuda()``, or an argument of another factory/``.to`` chain that is moved."""
    node = call
    while True:
        parent = parents.get(node)
        if isinstance(parent, ast.Attribute) and parent.attr in ("to", "cuda", "pin_memory") and parent.value is node:
            return True
        if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Attribute) and parent.func.attr == "Parameter":
            return True  # a module's parameter: moved with its module
        if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Attribute) and parent.func.attr == "cat":
            node = parent  # torch.cat([torch.ones(b), ...]).to(x): the whole is moved
            continue
        if isinstance(parent, (ast.List, ast.Tuple)):
            node = parent
            continue
        return False


def _host_function(call: ast.Call, parents: dict, lines: list[str]) -> bool:
    """Whether the innermost function around ``call`` says, before it, that its tensors are host-side."""
    node = call
    while node in parents and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        node = parents[node]
    start = node.lineno if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else 1
    return any("# host:" in line for line in lines[start - 1 : call.end_lineno or call.lineno])


def unplaced_factories(path: Path) -> list[str]:
    """``file:line: call`` of every torch factory call without a device that is not moved or marked ``# host``."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    tree = ast.parse(source)
    parents = _parents(tree)
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in FACTORIES
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"):
            continue
        if any(k.arg == "device" for k in node.keywords) or _moved(node, parents):
            continue
        if _host_function(node, parents, lines):
            continue
        where = path.relative_to(PACKAGE.parent) if path.is_relative_to(PACKAGE.parent) else path.name
        found.append(f"{where}:{node.lineno}: {ast.unparse(node)[:80]}")
    return found


def test_every_tensor_factory_in_training_and_encode_code_names_its_device():
    found = [hit for path in CHECKED for hit in unplaced_factories(path)]
    assert not found, "tensor factories that make CPU tensors in device code (add device=, .to(...), or a " \
                      "'# host: <why>' comment):\n" + "\n".join(found)


def test_the_check_flags_the_kind_of_line_that_broke_ese_on_cuda(tmp_path):
    bad = tmp_path / "probe.py"
    bad.write_text("import torch\n\ndef f(x):\n    i = torch.arange(x.shape[0])\n    ok = torch.arange(3, device=x.device)\n"
                   "    moved = torch.tensor([1.0]).to(x)\n    return x[i], ok, moved\n\n"
                   "def g():\n    # host: a numpy bridge\n    return torch.zeros(2)\n", encoding="utf-8")
    found = unplaced_factories(bad)
    assert len(found) == 1 and ":4: torch.arange(x.shape[0])" in found[0]
