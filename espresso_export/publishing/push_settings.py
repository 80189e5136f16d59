"""The settings of ``push``, declared once: the API, the ``push`` command and the recipe's ``push`` step derive
from this class. The token is not a setting: it never belongs in a recipe (HF_TOKEN, `hf auth login`, or the
command's ``--token``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from espresso_export.core.settings import setting


@dataclass
class PushSettings:
    """:func:`espresso_export.publishing.push.push`: where and how the commit goes."""

    private: bool = setting(False, help="Create the repository as private.")
    create_pr: bool = setting(False, help="Open a pull request instead of committing to the branch.")
    revision: Optional[str] = setting(None, help="Branch to commit to (created if missing; with --create-pr, the "
                                                 "PR's base).")
    commit_message: Optional[str] = setting(None, help="Commit title.")
    license: Optional[str] = setting(None, help="The card's license id (apache-2.0, mit, ...). Default: the source "
                                                "model's, from its card or config.json; required when unknown.")
