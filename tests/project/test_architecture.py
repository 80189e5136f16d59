"""The package's structure: the import rule between stages, and `--help` without heavy imports."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_hold():
    """`lint-imports` (import-linter) checks the contracts in pyproject.toml: stages import downwards only."""
    exe = shutil.which("lint-imports")
    if exe is None:
        pytest.skip("import-linter is not installed (pip install -e '.[dev]')")
    proc = subprocess.run([exe], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "broken" in proc.stdout and "0 broken" in proc.stdout


def test_cli_help_imports_no_heavy_library():
    """`espresso-export --help` must stay instant: building the CLI imports neither torch nor onnx."""
    code = ("import sys; import espresso_export.cli.app as a; a._register(); "
            "heavy = [m for m in ('torch', 'transformers', 'onnx', 'onnxruntime', 'numpy') if m in sys.modules]; "
            "print(','.join(heavy))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ""


def test_modules_and_functions_stay_small():
    """No module over 400 lines and no function over 60 lines from its ``def`` to its last line (signature and
    docstring included), so a reader finds one concern per file and one step per function."""
    import ast

    too_long = []
    for path in sorted((ROOT / "espresso_export").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > 400:
            too_long.append(f"{path.relative_to(ROOT)}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            length = node.end_lineno - node.lineno + 1
            if length > 60:
                too_long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {length} lines")
    assert not too_long, "\n".join(too_long)


SEARCHING = ROOT / "espresso_export" / "searching"
# a candidate's scores are frozen records (searching/candidates.py, scoring.py): their fields, never string keys
SCORE_KEYS = {"retention", "ci95", "agreement_at_10", "bytes_per_vector", "variants"}


def _searching_modules():
    import ast

    for path in sorted(SEARCHING.glob("*.py")):
        yield path, ast.parse(path.read_text(encoding="utf-8"))


def _functions(tree):
    import ast

    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def test_the_search_package_imports_its_modules_at_the_top():
    """An import of a sibling inside a function hides a cycle: the package's modules import one way, at the top
    (the layers contract in pyproject.toml checks the direction)."""
    import ast

    inside = [f"{path.name}:{node.lineno}" for path, tree in _searching_modules() for fn in _functions(tree)
              for node in ast.walk(fn) if isinstance(node, ast.ImportFrom)
              and (node.module or "").startswith("espresso_export.searching")]
    assert not inside, inside


def test_the_search_context_is_typed_wherever_it_is_passed():
    untyped = [f"{path.name}:{fn.lineno} {fn.name}" for path, tree in _searching_modules() for fn in _functions(tree)
               for arg in fn.args.args + fn.args.kwonlyargs
               if arg.arg == "ctx" and (arg.annotation is None or getattr(arg.annotation, "id", None) != "Context")]
    assert not untyped, untyped


def test_a_candidates_scores_are_read_by_field_not_by_string_key():
    """Only the records' own ``from_dict`` reads a score's string keys; the final check reads verify's report,
    which is verify's dicts, not a candidate's scores."""
    import ast

    found = []
    for path, tree in _searching_modules():
        if path.name == "final_check.py":
            continue
        allowed = {id(n) for fn in _functions(tree) if fn.name == "from_dict" for n in ast.walk(fn)}
        for node in ast.walk(tree):
            key = None
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
                key = node.slice.value
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "get" and node.args \
                    and isinstance(node.args[0], ast.Constant):
                key = node.args[0].value
            if key in SCORE_KEYS and id(node) not in allowed:
                found.append(f"{path.name}:{node.lineno} [{key!r}]")
    assert not found, found


def test_no_package_is_named_as_a_public_function():
    """The naming rule (docs/architecture.md): a stage's package is named for its job, never as the public function
    ``from espresso_export import <verb>`` gives, which a subpackage of the same name would shadow."""
    import espresso_export

    packages = {p.name for p in (ROOT / "espresso_export").iterdir() if (p / "__init__.py").is_file()}
    public = set(getattr(espresso_export, "__all__", ()))
    assert {"shrink", "export", "verify", "auto"} <= public
    assert not packages & public, packages & public
