"""Recipes: one YAML file that declares a whole pipeline, validated strictly before anything runs.

A recipe names a source model, an ordered list of steps and, optionally, where the run folder goes::

    name: minilm-L3-d128            # optional; default: the file name
    source: minilm                  # folder, Hub id or alias (`espresso-export models`)
    output: runs/minilm-L3-d128     # optional; default: ./NAME (relative paths: against the recipe's folder)
    threads: 2                      # optional; torch / onnxruntime threads for every step
    steps:
      - shrink: {layers: 3, dim: 128}
      - distill: {corpus: [sentences.txt], max_sentences: 10000, lr: 1.0e-3}
      - export: {quantize: int8}
      - verify: {sts: [sts-test.csv], min_retention: 0.95}
      - push: {repo_id: me/minilm-L3-d128, dry_run: true}

Each step kind appears at most once; its keys are the parameters of the library call it makes
(:func:`~espresso_export.shrinking.shrink`, :func:`~espresso_export.distillation.distill`,
:func:`~espresso_export.esetrain.train_ese`, :func:`~espresso_export.exporting.pipeline.export`,
:func:`~espresso_export.verification.runner.verify`, :func:`~espresso_export.hub.push`) with the same names and
defaults; the dataclasses below are the schema. Unknown keys, wrong types and missing files are errors that
name the key and the line of the file. Relative paths in a recipe resolve against the recipe's folder; values
given with ``--set step.key=value`` (parsed as YAML) are type-checked the same way and their relative paths
resolve against the current folder.

Shipped recipes live in ``recipes/`` at the root of the source tree; :func:`find_recipe` accepts a path or the
name of a shipped recipe. How steps feed each other is :mod:`espresso_export.recipe_runner`'s concern.
"""

from __future__ import annotations

import difflib
import os
import re
import types
import typing
from dataclasses import MISSING, dataclass, field, fields
from enum import Enum
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional, Union

from espresso_export.core.errors import NotFoundError, ValidationError
from espresso_export.core.types import (
    Attention, CorpusSample, ExportFormat, Head, IndexKind, Loss, Optimize, Pooling, ProjectionInit, Quantize, Select,
)

RECIPE_SUFFIXES = (".yaml", ".yml")
SHIPPED_DIR = Path(__file__).resolve().parents[2] / "recipes"  # root recipes/ of a source checkout
_DATA_SUFFIXES = (".txt", ".csv", ".tsv", ".jsonl", ".json", ".gz", ".parquet")

# field metadata: how a string value is resolved
MODEL = {"kind": "model"}  # folder (must exist), else a Hub id or alias
DATA = {"kind": "data"}  # file/folder (must exist), else 'builtin', hf://..., or a Hub dataset id
FILE = {"kind": "file"}  # a path that must exist
DIR = {"kind": "dir"}  # a path that may not exist yet


# --- the schema: one dataclass per step, fields = the library call's keyword arguments ------------------------

@dataclass
class ShrinkStep:
    """:func:`espresso_export.shrinking.shrink` on the previous step's model (or the source)."""

    layers: Union[int, list[int]]
    dim: Optional[int] = None
    head: Optional[Head] = None
    select: Select = Select.AUTO
    pooling: Optional[Pooling] = None
    calibration: Optional[str] = field(default=None, metadata=DATA)
    calibration_samples: int = 4096
    seed: int = 0
    batch_size: int = 64
    attention: Optional[Attention] = None
    trust_remote_code: bool = False


@dataclass
class DistillStep:
    """:func:`espresso_export.distillation.distill`.

    ``teacher`` defaults to the model the previous shrink step cut (else the source). Without ``student``: after
    a shrink step, the teacher cut to the same layers is healed (the shrink's layers and dim are the defaults);
    after a train/distill step, that step's model is the student; as the first step, ``student_layers`` is needed.
    """

    corpus: Optional[list[str]] = field(default=None, metadata=DATA)  # needed unless pairs are given
    pairs: Optional[list[str]] = field(default=None, metadata=DATA)  # pair files: trains with the pair loss
    dim: Optional[int] = None
    teacher: Optional[str] = field(default=None, metadata=MODEL)
    student: Optional[str] = field(default=None, metadata=MODEL)
    student_layers: Union[int, list[int], None] = None
    select: Select = Select.AUTO
    corpus_field: Optional[str] = None
    corpus_column: Optional[str] = None
    max_sentences: Optional[int] = None
    sample: CorpusSample = CorpusSample.RANDOM
    augment: list[str] = field(default_factory=list)
    augment_copies: int = 1
    pca_samples: int = 20000
    epochs: int = 1
    batch_size: int = 64
    lr: Optional[float] = None  # distill() picks: 5e-5 with pairs, 1e-3 healing, 1e-4 another student
    warmup: float = 0.1
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    max_seq_len: int = 128
    max_steps: Optional[int] = None
    loss: Optional[Loss] = None  # distill() picks: pair with pairs, else mse
    layer_targets: Optional[bool] = None
    layer_weight: float = 1.0
    projection_init: ProjectionInit = ProjectionInit.PCA_ALIGNED
    dropout: bool = False
    bucket: bool = True
    eval_sts: Optional[str] = field(default=None, metadata=DATA)
    eval_limit: Optional[int] = None
    heldout: int = 256
    seed: int = 0
    device: str = "cpu"
    amp: str = "auto"
    checkpoint_every: int = 200
    keep_checkpoints: bool = False
    cache_dir: Optional[str] = field(default=None, metadata=DIR)
    pooling: Optional[Pooling] = None
    trust_remote_code: bool = False


@dataclass
class TrainStep:
    """:func:`espresso_export.esetrain.train_ese` (``ese: true``) or plain fine-tuning, on the previous model."""

    data: str = field(metadata=DATA)
    ese: bool = False
    loss: str = "angle"  # angle, cosent, infonce (espresso_export.ese.SentenceLoss)
    compression_dim: int = 128
    alpha: float = 1.0
    beta: float = 1.0
    layer_weights: str = "log"  # log, uniform, learned
    layers_from: int = 1
    positive_threshold: Optional[float] = None
    data_limit: Optional[int] = None
    epochs: int = 1
    batch_size: int = 32
    lr: float = 2e-5
    warmup: float = 0.1
    max_steps: Optional[int] = None
    max_seq_len: Optional[int] = None
    eval_sts: Optional[str] = field(default=None, metadata=DATA)
    eval_limit: Optional[int] = None
    seed: int = 0
    device: str = "cpu"
    checkpoint_every: int = 200
    keep_checkpoints: bool = False
    attention: Optional[Attention] = None
    lora_r: Optional[int] = None  # LoRA rank (alpha = rank); none: full fine-tuning
    pooling: Optional[Pooling] = None
    trust_remote_code: bool = False


@dataclass
class ExportStep:
    """:func:`espresso_export.exporting.pipeline.export` (:class:`~espresso_export.exporting.options.ExportOptions`)."""

    formats: list[ExportFormat] = field(default_factory=lambda: [ExportFormat.ONNX])
    quantize: Quantize = Quantize.NONE
    optimize: Optimize = Optimize.NONE
    opset: int = 17
    max_seq_length: Optional[int] = None
    validate: bool = True
    exporter: str = "auto"
    smooth_alpha: float = 0.5
    calibration_samples: int = 256
    min_cosine: dict[str, float] = field(default_factory=dict)
    trust_remote_code: bool = False


@dataclass
class VerifyStep:
    """:func:`espresso_export.verification.runner.verify` of the last export (else the last model) against
    ``against`` (default: the recipe's source); the thresholds are the gate: a failed one stops the run (exit 3)."""

    sts: list[str] = field(default_factory=lambda: ["builtin"], metadata=DATA)
    against: Optional[str] = field(default=None, metadata=MODEL)
    min_retention: Optional[float] = None
    max_latency_ratio: Optional[float] = None
    min_retrieval_retention: Optional[float] = None
    sts_columns: Optional[list[str]] = None
    sts_limit: Optional[int] = None
    retrieval: list[str] = field(default_factory=list, metadata=DATA)
    relevant_score: float = 4.0
    index: IndexKind = IndexKind.FLAT
    nlist: int = 100
    nprobe: int = 10
    batch_sizes: list[int] = field(default_factory=lambda: [1, 32])
    threads: Optional[int] = None
    latency_texts: int = 128
    latency_rounds: int = 3
    batch_size: int = 64
    seed: int = 0
    trust_remote_code: bool = False


@dataclass
class PushStep:
    """:func:`espresso_export.hub.push` of the last model with the last export and verify report.

    The token is never part of a recipe: it comes from HF_TOKEN or `hf auth login`. ``dry_run: true`` stages
    the upload in the step's folder and uploads nothing."""

    repo_id: str
    private: bool = False
    create_pr: bool = False
    revision: Optional[str] = None
    commit_message: Optional[str] = None
    dry_run: bool = False


STEP_TYPES: dict[str, type] = {
    "shrink": ShrinkStep, "distill": DistillStep, "train": TrainStep, "export": ExportStep, "verify": VerifyStep,
    "push": PushStep,
}
MODEL_STEPS = ("shrink", "distill", "train")  # steps that write a model folder
TOP_KEYS = ("name", "description", "source", "output", "threads", "steps")


@dataclass
class Step:
    kind: str
    config: Any  # one of the *Step dataclasses
    line: int | None = None

    def to_dict(self) -> dict:
        return {"kind": self.kind, **{f.name: _plain(getattr(self.config, f.name)) for f in fields(self.config)}}


@dataclass
class Recipe:
    name: str
    source: str
    steps: list[Step]
    path: Path | None = None  # the recipe file
    output: Path | None = None  # the run folder (None: ./NAME)
    threads: int | None = None
    description: str | None = None

    def step(self, kind: str) -> Step | None:
        return next((s for s in self.steps if s.kind == kind), None)

    def folder(self, step: Step) -> Path:
        """The step's folder inside the run folder: ``1-shrink``, ``2-distill``, ..."""
        return self.run_folder / f"{self.steps.index(step) + 1}-{step.kind}"

    @property
    def run_folder(self) -> Path:
        return (self.output or Path.cwd() / self.name).resolve()

    def to_dict(self) -> dict:
        return {"name": self.name, "description": self.description, "source": self.source,
                "recipe": str(self.path) if self.path else None, "output": str(self.run_folder),
                "threads": self.threads, "steps": [s.to_dict() for s in self.steps]}


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


# --- YAML with line numbers ------------------------------------------------------------------------------

class _Where:
    """Line numbers of every key and list item, by path, from the composed YAML nodes."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.lines: dict[tuple, int] = {}

    def at(self, path: tuple) -> str:
        while path and path not in self.lines:
            path = path[:-1]
        line = self.lines.get(path)
        return f"{self.file}:{line}" if line else self.file

    def walk(self, node, path: tuple = ()) -> None:
        import yaml

        self.lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            seen: dict[str, int] = {}
            for key, value in node.value:
                name = key.value if isinstance(key, yaml.ScalarNode) else str(key.start_mark)
                line = key.start_mark.line + 1
                if name in seen:
                    raise ValidationError(f"{self.file}:{line}: duplicate key {'.'.join(map(str, (*path, name)))!r} "
                                          f"(first at line {seen[name]})")
                seen[name] = line
                self.lines[(*path, name)] = line
                self.walk(value, (*path, name))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self.lines[(*path, i)] = item.start_mark.line + 1
                self.walk(item, (*path, i))


def _load_yaml(text: str, file: str) -> tuple[Any, _Where]:
    import yaml

    where = _Where(file)
    try:
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                raise ValidationError(f"{file}: the recipe is empty")
            where.walk(node)
            data = loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f"{file}:{mark.line + 1}" if mark is not None else file
        raise ValidationError(f"{at}: not valid YAML: {getattr(e, 'problem', None) or e}") from e
    return data, where


# --- type checking --------------------------------------------------------------------------------------------

def _type_name(tp) -> str:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return " or ".join(_type_name(a) for a in args)
    if origin is list:
        return f"a list of {_plural(typing.get_args(tp)[0])}"
    if origin is dict:
        return f"a mapping of names to {_plural(typing.get_args(tp)[1])}"
    if isinstance(tp, type) and issubclass(tp, Enum):
        return "one of " + ", ".join(m.value for m in tp)
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(tp, str(tp))


def _plural(tp) -> str:
    if isinstance(tp, type) and issubclass(tp, Enum):
        return "values among " + ", ".join(m.value for m in tp)
    return {int: "integers", float: "numbers", bool: "booleans", str: "strings"}.get(tp, str(tp))


class _Mismatch(Exception):
    pass


def _coerce(value: Any, tp, *, from_cli: bool) -> Any:
    """``value`` as type ``tp`` or :class:`_Mismatch`."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for arm in (a for a in args if a is not type(None)):
            try:
                return _coerce(value, arm, from_cli=from_cli)
            except _Mismatch:
                continue
        raise _Mismatch
    if origin is list:
        (item,) = typing.get_args(tp)
        if not isinstance(value, list):
            if item is str and isinstance(value, str):
                return [value]  # one file where a list is expected
            raise _Mismatch
        return [_coerce(v, item, from_cli=from_cli) for v in value]
    if origin is dict:
        key_t, val_t = typing.get_args(tp)
        if not isinstance(value, dict):
            raise _Mismatch
        return {_coerce(k, key_t, from_cli=from_cli): _coerce(v, val_t, from_cli=from_cli) for k, v in value.items()}
    if isinstance(tp, type) and issubclass(tp, Enum):
        if isinstance(value, str):
            for member in tp:
                if value == member.value or value.lower() == member.value.lower():
                    return member
        raise _Mismatch
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise _Mismatch
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise _Mismatch
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise _Mismatch
    if tp is str:
        if isinstance(value, str):
            return value
        if from_cli and isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)  # --set push.revision=2024 means the string
        raise _Mismatch
    raise _Mismatch


def _shown(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})" if value is not None else "null"


def _suggest(name: str, known) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


# --- paths -------------------------------------------------------------------------------------------------------

def _looks_like_path(text: str) -> bool:
    """Not an alias or an ``owner/name`` Hub id: a relative or absolute path, a data file, or a deeper path."""
    return (text.startswith(("./", "../", "/", "~", ".\\", "..\\")) or text.lower().endswith(_DATA_SUFFIXES)
            or text.split(":", 1)[0].count("/") > 1)


def _resolve(value: str, kind: str, base: Path, key: str, at: str, check: bool = True) -> str:
    """A path relative to ``base`` made absolute and checked (``check``); other specs (aliases, Hub ids,
    builtin) as given."""
    hint = f"; point it elsewhere with --set {key}=PATH"
    if kind == "dir":
        return str((base / Path(value).expanduser()).resolve())
    if kind == "data" and (value == "builtin" or value.startswith("hf://")):
        return value
    path = (base / Path(value).expanduser()).resolve()
    if path.exists():
        return str(path)
    if kind == "file" or _looks_like_path(value):
        if not check:
            return str(path)
        raise NotFoundError(f"{at}: {key}: file not found: {path}{hint}")
    return value  # an alias or a Hub id (model or dataset)


# --- building the recipe --------------------------------------------------------------------------------------

@dataclass
class _Origin:
    """Where the values come from: the file (line numbers, paths against its folder) or ``--set`` (the cwd)."""

    where: _Where
    base: Path
    cli: dict[tuple, str] = field(default_factory=dict)  # raw path -> the --set item that set it
    check_files: bool = True

    def at(self, path: tuple) -> str:
        return f"--set {self.cli[path]}" if path in self.cli else self.where.at(path)

    def base_for(self, path: tuple) -> Path:
        return Path.cwd().resolve() if path in self.cli else self.base

    def from_cli(self, path: tuple) -> bool:
        return path in self.cli


def _build_step(kind: str, raw: Any, path: tuple, origin: _Origin) -> Any:
    cls = STEP_TYPES[kind]
    hints = typing.get_type_hints(cls)
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ValidationError(f"{origin.at(path)}: step {kind!r} must be a mapping of its settings, got {_shown(raw)}")
    known = {f.name: f for f in fields(cls)}
    values = {}
    for key, value in raw.items():
        at = origin.at((*path, key))
        if kind == "push" and key == "token":
            raise ValidationError(f"{at}: push.token: a token never belongs in a recipe; set HF_TOKEN or run "
                                  "`hf auth login`")
        if key not in known:
            raise ValidationError(f"{at}: unknown key {kind}.{key}{_suggest(str(key), known)} "
                                  f"(known: {', '.join(known)})")
        tp, f = hints[key], known[key]
        try:
            out = _coerce(value, tp, from_cli=origin.from_cli((*path, key)))
        except _Mismatch:
            raise ValidationError(f"{at}: {kind}.{key} must be {_type_name(tp)}, got {_shown(value)}") from None
        path_kind = f.metadata.get("kind")
        if path_kind and out is not None:
            base = origin.base_for((*path, key))
            out = ([_resolve(v, path_kind, base, f"{kind}.{key}", at, origin.check_files) for v in out]
                   if isinstance(out, list) else _resolve(out, path_kind, base, f"{kind}.{key}", at, origin.check_files))
        values[key] = out
    missing = [f.name for f in fields(cls) if f.name not in values and f.default is MISSING
               and f.default_factory is MISSING]
    if missing:
        raise ValidationError(f"{origin.at(path)}: step {kind!r} needs {', '.join(missing)}")
    return cls(**values)


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
        if s.kind == "train":
            from espresso_export.training.ese import LayerWeighting, SentenceLoss  # torch: only for recipes that train

            for key, enum in (("loss", SentenceLoss), ("layer_weights", LayerWeighting)):
                if getattr(s.config, key) not in {m.value for m in enum}:
                    raise ValidationError(f"{at}: train.{key} must be one of {', '.join(m.value for m in enum)}, "
                                          f"got {getattr(s.config, key)!r}")
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
                raise ValidationError(f"--set {key}: unknown key {key!r}{_suggest(key, TOP_KEYS)}; step settings "
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
    data, where = _load_yaml(text, file)
    if not isinstance(data, dict):
        raise ValidationError(f"{file}: a recipe is a mapping with source and steps, got {_shown(data)}")
    origin = _Origin(where, (base or Path.cwd()).resolve(), check_files=check_files)
    _apply_overrides(data, overrides, origin)
    for key in data:
        if key not in TOP_KEYS:
            raise ValidationError(f"{origin.at((key,))}: unknown key {key!r}{_suggest(str(key), TOP_KEYS)} "
                                  f"(known: {', '.join(TOP_KEYS)})")
    for key, tp in (("name", str), ("description", str), ("source", str), ("output", str), ("threads", int)):
        if data.get(key) is not None:
            try:
                data[key] = _coerce(data[key], tp, from_cli=origin.from_cli((key,)))
            except _Mismatch:
                raise ValidationError(f"{origin.at((key,))}: {key} must be {_type_name(tp)}, "
                                      f"got {_shown(data[key])}") from None
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
                                  f"({', '.join(STEP_TYPES)}), got {_shown(item)}")
        (kind, raw), = item.items()
        if kind not in STEP_TYPES:
            raise ValidationError(f"{at}: unknown step {kind!r}{_suggest(str(kind), STEP_TYPES)} "
                                  f"(steps: {', '.join(STEP_TYPES)})")
        config = _build_step(kind, raw, ("steps", i, kind), origin)
        steps.append(Step(kind, config, where.lines.get(("steps", i))))
    _check_steps(steps, file)
    threads = data.get("threads")
    if threads is not None and threads < 1:
        raise ValidationError(f"{origin.at(('threads',))}: threads must be at least 1, got {threads}")
    name = data.get("name") or (Path(file).stem if file != "<recipe>" else "recipe")
    if not re.fullmatch(r"[A-Za-z0-9][\w.-]*", name):
        raise ValidationError(f"{origin.at(('name',))}: name must be letters, digits, '-', '_' and '.', got {name!r}")
    source = _resolve(data["source"], "model", origin.base_for(("source",)), "source", origin.at(("source",)),
                      check_files)
    output = None
    if data.get("output"):
        output = (origin.base_for(("output",)) / Path(data["output"]).expanduser()).resolve()
    push = next((s for s in steps if s.kind == "push"), None)
    if push is not None:
        from espresso_export.publishing.hub import validate_repo_id

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
    recipe = parse_recipe(text, file=str(path), base=path.parent, overrides=overrides, check_files=check_files)
    recipe.path = path
    return recipe


# --- finding recipes ------------------------------------------------------------------------------------------

def shipped_recipes() -> list[Path]:
    """The recipes shipped in ``recipes/`` of the source tree (empty for an installed wheel)."""
    if not (SHIPPED_DIR.is_dir() and (SHIPPED_DIR.parent / "pyproject.toml").is_file()):  # a source checkout only
        return []
    return sorted(p for p in SHIPPED_DIR.iterdir() if p.suffix in RECIPE_SUFFIXES and p.is_file())


def find_recipe(spec: str | os.PathLike) -> Path:
    """A recipe file path, or the name of a shipped recipe (``minilm-L3-d128``)."""
    path = Path(spec).expanduser()
    if path.is_file():
        return path.resolve()
    for candidate in shipped_recipes():
        if str(spec) in (candidate.stem, candidate.name):
            return candidate
    names = [p.stem for p in shipped_recipes()]
    listed = f"; shipped recipes: {', '.join(names)}" if names else ""
    raise NotFoundError(f"recipe not found: {spec} (neither a file nor a shipped recipe name{listed})")


def recipe_header(path: Path) -> list[str]:
    """The leading comment lines of a recipe file (its description, expected retention and speed-up)."""
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    return lines


__all__ = ["Recipe", "Step", "STEP_TYPES", "load_recipe", "parse_recipe", "find_recipe",
           "shipped_recipes", "recipe_header"]
