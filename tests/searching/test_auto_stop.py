"""Ctrl-C while ``auto`` heals a candidate: the stop is auto's own (exit 130, its work folder named, the same
command continues it), not the message of the distill it was running (which names a run folder and ``--resume``,
an option ``auto`` does not take)."""

from __future__ import annotations

import os
import signal
import time

import pytest
from faults import Child
from small_search import SMALL_SEARCH_CLI

from espresso_export.searching.work import WORK_SUFFIX

pytest.importorskip("faiss", reason="auto searches with faiss (pip install 'espresso-export[eval]')")


def test_ctrl_c_during_a_heal_names_the_work_folder_the_same_command_continues(tiny_bert, docs, tmp_path):
    out = tmp_path / "out"
    work = tmp_path / ("out" + WORK_SUFFIX)
    argv = ["auto", tiny_bert, "--corpus", docs, "-o", out, *SMALL_SEARCH_CLI, "--no-static", "--layers", "1",
            "--objective", "size", "--min-retention", "0.93", "--time-budget", "10m",
            "--batch-size", "1"]  # a heal of hundreds of steps: the stop lands inside its training
    # a fresh interpreter, not a fork: forked from a test process whose thread pools (torch, faiss) other searches
    # have started, the child can hang before it runs
    child = Child(argv, tmp_path / "auto.log", fresh=True)
    deadline = time.monotonic() + 240
    while not list(work.glob("teacher-cache/*/embeddings.npy")) and child.poll() is None \
            and time.monotonic() < deadline:
        time.sleep(0.01)  # until the first heal's teacher pass is done
    time.sleep(1.0)  # its training (700 steps of one text) is under way: seconds long, even on a fast machine
    assert child.poll() is None, child.text()
    os.kill(child.pid, signal.SIGINT)
    assert child.wait() == 130, child.text()
    said = child.text().strip().splitlines()[-1]
    assert said.startswith(f"interrupted: kept {work} (the search's work so far: the same command continues it)"), said
    assert "--resume" not in said
