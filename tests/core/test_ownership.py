"""--overwrite replaces only the tool's own outputs, decided by content: a record whose fields the tool writes, and
no entry that kind of output does not hold. A user's file named like a record proves nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from espresso_export.cli.app import main
from espresso_export.core.ownership import RECORDS, foreign_entries

pytestmark = pytest.mark.usefixtures("one_thread")


def cli(capsys, *args):
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def shrunk(tiny_cut) -> Path:
    """A real shrink output (read-only)."""
    return tiny_cut


@pytest.mark.parametrize("record", ["report.json", "run.json", "espresso.json", "export.json", "sweep.json"])
def test_a_users_file_named_like_a_record_does_not_make_the_folder_replaceable(tiny_bert, tmp_path, capsys,
                                                                              record):
    mine = tmp_path / "d"
    mine.mkdir()
    (mine / record).write_text('{"my": "data"}')
    (mine / "thesis.txt").write_text("x")
    code, _, err = cli(capsys, "shrink", tiny_bert, "--layers", "2", "--dim", "8", "-o", mine, "--overwrite")
    assert code == 2 and "replaces only a folder espresso-export wrote" in err, err
    assert (mine / "thesis.txt").read_text() == "x" and (mine / record).read_text() == '{"my": "data"}'


def test_a_real_record_beside_a_users_file_is_not_enough_either(shrunk, tiny_bert, tmp_path, capsys):
    mine = Path(shutil.copytree(shrunk, tmp_path / "d"))
    (mine / "thesis.txt").write_text("x")
    code, _, err = cli(capsys, "shrink", tiny_bert, "--layers", "2", "--dim", "8", "-o", mine, "--overwrite")
    assert code == 2 and "thesis.txt, which espresso-export does not write" in err, err
    assert (mine / "thesis.txt").read_text() == "x"


def test_previous_outputs_of_shrink_export_and_push_are_replaced(shrunk, tiny_bert, tmp_path, capsys):
    cut, onnx, staged = tmp_path / "cut", tmp_path / "onnx", tmp_path / "staged"
    for _ in range(2):
        assert cli(capsys, "shrink", tiny_bert, "--layers", "2", "--dim", "8", "-o", cut, "--overwrite")[0] == 0
        assert cli(capsys, "export", shrunk, "-o", onnx, "--overwrite", "--no-validate")[0] == 0
        assert cli(capsys, "push", shrunk, "--repo-id", "me/m", "--dry-run", staged, "--overwrite")[0] == 0
    assert foreign_entries(cut) == foreign_entries(onnx) == foreign_entries(staged) == []


def _record_content(name: str) -> dict:
    """The fields each record holds when the tool writes it (as the writers of sweep, run, verify and training
    write them; shrink, export and push are written for real above)."""
    return {
        "espresso.json": {"espresso_version": "0.1.0", "step": "shrink"},
        "export.json": {"format_version": 2, "espresso_version": "0.1.0", "files": []},
        "sweep.json": {"espresso_version": "0.1.0", "source": {"id": "m"}},
        "report.json": {"espresso_version": "0.1.0", "gate": {}, "sts": {}},
        "run.json": {"recipe": {"name": "r", "output": "/x"}, "steps": []},
        "push.json": {"repo_id": "me/m", "files": [], "card": {}},
        "trainer.json": {"format": 1, "run_hash": "ab", "run": {}},
        "best.json": {"score": 0.5, "step": 3, "epoch": 1},
        "auto.json": {"espresso_version": "0.1.0", "objective": "latency", "candidates": []},
    }[name]


@pytest.mark.parametrize("record", RECORDS)
def test_each_record_is_recognised_by_content_and_its_layout(tmp_path, record):
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / record).write_text(json.dumps(_record_content(record)))
    assert foreign_entries(folder) == []
    layout_member = {"run.json": "1-shrink", "sweep.json": "sweep.csv", "report.json": "report.md",
                     "trainer.json": "optimizer.safetensors", "best.json": "model.safetensors",
                     "auto.json": "recipe.yaml"}.get(record)
    if layout_member:
        (folder / layout_member).write_text("")
        assert foreign_entries(folder) == []
    (folder / "notes.txt").write_text("mine")
    assert foreign_entries(folder) == ["notes.txt"]
    (folder / "notes.txt").unlink()
    (folder / record).write_text('{"my": "data"}')
    assert foreign_entries(folder) is None
