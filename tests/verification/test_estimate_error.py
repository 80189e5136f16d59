"""The known-item estimate's measured error by kind, as shipped for ``auto.json`` and the card."""

from __future__ import annotations

import pytest

from espresso_export.verification.estimate_error import KINDS, error_line, kind_of, measured_error, table


@pytest.mark.parametrize(("static", "cut", "healed", "precision", "kind"), [
    (False, True, False, "float32", "plain"),
    (False, True, True, "float32", "healed-held-out"),
    (False, True, True, "int8", "int8-vectors"),
    (False, True, True, "binary", "binary-vectors"),
    (True, False, False, "float32", "static-plain"),
    (True, False, True, "float32", "static-held-out"),
    (True, False, True, "binary", "static-binary-vectors"),
    (False, False, True, "float32", None),  # a trained student: never measured
    (False, True, False, "binary", None),  # a plain cut's binary vectors: never measured
])
def test_kind_of(static, cut, healed, precision, kind):
    assert kind_of(static=static, cut=cut, healed=healed, precision=precision) == kind


def test_the_shipped_table_holds_every_kind_auto_can_answer_on_several_collections():
    t = table()
    assert t["source"] and t["date"] and len(t["collections"]) >= 4
    for kind in KINDS:
        error = measured_error(kind)
        assert error["collections"], kind
        for row in error["collections"]:
            assert row["n"] >= 1 and row["min_error"] <= row["mean_error"] <= row["max_error"]
            assert row["labelled_queries"] > 0


def test_error_line_states_the_measured_range_or_that_none_was_measured():
    error = measured_error("healed-held-out")
    means = [r["mean_error"] for r in error["collections"]]
    line = error_line(error)
    assert f"{min(means):+.3f}" in line and "healed cuts" in line and error["reference"] in line
    never = measured_error(None)
    assert never["collections"] == [] and "never measured" in error_line(never)
