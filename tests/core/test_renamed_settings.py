"""One spelling per setting: an earlier name (declared with ``renamed_from``) still works as an API keyword and as
a recipe key, with one line naming the new one."""

from __future__ import annotations

from dataclasses import fields

import pytest

from espresso_export.core.settings import renamed, resolve
from espresso_export.exporting.export_settings import ExportSettings
from espresso_export.pipeline.recipes import parse_recipe


def test_export_spells_max_seq_len_as_distill_and_train_do():
    from espresso_export.distilling.distill_settings import DistillSettings

    assert "max_seq_len" in {f.name for f in fields(ExportSettings)}
    assert "max_seq_len" in {f.name for f in fields(DistillSettings)}
    assert renamed(ExportSettings) == {"max_seq_length": "max_seq_len"}


def test_the_old_api_keyword_works_with_a_deprecation_warning():
    with pytest.warns(DeprecationWarning, match=r"export\(\): max_seq_length is now max_seq_len"):
        settings = resolve(ExportSettings, None, {"max_seq_length": 64}, call="export")
    assert settings.max_seq_len == 64
    with pytest.raises(TypeError, match="both max_seq_len and its earlier name max_seq_length"):
        resolve(ExportSettings, None, {"max_seq_length": 64, "max_seq_len": 32}, call="export")


def test_the_old_recipe_key_works_with_one_line_naming_the_new_one(capsys):
    recipe = parse_recipe("source: m\nsteps:\n  - export: {max_seq_length: 128}\n", file="r.yaml")
    assert recipe.steps[0].config.max_seq_len == 128
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [("warning: r.yaml:3: export.max_seq_length is now export.max_seq_len; the old name will be "
                    "removed in 1.0")]
    recipe = parse_recipe("source: m\nsteps:\n  - export: {max_seq_len: 96}\n", file="r.yaml")
    assert recipe.steps[0].config.max_seq_len == 96 and capsys.readouterr().err == ""
