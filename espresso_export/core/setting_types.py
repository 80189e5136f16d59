"""Setting values checked against their declared types, as recipes and the API's keyword arguments give them
(``"pca"`` -> ``Head.PCA``, one path where a list is expected -> a list of it), and the types named in messages."""

from __future__ import annotations

import os
import types
import typing
from enum import Enum
from typing import Any, Union


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
        if not isinstance(value, (list, tuple)):  # a tuple from Python; YAML gives lists
            if item is str and isinstance(value, (str, os.PathLike)):
                return [coerce(value, str, from_cli=from_cli)]  # one file where a list is expected
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
        if isinstance(value, os.PathLike):  # the API: Path("data/sts.csv") where a path is a string setting
            return os.fspath(value)
        if from_cli and isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)  # --set push.revision=2024 means the string
        raise Mismatch
    raise Mismatch


def shown(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})" if value is not None else "null"
