"""The command line: exit codes, one-line errors, nothing written on failure, atomic outputs."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
from pathlib import Path
import subprocess
import sys

import pytest

from espresso_export.cli.app import main
from espresso_export.core.errors import RuntimeFailure
from espresso_export.core.files import atomic_output


def run(capsys, *args):
    code = main(list(map(str, args)))
    out, err = capsys.readouterr()
    return code, out, err


def _digest(folder):
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        h.update(str(p.relative_to(folder)).encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


def test_help_is_instant_and_imports_no_torch():
    code = ("import sys; from espresso_export.cli.app import app, main; "
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules; print('ok')")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "ok"
    res = subprocess.run([sys.executable, "-m", "espresso_export", "--help"], capture_output=True, text=True)
    assert res.returncode == 0 and "shrink" in res.stdout and "Exit codes" in res.stdout


def test_version(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.startswith("espresso-export ")


def test_models_json(capsys):
    code, out, _ = run(capsys, "models", "--json")
    data = json.loads(out)
    assert code == 0 and any(a["alias"] == "minilm" for a in data["aliases"])
    assert {"bert", "mpnet", "qwen2"} <= {t for a in data["architectures"] for t in a["model_types"]}


def test_shrink_json_end_to_end(capsys, tiny_bert, tmp_path):
    code, out, _ = run(capsys, "shrink", tiny_bert, "--layers", "2", "--dim", "8", "-o", tmp_path / "o", "--json")
    result = json.loads(out)
    assert code == 0 and result["dim"] == 8 and result["layers"] == [1, 3] and result["head"] == "pca"
    assert (tmp_path / "o" / "model.safetensors").is_file()


@pytest.mark.parametrize(("args", "message"), [
    (["--layers", "0"], "the model has 4 layers"),
    (["--layers", "9"], "the model has 4 layers"),
    (["--layers", "1,1"], "duplicates"),
    (["--layers", "two"], "comma-separated"),
    (["--layers", "2", "--dim", "0"], "greater than or equal to 1"),
    (["--layers", "2", "--dim", "33"], "between 1 and 32"),
    (["--layers", "2", "--head", "pca"], "needs --dim"),
])
def test_bad_options_exit_2_and_write_nothing(capsys, tiny_bert, tmp_path, args, message):
    code, _, err = run(capsys, "shrink", tiny_bert, "-o", tmp_path / "o", *args)
    assert code == 2 and message in err and "Traceback" not in err
    assert not (tmp_path / "o").exists() and not list(tmp_path.glob(".o.tmp-*"))


def test_missing_model_path_exit_2(capsys, tmp_path):
    code, _, err = run(capsys, "shrink", tmp_path / "missing", "--layers", "2", "-o", tmp_path / "o")
    assert code == 2 and "not found" in err and "Hub" not in err.split("not found")[0]


def test_unsupported_architecture_exit_2(capsys, tiny_bert, tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(tiny_bert, folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["model_type"] = "gpt2"
    (folder / "config.json").write_text(json.dumps(cfg))
    code, _, err = run(capsys, "shrink", folder, "--layers", "2", "-o", tmp_path / "o")
    assert code == 2 and "supported model types" in err


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_empty_calibration_exit_2(capsys, tiny_bert, tmp_path, content):
    cal = tmp_path / "cal.txt"
    cal.write_text(content)
    code, _, err = run(capsys, "shrink", tiny_bert, "--layers", "2", "--dim", "4", "--calibration", cal, "-o", tmp_path / "o")
    assert code == 2 and "no sentences" in err and not (tmp_path / "o").exists()


def test_unreadable_calibration_exit_2(capsys, tiny_bert, tmp_path):
    cal = tmp_path / "cal.txt"
    cal.write_bytes(b"\xff\xfe\x00bad")
    code, _, err = run(capsys, "shrink", tiny_bert, "--layers", "2", "--dim", "4", "--calibration", cal, "-o", tmp_path / "o")
    assert code == 2 and "not UTF-8" in err
    code, _, err = run(capsys, "shrink", tiny_bert, "--layers", "2", "--dim", "4", "--calibration", tmp_path / "no.txt",
                       "-o", tmp_path / "o")
    assert code == 2 and "not found" in err


def test_output_equal_to_input_refused(capsys, tiny_bert, tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(tiny_bert, folder)
    before = _digest(folder)
    code, _, err = run(capsys, "shrink", folder, "--layers", "2", "-o", folder, "--overwrite")
    assert code == 2 and "is the input folder" in err and _digest(folder) == before


def test_existing_output_kept_byte_identical_unless_overwrite(capsys, tiny_bert, tmp_path):
    out = tmp_path / "o"
    assert run(capsys, "shrink", tiny_bert, "--layers", "2", "-o", out)[0] == 0
    before = _digest(out)
    code, _, err = run(capsys, "shrink", tiny_bert, "--layers", "3", "-o", out)
    assert code == 2 and "already exists" in err and _digest(out) == before
    assert run(capsys, "shrink", tiny_bert, "--layers", "3", "-o", out, "--overwrite")[0] == 0
    assert json.loads((out / "config.json").read_text())["num_hidden_layers"] == 3
    assert [p.name for p in tmp_path.iterdir()] == ["o"]  # no temp or old folders left behind


def test_output_not_writable_exit_2(capsys, tiny_bert, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, _, err = run(capsys, "shrink", tiny_bert, "--layers", "2", "-o", blocker / "sub")
    assert code != 0 and "error:" in err and not (blocker.is_dir())


def test_corrupt_weights_exit_2_naming_the_file(capsys, tiny_bert, tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(tiny_bert, folder)
    w = folder / "model.safetensors"
    w.write_bytes(w.read_bytes()[:1000])
    code, _, err = run(capsys, "shrink", folder, "--layers", "2", "-o", tmp_path / "o")
    assert code == 2 and "model.safetensors" in err and not (tmp_path / "o").exists()


def test_debug_shows_traceback(capsys, tmp_path):
    code, _, err = run(capsys, "--debug", "shrink", tmp_path / "missing", "--layers", "2", "-o", tmp_path / "o")
    assert code == 2 and "Traceback" in err


def test_interrupt_leaves_no_partial_output(tmp_path):
    target = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        with atomic_output(target, overwrite=False) as tmp:
            (tmp / "model.safetensors").write_bytes(b"half")
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_disk_full_maps_to_runtime_failure_and_keeps_old_output(tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    (target / "config.json").write_text("old")
    (target / "espresso.json").write_text('{"espresso_version": "0"}')  # a previous output: --overwrite replaces only those
    with pytest.raises(RuntimeFailure, match="disk full"):
        with atomic_output(target, overwrite=True) as tmp:
            (tmp / "part").write_bytes(b"x")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert (target / "config.json").read_text() == "old" and (target / "espresso.json").is_file()


def test_forced_failure_during_shrink_leaves_nothing(capsys, tiny_bert, tmp_path):
    # a Dense activation we do not support makes calibration fail after the model was loaded and cut
    folder = tmp_path / "m"
    shutil.copytree(tiny_bert, folder)
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"},
    ]))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))
    from espresso_export.model.checkpoint import DenseLayer
    from espresso_export.model.save import save_dense

    import torch

    save_dense(DenseLayer(torch.eye(32), None, "torch.nn.modules.activation.Softsign"), folder / "2_Dense")
    code, _, err = run(capsys, "shrink", folder, "--layers", "2", "--dim", "4", "-o", tmp_path / "o")
    assert code == 2 and "Softsign" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_error_messages_print_brackets_verbatim(capsys, tmp_path):
    """A message is text, not rich markup: a path like '[red]x[/red]' must survive as typed."""
    missing = tmp_path / "[bold]missing[/bold]"
    code, _, err = run(capsys, "shrink", missing, "--layers", "2", "-o", tmp_path / "o")
    assert code == 2 and "[bold]missing[/bold]" in err and not (tmp_path / "o").exists()


@pytest.mark.parametrize("args", [
    ["shrink"],                                                         # missing argument
    ["shrink", "minilm", "--layers", "2", "--bogus"],                   # unknown option
    ["shrink", "minilm", "--layers", "2", "--calibration-samples", "0"],  # out of range
])
def test_usage_errors_exit_2_with_clicks_message(capsys, args):
    code, _, err = run(capsys, *args)
    assert code == 2 and err.startswith("error: ") and "Traceback" not in err and "--debug" not in err
    assert len(err.strip().splitlines()) == 1 and "(see 'espresso-export shrink --help')" in err


def test_a_bad_choice_is_one_line_exit_2(tmp_path):
    """The README promises one line: not click's usage + hint + message, nor typer's "Value error, " prefix."""
    res = subprocess.run([sys.executable, "-m", "espresso_export", "export", "minilm", "--optimize", "o4",
                          "-o", str(tmp_path / "o")], capture_output=True, text=True)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.strip().splitlines() == [
        "error: Invalid value for '--optimize': 'o4' is not one of 'none', 'o1', 'o2', 'o3'. "
        "(see 'espresso-export export --help')"]


def test_switches_show_no_type_in_help():
    """A switch takes no value: `--overwrite`, not `--overwrite <bool>`, in every command's help and the root's."""
    from typer.testing import CliRunner

    from espresso_export.cli.app import app

    commands = [info.name or info.callback.__name__ for info in app.registered_commands]
    assert len(commands) >= 10
    for args in ([], *([c.replace("_", "-")] for c in commands)):
        res = CliRunner().invoke(app, [*args, "--help"], terminal_width=200)
        assert res.exit_code == 0 and "--help" in res.output, args
        assert "<bool>" not in res.output, args


def test_help_at_80_columns_shows_every_option_whole():
    """At 80 columns typer's panels cut names ("--max-latency-ra…") and squeezed help to 18 characters: help is
    click's layout there, every line fits, every option is named in full, examples break between options."""
    from typer.testing import CliRunner

    from espresso_export.cli.app import app

    commands = [info.name or info.callback.__name__ for info in app.registered_commands]
    for args in ([], *([c.replace("_", "-")] for c in commands)):
        res = CliRunner().invoke(app, [*args, "--help"], terminal_width=80)
        assert res.exit_code == 0, args
        assert all(len(line) <= 80 for line in res.output.splitlines()), (args, max(res.output.splitlines(), key=len))
        assert "…" not in res.output and "╭" not in res.output and "\\[" not in res.output, args
        wide = CliRunner().invoke(app, [*args, "--help"], terminal_width=200).output
        names = {n.rstrip(",") for n in wide.split() if n.startswith("--") and len(n) > 16 and "…" not in n}
        assert all(n in res.output for n in names), (args, names)
    verify = CliRunner().invoke(app, ["verify", "--help"], terminal_width=80).output
    assert "    espresso-export verify small/ \\\n        --against sentence-transformers/all-mpnet-base-v2" in verify
    assert "╭" in CliRunner().invoke(app, ["verify", "--help"], terminal_width=200).output  # wide: typer's panels
    # and there too an example longer than the width breaks between its options, not mid-command
    for command in ("distill", "verify"):
        wide = CliRunner().invoke(app, [command, "--help"], terminal_width=120, env={"COLUMNS": "120"}).output
        examples = wide.split("Examples:", 1)[1].splitlines()
        assert examples and all(len(line.rstrip()) <= 120 for line in examples), command
        continued = [i for i, line in enumerate(examples) if line.rstrip().endswith(" \\")]
        assert continued and all(examples[i + 1].startswith("     -") for i in continued), (command, examples)
        assert all(line.startswith((" espresso-export", " torchrun", " #", "     -")) for line in examples if line.strip())


def test_a_reader_that_stops_early_gets_no_error_line():
    """``espresso-export distill --help | head``: the closed pipe ends the command silently with exit 1 (as rich
    and click do), not with "error: BrokenPipeError". (Wide: typer's panels, ~20 kB, more than one write.)"""
    proc = subprocess.Popen([sys.executable, "-m", "espresso_export", "distill", "--help"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "COLUMNS": "200"})
    proc.stdout.read(200)
    proc.stdout.close()  # the reader goes away with most of the help unread
    assert proc.wait(timeout=60) == 1
    assert proc.stderr.read().decode() == ""


def test_json_given_a_file_where_it_is_a_switch_says_how_to_write_one(capsys):
    """verify's --json takes a FILE, the other commands' --json is a switch: `sweep ... --json out.json` said only
    "Got unexpected extra argument(s) (out.json)"."""
    from espresso_export.cli.app import main

    assert main(["sweep", "minilm", "--layers", "2", "--dims", "32", "-o", "never-written", "--json", "out.json"]) == 2
    err = capsys.readouterr().err
    assert "--json is a switch here (the result as JSON on stdout): redirect it, --json > out.json" in err
    assert len(err.strip().splitlines()) == 1 and not Path("never-written").exists()
