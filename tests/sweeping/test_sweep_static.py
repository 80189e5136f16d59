"""``sweep`` of a static model (``distill --student static``): its widths (the table's first columns) scored on
STS, agreement with the full table's ranking of a corpus and at vector precisions, timed once; the axes a static
model does not have (depths, layer selection, a PCA head) refused in one line. The tiny static model is the static
export tests' (tests/exporting/test_static_export.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from espresso_export.cli.app import main
from exporting.test_static_export import _texts, static_folder  # noqa: F401  (the tiny static model, a fixture)

pytest.importorskip("model2vec", reason="the static extra (model2vec) is not installed")

FAST = ["--threads", "1", "--latency-texts", "16", "--latency-rounds", "1", "--latency-batch-size", "8"]


@pytest.fixture(autouse=True)
def _no_debug(monkeypatch):
    """`--debug` in an earlier test leaves ESPRESSO_DEBUG=1 in os.environ; these tests check the one-line errors."""
    monkeypatch.delenv("ESPRESSO_DEBUG", raising=False)


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    path = tmp_path_factory.mktemp("static-sweep") / "docs.txt"
    path.write_text("\n".join(_texts(120, 11)) + "\n", encoding="utf-8")
    return path


def test_a_static_model_is_swept_over_its_widths_and_precisions(static_folder, docs, tmp_path, capsys):  # noqa: F811
    pytest.importorskip("faiss", reason="agreement searches with faiss (the eval extra)")
    out = tmp_path / "sweep"
    code = main(["sweep", str(static_folder), "--dims", "8,16", "--metric", "agreement", "--corpus", str(docs),
                 "--corpus-queries", "30", "--precision", "float32,int8,binary", "--target-retention", "0.1",
                 "-o", str(out), *FAST])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "sweep of the static model" in captured.out and "full table" in captured.out
    report = json.loads((out / "sweep.json").read_text())
    tokens = json.loads((static_folder / "espresso.json").read_text())["student"]["tokens"]
    assert report["static"] is True and report["head"] == "truncate" and report["source"]["depth"] == 0
    assert report["source"]["dim"] == 16 and report["source"]["params"] == tokens * 16
    points = {p["dim"]: p for p in report["points"]}
    assert set(points) == {8, 16} and points[8]["params"] == tokens * 8 and points[8]["bytes_per_vector"] == 32
    assert points[16]["agreement_at_10"] == pytest.approx(1.0)  # the full table agrees with itself
    assert points[8]["agreement_at_10"] <= 1.0 and points[8]["sentences_per_s"] == points[16]["sentences_per_s"] > 0
    at = points[8]["precision"]
    assert set(at) == {"float32", "int8", "binary"} and at["int8"]["bytes_per_vector"] == 8
    assert at["binary"]["bytes_per_vector"] == 1
    assert report["recommended"]["smallest"]["command"] == f"espresso-export export {static_folder} --dims 8 -o OUT"
    assert any("its widths are its table's first columns" in n for n in report["notes"])
    assert (out / "sweep.png").read_bytes()[:4] == b"\x89PNG" and (out / "sweep.csv").is_file()


def test_a_width_is_the_table_cut_to_its_first_columns(static_folder):  # noqa: F811
    """What a point measures is a real model: the table's first 8 columns encode the full vectors' first 8 dims,
    renormalised (the sweep's STS scores, through the API)."""
    from model2vec import StaticModel

    from espresso_export.sweeping.sweep import sweep

    full = StaticModel.from_pretrained(static_folder, force_download=False)
    cut = StaticModel(vectors=np.asarray(full.embedding)[:, :8], tokenizer=full.tokenizer, config=full.config,
                      normalize=True)
    texts = _texts(30, 5)
    wide = full.encode(texts)[:, :8]
    wide /= np.maximum(np.linalg.norm(wide, axis=1, keepdims=True), 1e-12)
    assert (cut.encode(texts) * wide).sum(1).min() >= 0.9999
    result = sweep(static_folder, dims=[8], threads=1, sts_limit=40, latency_texts=16, latency_rounds=1)
    assert result.static and [p.label for p in result.points] == ["d8"] and result.source_dim == 16
    assert result.points[0].retention is not None and result.output is None


@pytest.mark.parametrize(("args", "message"), [
    (["--layers", "2"], "sweep --layers: a static model has no layers to cut"),
    (["--select", "first"], "sweep --select first: a static model has no layers to select"),
    (["--head", "pca"], "sweep --head pca: a static model's narrower widths are its table's first columns"),
    (["--dims", "32"], "--dims [32] exceed the static model's width 16"),
])
def test_an_axis_a_static_model_does_not_have_is_refused_in_one_line(static_folder, tmp_path, capsys, args,  # noqa: F811
                                                                     message):
    base = ["sweep", str(static_folder), "--sts-limit", "20", "-o", str(tmp_path / "s"), *FAST]
    code = main(base + (args if "--dims" in args else ["--dims", "8", *args]))
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "s").exists()


def test_a_transformer_sweep_still_needs_its_depths(tiny_bert, tmp_path, capsys):
    code = main(["sweep", str(tiny_bert), "--dims", "8", "-o", str(tmp_path / "s")])
    err = capsys.readouterr().err
    assert code == 2 and "sweep needs at least one depth (--layers)" in err
