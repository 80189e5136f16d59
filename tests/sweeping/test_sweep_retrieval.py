"""sweep --metric retrieval: points scored, recommended and plotted on nDCG@10 instead of STS Spearman."""

from __future__ import annotations

import csv
import json

import pytest

from espresso_export.cli.app import main
from espresso_export.sweeping.sweep_result import SweepResult
from espresso_export.verification.embedders import EncodeCache, open_embedder
from espresso_export.verification.retrieval import evaluate, load_retrieval

FAST = ["--threads", "1", "--latency-texts", "8", "--latency-rounds", "1", "--latency-batch-size", "8"]


def test_sweep_on_retrieval_scores_points_by_ndcg(tiny_bert, calibration_file, tmp_path, capsys):
    out = tmp_path / "sweep"
    code = main(["sweep", str(tiny_bert), "--layers", "2,4", "--dims", "16,32", "--metric", "retrieval",
                 "--retrieval", "builtin", "--calibration", str(calibration_file), "--target-retention", "0.5",
                 "-o", str(out), *FAST])
    assert code == 0, capsys.readouterr().err
    report = json.loads((out / "sweep.json").read_text())
    assert report["metric"] == "retrieval"
    (target,) = report["retrieval"]
    assert "sts" not in report  # the key names what it holds, as in verify's report
    assert target["kind"] == "retrieval" and target["queries"] > 10 and target["metric"] == "nDCG@10 x100"
    # the source's score is what verify's faiss retrieval measures: nDCG@10 x100 of the full model
    source = evaluate(EncodeCache(open_embedder(str(tiny_bert))), load_retrieval("builtin"))
    # on verify's scale, under verify's key: a fraction (it was x100 under the same key)
    assert report["source"]["ndcg_at_10"] == pytest.approx(source.ndcg_at_10, abs=1e-5)
    assert report["score_scale"] == "fraction"
    assert "spearman" not in report["source"]  # the key names what it holds
    assert {(p["layers"], p["dim"]) for p in report["points"]} == {(2, 16), (2, 32), (4, 16), (4, 32)}
    for p in report["points"]:
        assert 0 <= p["ndcg_at_10"] <= 1 and "spearman" not in p
        assert p["retention"] == pytest.approx(p["ndcg_at_10"] / report["source"]["ndcg_at_10"], abs=1e-3)
    assert (out / "sweep.png").stat().st_size > 10_000
    assert "nDCG@10" in capsys.readouterr().out  # the table's score column
    rows = list(csv.DictReader((out / "sweep.csv").open()))
    assert "ndcg_at_10" in rows[0] and "spearman" not in rows[0]
    again = SweepResult.from_dict(report).to_dict()  # a saved sweep re-reads whole
    assert again["points"] == report["points"] and again["source"] == report["source"]


def test_sweep_metric_retrieval_needs_a_set(tiny_bert, tmp_path, capsys):
    assert main(["sweep", str(tiny_bert), "--layers", "2", "--dims", "16", "--metric", "retrieval",
                 "-o", str(tmp_path / "a")]) == 2
    assert "--metric retrieval needs a --retrieval set" in capsys.readouterr().err
