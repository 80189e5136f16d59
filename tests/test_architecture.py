"""The package's structure: the import rule between stages, and `--help` without heavy imports."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


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
