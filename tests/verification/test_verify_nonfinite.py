"""verify and NaN: no comparison lets a value that is not a finite number pass, and a model whose vectors hold NaN
or inf fails the gate (exit 3) even when no threshold was given."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from espresso_export.cli.app import main
from espresso_export.core.errors import GateFailedError
from espresso_export.core.types import WithinNoise
from espresso_export.verification.gate import Thresholds
from espresso_export.verification.latency import BatchTiming
from espresso_export.verification.latency_report import (
    LatencyRow,
    LatencySetup,
    rounded,
)
from espresso_export.verification.report import RetrievalRow, StsRow, VerifyReport
from espresso_export.verification.retrieval import RetrievalScores

QUICK = ["--sts-limit", "20", "--batch-sizes", "none", "--threads", "1", "--no-cache"]
NAN = float("nan")


def _scores(ndcg: float) -> RetrievalScores:
    return RetrievalScores(mrr_at_10=0.5, recall_at_10=0.5, ndcg_at_10=ndcg, recall_at_100=0.9, index_bytes=1,
                           build_seconds=0.0, query_ms_per_query=0.1, queries=1, docs=1, dim=1)


def _nan_latency_row() -> LatencyRow:
    seconds = np.full((2, 3, 4), 0.01)
    seconds[0] = np.nan  # the candidate's timings
    return LatencyRow.of(BatchTiming(1, seconds, None, 2, 1))


def _report(thresholds: Thresholds, *, nonfinite: dict | None = None, candidate: float = NAN) -> VerifyReport:
    sts = [StsRow("set", "set.csv", "file", 100, candidate, 80.0), StsRow("inf", "inf.csv", "file", 100, 70.0,
                                                                          math.inf)]
    retrieval = [RetrievalRow("beir", "beir/", "flat", _scores(NAN), _scores(0.5))]
    return VerifyReport(candidate={}, source={}, threads=1, sts=sts, latency=[_nan_latency_row()],
                        latency_setup=LatencySetup(threads=1), retrieval=retrieval, thresholds=thresholds,
                        **({"nonfinite": nonfinite} if nonfinite else {}))


@pytest.mark.parametrize("policy", list(WithinNoise))
def test_every_check_fails_on_a_value_that_is_not_finite(policy):
    """NaN compares false both ways: a check written as "fail when below" let it pass; and ``--within-noise pass``
    turned an unreliable NaN latency ratio into a pass."""
    report = _report(Thresholds(min_sts_retention=0.5, max_latency_ratio=2.0, min_retrieval_retention=0.5,
                                within_noise=policy))
    checks = {c.name: c for c in report.checks}
    assert set(checks) == {"STS retention on set", "STS retention on inf", "latency ratio at batch 1 (1 / speed-up)",
                           "nDCG@10 retention on beir"}
    assert not any(c.passed for c in checks.values()) and not report.passed
    assert all(c.to_dict()["value"] is None for c in checks.values())  # JSON has no NaN: null, and failed
    assert all(c.to_dict()["decided_by"] == "value" for c in checks.values())  # never the noise policy
    with pytest.raises(GateFailedError, match="quality gate failed") as e:
        report.raise_for_gate()
    assert "STS retention on set = nan (not a finite number), needs >= 0.5" in str(e.value)
    json.dumps(report.to_dict(), allow_nan=False)  # the report stays valid JSON


def test_non_finite_vectors_fail_the_gate_without_any_threshold():
    report = _report(Thresholds(), nonfinite={"candidate": 12}, candidate=70.0)
    (check,) = report.checks
    assert check.name == "the candidate's vectors" and not check.passed and not report.passed
    assert check.describe() == "the candidate's vectors = NaN or inf for 12 text(s), needs all finite"
    assert report.to_dict()["gate"]["failed"] == ["the candidate's vectors"]
    assert _report(Thresholds(), candidate=70.0).passed  # finite vectors and no threshold: nothing to fail


def test_rounded_leaves_no_nan_in_the_json():
    assert [rounded(x) for x in (NAN, math.inf, -math.inf, None, 0.123456)] == [None, None, None, None, 0.1235]


@pytest.fixture(scope="module")
def headed(tiny_bert, tmp_path_factory) -> Path:
    """tiny_bert cut to 2 layers with a 16-d PCA head (3_Dense)."""
    from espresso_export import shrink

    out = tmp_path_factory.mktemp("nonfinite") / "headed"
    shrink(str(tiny_bert), out, layers=2, dim=16, head="pca")
    return out


def _with_head(headed: Path, folder: Path, change) -> Path:
    """A copy of ``headed`` whose head tensors ``change(weights)`` edited in place."""
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(headed, folder)
    weights = load_file(str(folder / "3_Dense" / "model.safetensors"))
    change(weights)
    save_file(weights, str(folder / "3_Dense" / "model.safetensors"))
    return folder


def test_a_head_with_a_nan_weight_does_not_pass_verify(headed, tiny_bert, tmp_path, capsys):
    """``linear.weight[0, 0] = nan`` in the head passed verify. Refused as a model (exit 2), or
    measured and failed by the gate (exit 3): never passed."""
    def nan(weights):
        weights["linear.weight"][0, 0] = float("nan")

    broken = _with_head(headed, tmp_path / "nan-head", nan)
    code = main(["verify", str(broken), "--against", str(tiny_bert), *QUICK, "--json", str(tmp_path / "r.json")])
    assert code in (2, 3), capsys.readouterr().err
    if code == 3:
        report = json.loads((tmp_path / "r.json").read_text())
        assert report["gate"]["passed"] is False and "the candidate's vectors" in report["gate"]["failed"]


def test_finite_weights_whose_vectors_overflow_fail_the_gate(headed, tiny_bert, tmp_path, capsys):
    """Every weight finite, yet the head's output overflows float32 (inf, then NaN once normalised): only the
    vectors can tell, and the gate fails on them with no threshold given (exit 3), the report written first.
    Outputs 0 and 1 are ``max_float +- 1e38 * sum(x)``: one of them overflows unless the sum is 0."""
    def huge(weights):
        import torch

        w, b = weights["linear.weight"], weights["linear.bias"]
        top = torch.finfo(torch.float32).max
        w[0], w[1], b[0], b[1] = 1e38, -1e38, top, top

    broken = _with_head(headed, tmp_path / "huge-head", huge)
    out = tmp_path / "r.json"
    code = main(["verify", str(broken), "--against", str(tiny_bert), *QUICK, "--json", str(out)])
    err = capsys.readouterr().err
    assert code == 3, err
    assert "quality gate failed: the candidate's vectors = NaN or inf for" in err
    report = json.loads(out.read_text())  # strict JSON: NaN is written as null
    assert report["gate"]["failed"] == ["the candidate's vectors"]
    assert report["sts"]["sets"][0]["candidate_spearman"] is None
    assert report["sts"]["sets"][0]["source_spearman"] is not None
