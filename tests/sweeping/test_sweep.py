"""sweep: a 2x2 map of MiniLM through the real CLI, agreement with shrink, and the in-place cut."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import numpy as np
import pytest

from espresso_export.cli.app import main
from espresso_export.sweeping.sweep import SweepPoint, pareto_front

FAST = ["--threads", "1", "--latency-texts", "16", "--latency-rounds", "1", "--latency-batch-size", "8"]


@pytest.fixture(scope="module")
def swept(minilm_path, calibration_file, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sweep") / "minilm"
    code = main(["sweep", str(minilm_path), "--layers", "2,3", "--dims", "32,64", "--sts", "builtin",
                 "--sts-limit", "80", "--calibration", str(calibration_file), "--target-retention", "0.5",
                 "-o", str(out), *FAST])
    assert code == 0
    return out


def test_sweep_writes_table_json_and_plot(swept, calibration_file):
    assert (swept / "sweep.png").stat().st_size > 10_000
    assert (swept / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = list(csv.DictReader((swept / "sweep.csv").open()))
    assert [(r["layers"], r["dim"]) for r in rows] == [("2", "32"), ("2", "64"), ("3", "32"), ("3", "64")]
    assert [r["kept"] for r in rows] == ["2 5", "2 5", "1 3 5", "1 3 5"]  # spread: shrink's auto for MiniLM
    report = json.loads((swept / "sweep.json").read_text())
    assert report["source"]["depth"] == 6 and report["source"]["dim"] == 384
    assert report["head"] == "pca" and report["select"] == "spread" and report["select_auto"] is True
    assert report["calibration"]["size"] == 300
    points = report["points"]
    assert len(points) == 4
    for p, row in zip(points, rows):
        assert float(row["spearman"]) == pytest.approx(p["spearman"])
        assert p["retention"] == pytest.approx(p["spearman"] / report["source"]["spearman"], abs=1e-3)
        assert p["sentences_per_s"] > 0 and p["bytes_per_vector"] == 4 * p["dim"]
        assert 0 < p["explained_variance"] <= 1
    # throughput is measured per depth: both widths of one depth share it
    assert points[0]["sentences_per_s"] == points[1]["sentences_per_s"]
    # params: deeper and wider cost more, and all are below the source
    assert points[0]["params"] < points[1]["params"] < points[3]["params"] < report["source"]["params"]
    assert any(p["pareto"] for p in points)
    command = report["recommended"]["smallest"]["command"]
    assert command.startswith("espresso-export shrink ")
    # the PCA as the sweep fitted it: without --calibration the command built another model (0.49 vs 0.43)
    assert f"--calibration {calibration_file}" in command and "--calibration-samples" not in command
    assert set(report["timings_seconds"]) >= {"encode", "latency", "total"}
    # one timed round (FAST): its spread is unknown, and the sweep says the throughput is not to be trusted
    assert report["latency"]["reliable"] is False and report["latency"]["reasons"][0].startswith("1 round(s)")
    assert report["notes"][0].startswith("throughput NOT reliable (1 round(s): too few")


def test_sweep_on_a_busy_machine_says_its_throughput_is_not_reliable(tiny_bert, tmp_path, capsys):
    """Another process keeping a core busy while the depths are timed: verify and export say so, sweep did not
    (its sent/s, speed-ups and "fastest" pick were printed as measured)."""
    import subprocess
    import sys

    if not Path("/proc/stat").is_file():
        pytest.skip("other processes' CPU time is read from /proc/stat (Linux)")
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        code = main(["sweep", str(tiny_bert), "--layers", "2,4", "--dims", "16", "--sts", "builtin", "--threads", "1",
                     "--latency-texts", "16", "--latency-batch-size", "8", "--target-retention", "0.1",
                     "-o", str(tmp_path / "s")])
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    captured = capsys.readouterr()
    assert code == 0, captured.err
    latency = json.loads((tmp_path / "s" / "sweep.json").read_text())["latency"]
    assert latency["rounds"] == 3 and latency["reliable"] is False and latency["other_cores"] > 0.25
    assert any(r.startswith("other processes kept ") for r in latency["reasons"])
    assert "note: throughput NOT reliable (" in captured.err
    assert "x?" in captured.out  # the speed-up cells carry the mark


def _shrunk_score(minilm_path, calibration_file, **select) -> tuple[list[int], float]:
    from espresso_export import shrink
    from espresso_export.core.metrics import sts_spearman
    from espresso_export.model.embed import encode
    from espresso_export.verification.sts import load_sts

    result = shrink(str(minilm_path), None, layers=2, dim=64, calibration=calibration_file, **select)
    pairs = load_sts("builtin", limit=80).pairs
    ckpt = result.checkpoint
    return result.layers, sts_spearman(encode(ckpt, pairs.sentence1), encode(ckpt, pairs.sentence2), pairs.scores)


def test_sweep_and_shrink_agree_on_their_defaults(swept, minilm_path, calibration_file, capsys):
    """Same settings, same cut: sweep selected the first layers while shrink spread them (L3/d128 of MiniLM
    scored 50.30 in a sweep and 69.72 as a shrink); both now take shrink's `auto`, and the recommended command
    is plain `shrink --layers L`, which builds that point."""
    report = json.loads((swept / "sweep.json").read_text())
    point = next(p for p in report["points"] if (p["layers"], p["dim"]) == (2, 64))
    kept, score = _shrunk_score(minilm_path, calibration_file)  # shrink's defaults
    assert point["kept"] == kept == [2, 5]
    assert point["spearman"] == pytest.approx(score, abs=1e-3)
    for pick in report["recommended"].values():
        assert f"--layers {pick['layers']} --dim" in pick["command"] and "--select" not in pick["command"]


def test_sweep_select_first_equals_shrink_select_first(minilm_path, calibration_file):
    """The one-pass path (`--select first`) is what `shrink --select first` builds."""
    from espresso_export.sweeping.sweep import SweepSettings, sweep

    result = sweep(str(minilm_path), None, SweepSettings(layers=[2], dims=[64], select="first", sts_limit=80,
                                                         calibration=calibration_file, threads=1, latency_texts=8,
                                                         latency_rounds=1, latency_batch_size=8))
    kept, score = _shrunk_score(minilm_path, calibration_file, select="first")
    assert result.selection == "first" and result.points[0].kept == kept == [0, 1]
    assert result.points[0].spearman == pytest.approx(score, abs=1e-3)


def test_sweep_refuses_bad_grids(tiny_bert, tmp_path, capsys):
    assert main(["sweep", str(tiny_bert), "--layers", "2,9", "--dims", "16", "-o", str(tmp_path / "a")]) == 2
    assert "the model has 4 layers" in capsys.readouterr().err
    assert main(["sweep", str(tiny_bert), "--layers", "2", "--dims", "16,64", "-o", str(tmp_path / "b")]) == 2
    assert "exceed the embedding width 32" in capsys.readouterr().err
    assert main(["sweep", str(tiny_bert), "--layers", "two", "--dims", "16", "-o", str(tmp_path / "c")]) == 2
    capsys.readouterr()
    assert main(["sweep", str(tiny_bert), "--layers", "2", "--dims", "16", "--target-retention", "90",
                 "-o", str(tmp_path / "d")]) == 2
    assert "--target-retention is a ratio of the source's score (0.95 keeps 95%)" in capsys.readouterr().err
    too_many = str((os.cpu_count() or 1) + 1)  # bounded by the declaration (cpus=True), before any model loads
    assert main(["sweep", str(tiny_bert), "--layers", "2", "--dims", "16", "--threads", too_many,
                 "-o", str(tmp_path / "e")]) == 2
    assert f"--threads must be at most {os.cpu_count() or 1} (this machine's CPUs)" in capsys.readouterr().err
    assert main(["sweep", str(tiny_bert), "--layers", "2", "--dims", "16", "--head", "none",
                 "-o", str(tmp_path / "f")]) == 2
    assert "sweep --head must be pca or truncate, got none" in capsys.readouterr().err
    assert not any((tmp_path / n).exists() for n in "abcdef")


def test_sweep_takes_its_settings_or_their_fields_and_the_old_forms_still_work(tiny_bert, tmp_path):
    """``sweep(model, out, settings)`` as shrink takes its own, or the fields as keywords; ``SweepOptions``,
    ``sweep(model, settings, output=OUT)`` and ``options=`` still work, each with a DeprecationWarning."""
    import espresso_export
    from espresso_export.core.errors import ValidationError
    from espresso_export.sweeping.sweep import SweepSettings, sweep

    fast = {"sts_limit": 20, "threads": 1, "latency_texts": 8, "latency_rounds": 1, "latency_batch_size": 8,
            "head": "truncate"}
    settings = SweepSettings(layers=[2], dims=[16], **fast)
    by_keywords = sweep(tiny_bert, tmp_path / "new", layers=2, dims=16, **fast)
    assert [(p.layers, p.dim) for p in by_keywords.points] == [(2, 16)]
    assert json.loads((tmp_path / "new" / "sweep.json").read_text())["latency"]["texts"] == 8
    by_name = sweep(tiny_bert, output=tmp_path / "named", settings=settings)
    assert (tmp_path / "named" / "sweep.json").is_file() and by_name.points[0].dim == 16
    with pytest.warns(DeprecationWarning, match="SweepSettings"):
        old_name = espresso_export.SweepOptions
    assert old_name is SweepSettings
    with pytest.warns(DeprecationWarning, match=r"sweep\(model, OUT, settings\)"):
        old = sweep(tiny_bert, old_name(layers=[2], dims=[16], **fast), output=tmp_path / "old")
    assert (tmp_path / "old" / "sweep.json").is_file() and old.points[0].spearman == by_keywords.points[0].spearman
    with pytest.warns(DeprecationWarning, match="settings="):
        assert sweep(tiny_bert, options=settings, dims=[8]).points[0].dim == 8
    with pytest.raises(TypeError, match="multiple values for argument 'output'"):
        sweep(tiny_bert, tmp_path / "x", settings, output=tmp_path / "y")
    with pytest.raises(TypeError, match="dimz"):
        sweep(tiny_bert, layers=2, dimz=16)
    with pytest.raises(ValidationError, match="latency_texts must be at least 1"):
        sweep(tiny_bert, layers=2, dims=16, latency_texts=0)
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


@pytest.mark.parametrize("family", ["bert", "qwen2"])
def test_temporary_cut_restores_the_model(tiny_models, family):
    from espresso_export.model.checkpoint import load
    from espresso_export.model.embed import encode
    from espresso_export.shrinking.slicing import cut, temporary_cut

    ckpt = load(tiny_models[family])
    texts = ["a dog runs in the city", "the cat sleeps"]
    before = encode(ckpt, texts)
    with temporary_cut(ckpt.model, ckpt.arch, [0, 2]):
        assert ckpt.depth == 2
        inside = encode(ckpt, texts)
    assert ckpt.depth == 4
    np.testing.assert_array_equal(encode(ckpt, texts), before)
    reference = load(tiny_models[family])
    cut(reference.model, reference.arch, [0, 2])  # the permanent cut gives what the block saw
    np.testing.assert_allclose(encode(reference, texts), inside, rtol=1e-5, atol=1e-6)


def _point(layers: int, dim: int, spearman: float, speed: float) -> SweepPoint:
    return SweepPoint(layers=layers, kept=list(range(layers)), dim=dim, spearman=spearman, per_set={},
                      retention=None, sentences_per_s=speed, p50_ms=1.0, params=layers, bytes_per_vector=4 * dim)


def test_pareto_front():
    a, b, c, d = _point(1, 64, 60, 400), _point(2, 64, 70, 300), _point(2, 128, 69, 300), _point(3, 64, 75, 100)
    assert pareto_front([a, b, c, d]) == [a, b, d]  # c is beaten by b on quality at the same speed


def test_sweep_json_round_trips(swept, tmp_path):
    from espresso_export.sweeping.plots import plot_sweep
    from espresso_export.sweeping.sweep import SweepResult

    saved = json.loads((swept / "sweep.json").read_text())
    result = SweepResult.from_dict(saved)
    assert result.to_dict()["points"] == saved["points"]
    assert result.smallest is not None and result.smallest.meets_target
    assert plot_sweep(result, tmp_path / "again.png").stat().st_size > 10_000
