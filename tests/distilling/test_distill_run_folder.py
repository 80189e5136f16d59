"""distill's run folder: one run at a time, refused at once; a corpus too small for the settings named as such."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from espresso_export.cli.app import main

pytestmark = pytest.mark.usefixtures("one_thread")

HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from espresso_export.training.run_files import held
    with held(Path(sys.argv[1])):
        print("held", flush=True)
        time.sleep(600)
""")


def _hold(run_dir: Path) -> subprocess.Popen:
    """Another process holding ``run_dir``'s lock, as a running distill does."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(run_dir)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def _distill(tiny_bert, corpus: Path, tmp_path: Path, *extra: str) -> int:
    return main(["distill", "--teacher", str(tiny_bert), "--student-layers", "2", "--dim", "4", "--corpus",
                 str(corpus), "--batch-size", "16", "--max-steps", "2", "--heldout", "0", "--cache-dir",
                 str(tmp_path / "cache"), "-o", str(tmp_path / "out"), *extra])


def test_a_second_run_on_the_same_run_folder_is_refused_at_once(tiny_bert, calibration_file, tmp_path, capsys):
    """Two distills to one -o trained into the same OUT.run and the loser failed only at the end."""
    holder = _hold(tmp_path / "out.run")
    try:
        assert _distill(tiny_bert, calibration_file, tmp_path) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"run folder {tmp_path / 'out.run'} is in use by another run" in err[0]
        assert f"process {holder.pid} " in err[0]
        assert not (tmp_path / "cache").exists() and not (tmp_path / "out").exists()  # no teacher pass, no output
    finally:
        holder.kill()
        holder.wait()
    assert _distill(tiny_bert, calibration_file, tmp_path) == 0  # the lock went with its process
    assert (tmp_path / "out" / "espresso.json").is_file() and not (tmp_path / "out.run").exists()


def test_a_killed_runs_lock_blocks_nothing_and_a_refused_start_leaves_no_folder(tiny_bert, calibration_file,
                                                                                  tmp_path, capsys):
    holder = _hold(tmp_path / "out.run")
    os.kill(holder.pid, signal.SIGKILL)  # as a kill -9 or an out-of-memory kill leaves it
    holder.wait()
    assert (tmp_path / "out.run").is_dir()  # the killed run's folder, with its lock file
    assert _distill(tiny_bert, calibration_file, tmp_path) == 0
    assert not (tmp_path / "out.run").exists()  # the finished run removed the lock file and the tool's folder
    holder = _hold(tmp_path / "out.run")
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    assert _distill(tiny_bert, calibration_file, tmp_path, "--resume", "--overwrite") == 2
    assert "nothing to resume" in capsys.readouterr().err
    assert not (tmp_path / "out.run").exists()  # a run refused at its start leaves none of the tool's files
    mine = tmp_path / "mine"
    mine.mkdir()  # a folder the user named: kept, empty, as it was
    assert _distill(tiny_bert, calibration_file, tmp_path, "--resume", "--run-dir", str(mine)) == 2
    assert mine.is_dir() and not any(mine.iterdir())


def test_a_one_sentence_corpus_is_refused_as_too_small_not_blamed_on_the_learning_rate(tiny_bert, tmp_path, capsys):
    """A 1-sentence distill at --batch-size 1 trained on targets that are all zero and said "lower --lr"."""
    one = tmp_path / "one.txt"
    one.write_text("a dog runs in the park\n", encoding="utf-8")
    code = main(["distill", "--teacher", str(tiny_bert), "--student-layers", "2", "--dim", "1", "--corpus", str(one),
                 "--batch-size", "1", "--cache-dir", str(tmp_path / "cache"), "-o", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "too few sentences for --dim 1" in err and "needs at least 2 sentences" in err and "--lr" not in err
    assert not (tmp_path / "out.run").exists()
