"""The recipe file as text: YAML with the line of every key, values checked against a settings type, and
path values resolved against the recipe's folder. :mod:`espresso_export.pipeline.recipes` builds on these."""

from __future__ import annotations

import difflib
import types
import typing
from enum import Enum
from pathlib import Path
from typing import Any, Union

from espresso_export.core.errors import NotFoundError, ValidationError

_DATA_SUFFIXES = (".txt", ".csv", ".tsv", ".jsonl", ".json", ".gz", ".parquet")


# --- YAML with line numbers ------------------------------------------------------------------------------

class Where:
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


def load_yaml(text: str, file: str) -> tuple[Any, Where]:
    import yaml

    where = Where(file)
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

def type_name(tp) -> str:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return " or ".join(type_name(a) for a in args)
    if origin in (list, tuple):
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


class Mismatch(Exception):
    pass


def coerce(value: Any, tp, *, from_cli: bool) -> Any:
    """``value`` as type ``tp`` or :class:`Mismatch`."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for arm in (a for a in args if a is not type(None)):
            try:
                return coerce(value, arm, from_cli=from_cli)
            except Mismatch:
                continue
        raise Mismatch
    if origin is tuple:  # tuple[X, ...]: written as a list
        return tuple(coerce(value, list[typing.get_args(tp)[0]], from_cli=from_cli))
    if origin is list:
        (item,) = typing.get_args(tp)
        if not isinstance(value, list):
            if item is str and isinstance(value, str):
                return [value]  # one file where a list is expected
            raise Mismatch
        return [coerce(v, item, from_cli=from_cli) for v in value]
    if origin is dict:
        key_t, val_t = typing.get_args(tp)
        if not isinstance(value, dict):
            raise Mismatch
        return {coerce(k, key_t, from_cli=from_cli): coerce(v, val_t, from_cli=from_cli) for k, v in value.items()}
    if isinstance(tp, type) and issubclass(tp, Enum):
        if isinstance(value, str):
            for member in tp:
                if value == member.value or value.lower() == member.value.lower():
                    return member
        raise Mismatch
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise Mismatch
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise Mismatch
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise Mismatch
    if tp is str:
        if isinstance(value, str):
            return value
        if from_cli and isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)  # --set push.revision=2024 means the string
        raise Mismatch
    raise Mismatch


def shown(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})" if value is not None else "null"


def suggest(name: str, known) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


# --- paths -------------------------------------------------------------------------------------------------------

def _looks_like_path(text: str) -> bool:
    """Not an alias or an ``owner/name`` Hub id: a relative or absolute path, a data file, or a deeper path."""
    return (text.startswith(("./", "../", "/", "~", ".\\", "..\\")) or text.lower().endswith(_DATA_SUFFIXES)
            or text.split(":", 1)[0].count("/") > 1)


def resolve_value(value: str, kind: str, base: Path, key: str, at: str, check: bool = True) -> str:
    """A path relative to ``base`` made absolute and checked (``check``); other specs (aliases, Hub ids,
    builtin) as given."""
    hint = f"; point it elsewhere with --set {key}=PATH"
    if kind == "data":
        from espresso_export.data.corpus import split_weight

        spec, share = split_weight(value)
        if share is not None:  # a corpus source's share of the mix (docs.jsonl:0.7): resolve the path part
            return f"{resolve_value(spec, kind, base, key, at, check)}:{share:g}"
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
