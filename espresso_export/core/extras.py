"""Optional packages: which feature needs which modules, from which extra (:data:`EXTRAS`), checked at the
start of every command and recipe step, so a missing package fails in the first second with one message and exit
code 2, not as a bare ``ImportError`` an hour later.
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
    "static": Extra("a static model (model2vec)", ("model2vec", "skeletoken"), "static"),
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

