"""Settings several commands share, declared once: every command that has one takes this declaration, so the
name, default and help cannot drift apart between commands (torch-free)."""

from __future__ import annotations

from espresso_export.core.settings import setting
from espresso_export.core.types import Select

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
