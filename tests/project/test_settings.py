"""Every verb's settings are declared once: its command's options, its library function's keywords and its recipe
step's keys (where a recipe has that step) agree with the declaration (names, types, defaults, choices and help
text), for all seven verbs."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
import typing
from enum import Enum

import pytest
import typer

from espresso_export.cli.app import _register, app
from espresso_export.core import common_settings
from espresso_export.core.errors import EspressoError
from espresso_export.core.settings import RENAMED_PREFIX, Field, resolve, settings_fields
from espresso_export.distilling.distill_settings import DistillSettings
from espresso_export.exporting.export_settings import ExportSettings
from espresso_export.finetuning.train_settings import TrainSettings
from espresso_export.pipeline import recipes
from espresso_export.publishing.push_settings import PushSettings
from espresso_export.shrinking.shrink_settings import ShrinkSettings
from espresso_export.sweeping.sweep_settings import SweepSettings
from espresso_export.searching.auto_settings import AutoSettings
from espresso_export.verification.verify_settings import VerifySettings

VERBS = {"shrink": ShrinkSettings, "distill": DistillSettings, "train": TrainSettings, "export": ExportSettings,
         "verify": VerifySettings, "sweep": SweepSettings, "push": PushSettings, "auto": AutoSettings}
RECIPE_STEPS = [verb for verb in VERBS if verb in recipes.STEP_TYPES]  # sweep explores; it is no pipeline step
# each library function, and the positional inputs it takes before its settings
CALLS = {
    "shrink": ("espresso_export.shrinking.shrink:shrink", ("model", "out")),
    "distill": ("espresso_export.distilling:distill", ("teacher", "out")),
    "train": ("espresso_export.finetuning.train:train_ese", ("model", "data.jsonl", "out")),
    "export": ("espresso_export.exporting.export:export", ("model", "out")),
    "verify": ("espresso_export.verification.verify:verify", ("candidate", "source")),
    "sweep": ("espresso_export.sweeping.sweep:sweep", ("model",)),
    "push": ("espresso_export.publishing.push:push", ("folder", "owner/name")),
    "auto": ("espresso_export.searching.auto:auto", ("model", "out")),
}
# command parameters that are not settings: the inputs, where the result goes, and how it is shown
NOT_SETTINGS = {"model", "teacher", "candidate", "against", "folder", "repo_id", "data", "output", "overwrite",
                "json_out", "json_file", "markdown_file", "resume", "run_dir", "dry_run", "onnx", "token",
                "verify_report"}


def _commands() -> dict:
    _register()
    group = typer.main.get_command(app)
    return {name: group.commands[name] for name in VERBS}


def _function(verb: str):
    module, attr = CALLS[verb][0].split(":")
    return getattr(importlib.import_module(module), attr)


def _option(command, f: Field):
    flag = f.flags[0].split("/")[0]
    matches = [p for p in command.params if p.param_type_name == "option" and flag in p.opts]
    assert len(matches) == 1, f"{command.name}: no single option {flag} for setting {f.name}"
    return matches[0]


def _named(cls) -> dict[str, Field]:
    return {f.name: f for f in settings_fields(cls)}


def _base(tp):
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    return args[0] if typing.get_origin(tp) is typing.Union and len(args) == 1 else tp


def test_the_verbs_are_the_commands_and_the_recipe_steps():
    assert set(_commands()) == set(VERBS) == set(CALLS)
    assert set(recipes.STEP_TYPES) == set(RECIPE_STEPS)  # every recipe step is a verb with its settings class


@pytest.mark.parametrize("verb", list(VERBS))
def test_command_options_are_the_declared_settings(verb):
    cls, command = VERBS[verb], _commands()[verb]
    declared = settings_fields(cls)
    for f in declared:
        if not f.spec.cli:
            continue
        option = _option(command, f)
        assert option.name == f.name and set(f.flags[0].split("/")[0:1]) <= set(option.opts), f.name
        assert option.help == f.spec.help, f.name
        base = _base(f.type)
        if f.spec.cli_type is None and typing.get_origin(base) is None:  # an enum: its members are the choices
            assert option.type_descriptor.annotation is base, (f.name, option.type_descriptor.annotation)
        if not option.required and f.spec.cli_type is None and not isinstance(f.default, (list, tuple)):
            default = f.default.value if isinstance(f.default, Enum) else f.default
            shown = option.default.value if isinstance(option.default, Enum) else option.default
            assert shown == default, (f.name, shown, default)
        assert option.required or not f.required, f.name  # a command may ask for what the API decides later
        if f.spec.min is not None:
            assert option.min == f.spec.min, f.name
    # nothing declared a second time by hand: every other parameter is an input or an output switch
    names = {f.name for f in declared}
    hidden = {p.name for p in command.params if p.name.startswith(RENAMED_PREFIX)}
    others = {p.name for p in command.params} - names - hidden
    assert others <= NOT_SETTINGS, others
    assert not names & NOT_SETTINGS
    # an earlier name keeps working as a hidden flag, and only an earlier name does
    earlier = {RENAMED_PREFIX + old for f in declared if f.spec.cli and not f.spec.flags for old in f.spec.renamed_from}
    assert hidden == earlier
    assert all(p.hidden for p in command.params if p.name in hidden)


@pytest.mark.parametrize("verb", RECIPE_STEPS)
def test_recipe_step_keys_are_the_declared_settings(verb):
    cls, step_cls = VERBS[verb], recipes.STEP_TYPES[verb]
    declared = {f.name: f for f in settings_fields(cls) if f.spec.recipe}
    keys = {f.name: f for f in recipes.step_fields(step_cls)}
    assert set(declared) <= set(keys)
    for name, f in declared.items():
        assert keys[name].type == f.type and keys[name].default == f.default and keys[name].spec == f.spec, name
    extra = set(keys) - set(declared)  # what a recipe adds: the inputs the API takes as arguments
    assert extra <= {"teacher", "data", "against", "repo_id", "dry_run"}, extra


@pytest.mark.parametrize("verb", list(VERBS))
def test_library_takes_the_settings_or_keywords(verb):
    """``fn(inputs..., settings)`` or the settings' names as keywords, checked as a recipe's values are, before any
    work: an unknown name is a TypeError, a value of the wrong type an error naming the argument."""
    cls, fn, call = VERBS[verb], _function(verb), CALLS[verb][0].split(":")[1]
    params = inspect.signature(fn).parameters
    assert cls.__name__ in str(params["settings"].annotation)
    assert params["settings"].default is None
    assert any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    inputs = CALLS[verb][1]
    with pytest.raises(TypeError, match="not_a_setting"):
        fn(*inputs, not_a_setting=1)
    first = settings_fields(cls)[0]
    with pytest.raises(EspressoError, match=rf"{call}\(\): {first.name} must be"):
        fn(*inputs, **{first.name: {1}})  # a set: no setting's type takes one
    for f in settings_fields(cls):
        if f.spec.choices is not None:
            with pytest.raises(EspressoError, match=rf"{call}\(\): {f.name} must be one of {', '.join(f.spec.choices)}"):
                fn(*inputs, **{f.name: "not-a-choice"})


def test_every_setting_is_documented_and_typed():
    for cls in VERBS.values():
        hints = typing.get_type_hints(cls)
        for f in settings_fields(cls):
            assert f.spec.help.strip(), f"{cls.__name__}.{f.name} has no help"
            assert f.name in hints, f"{cls.__name__}.{f.name} has no type"


def test_a_setting_several_verbs_share_is_one_declaration():
    """The shared declarations (core/common_settings.py) mean the same in every verb that has them."""
    for cls in VERBS.values():
        by_name = _named(cls)
        if "trust_remote_code" in by_name:  # never a recipe key: a shared YAML file must not run Hub code
            f = by_name["trust_remote_code"]
            assert (f.default, f.spec.help, f.spec.recipe) == (False, common_settings.TRUST_REMOTE_CODE_HELP, False)
        if "judge_command" in by_name:  # nor a program to run (verify's and auto's judge)
            assert by_name["judge_command"].spec.recipe is False, cls.__name__
        if "pooling" in by_name:
            assert by_name["pooling"].spec.help == common_settings.POOLING_HELP, cls.__name__
        if "select" in by_name:
            assert by_name["select"].spec.help == common_settings.SELECT_HELP, cls.__name__
            assert by_name["select"].default == _named(ShrinkSettings)["select"].default
        if "seed" in by_name:
            assert by_name["seed"].default == 0, cls.__name__


def test_sweep_measures_with_verify_and_shrink_settings():
    """What sweep shares with verify (the sets, threads, the encoding batch, the latency sample) and with shrink
    (the calibration corpus) is their declaration: the same name, type, default, bounds and help."""
    sweep, verify, shrink = (_named(c) for c in (SweepSettings, VerifySettings, ShrinkSettings))
    for name in ("sts", "sts_columns", "sts_limit", "retrieval", "relevant_score", "threads", "batch_size"):
        assert (sweep[name].type, sweep[name].default, sweep[name].spec) == \
            (verify[name].type, verify[name].default, verify[name].spec), name
    for name in ("calibration", "calibration_samples"):
        assert (sweep[name].type, sweep[name].default, sweep[name].spec) == \
            (shrink[name].type, shrink[name].default, shrink[name].spec), name
    for name in ("latency_texts", "latency_rounds"):  # timed alike, counted per depth instead of per batch size
        assert sweep[name].default == verify[name].default and sweep[name].spec.min == verify[name].spec.min, name
    assert sweep["threads"].spec.cpus  # at most this machine's CPUs, as verify's


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
        (lambda: verify(tiny_bert, tiny_bert, min_sts_retention="x"),
             "verify(): min_sts_retention must be a number, got 'x'"),
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


def test_an_earlier_flag_still_works_with_one_line_naming_the_new_one(tmp_path):
    """A renamed option (``renamed_from``) keeps its old flag for a release: the value reaches the setting and one
    warning line names the new flag."""
    from typer.testing import CliRunner

    from espresso_export.cli.app import app

    out = CliRunner().invoke(app, ["verify", str(tmp_path / "missing"), "--against", str(tmp_path / "missing"),
                                   "--agreement-queries", "0"])
    assert "--corpus-queries must be at least 1, got 0" in str(out.exception)  # the value reached the setting
    assert "warning: --agreement-queries is now --corpus-queries" in out.output
