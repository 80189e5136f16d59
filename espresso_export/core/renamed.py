"""Names of earlier releases that still import from the module they lived in, with a DeprecationWarning naming
the new one: one module ``__getattr__`` (PEP 562) built here, instead of one hand-written per module."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any


def old_names(module: str, renamed: Mapping[str, tuple[str, Callable[[], Any]]]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``renamed``: old name -> (new name, a function returning the object)."""

    def __getattr__(name: str) -> Any:
        if name in renamed:
            new, get = renamed[name]
            warnings.warn(f"{name} is now {new}; the old name will be removed in 1.0", DeprecationWarning,
                          stacklevel=2)
            return get()
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
