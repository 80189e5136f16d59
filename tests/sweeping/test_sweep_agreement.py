"""sweep --metric agreement (label-free, on the user's corpus) and --precision (vectors stored at each precision)."""

from __future__ import annotations

import csv
import json
import random

import numpy as np
import pytest

from espresso_export.cli.app import main
from espresso_export.core.errors import ValidationError
from espresso_export.sweeping.sweep_result import SweepResult
from espresso_export.sweeping.sweep_settings import SweepSettings

FAST = ["--threads", "1", "--latency-texts", "8", "--latency-rounds", "1", "--latency-batch-size", "8"]
_WORDS = ("dog cat man woman child car house tree runs walks eats sleeps big small red blue green happy sad fast "
          "slow today tomorrow city river music food water book school computer phone play guitar piano "
          "football").split()


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    """A jsonl corpus of 60 passages (a title, then two or three sentences of the tiny models' words)."""
    rng = random.Random(7)
    path = tmp_path_factory.mktemp("corpus") / "docs.jsonl"
    lines = []
    for i in range(60):
        sentences = [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(6, 10))).capitalize() + "."
                     for _ in range(rng.randint(2, 3))]
        title = f"{rng.choice(_WORDS)} {rng.choice(_WORDS)} {i}"
        lines.append(json.dumps({"_id": str(i), "title": title, "text": " ".join(sentences)}))
    path.write_text("\n".join(lines) + "\n")
    return path


def _sweep(args, capsys) -> dict:
    code = main(["sweep", *args, *FAST])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured


def test_agreement_of_the_uncut_model_is_one_and_cuts_score_below(tiny_bert, docs, tmp_path, capsys):
    """Full depth, truncate head at full width: the point is the source, so it agrees with it on every query."""
    out = tmp_path / "s"
    printed = _sweep([str(tiny_bert), "--layers", "1,4", "--dims", "16,32", "--head", "truncate", "--metric",
                      "agreement", "--corpus", str(docs), "--corpus-queries", "40", "--target-retention", "0.99",
                      "-o", str(out)], capsys)
    report = json.loads((out / "sweep.json").read_text())
    assert report["metric"] == "agreement" and report["score_scale"] == "fraction"
    (corpus,) = report["agreement"]
    # auto: the records have titles, so titles are the pseudo-queries; 40 asked, each from its own passage
    assert corpus["query_source"] == "pseudo-title" and corpus["queries"] == 40 and corpus["docs"] == 60
    assert report["source"]["agreement_at_10"] == 1.0
    points = {(p["layers"], p["dim"]): p for p in report["points"]}
    whole = points[(4, 32)]
    assert whole["agreement_at_10"] == pytest.approx(1.0) and whole["retention"] == pytest.approx(1.0)
    assert whole["agreement"]["docs.jsonl"]["ndcg_at_10"] == pytest.approx(1.0)
    assert whole["agreement"]["docs.jsonl"]["recall_at_100"] == pytest.approx(1.0)
    assert whole["meets_target"] and report["recommended"]["smallest"]["layers"] == 4
    for key in ((1, 16), (1, 32), (4, 16)):
        p = points[key]
        assert 0 <= p["agreement_at_10"] < 1 and p["retention"] == pytest.approx(p["agreement_at_10"], abs=1e-4)
        assert set(p["agreement"]["docs.jsonl"]) >= {"agreement_at_10", "ndcg_at_10", "recall_at_100", "interval_95"}
    assert "precision" not in whole and "precision" not in report  # no --precision: no new keys
    assert "agreement@10" in printed.out
    assert (out / "sweep.png").stat().st_size > 10_000 and not any("sweep.png" in n for n in report["notes"])
    rows = list(csv.DictReader((out / "sweep.csv").open()))
    assert "agreement_at_10" in rows[0] and not any(c.endswith("_int8") for c in rows[0])
    again = SweepResult.from_dict(report).to_dict()
    assert again["points"] == report["points"] and again["source"] == report["source"]


def test_agreement_is_what_verify_measures_on_the_model_shrink_builds(tiny_bert, docs, calibration_file, tmp_path,
                                                                        capsys):
    """A swept point's agreement equals the agreement of the model its shrink command builds, searched apart."""
    from espresso_export import shrink
    from espresso_export.data.pseudo_queries import pseudo_queries, read_documents_of
    from espresso_export.verification.agreement import retrieval_agreement
    from espresso_export.verification.embedders import open_embedder

    out = tmp_path / "s"
    _sweep([str(tiny_bert), "--layers", "2", "--dims", "16", "--metric", "agreement", "--corpus", str(docs),
            "--agreement-from", "sentence", "--corpus-queries", "30", "--calibration", str(calibration_file),
            "--target-retention", "0.01", "-o", str(out)], capsys)
    report = json.loads((out / "sweep.json").read_text())
    assert report["agreement"][0]["query_source"] == "pseudo-sentence"
    (point,) = report["points"]
    shrink(str(tiny_bert), tmp_path / "cut", layers=2, dim=16, head="pca", select=report["select"],
           calibration=str(calibration_file))
    passages = read_documents_of(docs)
    queries = pseudo_queries(passages, "sentence", limit=30, seed=0)
    source, cut = open_embedder(str(tiny_bert)), open_embedder(str(tmp_path / "cut"))
    def unit(texts, model):  # the tiny source has no Normalize module: cosine is the inner product of unit vectors
        x = model.encode(texts)
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    found = retrieval_agreement(unit(queries.texts, source), unit(passages.texts, source), unit(queries.texts, cut),
                                unit(passages.texts, cut), exclude=queries.exclude).to_dict()
    assert point["agreement"]["docs.jsonl"] == found
    assert point["agreement_at_10"] == found["agreement_at_10"]


def test_precision_axis_scores_each_point_at_each_precision(tiny_bert, docs, calibration_file, tmp_path, capsys):
    out = tmp_path / "s"
    printed = _sweep([str(tiny_bert), "--layers", "2,4", "--dims", "16,32", "--head", "truncate", "--metric",
                      "agreement", "--corpus", str(docs), "--corpus-queries", "30", "--precision",
                      "float32,int8,binary", "--calibration", str(calibration_file), "-o", str(out)], capsys)
    report = json.loads((out / "sweep.json").read_text())
    assert report["precision"]["precisions"] == ["float32", "int8", "binary"]
    assert report["precision"]["int8_calibration"]["size"] == 300  # the calibration sentences, not the corpus
    source = report["source"]["precision"]
    assert source["float32"]["agreement_at_10"] == 1.0 and source["float32"]["bytes_per_vector"] == 4 * 32
    for p in report["points"]:
        at, d = p["precision"], p["dim"]
        assert [at[n]["bytes_per_vector"] for n in ("float32", "int8", "binary")] == [4 * d, d, d // 8]
        # float32 storage searched by faiss ranks as the point's own score does
        assert at["float32"]["agreement_at_10"] == pytest.approx(p["agreement_at_10"], abs=1e-6)
        for n in ("int8", "binary"):
            assert 0 <= at[n]["agreement_at_10"] <= 1
            assert at[n]["retention"] == pytest.approx(at[n]["agreement_at_10"], abs=1e-3)
    whole = next(p for p in report["points"] if (p["layers"], p["dim"]) == (4, 32))
    # int8 keeps most of the ranking; one bit a dimension keeps less of it
    assert whole["precision"]["int8"]["agreement_at_10"] > whole["precision"]["binary"]["agreement_at_10"]
    rows = list(csv.DictReader((out / "sweep.csv").open()))
    assert {"agreement_at_10_int8", "bytes_per_vector_binary"} <= set(rows[0])
    assert {r["bytes_per_vector_int8"] for r in rows} == {"16", "32"}
    assert "100.00 (128)" in printed.out  # the precision table: the source's float32 score (bytes per vector)
    again = SweepResult.from_dict(report).to_dict()
    assert again["points"] == report["points"] and again["source"] == report["source"]
    assert again["precision"] == report["precision"]


def test_precision_on_retrieval_matches_the_float_score(tiny_bert, tmp_path, capsys):
    out = tmp_path / "s"
    _sweep([str(tiny_bert), "--layers", "2", "--dims", "32", "--head", "truncate", "--metric", "retrieval",
            "--retrieval", "builtin", "--precision", "float32,ubinary", "-o", str(out)], capsys)
    report = json.loads((out / "sweep.json").read_text())
    (p,) = report["points"]
    assert p["precision"]["float32"]["ndcg_at_10"] == pytest.approx(p["ndcg_at_10"], abs=1e-4)
    assert p["precision"]["ubinary"]["bytes_per_vector"] == 4 and 0 <= p["precision"]["ubinary"]["ndcg_at_10"] <= 1
    assert report["precision"]["int8_calibration"] is None  # no int8: truncate loads no calibration


def test_an_older_sweep_json_reads_and_writes_without_the_new_keys(tiny_bert, tmp_path, capsys):
    out = tmp_path / "s"
    _sweep([str(tiny_bert), "--layers", "2", "--dims", "16", "--sts", "builtin", "-o", str(out)], capsys)
    report = json.loads((out / "sweep.json").read_text())
    assert "precision" not in report and all("agreement" not in p and "precision" not in p for p in report["points"])
    old = json.loads(json.dumps(report))
    old.pop("score_scale")
    result = SweepResult.from_dict(old)
    assert result.precision is None and result.points[0].precision == {} and result.points[0].agreement is None
    assert result.to_dict()["points"] == report["points"]


@pytest.mark.parametrize(("args", "message"), [
    (["--precision", "int8"], "--precision scores searches"),  # STS (the default metric) at a precision
    (["--metric", "retrieval", "--retrieval", "builtin", "--precision", "fp16"], "unknown precision 'fp16'"),
    (["--metric", "agreement"], "--metric agreement needs a --corpus"),
    (["--corpus", "docs.jsonl"], "--corpus: scored only with --metric agreement"),
    (["--metric", "agreement", "--corpus", "x.jsonl", "--agreement-from", "words"], "must be one of"),
    (["--metric", "agreement", "--corpus", "a.jsonl", "--corpus", "b.jsonl", "--queries", "q.txt"],
     "--queries is one file per --corpus"),
])
def test_refused_combinations_exit_2(tiny_bert, tmp_path, capsys, args, message):
    assert main(["sweep", str(tiny_bert), "--layers", "2", "--dims", "16", *args, "-o", str(tmp_path / "a")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "a").exists()


def test_settings_refuse_precision_with_sts_and_keep_declared_defaults():
    with pytest.raises(ValidationError, match="--precision scores searches"):
        SweepSettings(layers=2, dims=16, precision="int8")
    s = SweepSettings(layers=2, dims=16, metric="agreement", corpus="docs.jsonl", precision="int8, binary,int8")
    assert s.precision == ["int8", "binary"] and s.agreement_from == "auto" and s.corpus_queries == 200


def test_given_queries_are_sampled_to_the_cap(tiny_bert, docs, tmp_path, capsys):
    queries = tmp_path / "q.txt"
    queries.write_text("\n".join(f"{w} {v} plays" for w in _WORDS[:6] for v in _WORDS[6:10]) + "\n")
    out = tmp_path / "s"
    _sweep([str(tiny_bert), "--layers", "4", "--dims", "32", "--head", "truncate", "--metric", "agreement",
            "--corpus", str(docs), "--queries", str(queries), "--corpus-queries", "10", "-o", str(out)], capsys)
    report = json.loads((out / "sweep.json").read_text())
    (corpus,) = report["agreement"]
    assert corpus["query_source"] == "queries" and corpus["queries"] == 10
    assert np.isclose(report["points"][0]["agreement_at_10"], 1.0)
