"""Nothing lost, nothing let in: the tool deletes only what it created, checks outputs before any work, keeps
remote code behind the command-line flag, uploads nothing from outside the folder, writes outputs with the
user's umask, and keeps a `run --resume` state it can trust."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from espresso_export.cli.app import main
from espresso_export.data import builtin_resource

pytestmark = pytest.mark.usefixtures("one_thread")

SMOKE = builtin_resource("sts_smoke.tsv")


def cli(capsys, *args):
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def _distill_args(teacher, corpus, out, *extra):
    return ["distill", "--teacher", teacher, "--student-layers", "2", "--dim", "8", "--corpus", corpus,
            "--batch-size", "32", "--max-steps", "2", "--heldout", "0", "-o", out, *extra]


# --- 1. the run folder: delete only what the tool wrote ---------------------------------------------------------

def test_run_dir_holding_user_files_is_refused_before_any_work(tiny_bert, calibration_file, tmp_path, capsys):
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "notes.txt").write_text("my notes")
    code, _, err = cli(capsys, *_distill_args(tiny_bert, calibration_file, tmp_path / "out", "--run-dir", runs,
                                              "--cache-dir", tmp_path / "cache"))
    assert code == 2 and "not created by espresso-export" in err and "'notes.txt'" in err
    assert len(err.strip().splitlines()) == 1
    assert (runs / "notes.txt").read_text() == "my notes" and not (tmp_path / "out").exists()
    assert not (tmp_path / "cache").exists()  # refused before the teacher pass


def test_a_finished_run_and_overwrite_remove_only_the_checkpoints(tiny_bert, calibration_file, tmp_path, capsys):
    runs = tmp_path / "runs"
    runs.mkdir()  # an empty folder the user made: the tool may use it, not delete it
    args = _distill_args(tiny_bert, calibration_file, tmp_path / "out", "--run-dir", runs,
                         "--cache-dir", tmp_path / "cache")
    assert cli(capsys, *args)[0] == 0
    assert runs.is_dir() and list(runs.iterdir()) == []
    assert cli(capsys, *args, "--keep-checkpoints", "--checkpoint-every", "1",
               "--overwrite")[0] == 0  # leaves a checkpoint in runs/
    assert (runs / "checkpoint" / "trainer.json").is_file()
    (runs / "notes.txt").write_text("added later")
    code, _, err = cli(capsys, *args, "--overwrite")  # a fresh start over the kept checkpoint
    assert code == 0, err
    assert sorted(p.name for p in runs.iterdir()) == ["notes.txt"]


def test_the_default_run_folder_is_removed_after_a_finished_run(tiny_bert, calibration_file, tmp_path, capsys):
    code, _, err = cli(capsys, *_distill_args(tiny_bert, calibration_file, tmp_path / "out",
                                              "--cache-dir", tmp_path / "cache"))
    assert code == 0, err
    assert (tmp_path / "out" / "model.safetensors").is_file() and not (tmp_path / "out.run").exists()


def test_run_dir_inside_the_output_is_refused(tiny_bert, calibration_file, tmp_path, capsys):
    code, _, err = cli(capsys, *_distill_args(tiny_bert, calibration_file, tmp_path / "out", "--run-dir",
                                              tmp_path / "out" / "ckpt"))
    assert code == 2 and "inside it" in err


# --- 5. outputs get the user's umask ----------------------------------------------------------------------------

def _modes(folder: Path) -> dict[str, int]:
    return {p.relative_to(folder).as_posix() or ".": p.stat().st_mode & 0o777 for p in [folder, *folder.rglob("*")]}


@pytest.mark.parametrize("umask, folder_mode, file_mode", [(0o022, 0o755, 0o644), (0o027, 0o750, 0o640)])
def test_outputs_are_created_with_the_users_umask(tiny_bert, tmp_path, capsys, umask, folder_mode, file_mode):
    before = os.umask(umask)
    try:
        assert cli(capsys, "shrink", tiny_bert, "--layers", "2", "-o", tmp_path / "small")[0] == 0
        assert cli(capsys, "export", tmp_path / "small", "-o", tmp_path / "onnx", "--no-validate")[0] == 0
    finally:
        os.umask(before)
    for folder in (tmp_path / "small", tmp_path / "onnx"):
        modes = _modes(folder)
        dirs = {k: v for k, v in modes.items() if (folder / k).is_dir()}
        files = {k: v for k, v in modes.items() if (folder / k).is_file()}
        assert "model.safetensors" in files or "model.onnx" in files
        assert set(dirs.values()) == {folder_mode} and set(files.values()) == {file_mode}, modes
