"""Recipes: one YAML file that declares a whole pipeline, validated strictly before anything runs.

A recipe names a source model, an ordered list of steps and, optionally, where the run folder goes::

    name: minilm-L3-d128            # optional; default: the file name
    source: minilm                  # folder, Hub id or alias (`espresso-export models`)
    output: runs/minilm-L3-d128     # optional; default: runs/NAME (relative paths: against the recipe's folder)
    threads: 2                      # optional; torch / onnxruntime threads for every step
    steps:
      - shrink: {layers: 3, dim: 128}
      - distill: {corpus: [sentences.txt], max_sentences: 10000, lr: 1.0e-3}
      - export: {quantize: int8}
      - verify: {sts: [sts-test.csv], min_retention: 0.95}
      - push: {repo_id: me/minilm-L3-d128, dry_run: true}

Each step kind appears at most once; its keys are the parameters of the library call it makes
(:func:`~espresso_export.shrinking.shrink`, :func:`~espresso_export.distillation.distill`,
:func:`~espresso_export.esetrain.train_ese`, :func:`~espresso_export.exporting.export.export`,
:func:`~espresso_export.verification.verify.verify`, :func:`~espresso_export.hub.push`) with the same names and
defaults; the dataclasses below are the schema. Unknown keys, wrong types and missing files are errors that
name the key and the line of the file. Relative paths in a recipe resolve against the recipe's folder; values
given with ``--set step.key=value`` (parsed as YAML) are type-checked the same way and their relative paths
resolve against the current folder.

Shipped recipes live in ``recipes/`` at the root of the source tree; :func:`find_recipe` accepts a path or the
name of a shipped recipe. How steps feed each other is :mod:`espresso_export.recipe_runner`'s concern.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from enum import Enum
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from espresso_export.core.errors import NotFoundError, ValidationError
from espresso_export.core.settings import Mismatch, coerce, out_of_bounds, setting, settings_fields, shown, type_name
from espresso_export.pipeline.shipped import find_recipe, installed_recipe_dirs, shipped_recipes
from espresso_export.pipeline.yamlfile import (
    Where, load_yaml, missing_file_message, resolve_value, suggest,
)
from espresso_export.exporting.export_settings import ExportSettings
from espresso_export.publishing.push_settings import PushSettings
from espresso_export.shrinking.shrink_settings import ShrinkSettings
from espresso_export.distilling.distill_settings import DistillSettings
from espresso_export.finetuning.train_settings import TrainSettings
from espresso_export.verification.verify_settings import VerifySettings


# --- the schema: each step's settings class (declared once, in its stage), plus the recipe's own keys ------------
# The keys of a step are the fields of its settings class that are marked ``recipe=True``
# (:mod:`espresso_export.core.settings`), with their types and defaults; what a recipe adds is declared here.

ShrinkStep = ShrinkSettings
ExportStep = ExportSettings


RUNS_FOLDER = "runs"  # the default run folder is runs/NAME: never a folder another command wrote


@dataclass
class DistillStep(DistillSettings):
    """``teacher`` defaults to the model the previous shrink step cut (else the source). Without ``student``: after
    a shrink step, the teacher cut to the same layers is healed (the shrink's layers and dim are the defaults);
    after a train/distill step, that step's model is the student; as the first step, ``student_layers`` is needed."""

    teacher: Optional[str] = setting(None, path="model", cli=False, help="The teacher (default: the model the "
                                     "shrink step cut, else the source).")


@dataclass(kw_only=True)
class TrainStep(TrainSettings):
    """``train`` on the previous step's model (or the source)."""

    data: str = setting(path="data", cli=False, help="Training data (as `train --data`).")


@dataclass
class VerifyStep(VerifySettings):
    """verify the last export (else the last model) against ``against``; the thresholds are the gate: a failed one
    stops the run (exit 3)."""

    against: Optional[str] = setting(None, path="model", cli=False, help="The source model (default: the recipe's "
                                                                         "source).")


@dataclass(kw_only=True)
class PushStep(PushSettings):
    """push the last model with the last export and verify report. The token is never part of a recipe: it comes
    from HF_TOKEN or `hf auth login`. ``dry_run: true`` stages the upload in the step's folder."""

    repo_id: str = setting(cli=False, help="Hub repository, owner/name.")
    dry_run: bool = setting(False, cli=False, help="Stage the upload in the step's folder; upload nothing.")


def step_fields(cls: type) -> list:
    """The recipe keys of a step class (:class:`~espresso_export.core.settings.Field` objects)."""
    return [f for f in settings_fields(cls) if f.spec.recipe]


STEP_TYPES: dict[str, type] = {
    "shrink": ShrinkStep, "distill": DistillStep, "train": TrainStep, "export": ExportStep, "verify": VerifyStep,
    "push": PushStep,
}
MODEL_STEPS = ("shrink", "distill", "train")  # steps that write a model folder
REMOTE_CODE_KEY = "trust_remote_code"  # only the command line turns it on (`run --trust-remote-code`)
TOP_KEYS = ("name", "description", "source", "output", "threads", "steps")


@dataclass
class Step:
    kind: str
    config: Any  # one of the *Step dataclasses
    line: int | None = None

    def to_dict(self) -> dict:
        return {"kind": self.kind, **{f.name: _plain(getattr(self.config, f.name)) for f in step_fields(type(self.config))}}


@dataclass
class Recipe:
    name: str
    source: str
    steps: list[Step]
    path: Path | None = None  # the recipe file
    output: Path | None = None  # the run folder (None: runs/NAME under the current folder)
    threads: int | None = None
    description: str | None = None

    def step(self, kind: str) -> Step | None:
        return next((s for s in self.steps if s.kind == kind), None)

    def folder(self, step: Step) -> Path:
        """The step's folder inside the run folder: ``1-shrink``, ``2-distill``, ..."""
        return self.run_folder / f"{self.steps.index(step) + 1}-{step.kind}"

    @property
    def run_folder(self) -> Path:
        return (self.output or Path.cwd() / RUNS_FOLDER / self.name).resolve()

    def to_dict(self) -> dict:
        return {"name": self.name, "description": self.description, "source": self.source,
                "recipe": str(self.path) if self.path else None, "output": str(self.run_folder),
                "threads": self.threads, "steps": [s.to_dict() for s in self.steps]}


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


# --- building the recipe --------------------------------------------------------------------------------------

@dataclass
class _Origin:
    """Where the values come from: the file (line numbers, paths against its folder) or ``--set`` (the cwd)."""

    where: Where
    base: Path
    cli: dict[tuple, str] = field(default_factory=dict)  # raw path -> the --set item that set it
    check_files: bool = True
    missing: list[tuple[str, str, Path]] = field(default_factory=list)  # (where, key, path) of each missing file

    def resolve(self, value: str, kind: str, path: tuple, key: str) -> str:
        return resolve_value(value, kind, self.base_for(path), key, self.at(path), self.check_files, self.missing)

    def raise_missing(self) -> None:
        """One error naming every missing file (the first alone read as the only one: fix, rerun, next)."""
        if not self.missing:
            return
        if len(self.missing) == 1:
            raise NotFoundError(missing_file_message(*self.missing[0]))
        by_key: dict[tuple[str, str], list[str]] = {}
        for at, key, path in self.missing:
            by_key.setdefault((at, key), []).append(str(path))
        listed = "; ".join(f"{at}: {key}: {', '.join(paths)}" for (at, key), paths in by_key.items())
        keys = " ".join(dict.fromkeys(f"--set {key}=PATH" for _, key in by_key))
        raise NotFoundError(f"{len(self.missing)} files the recipe reads are missing: {listed}; point them "
                            f"elsewhere with {keys}")

    def at(self, path: tuple) -> str:
        return f"--set {self.cli[path]}" if path in self.cli else self.where.at(path)

    def base_for(self, path: tuple) -> Path:
        return Path.cwd().resolve() if path in self.cli else self.base

    def from_cli(self, path: tuple) -> bool:
        return path in self.cli


def _build_step(kind: str, raw: Any, path: tuple, origin: _Origin) -> Any:
    cls = STEP_TYPES[kind]
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ValidationError(f"{origin.at(path)}: step {kind!r} must be a mapping of its settings, got {shown(raw)}")
    known = {f.name: f for f in step_fields(cls)}
    values = {}
    for key, value in raw.items():
        at = origin.at((*path, key))
        if kind == "push" and key == "token":
            raise ValidationError(f"{at}: push.token: a token never belongs in a recipe; set HF_TOKEN or run "
                                  "`hf auth login`")
        if key == REMOTE_CODE_KEY:
            raise ValidationError(f"{at}: {kind}.{key}: a recipe cannot allow remote code; pass --trust-remote-code "
                                  "to `espresso-export run` to allow it for every step")
        if key not in known:
            raise ValidationError(f"{at}: unknown key {kind}.{key}{suggest(str(key), known)} "
                                  f"(known: {', '.join(known)})")
        f = known[key]
        try:
            out = f.coerce(value, from_cli=origin.from_cli((*path, key)))
        except Mismatch:
            raise ValidationError(f"{at}: {kind}.{key} must be {type_name(f.type)}, got {shown(value)}") from None
        if f.spec.choices is not None and out not in f.spec.choices:
            raise ValidationError(f"{at}: {kind}.{key} must be one of {', '.join(f.spec.choices)}, got {out!r}")
        if (problem := f.out_of_bounds(out)) is not None:  # batch_size 0 ran shrink, then "range() arg 3 ..."
            raise ValidationError(f"{at}: {kind}.{key} {problem}")
        path_kind = f.spec.path
        if path_kind and out is not None:
            out = ([origin.resolve(v, path_kind, (*path, key), f"{kind}.{key}") for v in out]
                   if isinstance(out, list) else origin.resolve(out, path_kind, (*path, key), f"{kind}.{key}"))
        values[key] = out
    missing = [f.name for f in known.values() if f.name not in values and f.required]
    if missing:
        raise ValidationError(f"{origin.at(path)}: step {kind!r} needs {', '.join(missing)}")
    if kind == "train" and "lora_r" in values and "lora" not in values:
        values["lora"] = True  # recipes written before `lora` existed: a rank alone meant LoRA
    try:
        return cls(**values)
    except ValidationError as e:  # a check across keys (the settings class's own): say where the step is
        raise ValidationError(f"{origin.at(path)}: {kind}: {e.message}") from None


def _check_steps(steps: list[Step], file: str) -> None:
    """The order and the settings that only make sense together."""
    kinds = [s.kind for s in steps]
    for s in steps:
        at = f"{file}:{s.line}" if s.line else file
        if kinds.count(s.kind) > 1:
            raise ValidationError(f"{at}: step {s.kind!r} appears twice; each step kind runs at most once")
        i = kinds.index(s.kind)
        later_models = [k for k in kinds[i + 1:] if k in MODEL_STEPS]
        if s.kind in ("export", "verify", "push") and later_models:
            raise ValidationError(f"{at}: {s.kind} must come after every model step ({later_models[0]} follows it)")
        if s.kind == "verify" and "export" in kinds[i + 1:]:
            raise ValidationError(f"{at}: verify must come after export (it measures the exported model)")
        if s.kind == "push" and i != len(kinds) - 1:
            raise ValidationError(f"{at}: push must be the last step")
        if s.kind == "distill":
            before = kinds[:i]
            cut = "shrink" in before
            c = s.config
            if c.corpus is None and c.pairs is None:
                raise ValidationError(f"{at}: step 'distill' needs corpus (sentences) or pairs (pair files)")
            if c.dim is None and not (cut and steps[before.index("shrink")].config.dim is not None):
                raise ValidationError(f"{at}: distill needs dim (or a shrink step with a dim before it)")
            if c.student is None and c.student_layers is None and not any(k in MODEL_STEPS for k in before):
                raise ValidationError(f"{at}: distill needs a student, student_layers (heal the source cut to L "
                                      "layers), or a shrink step before it")


def _apply_overrides(data: dict, overrides, origin: _Origin) -> None:
    """Write each ``key=value`` into the raw recipe before it is checked (so a file it replaces is never looked
    for); the value is parsed as YAML."""
    import yaml

    for item in overrides:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValidationError(f"--set needs key=value (e.g. distill.lr=1e-3), got {item!r}")
        try:
            value = yaml.safe_load(text) if text.strip() else None
        except yaml.YAMLError as e:
            raise ValidationError(f"--set {key}: cannot parse {text!r} as a YAML value: {e}") from None
        if "." not in key:
            if key not in TOP_KEYS or key == "steps":
                raise ValidationError(f"--set {key}: unknown key {key!r}{suggest(key, TOP_KEYS)}; step settings "
                                      "are STEP.KEY, e.g. distill.lr=1e-3")
            data[key] = value
            origin.cli[(key,)] = item
            continue
        kind, _, name = key.partition(".")
        steps = data.get("steps") if isinstance(data.get("steps"), list) else []
        index = next((i for i, s in enumerate(steps) if isinstance(s, dict) and kind in s), None)
        if index is None:
            have = ", ".join(k for s in steps if isinstance(s, dict) for k in s)
            raise ValidationError(f"--set {key}: the recipe has no {kind!r} step (it has: {have})")
        if steps[index][kind] is None:
            steps[index][kind] = {}
        if not isinstance(steps[index][kind], dict):
            raise ValidationError(f"{origin.at(('steps', index, kind))}: step {kind!r} must be a mapping")
        steps[index][kind][name] = value
        origin.cli[("steps", index, kind, name)] = item


def parse_recipe(text: str, *, file: str = "<recipe>", base: Path | None = None,
                 overrides: Sequence[str] = (), check_files: bool = True) -> Recipe:
    """Parse and check a recipe's text (paths relative to ``base``, default the current folder), with
    ``--set`` overrides applied first. ``check_files=False`` checks everything but the existence of files
    (a recipe meant for another machine's data)."""
    data, where = load_yaml(text, file)
    if not isinstance(data, dict):
        raise ValidationError(f"{file}: a recipe is a mapping with source and steps, got {shown(data)}")
    origin = _Origin(where, (base or Path.cwd()).resolve(), check_files=check_files)
    _apply_overrides(data, overrides, origin)
    for key in data:
        if key not in TOP_KEYS:
            raise ValidationError(f"{origin.at((key,))}: unknown key {key!r}{suggest(str(key), TOP_KEYS)} "
                                  f"(known: {', '.join(TOP_KEYS)})")
    for key, tp in (("name", str), ("description", str), ("source", str), ("output", str), ("threads", int)):
        if data.get(key) is not None:
            try:
                data[key] = coerce(data[key], tp, from_cli=origin.from_cli((key,)))
            except Mismatch:
                raise ValidationError(f"{origin.at((key,))}: {key} must be {type_name(tp)}, "
                                      f"got {shown(data[key])}") from None
    if not data.get("source"):
        raise ValidationError(f"{file}: the recipe needs a source (a model folder, Hub id or alias)")
    raw_steps = data.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise ValidationError(f"{origin.at(('steps',))}: steps must be a non-empty list like "
                              "[{shrink: {layers: 3, dim: 128}}, {export: {}}]")
    steps: list[Step] = []
    for i, item in enumerate(raw_steps):
        at = origin.at(("steps", i))
        if not isinstance(item, dict) or len(item) != 1:
            raise ValidationError(f"{at}: each step is a mapping with one key, the step kind "
                                  f"({', '.join(STEP_TYPES)}), got {shown(item)}")
        (kind, raw), = item.items()
        if kind not in STEP_TYPES:
            raise ValidationError(f"{at}: unknown step {kind!r}{suggest(str(kind), STEP_TYPES)} "
                                  f"(steps: {', '.join(STEP_TYPES)})")
        config = _build_step(kind, raw, ("steps", i, kind), origin)
        steps.append(Step(kind, config, where.lines.get(("steps", i))))
    _check_steps(steps, file)
    threads = data.get("threads")
    if threads is not None and (problem := out_of_bounds(threads, 1, None, cpus=True)) is not None:
        raise ValidationError(f"{origin.at(('threads',))}: threads {problem}")
    name = data.get("name") or (Path(file).stem if file != "<recipe>" else "recipe")
    if not re.fullmatch(r"[A-Za-z0-9][\w.-]*", name):
        raise ValidationError(f"{origin.at(('name',))}: name must be letters, digits, '-', '_' and '.', got {name!r}")
    source = origin.resolve(data["source"], "model", ("source",), "source")
    origin.raise_missing()
    output = None
    if data.get("output"):
        output = (origin.base_for(("output",)) / Path(data["output"]).expanduser()).resolve()
    push = next((s for s in steps if s.kind == "push"), None)
    if push is not None:
        from espresso_export.publishing.push import validate_repo_id

        try:
            validate_repo_id(push.config.repo_id)
        except ValidationError as e:
            at = origin.at(("steps", steps.index(push), "push", "repo_id"))
            raise ValidationError(f"{at}: push.repo_id: {e.message}") from None
    return Recipe(name=name, source=source, steps=steps, output=output, threads=threads,
                  description=data.get("description"))


def load_recipe(spec: str | os.PathLike, *, overrides: Sequence[str] = (), check_files: bool = True) -> Recipe:
    """Read a recipe file (or a shipped recipe's name) with ``--set`` overrides and check it."""
    path = find_recipe(spec)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ValidationError(f"cannot read the recipe {path}: {e}") from e
    try:
        recipe = parse_recipe(text, file=str(path), base=path.parent, overrides=overrides, check_files=check_files)
    except NotFoundError as e:
        if path.parent in installed_recipe_dirs():  # a wheel's copy: its ../../shared/data is not there
            raise NotFoundError(f"{e.message} (a shipped recipe reads the project's shared data, which pip does not "
                                "install: give it your own files with these --set, as its header says: "
                                f"`espresso-export run {path.stem} --plan`)") from None
        raise
    recipe.path = path
    return recipe


def missing_files(recipe: Recipe | str | os.PathLike, *, overrides: Sequence[str] = ()) -> str | None:
    """The error a run of this recipe would stop on for missing files (``None``: every file is there)."""
    try:
        load_recipe(recipe.path if isinstance(recipe, Recipe) else recipe, overrides=overrides)
    except NotFoundError as e:
        return e.message
    return None


__all__ = ["Recipe", "Step", "STEP_TYPES", "load_recipe", "parse_recipe", "find_recipe", "shipped_recipes",
           "missing_files"]
