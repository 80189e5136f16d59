"""The settings of ``shrink``, declared once: the API, the ``shrink`` command and the recipe's ``shrink`` step
derive from this class (:mod:`espresso_export.core.settings`). Torch-free, so ``--help`` stays instant."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from espresso_export.core.parsing import parse_layers
from espresso_export.core.settings import setting
from espresso_export.core.types import Attention, Head, Pooling, Select

# shared by every command that reads a model (declared here, the lowest stage that has settings)
TRUST_REMOTE_CODE_HELP = "Allow model code from the checkpoint's repository (off by default)."
POOLING_HELP = "Override the pooling read from the checkpoint."
SEED_HELP = "Random seed (calibration sampling, training)."
SELECT_HELP = ("Which layers a count keeps: first (ESE), spread (keeps the last layer), auto = first for ESE-trained "
               "models, spread otherwise.")
BIDIRECTIONAL_HELP = ("Decoders: make all layers (ESE's LLM recipe) or the last layer (BeLLM) bidirectional; mean "
                      "pooling. Recorded in config.json and espresso.json.")


def trust_remote_code_setting():
    # never a recipe key: a shared YAML file must not run code from the Hub (`run --trust-remote-code` turns it on)
    return setting(False, recipe=False, help=TRUST_REMOTE_CODE_HELP)


def pooling_setting():
    return setting(None, help=POOLING_HELP)


def seed_setting(help: str = SEED_HELP):
    return setting(0, help=help)


def select_setting():
    return setting(Select.AUTO, help=SELECT_HELP)


def attention_setting():
    return setting(None, help=BIDIRECTIONAL_HELP, flags=("--bidirectional",))


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
