"""Recipes: one YAML file that declares a whole pipeline (``source``, ``steps``, optional ``name``, ``output``,
``threads``; docs/recipes.md), checked strictly before anything runs.

A step's keys are the settings of the library call it makes, with the same names and defaults
(:mod:`espresso_export.pipeline.recipe_schema`). Unknown keys, wrong types, missing files and YAML aliases are
errors naming the key and the line. Paths a step reads resolve against the recipe's folder; folders a step writes
into (``distill.cache_dir``) resolve against the run folder and must stay inside it, so a recipe from elsewhere
cannot write outside its run. ``--set step.key=value`` (parsed as YAML) is checked the same way; its relative
paths resolve against the current folder, and may point anywhere: the caller chose them.

:func:`find_recipe` takes a path or a shipped recipe's name; :mod:`espresso_export.pipeline.recipe_runner` runs it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from espresso_export.core.errors import NotFoundError, ValidationError
from espresso_export.core.files import is_within
from espresso_export.core.settings import Mismatch, coerce, current_key, out_of_bounds, shown, type_name
from espresso_export.model.static import STATIC_STUDENT
from espresso_export.pipeline.recipe_schema import (
    MODEL_STEPS, REMOTE_CODE_KEY, RUNS_FOLDER, STEP_TYPES, TOP_KEYS, DistillStep, ExportStep, PushStep, Recipe,
    ShrinkStep, Step, TrainStep, VerifyStep, step_fields,
)
from espresso_export.pipeline.shipped import find_recipe, installed_recipe_dirs, shipped_recipes
from espresso_export.pipeline.yamlfile import (
    Where, load_yaml, missing_file_message, parse_value, resolve_value, suggest,
)


# --- building the recipe --------------------------------------------------------------------------------------

@dataclass
class _Origin:
    """Where the values come from: the file (line numbers, paths against its folder) or ``--set`` (the cwd)."""

    where: Where
    base: Path
    cli: dict[tuple, str] = field(default_factory=dict)  # raw path -> the --set item that set it
    check_files: bool = True
    missing: list[tuple[str, str, Path]] = field(default_factory=list)  # (where, key, path) of each missing file
    written: list[tuple[tuple, str, str]] = field(default_factory=list)  # (path, key, raw value) of a folder the file
    # names for a step to write into: resolved against the run folder once it is known (:func:`_place_written`)

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
        key = current_key(cls, key, at, f"{kind}.")  # an earlier name of a setting, with a warning line
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
        if path_kind == "dir" and out is not None and not origin.from_cli((*path, key)):
            origin.written.append(((*path, key), f"{kind}.{key}", out))  # placed inside the run folder later
        elif path_kind and out is not None:
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
            if c.corpus is None and c.pairs is None and c.student != STATIC_STUDENT:  # static: model2vec's alone
                raise ValidationError(f"{at}: step 'distill' needs corpus (sentences) or pairs (pair files)")
            if c.dim is None and not (cut and steps[before.index("shrink")].config.dim is not None):
                raise ValidationError(f"{at}: distill needs dim (or a shrink step with a dim before it)")
            if c.student is None and c.student_layers is None and not any(k in MODEL_STEPS for k in before):
                raise ValidationError(f"{at}: distill needs a student, student_layers (heal the source cut to L "
                                      "layers), or a shrink step before it")


def _apply_overrides(data: dict, overrides, origin: _Origin) -> None:
    """Write each ``key=value`` into the raw recipe before it is checked (so a file it replaces is never looked
    for); the value is parsed as YAML."""
    for item in overrides:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValidationError(f"--set needs key=value (e.g. distill.lr=1e-3), got {item!r}")
        value = parse_value(text, f"--set {key}") if text.strip() else None
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
    _check_top_keys(data, origin, file)
    steps = _parse_steps(data.get("steps"), origin)
    _check_steps(steps, file)
    threads = data.get("threads")
    if threads is not None and (problem := out_of_bounds(threads, 1, None, cpus=True)) is not None:
        raise ValidationError(f"{origin.at(('threads',))}: threads {problem}")
    name = data.get("name") or (Path(file).stem if file != "<recipe>" else "recipe")
    if not re.fullmatch(r"[A-Za-z0-9][\w.-]*", name):
        raise ValidationError(f"{origin.at(('name',))}: name must be letters, digits, '-', '_' and '.', got {name!r}")
    source = origin.resolve(data["source"], "model", ("source",), "source")
    origin.raise_missing()
    _check_repo_id(steps, origin)
    recipe = Recipe(name=name, source=source, steps=steps, output=_output(data.get("output"), origin),
                    threads=threads, description=data.get("description"))
    _place_written(recipe, origin)
    return recipe


def _check_top_keys(data: dict, origin: _Origin, file: str) -> None:
    """Known top-level keys of the right types, and a source."""
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


def _parse_steps(raw_steps: Any, origin: _Origin) -> list[Step]:
    """Each ``- kind: {settings}`` item as a checked :class:`Step`."""
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
        steps.append(Step(kind, config, origin.where.lines.get(("steps", i))))
    return steps


def _output(value: str | None, origin: _Origin) -> Path | None:
    """The run folder a recipe names. It may be anywhere: ``run`` writes into it only when it is new, empty or a
    run folder of its own (:func:`~espresso_export.pipeline.state.check_run_folder`)."""
    if not value:
        return None
    return (origin.base_for(("output",)) / Path(value).expanduser()).resolve()


def _place_written(recipe: Recipe, origin: _Origin) -> None:
    """Folders a step writes into (``distill.cache_dir``), as the file names them: resolved against the run folder,
    and refused outside it or inside a step's own folder (which the run replaces). Given with ``--set``, such a
    path is the caller's choice and goes anywhere."""
    run = recipe.run_folder
    for path, key, raw in origin.written:
        where = (run / Path(raw).expanduser()).resolve()
        inside = where.relative_to(run).parts if is_within(where, run) else None
        if inside is None or not inside or re.fullmatch(r"\d+-[a-z]+(\.run)?", inside[0]):
            problem = "is outside the run folder" if inside is None else "is not a folder of its own in the run folder"
            raise ValidationError(f"{origin.at(path)}: {key}: {raw!r} {problem} {run} (it resolves to {where}); a "
                                  "recipe writes only into its run folder, beside the step folders: give another "
                                  f"place on the command line with --set {key}=PATH")
        step = recipe.steps[path[1]]
        setattr(step.config, path[-1], str(where))


def _check_repo_id(steps: list[Step], origin: _Origin) -> None:
    push = next((s for s in steps if s.kind == "push"), None)
    if push is not None:
        from espresso_export.publishing.push import validate_repo_id

        try:
            validate_repo_id(push.config.repo_id)
        except ValidationError as e:
            at = origin.at(("steps", steps.index(push), "push", "repo_id"))
            raise ValidationError(f"{at}: push.repo_id: {e.message}") from None


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
           "missing_files", "step_fields", "MODEL_STEPS", "RUNS_FOLDER", "DistillStep", "ExportStep", "PushStep",
           "ShrinkStep", "TrainStep", "VerifyStep"]
