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
