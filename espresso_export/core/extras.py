"""Optional packages: which feature needs which module, from which extra, checked before any work starts.

One table, read by every command (and the recipe runner, for all its steps) at its start, so a missing package
fails in the first second with one message and one exit code (2), not as a bare ``ImportError`` after an hour:

==================  ==========================  ===========  ==================================================
feature             modules                     extra        used by
==================  ==========================  ===========  ==================================================
onnx-export         onnx, onnxruntime           ``onnx``     ``export`` (``--format onnx``, the default)
onnx-runtime        onnxruntime                 ``onnx``     ``verify`` / ``sweep`` of an export folder
openvino-export     openvino, nncf              ``openvino`` ``export --format onnx,openvino``
openvino-runtime    openvino                    ``openvino`` running an ``openvino/*.xml`` file of an export
retrieval           faiss                       ``eval``     ``verify --retrieval``
plot                matplotlib                  ``eval``     ``sweep`` (``sweep.png``)
lora                peft                        ``lora``     ``train --lora``
hub-datasets        datasets                    ``data``     a Hub dataset split (``hf://owner/name:split``)
parquet             pyarrow                     ``data``     a ``.parquet`` input
==================  ==========================  ===========  ==================================================
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from espresso_export.core.errors import ValidationError
from espresso_export.core.telemetry import TELEMETRY_MODULES, no_openvino_telemetry


@dataclass(frozen=True)
class Extra:
    what: str  # the feature, as the message says it
    modules: tuple[str, ...]
    extra: str


EXTRAS: dict[str, Extra] = {
    "onnx-export": Extra("exporting to ONNX", ("onnx", "onnxruntime"), "onnx"),
    "onnx-runtime": Extra("running an ONNX export", ("onnxruntime",), "onnx"),
    "openvino-export": Extra("exporting to OpenVINO", ("openvino", "nncf"), "openvino"),
    "openvino-runtime": Extra("running an OpenVINO file", ("openvino",), "openvino"),
    "retrieval": Extra("retrieval evaluation", ("faiss",), "eval"),
    "plot": Extra("the sweep plot", ("matplotlib",), "eval"),
    "lora": Extra("LoRA", ("peft",), "lora"),
    "hub-datasets": Extra("reading a Hub dataset", ("datasets",), "data"),
    "parquet": Extra("reading parquet files", ("pyarrow",), "data"),
}


class MissingExtraError(ValidationError):
    """An optional package a requested feature needs is not installed. Exit code 2, before any work."""


def missing_modules(feature: str) -> list[str]:
    """The modules of ``feature`` that cannot be imported (absent, or broken: an import is the only true test)."""
    out = []
    for module in EXTRAS[feature].modules:
        if module in TELEMETRY_MODULES:
            no_openvino_telemetry()  # before their first import (core/telemetry.py)
        try:
            importlib.import_module(module)
        except ImportError:
            out.append(module)
    return out


def require(*features: str) -> None:
    """Raise :class:`MissingExtraError` naming the extra to install if any module of ``features`` is missing."""
    for feature in dict.fromkeys(features):
        absent = missing_modules(feature)
        if absent:
            extra = EXTRAS[feature]
            raise MissingExtraError(
                f"{extra.what} needs {', '.join(absent)}, which is not installed: "
                f'pip install "espresso-export[{extra.extra}]"')

