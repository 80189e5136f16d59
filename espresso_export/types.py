"""User choices as ``str`` Enums: CLI strings and YAML values validate for free."""

from __future__ import annotations

from enum import Enum


class Pooling(str, Enum):
    CLS = "cls"
    MEAN = "mean"
    LAST_TOKEN = "lasttoken"
    MAX = "max"


class Head(str, Enum):
    PCA = "pca"  # fitted PCA, stored as a sentence-transformers Dense module
    TRUNCATE = "truncate"  # first-k dims (ESE-trained models)
    NONE = "none"  # keep the full width


class Select(str, Enum):
    AUTO = "auto"  # first for ESE-trained models, spread otherwise
    FIRST = "first"  # the first L layers (ESE semantics)
    SPREAD = "spread"  # L layers spread over the depth, always keeping the last


class IndexKind(str, Enum):
    FLAT = "flat"  # exact inner-product search
    IVF = "ivf"  # inverted lists: k-means cells, search the nprobe nearest cells
