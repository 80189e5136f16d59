"""``distill --resume`` after a Ctrl-C in the teacher pass continues it: the finished chunks are reused, then the
training starts from step 0. Without such a stop, ``--resume`` still says there is nothing to resume."""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from espresso_export.cli.app import main
from espresso_export.training.run_files import STOPPED_EARLY

pytestmark = pytest.mark.usefixtures("one_thread")

@pytest.fixture
def corpus(big_corpus) -> Path:
    return big_corpus


def _stopped_in_the_teacher_pass(argv: list[str], cache: Path, capsys) -> tuple[int, str] | None:
    """Run ``argv`` and press Ctrl-C once the pass has kept its first chunk; None if the pass outran the signal."""
    finished = threading.Event()

    def ctrl_c_after_the_first_chunk():
        while not finished.is_set():
            if len(list(cache.glob("teacher-*/parts/*.0-2048.npy"))) >= 1:
                signal.raise_signal(signal.SIGINT)  # delivered to the main thread, as a real Ctrl-C
                return
            time.sleep(0.002)

    watcher = threading.Thread(target=ctrl_c_after_the_first_chunk)
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)  # the watcher gets the GIL often while the main thread encodes
    watcher.start()
    try:
        code = main(argv)
    finally:
        finished.set()
        watcher.join()
        sys.setswitchinterval(switch)
    err = capsys.readouterr().err
    return (code, err) if "teacher pass after" in err else None


def test_resume_after_ctrl_c_in_the_teacher_pass_reuses_its_chunks_and_trains(tiny_bert, corpus, tmp_path, capsys):
    def argv(k: int) -> list[str]:
        return ["distill", "--teacher", str(tiny_bert), "--student-layers", "2", "--dim", "8", "--corpus", str(corpus),
                "--batch-size", "4", "--max-steps", "3", "--heldout", "0", "--cache-dir", str(tmp_path / f"cache{k}"),
                "-o", str(tmp_path / f"out{k}"), "--json"]

    # in a long test session the pass can outrun the watcher thread; a fresh cache is a fresh attempt
    k, stop = next(((k, s) for k in range(4) if (s := _stopped_in_the_teacher_pass(argv(k), tmp_path / f"cache{k}",
                                                                                     capsys)) is not None), (0, None))
    assert stop is not None, "the Ctrl-C never landed inside the teacher pass in 4 attempts"
    code, err = stop
    assert code == 130 and "--resume" in err, err
    run_dir = tmp_path / f"out{k}.run"
    parts = list((tmp_path / f"cache{k}").glob("teacher-*/parts/*.npy"))
    assert parts and (run_dir / STOPPED_EARLY).is_file() and not (run_dir / "checkpoint").exists()

    assert main([*argv(k), "--resume"]) == 0, capsys.readouterr().err
    out = json.loads(capsys.readouterr().out)
    assert out["train"]["resumed_from"] is None and out["train"]["steps"] == 3 and not out["targets_cached"]
    assert (tmp_path / f"out{k}" / "espresso.json").is_file()
    assert not run_dir.exists()  # the finished run removes its folder, the note included
    assert not list((tmp_path / f"cache{k}").glob("teacher-*/parts"))  # the pass is whole: its chunks are gone


def test_resume_without_a_checkpoint_or_a_stopped_pass_is_refused(tiny_bert, corpus, tmp_path, capsys):
    code = main(["distill", "--teacher", str(tiny_bert), "--student-layers", "2", "--dim", "8", "--corpus", str(corpus),
                 "--max-steps", "1", "--heldout", "0", "--cache-dir", str(tmp_path / "cache"), "-o",
                 str(tmp_path / "out"), "--resume"])
    assert code == 2 and "nothing to resume" in capsys.readouterr().err
