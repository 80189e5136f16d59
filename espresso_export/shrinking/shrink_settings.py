"""The settings of ``shrink``, declared once: the API, the ``shrink`` command and the recipe's ``shrink`` step
derive from this class (:mod:`espresso_export.core.settings`). Torch-free, so ``--help`` stays instant."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from espresso_export.core.parsing import parse_layers
from espresso_export.core.common_settings import (
    attention_setting, pooling_setting, seed_setting, select_setting, trust_remote_code_setting,
)
from espresso_export.core.settings import setting
from espresso_export.core.types import Attention, Head, Pooling, Select

@dataclass
class ShrinkSettings:
    """:func:`espresso_export.shrinking.shrink.shrink`: keep L layers and a k-d head."""

    layers: Union[int, list[int]] = setting(
        help="How many layers to keep (4), or 0-based layer indices to keep (0,2,4).", flags=("--layers", "-l"),
        cli_type=str, parse=parse_layers)
    dim: Optional[int] = setting(None, min=1, help="Output embedding width k.", flags=("--dim", "-d"))
    head: Optional[Head] = setting(None, help="pca (fitted), truncate (first-k, for ESE-trained models) or none. "
                                              "Default: truncate for ESE-trained models, pca otherwise; none without "
                                              "--dim.")
    select: Select = select_setting()
    pooling: Optional[Pooling] = pooling_setting()
    calibration: Optional[str] = setting(
        None, path="data", help="Sentences for the PCA head: .txt (one a line), .jsonl, .csv/.tsv. Default: a small "
                                "corpus shipped with espresso-export.")
    calibration_samples: int = setting(4096, min=1, help="Use at most this many calibration sentences.")
    seed: int = seed_setting()
    batch_size: int = setting(64, min=1, help="Sentences per forward pass.")
    attention: Optional[Attention] = attention_setting()
    prune_corpus: Optional[list[str]] = setting(
        None, path="data", help="Also prune the vocabulary to the tokens this corpus uses (repeatable; as "
                                "`prune-vocab --corpus`).")
    prune_min_count: int = setting(1, min=1, help="As `prune-vocab --min-count`.")
    prune_keep_top: Optional[int] = setting(None, min=1, help="As `prune-vocab --keep-top`.")
    prune_keep_file: Optional[str] = setting(None, path="file", help="As `prune-vocab --keep-file`.")
    trust_remote_code: bool = trust_remote_code_setting()
