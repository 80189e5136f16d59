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


def _file_size_limit(limit: int) -> str:
    """Writes past ``limit`` bytes fail with EFBIG (``ulimit -f``), the signal that would kill the process ignored."""
    return (f"import resource, signal; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
            f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))")


def test_write_error_during_export_is_a_runtime_failure(tiny_bert, tmp_path):
    """A file-size limit hit while the exporter writes model.onnx: exit 1 with the errno's text, not "cannot
    export BERT" (exit 2) with the dynamo fallback's colour codes; third-party log lines stay silent."""
    res = subprocess.run(_cli("export", tiny_bert, "-o", tmp_path / "out", setup=_file_size_limit(20_000)),
                         capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=600, check=False)
    assert res.returncode == 1, res.stderr
    assert res.stderr.splitlines() == [
        "error: cannot write model.onnx: file too large (a file-size limit: ulimit -f, or the file system's maximum)"]
    assert list(tmp_path.iterdir()) == []


def test_messages_carry_no_control_sequences(tmp_path):
    """A path with an escape sequence in it (a user's argument) is printed without the raw codes."""
    folder = tmp_path / "m\x1b[31mred\x07"
    folder.mkdir()
    res = subprocess.run(_cli("shrink", folder, "--layers", "2", "-o", tmp_path / "out"), capture_output=True,
                         text=True, env=_env(), cwd=ROOT, timeout=300, check=False)
    assert res.returncode == 2, res.stderr
    assert "\x1b" not in res.stderr and "\x07" not in res.stderr
    assert "mred" in res.stderr and "not a model folder" in res.stderr
