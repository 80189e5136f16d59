"""``espresso-export push``: its options are derived from :class:`~espresso_export.publishing.push_settings.PushSettings`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from espresso_export.cli.app import app
from espresso_export.cli.common_options import JsonOpt, OverwriteOpt
from espresso_export.core.settings import param, settings_command
from espresso_export.publishing.push_settings import PushSettings


def _push(settings: PushSettings, *, folder: Path, repo_id: str, token: Optional[str], onnx: Optional[Path],
          verify_report: Optional[Path], dry_run: Optional[Path], overwrite: bool, json_out: bool) -> None:
    """Upload a model folder to the Hugging Face Hub with a generated model card, ONNX export and verify report."""
    from espresso_export.cli.render import print_hints, print_json, print_table
    from espresso_export.publishing.push import push as run_push

    token = _token(token, print_hints)
    result = run_push(folder, repo_id, settings, token=token, onnx=onnx, verify_report=verify_report,
                      dry_run=dry_run, overwrite=overwrite, progress=not json_out)
    print_hints(result.warnings)
    if not json_out:
        print_hints(f"skipped {path}: {reason}" for path, reason in result.skipped)
    if json_out:
        print_json(result.to_dict())
        return
    card = ", ".join(filter(None, [
        "static model (model2vec)" if result.static else None,
        f"license {result.license}", "verify metrics" if result.metrics else "no metrics",
        "ONNX" if result.onnx else None,
        f"matryoshka {result.matryoshka_dimensions}" if result.matryoshka_dimensions else None,
        f"base_model {result.base_model}" if result.base_model else None,
    ]))
    rows = [("repository", result.repo_id), ("files", f"{len(result.files)} ({result.total_bytes / 1e6:.1f} MB)"),
            ("model card", card)]
    if result.dry_run is not None:
        rows += [("dry run", f"staged in {result.dry_run}; nothing uploaded")]
    else:
        rows += [("commit", result.commit_url)]
        if result.pr_url:
            rows.append(("pull request", result.pr_url))
        rows.append(("visibility", "private (if created now)" if result.private else "repository default"))
    rows.append(("time", f"{result.seconds:.1f} s"))
    print_table("push (dry run)" if result.dry_run is not None else "push", rows)


TOKEN_WARNING = ("warning: a token given as --token is visible in the shell history and the process list; set "
                 "HF_TOKEN, run `hf auth login`, or pass --token - to type it at a hidden prompt")


def _token(token: str | None, print_hints) -> str | None:
    """``--token -``: read at a hidden prompt; a token on the command line works but is warned about."""
    if token == "-":
        import getpass

        return getpass.getpass("Hugging Face token (hidden): ")
    if token:
        print_hints([TOKEN_WARNING])
    return token


push = app.command(
    name="push",
    epilog="The token comes from HF_TOKEN, `hf auth login`, or --token - (a hidden prompt); it is never printed or "
    "written anywhere. --token VALUE works but leaves the token in the shell history and the process list.\n\n"
    "Examples:\n\n"
    "  espresso-export push minilm-L3-d128 --repo-id me/minilm-L3-d128 --verify-report report.json\n\n"
    "  espresso-export push small/ --repo-id me/small --onnx small-onnx/ --dry-run staged/\n\n"
    "  espresso-export push small/ --repo-id org/small --create-pr --commit-message 'L4/d128, 0.97 retention'",
)(settings_command(PushSettings, [
    param("folder", Annotated[Path, typer.Argument(help="Model folder (from shrink/distill/train, a static model "
                                                       "from distill --student static, or any sentence-transformers "
                                                       "folder with safetensors weights).")]),
    param("repo_id", Annotated[str, typer.Option("--repo-id", help="Hub repository, owner/name (created if "
                                                 "missing).")]),
    param("token", Annotated[Optional[str], typer.Option("--token", help="Hugging Face token with write access; - "
                                                         "reads it at a hidden prompt (default: HF_TOKEN, then the "
                                                         "saved login).",
                                                         show_default=False)], None),
    param("onnx", Annotated[Optional[Path], typer.Option("--onnx", help="ONNX export folder (export.json + "
                                                         "model*.onnx) to upload under onnx/. Default: FOLDER/onnx "
                                                         "if it is one.")], None),
    param("verify_report", Annotated[Optional[Path], typer.Option("--verify-report", help="JSON report of "
                                     "`espresso-export verify --json FILE` for the card. Default: "
                                     "FOLDER/verify_report.json or FOLDER/verify.json.")], None),
    param("dry_run", Annotated[Optional[Path], typer.Option("--dry-run", help="Write exactly what would be uploaded "
                                                            "to this folder and upload nothing.")], None),
    param("overwrite", OverwriteOpt, False), param("json_out", JsonOpt, False),
], _push))
