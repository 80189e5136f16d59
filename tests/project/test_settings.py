"""Every step's settings are declared once: the commands, the recipe steps and the API agree with the declaration
(names, types, defaults, choices and help text) for all six steps."""

from __future__ import annotations

import inspect
import subprocess
import sys
import typing
from enum import Enum

import pytest
import typer

from espresso_export.cli.app import _register, app
from espresso_export.core.settings import Field, resolve, settings_fields
from espresso_export.exporting.export_settings import ExportSettings
from espresso_export.pipeline import recipes
from espresso_export.publishing.push_settings import PushSettings
from espresso_export.shrinking.shrink_settings import ShrinkSettings
from espresso_export.distilling.distill_settings import DistillSettings
from espresso_export.finetuning.train_settings import TrainSettings
from espresso_export.verification.verify_settings import VerifySettings

STEPS = {"shrink": ShrinkSettings, "distill": DistillSettings, "train": TrainSettings, "export": ExportSettings,
         "verify": VerifySettings, "push": PushSettings}


def _commands() -> dict:
    _register()
    group = typer.main.get_command(app)
    return {name: group.commands[name] for name in STEPS}


def _option(command, f: Field):
    flag = f.flags[0].split("/")[0]
    matches = [p for p in command.params if p.param_type_name == "option" and flag in p.opts]
    assert len(matches) == 1, f"{command.name}: no single option {flag} for setting {f.name}"
    return matches[0]


def _base(tp):
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    return args[0] if typing.get_origin(tp) is typing.Union and len(args) == 1 else tp


@pytest.mark.parametrize("step", list(STEPS))
def test_command_options_are_the_declared_settings(step):
    cls, command = STEPS[step], _commands()[step]
    for f in settings_fields(cls):
        if not f.spec.cli:
            continue
        option = _option(command, f)
        assert option.help == f.spec.help, f.name
        base = _base(f.type)
        if f.spec.cli_type is None and typing.get_origin(base) is None:
            assert option.type_descriptor.annotation is base, (f.name, option.type_descriptor.annotation)
        if not option.required and f.spec.cli_type is None and not isinstance(f.default, (list, tuple)):
            default = f.default.value if isinstance(f.default, Enum) else f.default
            shown = option.default.value if isinstance(option.default, Enum) else option.default
            assert shown == default, (f.name, shown, default)
        if f.spec.min is not None:
            assert option.min == f.spec.min, f.name


@pytest.mark.parametrize("step", list(STEPS))
def test_recipe_step_keys_are_the_declared_settings(step):
    cls, step_cls = STEPS[step], recipes.STEP_TYPES[step]
    declared = {f.name: f for f in settings_fields(cls) if f.spec.recipe}
    keys = {f.name: f for f in recipes.step_fields(step_cls)}
    assert set(declared) <= set(keys)
    for name, f in declared.items():
        assert keys[name].type == f.type and keys[name].default == f.default and keys[name].spec == f.spec, name
    extra = set(keys) - set(declared)  # what a recipe adds: the inputs the API takes as arguments
    assert extra <= {"teacher", "data", "against", "repo_id", "dry_run"}, extra


def test_every_setting_is_documented_and_typed():
    for cls in STEPS.values():
        for f in settings_fields(cls):
            assert f.spec.help.strip(), f"{cls.__name__}.{f.name} has no help"


def test_train_has_the_shared_training_options():
    """Declared once for every trainer: train gets what distill has."""
    train = {f.name for f in settings_fields(TrainSettings)}
    distill = {f.name for f in settings_fields(DistillSettings)}
    shared = {"epochs", "lr", "warmup", "weight_decay", "max_grad_norm", "max_steps", "amp", "device", "threads",
              "checkpoint_every", "keep_checkpoints", "eval_sts", "eval_limit", "seed"}
    assert shared <= train & distill
    help_of = {f.name: f.spec.help for f in settings_fields(TrainSettings)}
    for f in settings_fields(DistillSettings):
        if f.name in shared - {"lr"}:  # distill's learning rate has its own default rule
            assert help_of[f.name] == f.spec.help, f.name


@pytest.mark.parametrize("name, call", [
    ("shrink", "espresso_export.shrinking.shrink:shrink"),
    ("distill", "espresso_export.distilling:distill"),
    ("push", "espresso_export.publishing.push:push"),
    ("train", "espresso_export.finetuning.train:train_ese"),
    ("verify", "espresso_export.verification.verify:verify"),
    ("export", "espresso_export.exporting.export:export"),
])
def test_library_takes_the_settings_or_keywords(name, call):
    import importlib

    module, attr = call.split(":")
    fn = getattr(importlib.import_module(module), attr)
    params = inspect.signature(fn).parameters
    assert ("options" if name == "export" else "settings") in params
    if name == "train":  # train_ese's keywords are its structured objective/training; settings= is the flat form
        return
    assert any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def test_resolve_merges_keywords_and_refuses_unknown_names():
    s = resolve(ShrinkSettings, None, {"layers": 3, "dim": 128}, call="shrink")
    assert (s.layers, s.dim, s.calibration_samples) == (3, 128, 4096)
    s2 = resolve(ShrinkSettings, s, {"dim": 64}, call="shrink")
    assert (s2.layers, s2.dim, s.dim) == (3, 64, 128)
    with pytest.raises(TypeError, match="dimm"):
        resolve(ShrinkSettings, None, {"layers": 3, "dimm": 128}, call="shrink")


def test_recipes_and_settings_load_without_torch():
    code = ("import sys; from espresso_export.pipeline.recipes import load_recipe; "
            "load_recipe('minilm-L3-d128', check_files=False); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_train_choices_match_the_objective_enums():
    """TrainSettings checks loss and layer weights without importing torch; the names must be the enums'."""
    from espresso_export.finetuning.ese import LayerWeighting, SentenceLoss
    from espresso_export.finetuning.train_settings import LAYER_WEIGHTINGS, SENTENCE_LOSSES

    assert SENTENCE_LOSSES == tuple(m.value for m in SentenceLoss)
    assert LAYER_WEIGHTINGS == tuple(m.value for m in LayerWeighting)


def test_the_api_checks_keyword_arguments_as_a_recipe_checks_its_keys(tiny_bert, tmp_path):
    """A walk-through in a notebook: ``head="pcaa"`` was a bare ValueError, ``min_retention="x"`` a TypeError after
    22 s of measuring, ``sts="builtin"`` read letter by letter as files "b", "u", ...; ``layers="3"`` a TypeError.
    Keyword arguments are checked and converted as recipe values are: one EspressoError naming the argument."""
    from espresso_export import export, shrink, verify
    from espresso_export.core.errors import EspressoError
    from espresso_export.sweeping.sweep import sweep

    refused = [
        (lambda: shrink(tiny_bert, tmp_path / "a", layers=2, dim=16, head="pcaa"),
         "shrink(): head must be one of pca, truncate, none, got 'pcaa' (str)"),
        (lambda: export(tiny_bert, tmp_path / "b", quantize="int4"),
         "export(): quantize must be one of none, int8, fp16, got 'int4' (str)"),
        (lambda: verify(tiny_bert, tiny_bert, min_retention="x"), "verify(): min_retention must be a number, got 'x'"),
        (lambda: verify(tiny_bert, tiny_bert, batch_sizes=[1, "two"]), "verify(): batch_sizes must be"),
    ]
    for call, said in refused:
        with pytest.raises(EspressoError) as e:
            call()
        assert said in str(e.value)
    assert not any(tmp_path.iterdir())
    # the forms a recipe or the command line takes are taken: "3" layers, one set for a list, a Path for a string
    result = shrink(tiny_bert, tmp_path / "c", layers="2", dim=16, head="truncate")
    assert len(result.layers) == 2
    report = verify(tmp_path / "c", tiny_bert, sts="builtin", sts_limit=20, batch_sizes="none")
    assert [s.spec for s in report.sts] == ["builtin"] and report.latency == []
    swept = sweep(tiny_bert, layers=2, dims=[16], sts="builtin", sts_limit=20, latency_texts=8, threads=1)
    assert [p.layers for p in swept.points] == [2] and [s["name"] for s in swept.sets] == ["builtin (smoke set)"]
