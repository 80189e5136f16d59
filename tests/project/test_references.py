"""Every dotted path ``espresso_export.x.y[.Name]`` named in the package's docstrings and comments, the README,
docs/ and the benchmark page resolves: a module moved or renamed leaves no reference to its old place."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import io
import re
import tokenize
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "espresso_export"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), ROOT / "benchmarks" / "README.md"]
# a dotted name: "espresso_export" then identifiers joined by dots (a trailing sentence dot is not part of it)
DOTTED = re.compile(r"(?<![\w.])espresso_export(?:\.[A-Za-z_]\w*)+")


def _python_texts(path: Path) -> list[tuple[int, str]]:
    """``(line, text)`` of the docstrings and comments of one module: where prose names other modules."""
    source = path.read_text(encoding="utf-8")
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                out.append((node.body[0].lineno, doc))
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            out.append((tok.start[0], tok.string))
    return out


def _references() -> list[tuple[str, str]]:
    """``(where, dotted path)`` for every reference in the package's prose and the documents."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for line, text in _python_texts(path):
            found += [(f"{path.relative_to(ROOT)}:{line + text[:m.start()].count(chr(10))}", m.group())
                      for m in DOTTED.finditer(text)]
    for path in DOCS:
        if path.is_file():
            for line, text in enumerate(path.read_text(encoding="utf-8").split("\n"), 1):
                found += [(f"{path.relative_to(ROOT)}:{line}", m) for m in DOTTED.findall(text)]
    return found


def resolves(dotted: str) -> bool:
    """Import the longest importable module prefix of ``dotted``, then look the rest up as attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        name = ".".join(parts[:cut])
        try:
            obj = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name is None or name.startswith(e.name):
                continue  # no such module (or no such package above it)
            return importlib.util.find_spec(name) is not None  # it exists; an optional library it imports is absent
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_the_scan_finds_references_and_the_resolver_tells_old_paths_from_current_ones():
    refs = _references()
    assert len(refs) > 20 and any(where.startswith("espresso_export/") for where, _ in refs)
    assert resolves("espresso_export.core.files.atomic_output") and resolves("espresso_export.runtime.OnnxEncoder")
    assert not resolves("espresso_export.recipe_runner") and not resolves("espresso_export.core.files.no_such_name")


def test_every_dotted_module_path_in_docstrings_comments_and_docs_resolves():
    stale = sorted({f"{where}: {dotted}" for where, dotted in _references() if not resolves(dotted)})
    assert stale == [], f"{len(stale)} references to modules or names that do not exist:\n" + "\n".join(stale)
