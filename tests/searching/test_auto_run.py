"""``auto`` as a user runs it from the command line: the budget covers the whole command and says so up front;
rung 0 scores what the budget covers; a refused run leaves no folder; an output inside an input folder is refused;
a rerun says what it reuses; the closing line names only what was written; a stop names what it kept."""

from __future__ import annotations

import json
import shutil

import pytest

from espresso_export.cli.app import main
from espresso_export.searching.auto import auto

pytest.importorskip("faiss", reason="auto searches with faiss (pip install 'espresso-export[eval]')")

# the tiny random model's scores are noise: these tests check the command, not them
TINY = dict(sample_documents=80, sample_queries=24, max_texts=400, batch_size=16, threads=1, known_items="title",
            max_noise=10.0, latency_budget=0.0)
CLI = ["--sample-documents", "80", "--sample-queries", "24", "--max-texts", "400", "--batch-size", "16", "--threads", "1",
       "--known-items", "title", "--latency-budget", "0"]


def test_the_budget_keeps_the_finish_aside_and_rung_0_scores_the_deepest_cuts_it_covers(tmp_path, tiny_bert, docs):
    """A budget the source's pass has already spent: rung 0 scores the deepest depth only (it alone may keep a
    target untrained), the plan line says what is kept for the finish, and auto.json records the estimate beside
    what the finish took."""
    result = auto(tiny_bert, tmp_path / "out", corpus=[str(docs)], min_retention=0.5, time_budget="1s", **TINY)
    assert {c["name"] for c in result.candidates} == {"L3", "L3f"}
    assert any(line.startswith("budget 0.0 min:") and "kept aside" in line and "expected total" in line
               for line in result.log), result.log
    assert any("does not cover the cuts of 2 layers or fewer" in line for line in result.log), result.log
    timing = json.loads((tmp_path / "out" / "auto.json").read_text())["timing"]
    assert timing["finish_estimated_seconds"] > 0 and timing["finish_seconds"] > 0
    assert timing["seconds"] >= timing["finish_seconds"]


def test_a_refused_search_leaves_no_work_folder(tmp_path, tiny_bert):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    assert main(["auto", str(tiny_bert), "--corpus", str(empty), "-o", str(tmp_path / "out")]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.txt"]


def test_an_output_inside_an_input_folder_is_refused(tmp_path, tiny_bert, docs, capsys):
    model = tmp_path / "model"
    shutil.copytree(tiny_bert, model)
    before = sorted(p.name for p in model.iterdir())
    code = main(["auto", str(model), "--corpus", str(docs), "-o", str(model / "small"), "--time-budget", "1s", *CLI])
    assert code == 2 and "inside the input folder" in capsys.readouterr().err
    assert sorted(p.name for p in model.iterdir()) == before


def test_a_rerun_says_what_it_reuses_and_the_closing_line_names_only_what_was_written(tmp_path, tiny_bert, docs,
                                                                                     capsys):
    out = tmp_path / "out"
    args = ["auto", str(tiny_bert), "--corpus", str(docs), "-o", str(out), "--time-budget", "1s",
            "--min-retention", "0.5", "--max-noise", "0.001", "--layers", "1", *CLI]  # no score decides: exit 3
    assert main(args) == 3
    first = capsys.readouterr()
    assert "auto: no score could decide whether a candidate keeps 0.5 of the source" in first.err
    closing = next(line for line in first.out.splitlines() if str(out) in line)
    assert closing.startswith("auto.{json,csv,png}:") and "recipe.yaml" not in closing
    assert sorted(p.name for p in out.iterdir()) == ["auto.csv", "auto.json", "auto.png"]
    assert main([*args, "--overwrite"]) == 3
    again = capsys.readouterr().err
    assert f"continuing the search in {out}.auto-work: rung 0 (2 plain cuts) reused" in again


def test_a_stop_names_the_folders_it_keeps_and_no_temporary_path(tmp_path):
    from espresso_export.cli.app import _interrupted_note
    from espresso_export.core.tempfiles import (
        forget_written,
        note_kept,
        note_written,
        temp_name,
    )

    forget_written()
    work, out = tmp_path / "out.auto-work", tmp_path / "out"
    work.mkdir()
    note_kept(work, "the search's work so far: the same command continues it")
    note_written(work / "auto-state.json")  # inside the kept folder: the folder is named instead
    note_written(temp_name(out) / "verify.json")  # inside a temporary folder, removed with it
    note = _interrupted_note()
    forget_written()
    assert note == (f"kept {work} (the search's work so far: the same command continues it); nothing else written "
                    "(existing outputs are unchanged)")
