"""verify()'s settings are VerifySettings, declared once; the old VerifyOptions, options=, thresholds= and the two
renamed fields still work, each with a DeprecationWarning naming what replaces it."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from espresso_export.core.settings import settings_fields
from espresso_export.core.types import IndexKind
from espresso_export.verification.gate import Thresholds
from espresso_export.verification.retrieval import IndexOptions
from espresso_export.verification.verify import verify
from espresso_export.verification.verify_settings import VerifySettings

QUICK = {"sts": ["builtin"], "sts_limit": 20, "batch_sizes": [], "threads": 1, "cache": False}


def test_verify_declares_no_setting_of_its_own():
    """Every setting, default included, comes from VerifySettings: verify() takes an instance or its fields."""
    params = inspect.signature(verify).parameters
    assert list(params) == ["candidate", "against", "settings", "progress", "kwargs"]
    names = {f.name for f in settings_fields(VerifySettings)}
    old_options = {"sts", "sts_columns", "sts_limit", "retrieval", "index", "batch_sizes", "threads", "latency_texts",
                   "latency_rounds", "latency_budget", "cache", "cache_dir", "seed", "pooling", "trust_remote_code"}
    assert old_options | {"relevant_score", "batch_size", "nlist", "nprobe"} <= names
    api_only = {f.name for f in settings_fields(VerifySettings) if not f.spec.cli and not f.spec.recipe}
    assert api_only == {"cache_dir", "pooling"}  # the command and the recipes did not have them: still do not


def test_settings_positional_or_as_keywords(tiny_bert):
    settings = VerifySettings(**QUICK, min_sts_retention=0.5)
    by_instance = verify(tiny_bert, tiny_bert, settings)
    by_keywords = verify(tiny_bert, tiny_bert, **QUICK, min_sts_retention=0.5)
    for report in (by_instance, by_keywords):
        assert report.sts[0].pairs == 20 and report.threads == 1 and report.passed
        assert [c.name for c in report.checks] == ["STS retention on builtin (smoke set)"]
    assert verify(tiny_bert, tiny_bert, settings, min_sts_retention=None).checks == []  # keywords on top


def test_the_old_verify_options_still_work_with_warnings_naming_the_new_fields(tiny_bert, recwarn):
    from espresso_export.verification.verify import VerifyOptions

    options = VerifyOptions(sts=("builtin",), sts_limit=20, batch_sizes=(), threads=1, cache=False,
                            encode_batch_size=8, retrieval_min_score=3.5, sts_columns=("a", "b", "c"),
                            index=IndexOptions(kind=IndexKind.IVF, nlist=5, nprobe=2))
    assert isinstance(options, VerifySettings)
    assert (options.batch_size, options.relevant_score, options.sts_columns) == (8, 3.5, ["a", "b", "c"])
    assert (options.index, options.nlist, options.nprobe, options.batch_sizes) == (IndexKind.IVF, 5, 2, [])
    said = [str(w.message) for w in recwarn.list if w.category is DeprecationWarning]
    for old, new in (("VerifyOptions", "VerifySettings"), ("encode_batch_size", "batch_size"),
                     ("retrieval_min_score", "relevant_score"), ("index=IndexOptions(...)", "index, nlist and nprobe")):
        assert any(f"{old} is now {new}" in s for s in said), (old, said)

    options = dataclasses.replace(options, sts_columns=None)
    with pytest.warns(DeprecationWarning, match=r"options= is now settings="):
        report = verify(tiny_bert, tiny_bert, options=options,
                        thresholds=Thresholds(min_sts_retention=0.5))
    assert report.sts[0].pairs == 20 and report.thresholds.min_sts_retention == 0.5 and report.passed
    with pytest.warns(DeprecationWarning, match=r"encode_batch_size is now batch_size"):
        assert verify(tiny_bert, tiny_bert, **QUICK, encode_batch_size=4).sts[0].pairs == 20


def test_the_old_top_level_name_is_verify_settings():
    import espresso_export

    with pytest.warns(DeprecationWarning, match="VerifyOptions is now VerifySettings"):
        assert espresso_export.VerifyOptions is VerifySettings


def test_the_gate_part_of_the_settings_is_what_the_report_records():
    settings = VerifySettings(min_sts_retention=0.9, max_latency_ratio=0.5, within_noise="pass")
    assert settings.thresholds == Thresholds(min_sts_retention=0.9, max_latency_ratio=0.5, within_noise="pass")
    assert settings.columns == ("sentence1", "sentence2", "score")
