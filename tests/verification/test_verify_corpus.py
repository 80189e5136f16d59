"""verify on the user's own documents (--corpus), at other vector precisions (--precision) and widths (--dims):
tiny random models and a hand-made corpus, through the API and the real CLI."""

from __future__ import annotations

import io
import json
import math
import os
import random
import shutil
from pathlib import Path

import numpy as np
import pytest

from espresso_export.cli.app import main
from espresso_export.core.errors import ValidationError
from espresso_export.verification.agreement import Agreement
from espresso_export.verification.corpus_agreement import AgreementRow, VariantAgreement
from espresso_export.verification.gate import Thresholds
from espresso_export.verification.latency_report import LatencySetup
from espresso_export.verification.report import VerifyReport
from espresso_export.verification.vector_measures import (
    VariantScores,
    VectorRetrievalRow,
    WidthStsRow,
)
from espresso_export.verification.vectors import Variant
from espresso_export.verification.vectors_report import VectorReport
from espresso_export.verification.verify import verify

QUICK = ["--sts-limit", "40", "--batch-sizes", "none", "--threads", "1", "--no-cache"]
API = {"sts_limit": 40, "batch_sizes": [], "threads": 1, "cache": False}
WORDS = ["apple", "river", "stone", "cloud", "market", "engine", "violin", "garden", "planet", "forest", "harbor",
         "winter", "candle", "mirror", "bridge", "tower", "meadow", "lantern", "copper", "island"]
TABLES = Path(__file__).parents[1] / "data" / "tables"


@pytest.fixture(scope="module")
def other_bert(tmp_path_factory) -> Path:
    """A second tiny BERT (another seed): a candidate that ranks unlike ``tiny_bert``."""
    from tiny_models import build

    return build("bert", tmp_path_factory.mktemp("other") / "bert", seed=1)


@pytest.fixture(scope="module")
def docs(tmp_path_factory) -> Path:
    """120 titled passages of three sentences each (jsonl, BEIR-like fields)."""
    rng = random.Random(0)
    path = tmp_path_factory.mktemp("corpus") / "docs.jsonl"
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(120):
            body = " ".join(f"The {rng.choice(WORDS)} by the {rng.choice(WORDS)} looked {rng.choice(WORDS)} at "
                            f"dawn {i}." for _ in range(3))
            fh.write(json.dumps({"_id": str(i), "title": f"{rng.choice(WORDS)} {rng.choice(WORDS)} {i}",
                                 "text": body}) + "\n")
    return path


def _run(*args: str, tmp_path: Path) -> tuple[int, dict]:
    out = tmp_path / "r.json"
    code = main(["verify", *args, "--json", str(out), *QUICK])
    return code, json.loads(out.read_text()) if out.exists() else {}


def test_identical_candidate_and_source_agree_exactly(tiny_bert, docs):
    report = verify(tiny_bert, tiny_bert, corpus=[str(docs)], **API)
    row = report.agreement[0]
    assert row.agreement_at_10 == 1.0
    assert row.results[0].agreement.means() == {"agreement_at_10": 1.0, "ndcg_at_10": 1.0, "recall_at_100": 1.0}
    assert row.queries_from == "pseudo-queries (title, auto)" and row.passages == 120 and row.queries == 120


def test_agreement_gate_fails_below_its_threshold_exit_3(tiny_bert, other_bert, docs, tmp_path):
    code, report = _run(str(other_bert), "--against", str(tiny_bert), "--corpus", str(docs),
                        "--agreement-from", "sentence", "--corpus-queries", "50", "--min-agreement", "0.99",
                        tmp_path=tmp_path)
    assert code == 3
    row = report["agreement"][0]
    assert row["queries"] == 50 and row["queries_from"] == "pseudo-queries (sentence)"
    assert 0 <= row["agreement_at_10"] < 0.99
    low, high = row["ci95"]["agreement_at_10"]
    assert low <= row["agreement_at_10"] <= high
    check = report["gate"]["checks"][0]
    assert check["name"] == "agreement@10 on docs.jsonl" and check["threshold"] == ">= 0.99"
    assert check["value"] == row["agreement_at_10"] and not check["passed"]
    assert report["gate"]["thresholds"]["min_agreement"] == 0.99


def test_agreement_gate_passes_and_given_queries_are_used(tiny_bert, docs, tmp_path):
    queries = tmp_path / "queries.txt"
    rng = random.Random(3)
    queries.write_text("".join(f"{rng.choice(WORDS)} by the {rng.choice(WORDS)} {i}\n" for i in range(12)),
                       encoding="utf-8")
    code, report = _run(str(tiny_bert), "--against", str(tiny_bert), "--corpus", str(docs), "--queries",
                        str(queries), "--min-agreement", "0.5", tmp_path=tmp_path)
    row = report["agreement"][0]
    assert code == 0 and row["queries"] == 12 and row["queries_from"] == "queries.txt"
    assert report["gate"]["passed"]
    assert row["belief"]["retention"] == 1.0 and row["belief"]["queries"] == 12  # the source's own belief, kept


def test_given_queries_get_a_belief_retention_and_made_ones_none(tiny_bert, other_bert, docs, tmp_path, capsys):
    """Another model over the user's queries: a belief retention (the higher of its queries' and documents' sides)
    with its interval, per stored form, and a line under the table; queries made from the documents get none."""
    queries = tmp_path / "queries.txt"
    rng = random.Random(4)
    queries.write_text("".join(f"{rng.choice(WORDS)} {rng.choice(WORDS)} {i}\n" for i in range(30)), encoding="utf-8")
    code, report = _run(str(other_bert), "--against", str(tiny_bert), "--corpus", str(docs), "--queries",
                        str(queries), "--precision", "float32,binary", tmp_path=tmp_path)
    row = report["agreement"][0]
    b = row["belief"]
    assert 0 < b["retention"] < 1 and b["queries"] == 30 and b["ci95"][0] <= b["retention"] <= b["ci95"][1]
    assert b["retention"] == max(b["by_queries"], b["by_documents"])  # the higher of the belief's two sides
    assert f"belief retention on your 30 queries: {b['retention']:.3f}" in " ".join(capsys.readouterr().out.split())
    assert [v["belief"]["retention"] for v in row["variants"]][0] == b["retention"]
    assert all(0 <= v["belief"]["by_queries"] <= 1 for v in row["variants"]) and len(row["variants"]) >= 2
    binary = next(v["belief"] for v in row["variants"] if v["precision"] == "binary")
    assert binary["by_documents"] <= b["by_documents"] + 1e-4  # a stored form reads at most its float search
    made = verify(other_bert, tiny_bert, corpus=[str(docs)], **API).agreement[0]
    assert made.belief is None and "belief" not in made.results[0].to_dict()


def test_an_agreement_over_too_few_queries_decides_no_gate_exit_3(tiny_bert, other_bert, docs, tmp_path):
    """Three queries: whatever agreement they read, they cannot tell a candidate that keeps the source's ranking
    from one that does not, so the gate fails as undecided (never passes by luck), with the numbers."""
    queries = tmp_path / "queries.txt"
    queries.write_text("apple by the river\nstone tower at dawn\ncopper lantern\n", encoding="utf-8")
    code, report = _run(str(other_bert), "--against", str(tiny_bert), "--corpus", str(docs), "--queries",
                        str(queries), "--min-agreement", "0.01", "--within-noise", "pass", tmp_path=tmp_path)
    assert code == 3 and not report["gate"]["passed"]
    api = verify(other_bert, tiny_bert, corpus=[str(docs)], queries=[str(queries)], min_agreement=0.01, **API)
    (check,) = api.failed
    assert "undecided: 3 queries, fewer than the 10" in check.describe() and "--queries" in check.describe()


def test_a_nan_agreement_fails_the_gate():
    nan = Agreement(10, 100, np.full((4, 3), np.nan))
    row = AgreementRow("docs", "docs.jsonl", 10, 4, "queries.txt", [VariantAgreement(Variant("float32", 8), nan, 0)],
                       finite=False)
    report = VerifyReport(candidate={}, source={}, threads=1, sts=[], latency=[], latency_setup=LatencySetup(1),
                          retrieval=[], thresholds=Thresholds(min_agreement=0.1), agreement=[row])
    (check,) = report.checks
    assert math.isnan(check.value) and not check.passed and not report.passed
    assert row.to_dict()["agreement_at_10"] is None and row.to_dict()["ci95"]["agreement_at_10"] is None


@pytest.mark.parametrize("args, message", [
    (["--min-agreement", "80"], "--min-agreement is a share"),
    (["--corpus", "DOCS", "--min-agreement", "80"], "between 0 and 1"),
    (["--min-agreement", "0.8"], "needs a corpus"),
    (["--corpus", "DOCS", "--queries", "DOCS", "--queries", "DOCS"], "one file per --corpus"),
    (["--corpus", "DOCS", "--precision", "float16"], "unknown precision"),
    (["--corpus", "DOCS", "--rescore", "4"], "--rescore re-ranks a binary search"),
    (["--corpus", "DOCS", "--dims", "0"], "--dims"),
    (["--corpus", "DOCS", "--dims", "999"], "wider than the candidate"),
])
def test_bad_corpus_precision_and_width_settings_exit_2(tiny_bert, docs, tmp_path, capsys, args, message):
    args = [str(docs) if a == "DOCS" else a for a in args]
    code, _ = _run(str(tiny_bert), "--against", str(tiny_bert), *args, tmp_path=tmp_path)
    assert code == 2 and message in capsys.readouterr().err


def test_every_precision_reports_its_bytes_per_vector_and_index(tiny_bert, other_bert, docs, tmp_path):
    code, report = _run(str(other_bert), "--against", str(tiny_bert), "--corpus", str(docs), "--retrieval",
                        "builtin", "--precision", "float32,int8,uint8,binary,ubinary", "--rescore", "4",
                        tmp_path=tmp_path)
    assert code == 0
    d = report["candidate"]["dim"]
    variants = report["agreement"][0]["variants"]
    rows = [(v["precision"], v["rescore"]) for v in variants]
    assert rows == [("float32", 0), ("int8", 0), ("uint8", 0), ("binary", 0), ("binary", 4), ("ubinary", 0),
                    ("ubinary", 4)]
    assert [v["bytes_per_vector"] for v in variants] == [4 * d, d, d, d // 8, d // 8, d // 8, d // 8]
    index = {(v["precision"], v["rescore"]): v["index_bytes"] for v in variants}
    assert index[("float32", 0)] > index[("int8", 0)] > index[("binary", 0)] > 0
    assert all(0 <= v["agreement_at_10"] <= 1 for v in variants)
    assert variants[0]["agreement_at_10"] == pytest.approx(report["agreement"][0]["agreement_at_10"], abs=1e-4)
    labelled = report["vectors"]["retrieval"][0]
    assert [(v["precision"], v["rescore"]) for v in labelled["variants"]] == rows
    # float32 at the full width is the candidate as the retrieval table measured it
    assert labelled["variants"][0]["ndcg_at_10"] == pytest.approx(report["retrieval"][0]["candidate"]["ndcg_at_10"],
                                                                   abs=1e-4)
    assert report["vectors"]["ranges"] == {str(d): "fitted on 2211 calibration sentences (builtin)"}


@pytest.fixture(scope="module")
def tiny_export(tiny_bert, tmp_path_factory) -> Path:
    from espresso_export import export

    out = tmp_path_factory.mktemp("export") / "onnx"
    export(tiny_bert, out, validate=False)
    return out


def _with_calibration(export_folder: Path, folder: Path, stored: dict | None) -> Path:
    copy = folder / "export"
    shutil.copytree(export_folder, copy)
    meta = json.loads((copy / "export.json").read_text())
    meta.pop("vector_calibration", None)
    if stored is not None:
        meta["vector_calibration"] = stored
    (copy / "export.json").write_text(json.dumps(meta))
    return copy


def test_int8_ranges_come_from_export_json_when_it_has_them(tiny_export, tiny_bert, calibration_file, tmp_path):
    from espresso_export.runtime.precision import CalibrationRanges
    from espresso_export.verification.embedders import EncodeCache, open_embedder
    from espresso_export.verification.vectors import VectorForms, unit

    dim = open_embedder(tiny_export).dim
    ranges = np.vstack([np.full(dim, -0.25), np.full(dim, 0.25)]).astype(np.float32)
    stored = {str(dim): CalibrationRanges(ranges, 7).to_dict()}
    with_ranges = _with_calibration(tiny_export, tmp_path / "a", stored)
    without = _with_calibration(tiny_export, tmp_path / "b", None)

    forms = VectorForms(EncodeCache(open_embedder(with_ranges)), calibration=None, samples=100, seed=0)
    np.testing.assert_array_equal(forms.ranges(dim).ranges, ranges)
    assert forms.ranges_info() == {str(dim): "export.json (vector_calibration)"}

    cache = EncodeCache(open_embedder(without))
    forms = VectorForms(cache, calibration=str(calibration_file), samples=100, seed=0)
    fitted = forms.ranges(dim)
    from espresso_export.shrinking.shrink import load_calibration

    sentences, _ = load_calibration(str(calibration_file), 100, 0)
    np.testing.assert_array_equal(fitted.ranges, CalibrationRanges.fit(unit(cache.encode(sentences))).ranges)
    assert forms.ranges_info() == {str(dim): f"fitted on 100 calibration sentences ({calibration_file})"}

    report = verify(with_ranges, tiny_bert, precision=["int8"], retrieval=["builtin"], **API)
    assert report.vectors.ranges == {str(dim): "export.json (vector_calibration)"}
    assert [r.variant.precision for r in report.vectors.retrieval[0].results] == ["float32", "int8"]


def test_dims_at_the_full_width_equal_the_untruncated_numbers(tiny_bert, other_bert, docs):
    from espresso_export.core.metrics import cosine_rows, spearman
    from espresso_export.verification.embedders import open_embedder
    from espresso_export.verification.sts import load_sts

    full = open_embedder(other_bert).dim
    report = verify(other_bert, tiny_bert, corpus=[str(docs)], retrieval=["builtin"], dims=[full, 8], **API)
    widths = {r.dim: r for r in report.vectors.sts}
    assert widths[full].candidate == pytest.approx(report.sts[0].candidate, abs=1e-9)
    assert widths[full].retention == pytest.approx(report.sts[0].retention, abs=1e-9)
    labelled = {r.variant.dim: r for r in report.vectors.retrieval[0].results}
    assert labelled[full].ndcg_at_10 == pytest.approx(report.retrieval[0].candidate.ndcg_at_10, abs=1e-9)
    assert [r.variant.label for r in report.agreement[0].results] == [f"float32 {full}-d", "float32 8-d"]
    # a truncated width: the first 8 dimensions renormalised, as a user truncating the vectors gets them
    pairs = load_sts("builtin", limit=40).pairs
    enc = open_embedder(other_bert)
    a, b = enc.encode(pairs.sentence1)[:, :8], enc.encode(pairs.sentence2)[:, :8]
    assert widths[8].candidate == pytest.approx(100 * spearman(cosine_rows(a, b), np.asarray(pairs.scores)),
                                                abs=1e-6)


def _fixed_report() -> VerifyReport:
    """A report with fixed numbers: every new table, as the terminal shows it."""
    per_query = np.tile([[0.9, 0.95, 1.0], [0.7, 0.8, 1.0], [0.8, 0.85, 0.9], [0.6, 0.7, 1.0]], (2, 1))  # an interval holding 0.8
    results = [VariantAgreement(Variant(p, d, r), Agreement(10, 100, per_query * f), b)
               for p, d, r, f, b in (("float32", 128, 0, 1.0, 2_560_045), ("int8", 128, 0, 0.99, 640_301),
                                     ("binary", 128, 0, 0.8, 80_045), ("binary", 128, 4, 0.95, 80_045),
                                     ("float32", 64, 0, 0.9, 1_280_045))]
    corpus = AgreementRow("dbpedia-5k", "data/dbpedia-5k", 5000, 200, "pseudo-queries (title, auto)", results)
    labelled = VectorRetrievalRow("dbpedia-5k", 0.6631, [
        VariantScores(Variant("float32", 128), 0.4321, 0.71, 0.6517, (0.55, 0.74), 2_560_045),
        VariantScores(Variant("binary", 128, 4), 0.4102, 0.69, 0.6186, (0.52, 0.71), 80_045)])
    vectors = VectorReport([labelled], [WidthStsRow("sts-test.csv", 64, 70.12, 82.03, None)],
                           {"128": "export.json (vector_calibration)"})
    model = {"kind": "onnx", "n_params": 1000, "disk_bytes": 4000, "bytes_per_vector": 512, "dim": 128,
             "load_seconds": 0.1}
    return VerifyReport(candidate={**model, "spec": "out/minilm-L3-d128"}, source={**model, "spec": "minilm"},
                        threads=2, sts=[], latency=[], latency_setup=LatencySetup(2), retrieval=[],
                        thresholds=Thresholds(min_agreement=0.8), agreement=[corpus], vectors=vectors)


def test_the_new_tables_at_80_columns_match_their_stored_rendering():
    from rich.console import Console

    console = Console(width=80, file=io.StringIO(), color_system=None, force_terminal=False)
    report = _fixed_report()
    report.print(console)
    text = "\n".join(line.rstrip() for line in console.file.getvalue().splitlines()) + "\n"
    assert max(len(line) for line in text.splitlines()) <= 80
    path = TABLES / "verify-corpus.txt"
    if os.environ.get("ESPRESSO_UPDATE_TABLES") == "1":
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8")
    markdown = report.to_markdown()
    assert "| binary 128-d +rescore 4x | 16 |" in markdown and "### Agreement with the source's ranking" in markdown


def test_settings_refuse_an_unknown_precision_through_the_api():
    with pytest.raises(ValidationError, match="unknown precision"):
        verify("a", "b", precision=["int4"])


def test_the_known_item_retention_comes_with_its_measured_error_for_the_candidates_kind(tiny_bert, docs, tmp_path):
    """A plain cut (its lineage says shrink): the report states the estimate's measured error for plain cuts, in
    its notes and JSON; a folder without a lineage gets the line saying it was never measured for it."""
    from espresso_export import shrink
    from espresso_export.verification.estimate_error import error_line, measured_error

    cut = tmp_path / "cut"
    shrink(tiny_bert, cut, layers=1)
    report = verify(cut, tiny_bert, corpus=[str(docs)], **API)
    assert report.agreement[0].known_item is not None
    assert report.estimate_error == measured_error("plain") and report.estimate_error["collections"]
    assert error_line(measured_error("plain")) in report.notes
    assert report.to_dict()["estimate_error"]["kind"] == "plain"
    unknown = verify(tiny_bert, tiny_bert, corpus=[str(docs)], **API)
    assert unknown.estimate_error["kind"] is None and "never measured" in unknown.notes[-1]
    assert verify(cut, tiny_bert, **API).estimate_error is None  # no corpus, no known-item retention
