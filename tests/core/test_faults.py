"""Signals and kills: SIGTERM is handled like Ctrl-C, temp files of killed runs are removed by the next run,
a stopped teacher pass continues from its chunks, and shrink, export, distill and ``run`` stopped by SIGINT,
SIGTERM or SIGKILL at random points never show a partial output and resume to the same bytes
(:mod:`faults` describes the harness)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from faults import TEMP_NAME, Chain, Child, newer, run_to_end, temps, tree

pytestmark = pytest.mark.usefixtures("one_thread")

SEED = 16


# --- temp names: owned, and removed once their owner is gone ----------------------------------------------------

def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_temps_of_killed_runs_are_removed_at_start_and_others_kept(tiny_bert, tmp_path):
    from espresso_export.core.tempfiles import owner_tag, temp_name
    from espresso_export.core.files import atomic_output, check_output

    out = tmp_path / "out"
    dead, alive = owner_tag(_dead_pid()), owner_tag(os.getppid())
    pid, machine, boot = dead.split("-")
    stale_dir = temp_name(out, tag=dead)
    stale_file = temp_name(tmp_path / "report.json", tag=dead)
    rebooted = temp_name(out, tag=f"{os.getppid()}-{machine}-{'0' * 8}")  # this machine before a reboot
    live = temp_name(out, tag=alive)
    foreign = temp_name(out, tag=f"{pid}-{'f' * 8}-{boot}")  # another container or computer: not ours to judge
    untagged = tmp_path / ".out.tmp-k2j4h5x9"  # an older release's name: owner unknown
    for d in (stale_dir, rebooted, live, foreign, untagged):
        (d / "sub").mkdir(parents=True)
        (d / "sub" / "model.safetensors").write_bytes(b"partial")
    stale_file.write_text("{")
    check_output(out, overwrite=False)  # what every command runs before any work
    assert not stale_dir.exists() and not stale_file.exists() and not rebooted.exists()
    assert live.exists() and foreign.exists() and untagged.exists()

    # killed between the two renames of --overwrite: the previous output is put back, not deleted
    previous = temp_name(tmp_path / "model", "old", tag=dead)
    previous.mkdir()
    (previous / "model.safetensors").write_bytes(b"the user's model")
    (previous / "espresso.json").write_text('{"espresso_version": "0.1.0"}')  # an output the tool wrote
    check_output(tmp_path / "other", overwrite=False)
    assert (tmp_path / "model" / "model.safetensors").read_bytes() == b"the user's model" and not previous.exists()
    # ... and removed when the new output made it into place
    again = temp_name(tmp_path / "model", "old", tag=dead)
    again.mkdir()
    with atomic_output(tmp_path / "model", overwrite=True) as tmp:
        (tmp / "model.safetensors").write_bytes(b"new")
    assert not again.exists() and (tmp_path / "model" / "model.safetensors").read_bytes() == b"new"
    assert sorted(p.name for p in temps(tmp_path)) == sorted(p.name for p in (live, foreign, untagged))


def test_ctrl_c_between_the_two_renames_of_an_overwrite_keeps_the_previous_output(tmp_path, monkeypatch):
    from espresso_export.core import files as layout

    out = tmp_path / "out"
    out.mkdir()
    (out / "model.safetensors").write_bytes(b"previous")
    (out / "espresso.json").write_text('{"espresso_version": "0"}')  # a previous output: --overwrite replaces only those
    renames = []
    real_rename = os.rename

    def rename_then_ctrl_c(src, dst):  # the OS call itself: Ctrl-C lands right after the first rename
        real_rename(src, dst)
        renames.append(dst)
        if len(renames) == 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(layout.os, "rename", rename_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt), layout.atomic_output(out, overwrite=True) as tmp:
        (tmp / "model.safetensors").write_bytes(b"new")
    monkeypatch.undo()
    assert (out / "model.safetensors").read_bytes() == b"previous" and not temps(tmp_path)


def test_ctrl_c_just_after_the_output_is_renamed_in_reports_it_written_whole(tiny_bert, tmp_path, monkeypatch,
                                                                              capsys):
    """The rename is the commit point: a stop after it leaves the new output whole, the previous one gone, no
    temps, and the message names the output instead of claiming that nothing was written."""
    from espresso_export.cli.app import main
    from espresso_export.core import files as layout

    out = tmp_path / "out"
    out.mkdir()
    (out / "vocab.txt").write_bytes(b"previous")  # a file of the previous output the new one does not have
    (out / "espresso.json").write_text('{"espresso_version": "0"}')  # a previous output: --overwrite replaces only those
    real_rename = os.rename

    def rename_then_ctrl_c(src, dst):
        real_rename(src, dst)
        if Path(dst) == out:  # the new output just went into place
            raise KeyboardInterrupt

    monkeypatch.setattr(layout.os, "rename", rename_then_ctrl_c)
    code = main(["shrink", str(tiny_bert), "--layers", "1", "-o", str(out), "--overwrite"])
    monkeypatch.undo()
    err = " ".join(capsys.readouterr().err.split())
    assert code == 130
    assert not (out / "vocab.txt").exists() and (out / "model.safetensors").is_file() and not temps(tmp_path)
    assert f"stopped after {out} was written whole" in err and "nothing written" not in err


# --- the teacher pass continues where it stopped ----------------------------------------------------------------

def test_teacher_pass_stopped_mid_way_continues_from_its_chunks_with_the_same_bytes(tiny_bert, big_corpus, tmp_path):
    from espresso_export.data import read_corpus
    from espresso_export.model.checkpoint import load
    from espresso_export.distilling import TEACHER_CHUNK, teacher_targets
    from espresso_export.training.loop import TrainingInterrupted

    sentences = read_corpus([big_corpus]).sentences
    # small batches make a chunk take long enough (hundreds of forwards) for the watcher thread to stop the pass
    # inside the second chunk even on an idle, fast machine; the reference uses the same batches (same bytes)
    kw = {"dim": 8, "pca_samples": 500, "layers": [1], "batch_size": 4}
    full = teacher_targets(load(tiny_bert), sentences, cache_dir=tmp_path / "a", **kw)

    def stop_mid_way(cache):
        """Ctrl-C once the first chunk is kept; None if the pass finished before the signal landed."""
        parts = cache / full.folder.name / "parts"
        finished = threading.Event()

        def ctrl_c_after_the_first_chunk():
            while not finished.is_set():
                if len(list(parts.glob("*.0-2048.npy"))) == 2:  # both arrays of the first chunk are kept
                    signal.raise_signal(signal.SIGINT)  # delivered to the main thread, as a real Ctrl-C
                    return
                time.sleep(0.002)

        watcher = threading.Thread(target=ctrl_c_after_the_first_chunk)
        # Python's own Ctrl-C handler, whatever an earlier test in this process left installed (in a full run
        # the signal never landed without this)
        handler = signal.signal(signal.SIGINT, signal.default_int_handler)
        switch = sys.getswitchinterval()
        sys.setswitchinterval(1e-4)  # the watcher gets the GIL often while the main thread encodes
        watcher.start()
        try:
            teacher_targets(load(tiny_bert), sentences, cache_dir=cache, **kw)
        except TrainingInterrupted as e:
            return e, parts
        except KeyboardInterrupt:  # the signal landed after the pass, outside it: try again
            return None
        finally:
            finished.set()
            watcher.join()
            sys.setswitchinterval(switch)
            signal.signal(signal.SIGINT, handler)
        return None

    # in a long test session the pass can outrun the watcher thread; a fresh cache is a fresh attempt
    stop = next((s for s in (stop_mid_way(tmp_path / f"b{k}") for k in range(5)) if s is not None), None)
    assert stop is not None, "the Ctrl-C never landed inside the teacher pass in 5 attempts"
    stopped, parts = stop
    assert re.search(r"teacher pass after \d+ of 4200 sentences", str(stopped)), str(stopped)
    assert stopped.exit_code == 130
    assert not (parts.parent / "embeddings.npy").exists() and not temps(tmp_path)
    resumed = teacher_targets(load(tiny_bert), sentences, cache_dir=parts.parent.parent, **kw)
    assert resumed.resumed == TEACHER_CHUNK and full.resumed == 0
    for name in ("embeddings.npy", "layer-1.npy", next(full.folder.glob("targets-*.npy")).name):
        assert tree(full.folder)[name] == tree(resumed.folder)[name], name
    assert not parts.exists()  # the chunks are removed once the pass is whole
    np.testing.assert_array_equal(np.asarray(full.targets), np.asarray(resumed.targets))


# --- the CLI under signals --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cli(tiny_bert, calibration_file, big_corpus, tmp_path_factory):
    """The commands under test, their uninterrupted outputs (tree of sha256) and durations.

    One in-process ``run`` first imports everything, so each forked child (faults.Child) starts warm."""
    from espresso_export.cli.app import main

    root = tmp_path_factory.mktemp("cli")
    logs = root / "logs"
    logs.mkdir()
    recipe = root / "r.yaml"
    recipe.write_text(
        f"source: {tiny_bert}\nsteps:\n"
        f"  - shrink: {{layers: 2, dim: 8, calibration: {calibration_file}}}\n"
        f"  - distill: {{corpus: [{calibration_file}], epochs: 2, batch_size: 32, heldout: 0, checkpoint_every: 3}}\n"
        f"  - export: {{timing_batches: []}}\n", encoding="utf-8")  # timing numbers differ run to run
    cache = f"distill.cache_dir={root / 'work' / 'run-cache'}"  # outside the run folder: only from the command line
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(["run", str(recipe), "-o", str(root / "warm-up"), "--set", cache]) == 0
    work = root / "work"
    work.mkdir(exist_ok=True)
    c = {"root": work, "logs": logs, "recipe": recipe, "teacher": tiny_bert}
    c["shrink"] = ["shrink", tiny_bert, "--layers", "2", "--dim", "8", "--calibration", calibration_file]
    c["export"] = ["export", work / "s", "--timing-batches", "none"]  # timing numbers differ run to run
    c["distill"] = ["distill", "--teacher", tiny_bert, "--student-layers", "2", "--dim", "8", "--corpus", big_corpus,
                    "--batch-size", "32", "--max-steps", "40", "--checkpoint-every", "4", "--heldout", "0",
                    "--pca-samples", "300", "--cache-dir", work / "cache"]
    c["run"] = ["run", recipe, "--set", cache]
    refs = {}
    for name, out in (("shrink", work / "s"), ("export", work / "e"), ("distill", work / "d"), ("run", work / "run")):
        seconds = run_to_end([*c[name], "-o", out], logs / f"{name}-reference.log")
        refs[name] = (tree(out), seconds)
    c["refs"] = refs
    return c


def test_ctrl_c_in_an_overwrite_run_keeps_the_previous_runs_later_folders(cli, tmp_path):
    # `run --overwrite` removed the previous run's later step folders before running again: a Ctrl-C in its distill
    # lost the finished distill and export while the message said "existing outputs are unchanged"
    out = tmp_path / "run"
    shutil.copytree(cli["root"] / "run", out)
    before = {name: tree(out / name) for name in ("2-distill", "3-export")}
    child = Child([*cli["run"], "-o", out, "--overwrite"], tmp_path / "overwrite.log")
    since = time.time()
    deadline = time.monotonic() + 120
    while not newer("*", out / "2-distill.run", since) and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)  # until the distill step has written its first checkpoint: well into the run
    os.kill(child.pid, signal.SIGINT)
    assert child.wait() == 130, child.text()
    assert {name: tree(out / name) for name in before} == before
    assert not temps(out)


def _reset(*paths: Path) -> None:
    for p in paths:
        shutil.rmtree(p, ignore_errors=True)


def test_sigterm_during_training_saves_a_checkpoint_exits_143_and_resumes_exactly(cli):
    work, logs = cli["root"], cli["logs"]
    out = work / "term"
    argv = [*cli["distill"], "-o", out]
    child = Child(argv, logs / "term.log")
    deadline = time.monotonic() + 300
    while not (out.parent / "term.run" / "checkpoint" / "trainer.json").is_file() and child.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    os.kill(child.pid, signal.SIGTERM)  # what docker stop, Kubernetes and SLURM send
    assert child.wait() == 143, child.text()[-3000:]
    text = child.text()
    assert "terminated (SIGTERM) at step" in text and "--resume" in text, text[-2000:]
    assert not out.exists() and not temps(work)
    step = json.loads((work / "term.run" / "checkpoint" / "trainer.json").read_text())["step"]
    assert 0 < step < 40
    run_to_end([*argv, "--resume"], logs / "term-resume.log")
    assert tree(out) == cli["refs"]["distill"][0], "a resumed run differs from an uninterrupted one"
    _reset(out, work / "term.run")


def _steps_complete(reference: dict):
    """``run``: a step folder is visible only whole (the distill step's run folder holds its checkpoints; a
    killed step's hidden temp folder is checked by the next run)."""
    def check(before, after):
        tops = {k.split("/")[0] for k in after or {}}
        for top in (t for t in tops if not t.endswith(".run") and not TEMP_NAME.match(t)):
            mine = {k: v for k, v in after.items() if k.startswith(top + "/")}
            assert mine == {k: v for k, v in reference.items() if k.startswith(top + "/")}, f"{top} is partial"
    return check


def _chains(cli, fresh: bool = False) -> list[Chain]:
    work, logs, refs = cli["root"], cli["logs"], cli["refs"]
    s, e, d, r = work / "s", work / "e", work / "d", work / "run"

    def fresh_or_overwrite(cmd, out):
        return lambda: [*cli[cmd], "-o", out, *(["--overwrite"] if out.exists() else [])]

    def temp_folder_appears(out):
        def temp_folder_appears(since):
            return newer(f".{out.name}.tmp-*", out.parent, since)
        return temp_folder_appears

    def teacher_chunk_written(since):
        return any(newer("*.npy", p, since) for p in (work / "cache").glob("teacher-*/parts"))

    def checkpoint_saved(since):
        return newer("checkpoint", work / "d.run", since)

    def distill_step_checkpoint_saved(since):
        return newer("checkpoint", r / "2-distill.run", since)

    def resume_if_checkpoint():
        return [*cli["distill"], "-o", d, "--overwrite", *(["--resume"] if (work / "d.run" / "checkpoint").is_dir()
                                                            else [])]

    def run_or_resume():
        return [*cli["run"], "-o", r, *(["--resume"] if r.exists() else [])]

    # a fresh interpreter spends most of its time importing: draw the delays past that
    common = {"root": work, "logs": logs, "fresh": fresh, "window": (0.5, 0.95) if fresh else (0.05, 0.6)}
    # a resumed distill skips the teacher pass (cached) and the steps done: shorter delays stop it again
    distill_window = (0.5, 0.8) if fresh else (0.02, 0.35)
    return [
        Chain("shrink", fresh_or_overwrite("shrink", s), s, reference=refs["shrink"][0], seconds=refs["shrink"][1],
              waypoints=[temp_folder_appears(s)], **common),
        Chain("shrink --overwrite", fresh_or_overwrite("shrink", s), s, reference=refs["shrink"][0],
              seconds=refs["shrink"][1], **common),
        Chain("export", fresh_or_overwrite("export", e), e, reference=refs["export"][0], seconds=refs["export"][1],
              waypoints=[temp_folder_appears(e)], **common),
        Chain("export --overwrite", fresh_or_overwrite("export", e), e, reference=refs["export"][0],
              seconds=refs["export"][1], **common),
        Chain("distill --overwrite", resume_if_checkpoint, d, reference=refs["distill"][0],
              seconds=refs["distill"][1], waypoints=[teacher_chunk_written, checkpoint_saved],
              **{**common, "window": distill_window}),
        Chain("run", run_or_resume, r, reference=refs["run"][0], seconds=refs["run"][1],
              waypoints=[distill_step_checkpoint_saved, temp_folder_appears(r / "3-export")],
              check_visible=_steps_complete(refs["run"][0]), **common),
    ]


def _prepare(chain: Chain, cli) -> None:
    """Fresh chains start from nothing; ``--overwrite`` chains over an existing output (another model)."""
    work = cli["root"]
    _reset(chain.output, Path(str(chain.output) + ".run"), work / "cache", work / "run-cache")
    if chain.name.endswith("--overwrite"):  # a previous output of espresso-export's: --overwrite replaces no other
        shutil.copytree(cli["teacher"], chain.output)
        (chain.output / "espresso.json").write_text('{"espresso_version": "0"}')


def _inject(cli, attempts: dict[str, int], fresh: bool = False) -> list[str]:
    rng = random.Random(SEED)
    points: list[str] = []
    for chain in _chains(cli, fresh):
        if fresh:  # the delays are drawn against a fresh interpreter's duration
            _prepare(chain, cli)
            chain.seconds = run_to_end(chain.argv(), cli["logs"] / f"{chain.name}-fresh.log", fresh=True)
        _prepare(chain, cli)
        points += chain.run(rng, attempts[chain.name])
    print(f"\n{len(points)} interruption points:\n  " + "\n  ".join(points))
    return points


@pytest.mark.slow  # a few of test_signals_at_many_more_points' draws; the default run keeps the named points above
def test_signals_at_random_points_leave_no_partial_output_and_resume_to_the_same_bytes(cli):
    attempts = {"shrink": 3, "shrink --overwrite": 3, "export": 3, "export --overwrite": 3,
                "distill --overwrite": 6, "run": 4}
    points = _inject(cli, attempts)
    assert len(points) >= 12  # some draws land after a short command finished; those count as finished runs
    assert {p.split(", ")[1].split()[0] for p in points} == {"SIGINT", "SIGTERM", "SIGKILL"}


@pytest.mark.slow
@pytest.mark.parametrize("fresh,per_chain", [(False, 12), (True, 2)], ids=["forked-many-points", "fresh-interpreters"])
def test_signals_at_many_more_points(cli, fresh, per_chain):
    points = _inject(cli, dict.fromkeys(("shrink", "shrink --overwrite", "export", "export --overwrite",
                                         "distill --overwrite", "run"), per_chain), fresh=fresh)
    assert len(points) >= 3 * per_chain
