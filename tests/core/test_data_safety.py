"""Nothing lost, nothing let in: the tool deletes only what it created, checks outputs before any work, keeps
remote code behind the command-line flag, uploads nothing from outside the folder, writes outputs with the
user's umask, and keeps a `run --resume` state it can trust."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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


def test_train_refuses_a_run_dir_holding_user_files_too(tiny_bert, tmp_path, capsys):
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "notes.txt").write_text("my notes")
    code, _, err = cli(capsys, "train", tiny_bert, "--data", SMOKE, "--max-steps", "1", "-o", tmp_path / "out",
                       "--run-dir", runs)
    assert code == 2 and "not created by espresso-export" in err and (runs / "notes.txt").is_file()


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


@pytest.mark.parametrize("umask, folder_mode, file_mode", [(0o022, 0o755, 0o644), (0o027, 0o750, 0o640)],
                         ids=["umask022", "umask027"])
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
        assert "model.safetensors" in files or "onnx/model.onnx" in files
        assert set(dirs.values()) == {folder_mode} and set(files.values()) == {file_mode}, modes


# --- 11. outputs are checked against every input before any work ------------------------------------------------

def _digest(folder: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        h.update(p.relative_to(folder).as_posix().encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


@pytest.fixture
def model_copy(tiny_bert, tmp_path) -> Path:
    import shutil

    return Path(shutil.copytree(tiny_bert, tmp_path / "model"))


def test_distill_into_the_teacher_is_refused_before_the_teacher_pass(model_copy, calibration_file, tmp_path, capsys):
    before = _digest(model_copy)
    code, _, err = cli(capsys, *_distill_args(model_copy, calibration_file, model_copy, "--cache-dir",
                                              tmp_path / "cache", "--overwrite"))
    assert code == 2 and "is the input folder" in err
    assert not (tmp_path / "cache").exists() and not Path(f"{model_copy}.run").exists()
    assert _digest(model_copy) == before


def test_an_output_over_a_data_file_or_holding_one_is_refused(model_copy, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    corpus = out / "corpus.txt"
    corpus.write_text("a dog runs\nthe cat sleeps\n" * 20)
    code, _, err = cli(capsys, *_distill_args(model_copy, corpus, out, "--overwrite"))
    assert code == 2 and f"would delete the input {corpus}" in err and corpus.is_file()
    code, _, err = cli(capsys, "shrink", model_copy, "--layers", "2", "--dim", "8", "--head", "pca",
                       "--calibration", corpus, "-o", corpus)
    assert code == 2 and "is the input file" in err


def test_overwrite_never_replaces_the_current_folder_or_a_folder_of_the_users(model_copy, tmp_path, capsys,
                                                                              monkeypatch):
    # `-o "$UNSET" --overwrite` (and -o .) replaced the current folder: the user's notes and sources were gone
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "notes.md").write_text("important")
    (project / "src" / "app.py").write_text("code")
    monkeypatch.chdir(project)
    for out in ("", ".", ".."):
        code, _, err = cli(capsys, "shrink", model_copy, "--layers", "2", "-o", out, "--overwrite")
        assert code == 2 and "is the current folder or contains it" in err, (out, err)
    assert sorted(p.name for p in project.iterdir()) == ["notes.md", "src"] and (project / "src" / "app.py").is_file()
    # --overwrite of a folder espresso-export did not write deleted it in silence (a thesis, photos)
    mine = tmp_path / "mine"
    (mine / "photos").mkdir(parents=True)
    (mine / "thesis.txt").write_text("draft")
    code, _, err = cli(capsys, "shrink", model_copy, "--layers", "2", "-o", mine, "--overwrite")
    assert code == 2 and "replaces only a folder espresso-export wrote" in err and "photos, thesis.txt" in err
    assert (mine / "thesis.txt").read_text() == "draft" and (mine / "photos").is_dir()
    # a previous output is replaced as before, and so is an empty folder
    (tmp_path / "empty").mkdir()
    for out in (tmp_path / "cut", tmp_path / "cut", tmp_path / "empty"):
        assert cli(capsys, "shrink", model_copy, "--layers", "2", "-o", out, "--overwrite")[0] == 0


def test_train_into_its_model_is_refused_before_reading_the_data(model_copy, tmp_path, capsys):
    code, _, err = cli(capsys, "train", model_copy, "--data", tmp_path / "missing.tsv", "-o", model_copy,
                       "--overwrite")
    assert code == 2 and "is the input folder" in err  # not "file not found": the output is checked first


def test_sweep_overwriting_its_source_model_is_refused(model_copy, capsys):
    before = _digest(model_copy)
    code, _, err = cli(capsys, "sweep", model_copy, "--layers", "2", "--dims", "16", "--sts", "builtin",
                       "--latency-rounds", "1", "-o", model_copy, "--overwrite")
    assert code == 2 and "is the input folder" in err
    assert _digest(model_copy) == before


def test_push_dry_run_into_the_model_is_refused(model_copy, capsys):
    code, _, err = cli(capsys, "push", model_copy, "--repo-id", "me/m", "--dry-run", model_copy / "staged")
    assert code == 0  # a folder inside the model is allowed (like FOLDER/onnx)
    code, _, err = cli(capsys, "push", model_copy / "staged", "--repo-id", "me/m", "--dry-run", model_copy,
                       "--overwrite")
    assert code == 2 and "would delete the input" in err


# --- 2. remote code: only the command line turns it on ---------------------------------------------------------

@pytest.mark.parametrize("step", ["shrink: {layers: 2, trust_remote_code: true}",
                                  "distill: {corpus: [builtin], dim: 8, student_layers: 2, trust_remote_code: false}",
                                  "export: {trust_remote_code: true}"])
def test_a_recipe_cannot_allow_remote_code(tmp_path, capsys, step):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"source: minilm\nsteps:\n  - {step}\n")
    code, _, err = cli(capsys, "run", recipe, "-o", tmp_path / "run")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "r.yaml:3" in err and "trust_remote_code: a recipe cannot allow remote code; pass --trust-remote-code" in err


def test_set_cannot_allow_remote_code_either(tmp_path, capsys):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("source: minilm\nsteps:\n  - shrink: {layers: 2}\n")
    code, _, err = cli(capsys, "run", recipe, "--set", "shrink.trust_remote_code=true", "--plan")
    assert code == 2 and "--set shrink.trust_remote_code=true: shrink.trust_remote_code: a recipe cannot" in err


def test_run_trust_remote_code_reaches_every_step_that_loads_a_model(tiny_bert, tmp_path):
    from espresso_export.pipeline.recipes import parse_recipe
    from espresso_export.pipeline.recipe_runner import run_recipe

    text = f"source: {tiny_bert}\noutput: {tmp_path / 'run'}\nsteps:\n  - shrink: {{layers: 2}}\n  - export: {{}}\n"
    result = run_recipe(parse_recipe(text), trust_remote_code=True)
    assert [s.config.trust_remote_code for s in result.recipe.steps] == [True, True]
    plain = run_recipe(parse_recipe(text.replace("/run", "/run2")))
    assert [s.config.trust_remote_code for s in plain.recipe.steps] == [False, False]


# --- 9. run --resume: a state it can trust ----------------------------------------------------------------------

def _run(capsys, recipe, out, *extra):
    code, stdout, err = cli(capsys, "run", recipe, "-o", out, "--json", *extra)
    return code, [s["status"] for s in json.loads(stdout)["steps"]] if code == 0 else err


def test_a_truncated_run_state_is_refused_not_rerun(tiny_bert, tmp_path, capsys):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"source: {tiny_bert}\nsteps:\n  - shrink: {{layers: 2}}\n")
    out = tmp_path / "run"
    assert _run(capsys, recipe, out) == (0, ["done"])
    state = out / "run.json"
    assert json.loads(state.read_text())["steps"][0]["inputs"]  # the inputs' fingerprint is recorded
    state.write_text(state.read_text()[:40])  # a crash or full disk mid-write
    before = _digest(out / "1-shrink")
    code, err = _run(capsys, recipe, out, "--resume")
    assert code == 2 and f"run state {state} is unreadable" in err and "--overwrite" in err
    assert len(err.strip().splitlines()) == 1 and _digest(out / "1-shrink") == before
    assert not list(out.glob(".run.json.tmp-*"))


def test_resume_reruns_a_step_whose_input_files_changed(model_copy, calibration_file, tmp_path, capsys):
    import shutil

    cal = Path(shutil.copy(calibration_file, tmp_path / "cal.txt"))
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"source: {model_copy}\nsteps:\n  - shrink: {{layers: 2, dim: 8, head: pca, calibration: "
                      f"{cal}}}\n  - export: {{validate: false}}\n")
    out = tmp_path / "run"
    assert _run(capsys, recipe, out) == (0, ["done", "done"])
    assert _run(capsys, recipe, out, "--resume") == (0, ["reused", "reused"])
    cal.write_text("\n".join(cal.read_text().splitlines()[:100]) + "\n")  # same name, other sentences
    assert _run(capsys, recipe, out, "--resume") == (0, ["done", "done"])
    assert _run(capsys, recipe, out, "--resume") == (0, ["reused", "reused"])
    (model_copy / "config.json").touch()  # the source model changed (here: its time)
    assert _run(capsys, recipe, out, "--resume") == (0, ["done", "done"])


def test_a_recipe_reading_from_a_folder_the_run_replaces_is_refused(model_copy, tmp_path, capsys):
    out = tmp_path / "run"
    assert cli(capsys, "shrink", model_copy, "--layers", "3", "-o", out / "2-export")[0] == 0
    before = _digest(out / "2-export")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"source: {out / '2-export'}\nsteps:\n  - shrink: {{layers: 2}}\n  - export: {{}}\n")
    code, err = _run(capsys, recipe, out, "--overwrite")
    assert code == 2 and "inside the step folder" in err
    assert _digest(out / "2-export") == before and not (out / "1-shrink").exists()


# --- 4. push: nothing from outside the folder; the token off the command line ----------------------------------

@pytest.fixture
def small_model(tiny_bert, tmp_path) -> Path:
    from espresso_export.shrinking.shrink import shrink

    return shrink(tiny_bert, tmp_path / "small", layers=2).output


def test_push_refuses_a_link_to_a_file_outside_the_folder(small_model, tmp_path, capsys):
    secret = tmp_path / "token.txt"
    secret.write_text("hf_secret")
    (small_model / "vocab.txt").symlink_to(secret)
    code, _, err = cli(capsys, "push", small_model, "--repo-id", "me/m", "--dry-run", tmp_path / "staged")
    assert code == 2 and f"links to {secret}, outside {small_model}" in err
    assert not (tmp_path / "staged").exists()


def test_push_follows_links_into_the_hub_caches_blobs(small_model, tmp_path, capsys):
    """A Hub cache snapshot holds links to ../../blobs/<hash>: those are the model's own files."""
    import shutil

    cache = tmp_path / "hub" / "models--me--small"
    snapshot = cache / "snapshots" / "abc123"
    (cache / "blobs").mkdir(parents=True)
    for f in sorted(small_model.rglob("*")):
        rel = f.relative_to(small_model)
        if f.is_dir():
            (snapshot / rel).mkdir(parents=True, exist_ok=True)
            continue
        blob = cache / "blobs" / f"blob{len(list((cache / 'blobs').iterdir()))}"
        shutil.copyfile(f, blob)
        (snapshot / rel).parent.mkdir(parents=True, exist_ok=True)
        (snapshot / rel).symlink_to(os.path.relpath(blob, (snapshot / rel).parent))
    code, _, err = cli(capsys, "push", snapshot, "--repo-id", "me/m", "--dry-run", tmp_path / "staged")
    assert code == 0, err
    staged = tmp_path / "staged" / "model.safetensors"
    assert not staged.is_symlink() and staged.read_bytes() == (small_model / "model.safetensors").read_bytes()


def test_a_token_on_the_command_line_is_warned_about_and_never_shown(small_model, tmp_path, capsys):
    code, out, err = cli(capsys, "push", small_model, "--repo-id", "me/m", "--token", "hf_abcdef123456",
                         "--dry-run", tmp_path / "staged")
    assert code == 0 and "visible in the shell history and the process list; set HF_TOKEN" in err
    assert "hf_abcdef123456" not in out + err


def test_a_report_written_to_a_fifo_or_a_device_is_written_into_it_not_over_it(tmp_path):
    """``verify --json`` to a FIFO, ``/dev/stdout`` or ``/dev/null``: the rename of an atomic write replaced the FIFO
    (its reader hung) and, as root, /dev/null itself with a plain file; /dev/stdout on a pipe could not be opened."""
    import stat
    import threading

    from espresso_export.core.files import write_text_atomic

    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    write_text_atomic(fifo, '{"ok": true}\n')
    reader.join(timeout=30)
    assert got == ['{"ok": true}\n'] and stat.S_ISFIFO(fifo.stat().st_mode)
    # /dev/stdout on a pipe (``verify --json /dev/stdout | jq``); devices are not written here: a regression would
    # replace the machine's /dev/null
    run = subprocess.run([sys.executable, "-c", "from espresso_export.core.files import write_text_atomic; "
                          "write_text_atomic('/dev/stdout', 'through the pipe')"], capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout == "through the pipe", run.stderr
    # a regular file is still replaced whole, by rename
    (tmp_path / "r.json").write_text("old")
    write_text_atomic(tmp_path / "r.json", "new")
    assert (tmp_path / "r.json").read_text() == "new"


def test_a_report_never_replaces_a_file_that_is_not_a_report(model_copy, tmp_path, capsys):
    # verify --json cand/model.safetensors (or --markdown cand/config.json) replaced the model's own file, exit 0
    import shutil

    cand = Path(shutil.copytree(model_copy, tmp_path / "cand"))
    before = _digest(cand)
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    for flag, path in (("--json", cand / "model.safetensors"), ("--markdown", cand / "config.json"),
                       ("--json", notes)):
        code, _, err = cli(capsys, "verify", cand, "--against", model_copy, "--batch-sizes", "none", "--sts-limit",
                           "10", flag, path)
        assert code == 2 and "exists and is not a verify report; it is kept" in err, err
    assert _digest(cand) == before and notes.read_text() == "mine"
    report, md = tmp_path / "r.json", tmp_path / "r.md"
    for _ in range(2):  # a previous report is replaced, as before
        args = ["verify", cand, "--against", model_copy, "--batch-sizes", "none", "--sts-limit", "10"]
        assert cli(capsys, *args, "--json", report, "--markdown", md)[0] == 0
    assert json.loads(report.read_text())["gate"] and md.read_text().startswith("## Verification")
