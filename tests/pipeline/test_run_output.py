"""What `run` tells its user: a line as each step starts and ends (on stderr, so `--json` keeps stdout), and
`run --plan`'s plan before the recipe's description."""

from __future__ import annotations

import json
import re

from espresso_export.cli.app import main
from espresso_export.pipeline.run_log import duration


def run(capsys, *args):
    code = main(list(map(str, args)))
    out, err = capsys.readouterr()
    return code, out, err


def test_run_prints_each_steps_start_and_end_with_its_time_on_stderr(tiny_bert, tmp_path, capsys, one_thread):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"source: {tiny_bert}\nsteps:\n  - shrink: {{layers: 2}}\n  - export: {{timing_batches: []}}\n")
    out_dir = tmp_path / "run"
    code, out, err = run(capsys, "run", recipe, "-o", out_dir, "--json")
    assert code == 0 and json.loads(out)["passed"]  # stdout is the JSON alone
    lines = [line for line in err.splitlines() if line.startswith("step ")]
    assert lines[0] == "step 1/2 shrink: running, writes 1-shrink"
    assert re.fullmatch(r"step 1/2 shrink: done in \d+\.\ds", lines[1])
    assert lines[2] == "step 2/2 export: running, writes 2-export"
    assert re.fullmatch(r"step 2/2 export: done in (\d+\.\ds|\d+m\d\ds)", lines[3]) and len(lines) == 4
    code, out, err = run(capsys, "run", recipe, "-o", out_dir, "--resume")  # the table on stdout, the lines on stderr
    assert code == 0 and "kept from the previous run" not in out
    assert [line for line in err.splitlines() if line.startswith("step ")] == [
        "step 1/2 shrink: kept from the previous run (same settings and inputs)",
        "step 2/2 export: kept from the previous run (same settings and inputs)"]


def test_step_times_read_at_a_glance():
    assert [duration(s) for s in (8.44, 59.96, 192, 3900)] == ["8.4s", "1m00s", "3m12s", "1h05m"]


def test_plan_comes_first_then_the_recipe_description(tmp_path, capsys):
    recipe = tmp_path / "small.yaml"
    recipe.write_text("# Small: two layers of MiniLM, for a quick look.\n# Not for search.\n"
                      "source: minilm\nsteps:\n  - shrink: {layers: 2, dim: 32}\n  - export: {}\n")
    code, out, _ = run(capsys, "run", recipe, "--plan", "-o", tmp_path / "o")
    flat = " ".join(out.split())
    assert code == 0 and "plan of small" in flat and "Small: two layers of MiniLM, for a quick look. Not for search." in flat
    assert flat.index("plan of small") < flat.index("2-export") < flat.index("Small: two layers")
    assert not (tmp_path / "o").exists()


def test_top_level_help_shows_every_command_in_one_whole_sentence_at_80_columns():
    import os
    import subprocess
    import sys

    from espresso_export.cli.app import app

    env = {**os.environ, "COLUMNS": "80"}
    res = subprocess.run([sys.executable, "-m", "espresso_export", "--help"], capture_output=True, text=True, env=env)
    rows = res.stdout.split("Commands:", 1)[1].strip("\n").splitlines()
    names = sorted(c.name or c.callback.__name__ for c in app.registered_commands)
    assert res.returncode == 0 and [r.split()[0] for r in rows] == names  # one line per command, none wrapped
    assert all("..." not in r and r.rstrip().endswith(".") and len(r) <= 80 for r in rows), rows
