"""Two distills with the same teacher and corpus at once (two widths, two outputs): they share the teacher cache,
so the second waits for the first's teacher pass and reuses it, instead of the two writing the same chunks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_two_distills_on_one_teacher_cache_both_finish(tiny_bert, calibration_file, tmp_path):
    env = {**os.environ, "ESPRESSO_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-m", "espresso_export", "distill", "--teacher", str(tiny_bert),
                               "--student-layers", "2", "--dim", str(dim), "--corpus", str(calibration_file),
                               "--epochs", "1", "--batch-size", "16", "--heldout", "0",
                               "-o", str(tmp_path / f"out{dim}")],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for dim in (8, 16)]
    results = [(p.wait(timeout=600), p.stderr.read()) for p in procs]
    for code, err in results:
        assert code == 0, err[-2000:]
    assert all((tmp_path / f"out{dim}" / "model.safetensors").is_file() for dim in (8, 16))
    caches = list((tmp_path / "cache").glob("teacher-*"))
    assert len(caches) == 1 and (caches[0] / "embeddings.npy").is_file()
    assert not list(caches[0].glob("parts/*")) and not list(caches[0].rglob(".*.tmp-*"))
