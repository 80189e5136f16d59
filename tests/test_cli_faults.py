"""The command line under faults a user meets: Ctrl-C, a full disk or a file-size limit, a missing optional
package. Each runs the real CLI in a subprocess."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import espresso_export

ROOT = Path(espresso_export.__file__).resolve().parents[1]  # the code this session tests, also in the children


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
            "NO_COLOR": "", "TERM": "dumb"}


def _cli(*args, setup: str = "") -> list[str]:
    """The CLI in a fresh interpreter; ``setup`` runs first (a signal disposition, a resource limit, an import
    blocker), so the child is set up by itself rather than by a ``preexec_fn`` in this threaded process."""
    code = (f"{setup}\nimport runpy, sys\nsys.argv[0] = 'espresso-export'\n"
            "runpy.run_module('espresso_export', run_name='__main__')")
    return [sys.executable, "-c", code, *map(str, args)]


# a shell's background job inherits SIGINT ignored; Ctrl-C in a terminal finds the default disposition
DEFAULT_SIGINT = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)"


def _sigint_after(cmd: list[str], seconds: float) -> subprocess.CompletedProcess:
    """Start ``cmd``, send SIGINT (what Ctrl-C sends) after ``seconds``, wait for it."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=ROOT)
    time.sleep(seconds)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


@pytest.mark.parametrize("command", ["export", "shrink"])
def test_ctrl_c_prints_one_line_and_exits_130(tiny_bert, tmp_path, command):
    """typer turned Ctrl-C into a silent exit 130; now one line says so and no output (or temp folder) is left."""
    args = {"export": ["export", tiny_bert], "shrink": ["shrink", tiny_bert, "--layers", "2"]}[command]
    res = _sigint_after(_cli(*args, "-o", tmp_path / "out", setup=DEFAULT_SIGINT), 2.5)  # while torch/transformers import
    assert res.returncode == 130, res.stderr
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("interrupted: nothing written"), res.stderr
    assert "Traceback" not in res.stderr and "Aborted" not in res.stderr
    assert list(tmp_path.iterdir()) == []
