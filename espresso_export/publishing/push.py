"""``push``: stage a model folder for the Hugging Face Hub and upload it in one commit.

What goes into the repository, and the staging folder it is written to first, is
:mod:`espresso_export.publishing.staging` (``--dry-run DIR`` keeps that folder and uploads nothing). The
token is passed to huggingface-hub only: it is never printed, logged or written to the staging folder, and
it is masked in any error message. Before anything is uploaded, the staged folder must load the way
sentence-transformers loads it (:mod:`espresso_export.publishing.loadable`). A static model folder (model2vec's
format, with its ONNX export) is published the same way, with a card of its own kind.

The upload itself is huggingface-hub's: ``create_repo`` (``exist_ok``), ``create_branch`` for a new
``--revision``, then one ``create_commit`` with every staged file. Large files travel the way the Hub and
the client agree on (Xet storage when ``hf_xet`` is installed, else LFS); small ones go inline.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from espresso_export import __version__
from espresso_export.core.errors import EspressoError, NotFoundError, OfflineError, RuntimeFailure, ValidationError
from espresso_export.core.files import atomic_output, check_output
from espresso_export.core.settings import resolve
from espresso_export.publishing.loadable import check_loadable
from espresso_export.publishing.push_settings import PushSettings
from espresso_export.publishing.staging import StagedFile, prepare, write_staging

REPO_ID_RULE = ("--repo-id must be owner/name: two parts of letters, digits, '-', '_' and '.', each 1-96 characters "
                "starting and ending with a letter, digit or '_', with no '--' or '..' and not ending in '.git'")
_REPO_PART = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?$")


def validate_repo_id(repo_id: str) -> str:
    parts = repo_id.split("/")
    if (len(parts) != 2 or not all(_REPO_PART.match(p) for p in parts) or "--" in repo_id or ".." in repo_id
            or repo_id.endswith(".git")):
        raise ValidationError(f"{REPO_ID_RULE}; got {repo_id!r}")
    return repo_id


def resolve_token(token: str | None) -> str:
    """``--token``, else ``HF_TOKEN``, else the token saved by ``hf auth login``."""
    if token and token.strip():
        return token.strip()
    from huggingface_hub import get_token

    found = get_token()
    if not found:
        raise ValidationError("no Hugging Face token: pass --token, set HF_TOKEN, or log in with `hf auth login`")
    return found


def redact(text: str, token: str | None) -> str:
    return text.replace(token, "hf_***") if token else text


@dataclass
class PushResult:
    repo_id: str
    folder: Path
    files: list[StagedFile]
    skipped: list[tuple[str, str]]
    warnings: list[str]
    metrics: bool  # the card carries verify metrics
    onnx: bool
    matryoshka_dimensions: list[int] | None
    base_model: str | None
    dry_run: Path | None = None  # the staging folder kept by --dry-run
    url: str | None = None
    commit_url: str | None = None
    commit_oid: str | None = None
    pr_url: str | None = None
    revision: str | None = None
    private: bool = False
    create_pr: bool = False
    seconds: float = 0.0
    license: str | None = None  # the card's license: --license, else the source's
    static: bool = False  # a static model (model2vec's format): the card is model2vec's kind

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def to_dict(self) -> dict:
        return {
            "repo_id": self.repo_id, "folder": str(self.folder), "dry_run": str(self.dry_run) if self.dry_run else None,
            "url": self.url, "commit_url": self.commit_url, "commit_oid": self.commit_oid, "pr_url": self.pr_url,
            "revision": self.revision, "private": self.private, "create_pr": self.create_pr,
            "files": [f.to_dict() for f in self.files], "total_bytes": self.total_bytes,
            "skipped": [{"path": p, "reason": r} for p, r in self.skipped], "warnings": self.warnings,
            "card": {"metrics": self.metrics, "onnx": self.onnx, "base_model": self.base_model, "license": self.license,
                     "matryoshka_dimensions": self.matryoshka_dimensions, "static": self.static},
            "seconds": round(self.seconds, 2),
        }


def _endpoint() -> str | None:
    """``HF_ENDPOINT`` read now (huggingface-hub reads it once, at import)."""
    value = os.environ.get("HF_ENDPOINT")
    return value.rstrip("/") if value else None


def _hub_error(e: Exception, repo_id: str, token: str) -> EspressoError:
    """One clear line for a failed Hub call, with the token masked."""
    from huggingface_hub.errors import (
        HfHubHTTPError, OfflineModeIsEnabled, RepositoryNotFoundError, RevisionNotFoundError,
    )

    first = redact(str(e), token).strip().splitlines()
    detail = first[0] if first else e.__class__.__name__
    if isinstance(e, OfflineModeIsEnabled):
        return OfflineError("cannot push: HF_HUB_OFFLINE is set; unset it to reach the Hugging Face Hub")
    if isinstance(e, RevisionNotFoundError):
        return NotFoundError(f"revision not found in {repo_id}: {detail}")
    if isinstance(e, RepositoryNotFoundError):
        return NotFoundError(f"repository {repo_id} not found or not writable with this token: {detail}")
    if isinstance(e, HfHubHTTPError):
        status = e.response.status_code if getattr(e, "response", None) is not None else None
        server = redact((e.server_message or "").strip().splitlines()[0] if e.server_message else detail, token)
        if status == 401:
            return ValidationError(f"the Hub rejected the token (401 Unauthorized) for {repo_id}: check --token, "
                                   f"HF_TOKEN or `hf auth login` ({server})")
        if status == 403:
            return ValidationError(f"the token may not write to {repo_id} (403 Forbidden): {server}")
        return RuntimeFailure(f"the Hub refused the upload to {repo_id} (HTTP {status}): {server}")
    if isinstance(e, ValueError):
        return RuntimeFailure(f"the Hub refused the upload to {repo_id}: {' '.join(redact(str(e), token).split())}")
    if isinstance(e, _transport_errors()[1:]) or "Connect" in type(e).__name__ or "Timeout" in type(e).__name__:
        return OfflineError(f"cannot reach the Hugging Face Hub at {_endpoint() or 'huggingface.co'}: "
                            f"{e.__class__.__name__}: {detail}")
    return RuntimeFailure(f"upload to {repo_id} failed: {e.__class__.__name__}: {detail}")


def _transport_errors() -> tuple[type[BaseException], ...]:
    """OSError (HfHubHTTPError, requests' errors, file errors) and the HTTP client's transport errors."""
    errors: list[type[BaseException]] = [OSError]
    for module in ("httpx2", "httpx"):
        try:
            errors.append(__import__(module).TransportError)
        except (ImportError, AttributeError):
            continue
    return tuple(errors)


def upload(staging: Path, files: list[StagedFile], repo_id: str, *, token: str, private: bool = False,
           create_pr: bool = False, revision: str | None = None, commit_message: str | None = None,
           progress: bool = False):
    """Create the repo if needed (and the branch ``revision``) and commit every staged file at once."""
    from huggingface_hub import CommitOperationAdd, HfApi
    from huggingface_hub.utils import disable_progress_bars

    if not progress:
        disable_progress_bars()
    api = HfApi(endpoint=_endpoint(), token=token, library_name="espresso-export", library_version=__version__)
    message = commit_message or f"Upload {repo_id.split('/')[1]} with espresso-export {__version__}"
    total = sum(f.size for f in files)
    description = f"Staged by `espresso-export push`: {len(files)} files, {total} bytes."
    try:
        url = api.create_repo(repo_id, private=True if private else None, exist_ok=True, repo_type="model")
        if revision and not create_pr:
            api.create_branch(repo_id, branch=revision, exist_ok=True, repo_type="model")
        ops = [CommitOperationAdd(path_in_repo=f.path, path_or_fileobj=str(staging / f.path)) for f in files]
        info = api.create_commit(repo_id, operations=ops, commit_message=message, commit_description=description,
                                 revision=revision, create_pr=create_pr, repo_type="model")
    except (ValueError, *_transport_errors()) as e:
        raise _hub_error(e, repo_id, token) from None
    return str(url), info


def _source_license(facts) -> str:
    from espresso_export.publishing.license import source_license

    found, _ = source_license(facts)
    if not found:
        raise ValidationError(f"the license of {facts.source_id or facts.folder.name} is not recorded (no `license:` "
                              "in its card or config.json): pass --license ID (e.g. apache-2.0, mit)")
    return found


def push(
    folder: str | os.PathLike,
    repo_id: str,
    settings: PushSettings | None = None,
    *,
    token: str | None = None,
    onnx: str | os.PathLike | None = None,
    verify_report: str | os.PathLike | None = None,
    dry_run: str | os.PathLike | None = None,
    overwrite: bool = False,
    progress: bool = False,
    **kwargs,
) -> PushResult:
    """Stage ``folder`` (+ ONNX export, verify report, model card) and upload it to ``repo_id`` in one commit.

    ``settings`` is a :class:`~espresso_export.publishing.push_settings.PushSettings` (``private``, ``create_pr``,
    ``revision``, ``commit_message``); its fields are also accepted as keyword arguments. With ``dry_run=DIR``
    the staging folder is written to ``DIR`` (atomically) and nothing is uploaded; no token is needed then.
    """
    s = resolve(PushSettings, settings, kwargs, call="push")
    private, create_pr, revision, commit_message = s.private, s.create_pr, s.revision, s.commit_message
    start = time.perf_counter()
    validate_repo_id(repo_id)
    if dry_run is not None:
        check_output(dry_run, overwrite=overwrite, inputs=[folder, onnx, verify_report])
    prepared = prepare(folder, onnx=onnx, verify_report=verify_report)
    facts = prepared.facts
    facts.license = s.license or _source_license(facts)
    result = PushResult(
        repo_id=repo_id, folder=facts.folder, files=[], skipped=prepared.skipped, warnings=prepared.warnings,
        metrics=facts.metrics is not None, onnx=facts.onnx is not None,
        matryoshka_dimensions=facts.matryoshka_dims, base_model=facts.base_model, revision=revision,
        private=private, create_pr=create_pr, license=facts.license, static=facts.static is not None,
    )
    if dry_run is not None:
        inputs = [facts.folder] + ([facts.onnx.folder] if facts.onnx else [])
        with atomic_output(dry_run, overwrite=overwrite, inputs=inputs) as tmp:
            result.files = write_staging(prepared, tmp, repo_id, progress=progress)
            check_loadable(tmp, facts)
        result.dry_run = Path(dry_run).expanduser().resolve()
    else:
        secret = resolve_token(token)
        from huggingface_hub import constants

        if constants.HF_HUB_OFFLINE:
            raise OfflineError("cannot push: HF_HUB_OFFLINE is set; unset it to reach the Hugging Face Hub")
        with tempfile.TemporaryDirectory(prefix="espresso-push-") as tmp:
            result.files = write_staging(prepared, Path(tmp), repo_id, link=True, progress=progress)
            check_loadable(Path(tmp), facts)
            result.url, info = upload(Path(tmp), result.files, repo_id, token=secret, private=private,
                                      create_pr=create_pr, revision=revision, commit_message=commit_message,
                                      progress=progress)
        result.commit_url, result.commit_oid, result.pr_url = info.commit_url, info.oid, info.pr_url
    result.seconds = time.perf_counter() - start
    return result
