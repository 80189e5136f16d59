"""verify's files: a report path that cannot be written fails before any model loads (exit 2, one line); a cache
that cannot be written is skipped with a one-line warning and the measurement runs without it."""

from __future__ import annotations

import json
import os

import pytest

from espresso_export.cli.app import main

QUICK = ["--sts-limit", "20", "--batch-sizes", "none", "--threads", "1"]
AS_ROOT = pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                             reason="root writes into a read-only folder: chmod cannot make one here")


@pytest.mark.parametrize("flag", ["--json", "--markdown"])
def test_a_report_under_a_file_fails_before_any_model_loads(flag, tmp_path, capsys):
    """``--json some_file/report.json`` failed after the whole measurement. The models named here do not exist:
    the one line is about the report path, so nothing was loaded first."""
    (tmp_path / "some_file").write_text("x")
    report = tmp_path / "some_file" / "deeper" / "report.out"
    code = main(["verify", "no-such-model-is-loaded", "--against", "nor-this-one", flag, str(report)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"{flag} {report} cannot be written: {tmp_path / 'some_file'} is a file, not a folder" in err
    assert len(err.strip().splitlines()) == 1


@AS_ROOT
def test_a_report_in_a_read_only_folder_fails_before_any_model_loads(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        code = main(["verify", "no-such-model-is-loaded", "--against", "nor-this-one", "--json",
                     str(locked / "r.json")])
    finally:
        locked.chmod(0o700)
    err = capsys.readouterr().err
    assert code == 2 and f"no permission to write in {locked}" in err and len(err.strip().splitlines()) == 1


def test_a_report_in_a_folder_yet_to_be_made_is_written(tiny_bert, tmp_path, capsys):
    """A missing folder is not an unwritable one: it is made, as before."""
    out = tmp_path / "new" / "folder" / "r.json"
    assert main(["verify", str(tiny_bert), "--against", str(tiny_bert), *QUICK, "--no-cache", "--json",
                 str(out)]) == 0
    assert json.loads(out.read_text())["gate"]["passed"] is True


def _run_with_cache(cache, tiny_bert, monkeypatch, capsys) -> tuple[dict, str]:
    monkeypatch.setenv("ESPRESSO_CACHE", str(cache))
    code = main(["verify", str(tiny_bert), "--against", str(tiny_bert), *QUICK, "--json", "-"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out), err


def test_a_cache_under_a_file_is_skipped_with_one_warning(tiny_bert, tmp_path, monkeypatch, capsys):
    (tmp_path / "some_file").write_text("x")
    cache = tmp_path / "some_file" / "cache"
    report, err = _run_with_cache(cache, tiny_bert, monkeypatch, capsys)
    assert report["source_cache"]["used"] is False and report["sts"]["sets"][0]["source_spearman"] is not None
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert warnings == [(f"warning: the cache folder {cache / 'verify'} is not writable: the source's vectors are "
                         "not cached (set $ESPRESSO_CACHE to a writable folder, or --no-cache)")]


@AS_ROOT
def test_a_read_only_cache_is_skipped_with_one_warning(tiny_bert, tmp_path, monkeypatch, capsys):
    cache = tmp_path / "cache"
    (cache / "verify").mkdir(parents=True)
    (cache / "verify").chmod(0o500)
    try:
        report, err = _run_with_cache(cache, tiny_bert, monkeypatch, capsys)
    finally:
        (cache / "verify").chmod(0o700)
    assert report["source_cache"]["used"] is False
    assert sum(line.startswith("warning: the cache folder") for line in err.splitlines()) == 1
