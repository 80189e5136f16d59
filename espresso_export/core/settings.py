"""One declaration per setting: the API, the CLI and the recipes are derived from it.

A step's settings are a dataclass whose fields are declared with :func:`setting`: name, type, default,
bounds and help text live there once. From that class

* the library function accepts an instance *or* the same names as keyword arguments
  (:func:`resolve`: unknown names are a ``TypeError``, like any Python call);
* the Typer command gets one option per field (:func:`cli_parameters`, :func:`settings_command`);
* the recipe schema uses the fields marked ``recipe=True`` with the same types and defaults
  (:mod:`espresso_export.pipeline.recipes`).

Typer builds commands from function signatures, so the derived command is a function whose
``__signature__`` lists the options; this module has no heavy imports, so ``--help`` stays instant.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, fields
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional, Union

from espresso_export.core.errors import ValidationError
from espresso_export.core.setting_types import Mismatch, coerce, shown, type_name

SPEC_KEY = "espresso_setting"
PATH_KINDS = ("model", "data", "file", "dir")  # how a recipe resolves a string value (see pipeline/recipes.py)


@dataclass(frozen=True)
class Spec:
    """What a setting means beyond its type and default."""

    help: str
    flags: tuple[str, ...] = ()  # CLI names; default: --field-name
    min: float | None = None
    max: float | None = None
    path: str | None = None  # model | data | file | dir: the value names a file, folder or model
    cli: bool = True  # an option of the command
    recipe: bool = True  # a key of the recipe step
    cli_type: Any = None  # the type the command line parses (default: the field's type)
    parse: Callable[[Any], Any] | None = None  # command-line value -> field value
    metavar: str | None = None
    choices: tuple[str, ...] | None = None  # the values a string setting takes (enums carry their own)
    cpus: bool = False  # a thread count: at most the machine's CPUs
    renamed_from: tuple[str, ...] = ()  # earlier names, still accepted as API keywords and recipe keys

    def __post_init__(self) -> None:
        if self.path is not None and self.path not in PATH_KINDS:
            raise ValueError(f"path must be one of {PATH_KINDS}, got {self.path!r}")


def setting(default: Any = MISSING, *, help: str, default_factory: Any = MISSING, **spec: Any) -> Any:
    """A dataclass field with its :class:`Spec` (``help`` is required: every setting is documented)."""
    return dataclasses.field(default=default, default_factory=default_factory,
                             metadata={SPEC_KEY: Spec(help=help, **spec)})


def declared_as(cls: type, name: str, *, default: Any = MISSING) -> Any:
    """The declaration of ``cls``'s setting ``name`` (default, bounds, help), for a command that takes the same
    setting: one declaration, so name, default and help cannot drift apart. ``default``: this command's own."""
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    if default is not MISSING:
        return dataclasses.field(default=default, metadata=f.metadata)
    return dataclasses.field(default=f.default, default_factory=f.default_factory, metadata=f.metadata)


@dataclass(frozen=True)
class Field:
    """One resolved setting: the dataclass field, its real type and its spec."""

    name: str
    type: Any
    spec: Spec
    default: Any  # MISSING when required

    @property
    def required(self) -> bool:
        return self.default is MISSING

    def out_of_bounds(self, value: Any) -> str | None:
        return out_of_bounds(value, self.spec.min, self.spec.max, self.spec.cpus)

    def coerce(self, value: Any, *, from_cli: bool) -> Any:
        """``value`` as this setting's type, or in its command-line form ("1,32", "none"); else :class:`Mismatch`."""
        try:
            return coerce(value, self.type, from_cli=from_cli)
        except Mismatch:
            return coerce(self.parse_cli_form(value), self.type, from_cli=from_cli)

    def parse_cli_form(self, value: Any) -> Any:
        """A value given in its command-line form ("1,32", "none"; YAML null where the command line says "none"),
        parsed as the command line parses it; anything else is returned as it is (the type check reports it)."""
        if self.spec.parse is None or self.spec.cli_type is not str or not (value is None or isinstance(value, str)):
            return value
        try:
            parsed = self.spec.parse("none" if value is None else value)
        except ValidationError:
            return value
        return list(parsed) if isinstance(parsed, tuple) else parsed  # a sequence's form in YAML and JSON

    @property
    def flags(self) -> tuple[str, ...]:
        return self.spec.flags or ("--" + self.name.replace("_", "-"),)


def settings_fields(cls: type) -> list[Field]:
    """The declared settings of ``cls`` in declaration order (fields without a spec are not settings)."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in fields(cls):
        spec = f.metadata.get(SPEC_KEY)
        if spec is None:
            continue
        default = f.default if f.default is not MISSING else (
            f.default_factory() if f.default_factory is not MISSING else MISSING)
        out.append(Field(f.name, hints[f.name], spec, default))
    return out


def check_choices(settings: Any) -> None:
    """Refuse a string setting outside its declared ``choices`` or a number outside its bounds (named as the
    command line spells it)."""
    for f in settings_fields(type(settings)):
        value = getattr(settings, f.name)
        if f.spec.choices is not None and value not in f.spec.choices:
            raise ValidationError(f"{f.flags[0].split('/')[0]} must be one of {', '.join(f.spec.choices)}, "
                                  f"got {value!r}")
        if (problem := f.out_of_bounds(value)) is not None:
            raise ValidationError(f"{f.flags[0].split('/')[0]} {problem}")


def out_of_bounds(value: Any, low: float | None, high: float | None, cpus: bool = False) -> str | None:
    """Why a number (or each number of a list) is outside ``[low, high]`` (``cpus``: at most this machine's CPUs);
    ``None`` when it is inside, or not a number."""
    values = value if isinstance(value, (list, tuple)) else [value]
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        if low is not None and v < low:
            return f"must be at least {low:g}, got {v:g}"
        if high is not None and v > high:
            return f"must be at most {high:g}, got {v:g}"
        if cpus and v > (os.cpu_count() or 1):
            return f"must be at most {os.cpu_count() or 1} (this machine's CPUs), got {v:g}"
    return None


def renamed(cls: type) -> dict[str, str]:
    """Earlier name -> declared name, for the settings of ``cls`` declared with ``renamed_from``."""
    return {old: f.name for f in settings_fields(cls) for old in f.spec.renamed_from}


def renamed_message(old: str, new: str) -> str:
    return f"{old} is now {new}; the old name will be removed in 1.0"


def current_key(cls: type, key: str, at: str, prefix: str = "") -> str:
    """A recipe key by its declared name: an earlier name (``renamed_from``) is read as the new one, with one
    line on stderr naming the new key (``at``: the recipe line; ``prefix``: the step, e.g. ``export.``)."""
    new = renamed(cls).get(key)
    if new is None:
        return key
    from espresso_export.core.console import err_console

    err_console().print(f"warning: {at}: {renamed_message(prefix + key, prefix + new)}", markup=False,
                        highlight=False, soft_wrap=True)
    return new


def _renamed_kwargs(cls: type, kwargs: Mapping[str, Any], call: str) -> dict[str, Any]:
    """``kwargs`` with earlier names of settings replaced by the declared ones (a DeprecationWarning each)."""
    import warnings

    old_names = renamed(cls)
    out = dict(kwargs)
    for old in [k for k in kwargs if k in old_names]:
        new = old_names[old]
        if new in kwargs:
            raise TypeError(f"{call}() got both {new} and its earlier name {old}")
        warnings.warn(f"{call}(): {renamed_message(old, new)}", DeprecationWarning, stacklevel=4)
        out[new] = out.pop(old)
    return out


def resolve(cls: type, settings: Any, kwargs: Mapping[str, Any], *, call: str) -> Any:
    """The settings of one call: ``settings`` (an instance of ``cls`` or ``None``) with ``kwargs`` on top
    (a setting's earlier name still works, with a DeprecationWarning)."""
    kwargs = _renamed_kwargs(cls, kwargs, call)
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise TypeError(f"{call}() got unexpected keyword argument(s): {', '.join(unknown)}")
    if settings is not None and not isinstance(settings, cls):
        raise TypeError(f"{call}() settings must be a {cls.__name__}, got {type(settings).__name__}")
    typed = _typed(cls, kwargs, call)
    if settings is None:
        return cls(**typed)
    return dataclasses.replace(settings, **typed) if typed else settings


def _typed(cls: type, kwargs: Mapping[str, Any], call: str) -> dict[str, Any]:
    """The keyword arguments checked against their declared types as a recipe's values are, and converted the same
    way (``"pca"`` -> ``Head.PCA``, one path where a list is expected -> a list of it, ``"1,32"`` where the
    command line takes that form): a wrong type fails at the call, not deep inside after minutes of work, and a
    string is never read letter by letter as a list of files."""
    declared = {f.name: f for f in settings_fields(cls)}
    out = dict(kwargs)
    for name, value in kwargs.items():
        f = declared.get(name)
        if f is None:
            continue
        try:
            out[name] = f.coerce(value, from_cli=False)
        except Mismatch:
            raise ValidationError(f"{call}(): {name} must be {type_name(f.type)}, got {shown(value)}") from None
        if f.spec.choices is not None and out[name] not in f.spec.choices:
            raise ValidationError(f"{call}(): {name} must be one of {', '.join(f.spec.choices)}, got {out[name]!r}")
        if (problem := f.out_of_bounds(out[name])) is not None:
            raise ValidationError(f"{call}(): {name} {problem}")
    return out


def field_of(cls: type, name: str) -> Field:
    """One declared setting of ``cls`` (for commands outside the six steps that share its option)."""
    return next(f for f in settings_fields(cls) if f.name == name)


def option_type(cls: type, name: str, *, cli_type: Any = None):
    """``Annotated[type, typer.Option(...)]`` for a command parameter that is the declared setting ``name``."""
    f = field_of(cls, name)
    return Annotated[cli_type or _cli_type(f), option_for(f)]


def as_kwargs(settings: Any) -> dict[str, Any]:
    """The fields of a settings instance as keyword arguments (shallow: values are not copied)."""
    return {f.name: getattr(settings, f.name) for f in fields(settings)}


# --- the command line ----------------------------------------------------------------------------------------

def _optional(tp) -> tuple[Any, bool]:
    """``Optional[X]`` -> ``(X, True)``; anything else -> ``(tp, False)``."""
    if typing.get_origin(tp) in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(args) < len(typing.get_args(tp)):
            return args[0], True
    return tp, False


def _cli_type(f: Field):
    """The type Typer parses: the declared ``cli_type``, else the field's type (str for path settings)."""
    if f.spec.cli_type is not None:
        return f.spec.cli_type
    base, optional = _optional(f.type)
    if typing.get_origin(base) is list:
        return list[typing.get_args(base)[0]]
    return Optional[base] if optional else base


def option_for(f: Field):
    """The ``typer.Option`` of a setting."""
    import typer

    base, _ = _optional(f.type)
    flags = f.flags
    if base is bool and len(flags) == 1 and "/" not in flags[0] and f.default is not False:
        flags = (f"{flags[0]}/--no-{flags[0][2:]}",)  # a default-on (or tri-state) switch needs its off form
    kw: dict[str, Any] = {"help": f.spec.help}
    if f.spec.min is not None:
        kw["min"] = f.spec.min
    if f.spec.max is not None:
        kw["max"] = f.spec.max
    if isinstance(base, type) and issubclass(base, Enum):
        kw["case_sensitive"] = False
    if f.spec.metavar:
        kw["metavar"] = f.spec.metavar
    return typer.Option(*flags, **kw)


def cli_parameters(cls: type, *, exclude: tuple[str, ...] = (), required: tuple[str, ...] = ()) -> list[inspect.Parameter]:
    """One keyword parameter per CLI setting of ``cls``, annotated for Typer. ``required`` makes settings that
    have a default in the API (``None``: decided later) mandatory on the command line."""
    params = []
    for f in settings_fields(cls):
        if not f.spec.cli or f.name in exclude:
            continue
        default = inspect.Parameter.empty if (f.required or f.name in required) else f.default
        if isinstance(default, (list, tuple)):
            if _cli_type(f) is str:  # a comma-separated option: shown as it is typed
                default = ",".join(str(getattr(v, "value", v)) for v in default)
            else:
                default = list(default) or None  # Typer's repeatable options default to None, not []
        annotation = Annotated[_cli_type(f), option_for(f)]
        params.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation))
        params += _renamed_options(f)
    return params


RENAMED_PREFIX = "renamed__"  # a hidden option keeping an earlier name of a setting working on the command line


def _renamed_options(f: Field) -> list[inspect.Parameter]:
    """Hidden options for the earlier names of ``f`` (``renamed_from``) that were command-line flags: the value
    goes to ``f``, with one line naming the new flag (:func:`from_cli`)."""
    import typer

    if not f.spec.cli or f.spec.flags:
        return []
    return [inspect.Parameter(RENAMED_PREFIX + old, inspect.Parameter.KEYWORD_ONLY, default=None,
                              annotation=Annotated[Optional[_cli_type(f)], typer.Option(
                                  "--" + old.replace("_", "-"), hidden=True, help=f"Now {f.flags[0]}.")])
            for old in f.spec.renamed_from]


def from_cli(cls: type, values: Mapping[str, Any]) -> Any:
    """A settings instance from the parsed command-line values of :func:`cli_parameters` (``parse`` applied)."""
    kwargs = {}
    values = _renamed_values(cls, values)
    for f in settings_fields(cls):
        if f.name not in values:
            continue
        value = values[f.name]
        if value is not None and f.spec.parse is not None:
            value = f.spec.parse(value)
        if value is None and isinstance(f.default, list):
            value = list(f.default)
        if isinstance(value, Path) and _optional(f.type)[0] is str:
            value = str(value)
        kwargs[f.name] = value
    return cls(**kwargs)


def _renamed_values(cls: type, values: Mapping[str, Any]) -> dict[str, Any]:
    """The command line's values with an earlier flag's value moved to its setting, one warning line each."""
    from espresso_export.core.console import err_console

    out = {k: v for k, v in values.items() if not k.startswith(RENAMED_PREFIX)}
    for key, value in values.items():
        if not key.startswith(RENAMED_PREFIX) or value is None or value == []:
            continue
        old = key[len(RENAMED_PREFIX):]
        new = field_of(cls, renamed(cls)[old])
        err_console().print(f"warning: {renamed_message('--' + old.replace('_', '-'), new.flags[0])}",
                            markup=False, highlight=False, soft_wrap=True)
        out[new.name] = value
    return out


def param(name: str, annotation: Any, default: Any = inspect.Parameter.empty) -> inspect.Parameter:
    """A command parameter that is not a setting (the model argument, ``--output``, ``--json``, ...)."""
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


def settings_command(cls: type, fixed: list[inspect.Parameter], body: Callable[..., None], *,
                     exclude: tuple[str, ...] = (), required: tuple[str, ...] = (), doc: str | None = None) -> Callable:
    """A function Typer can register: the ``fixed`` parameters (arguments, ``--output``, ``--json``, ...) followed
    by one option per setting. Calling it calls ``body(settings, **fixed_values)``."""
    derived = cli_parameters(cls, exclude=exclude, required=required)
    names = {p.name for p in fixed}

    def command(**values: Any) -> None:
        fixed_values = {k: v for k, v in values.items() if k in names}
        settings_values = {k: v for k, v in values.items() if k not in names}
        body(from_cli(cls, settings_values), **fixed_values)

    # Typer accepts any order of keyword-only parameters; positional arguments come first in `fixed`
    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in fixed] + derived
    params.sort(key=lambda p: p.default is not inspect.Parameter.empty)  # required first (help lists them first)
    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    command.__doc__ = doc or body.__doc__
    command.__name__ = body.__name__
    return command


__all__ = [
    "Field",
    "Spec",
    "as_kwargs",
    "check_choices",
    "cli_parameters",
    "current_key",
    "field_of",
    "from_cli",
    "option_for",
    "option_type",
    "param",
    "renamed",
    "resolve",
    "setting",
    "settings_command",
    "settings_fields",
]
