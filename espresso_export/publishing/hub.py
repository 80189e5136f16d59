"""``push``: stage a model folder for the Hugging Face Hub and upload it in one commit.

The upload is assembled in a staging folder first, so what is uploaded is
exactly a folder you can inspect (``--dry-run DIR`` keeps it and uploads
nothing)::

    STAGING/
      README.md                          generated model card (espresso_export.card)
      config.json, model.safetensors     backbone (safetensors only), tokenizer files
      modules.json, 1_Pooling/, 3_Dense/ sentence-transformers config files and module folders
      espresso.json                      provenance
      onnx/                              the ONNX export (export.json, model*.onnx, tokenizer), if any
      verify_report.json                 the verify report, if any

Pickle or other non-safetensors weights, the folder's own README.md, hidden
files and folders that are not modules are left out (and listed). Absolute
local paths inside the staged JSON files are cut to their last component, so
no local directory names are published. The token is passed to
huggingface-hub only: it is never printed, logged or written to the staging
folder, and it is masked in any error message.

The upload itself is huggingface-hub's: ``create_repo`` (``exist_ok``), ``create_branch`` for a new
``--revision``, then one ``create_commit`` with every staged file. Large files travel the way the Hub and
the client agree on (Xet storage when ``hf_xet`` is installed, else LFS); small ones go inline.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from espresso_export import __version__
from espresso_export.publishing.card import (
    EXPORT_MANIFEST, CardMetrics, ModelFacts, OnnxFacts, metrics_from_report, read_model, read_onnx_export,
    render_card,
)
from espresso_export.model.checkpoint import PROVENANCE_FILE, _read_json
from espresso_export.core.errors import EspressoError, NotFoundError, OfflineError, RuntimeFailure, ValidationError
from espresso_export.model.layout import atomic_output

REPO_ID_RULE = ("--repo-id must be owner/name: two parts of letters, digits, '-', '_' and '.', each 1-96 characters "
                "starting and ending with a letter, digit or '_', with no '--' or '..' and not ending in '.git'")
_REPO_PART = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?$")
REPORT_FILE = "verify_report.json"  # name of the verify report in the repo
REPORT_NAMES = (REPORT_FILE, "verify.json")  # found in the model folder when --verify-report is not given
ONNX_DIR = "onnx"
ROOT_SUFFIXES = (".json", ".safetensors", ".txt", ".model", ".jinja")  # configs, weights, tokenizer files
OTHER_WEIGHTS = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle", ".h5", ".msgpack", ".joblib")
_ABS_PATH = re.compile(r"^(/|~|[A-Za-z]:[\\/])")


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


def _public_paths(obj: Any) -> Any:
    """Cut absolute local paths in JSON values to their last component."""
    if isinstance(obj, dict):
        return {k: _public_paths(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_public_paths(v) for v in obj]
    if isinstance(obj, str) and _ABS_PATH.match(obj):
        return re.split(r"[\\/]", obj.rstrip("/\\"))[-1] or obj
    return obj


def _json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2) + "\n").encode("utf-8")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass(frozen=True)
class StagedFile:
    path: str  # path in the repository (posix)
    size: int
    sha256: str

    def to_dict(self) -> dict:
        return {"path": self.path, "size": self.size, "sha256": self.sha256}


@dataclass
class Prepared:
    """Everything ``push`` will upload, checked, before anything is written."""

    facts: ModelFacts
    sources: dict[str, Path]  # repo path -> file copied as is
    skipped: list[tuple[str, str]]  # (path, reason)
    report: dict | None
    warnings: list[str] = field(default_factory=list)


def _skip_reason(rel: str) -> str | None:
    parts = rel.split("/")
    if any(p.startswith(".") for p in parts):
        return "hidden file"
    if rel.lower().endswith(OTHER_WEIGHTS):
        return "weights other than safetensors are never uploaded"
    return None


def _model_files(facts: ModelFacts, onnx_inside: bool) -> tuple[dict[str, Path], list[tuple[str, str]]]:
    folder = facts.folder
    modules = {p.split("/")[0] for p in facts.module_paths}
    if facts.transformer_dir:
        modules.add(facts.transformer_dir.split("/")[0])
    keep: dict[str, Path] = {}
    skipped: list[tuple[str, str]] = []
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = f.relative_to(folder).as_posix()
        top = rel.split("/")[0]
        if onnx_inside and top == ONNX_DIR:
            continue  # staged from the export folder
        reason = _skip_reason(rel)
        if reason is None:
            if rel in REPORT_NAMES:
                continue  # the verify report is staged on its own
            if rel == "README.md":
                reason = "replaced by the generated model card"
            elif "/" not in rel:
                reason = None if rel.endswith(ROOT_SUFFIXES) else "not a model, tokenizer or config file"
            elif top not in modules:
                reason = "not a module folder listed in modules.json"
        if reason:
            skipped.append((rel, reason))
        else:
            keep[rel] = f
    return keep, skipped


def _onnx_files(onnx: OnnxFacts) -> tuple[dict[str, Path], list[tuple[str, str]]]:
    keep: dict[str, Path] = {}
    skipped: list[tuple[str, str]] = []
    for f in sorted(p for p in onnx.folder.rglob("*") if p.is_file()):
        rel = f.relative_to(onnx.folder).as_posix()
        reason = _skip_reason(rel)
        if reason:
            skipped.append((f"{ONNX_DIR}/{rel}", reason))
        else:
            keep[f"{ONNX_DIR}/{rel}"] = f
    return keep, skipped


def _load_report(path: Path) -> dict:
    if not path.is_file():
        raise NotFoundError(f"verify report not found: {path}")
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValidationError(f"cannot read the verify report {path}: {e}") from e
    return report


def prepare(folder: str | os.PathLike, *, onnx: str | os.PathLike | None = None,
            verify_report: str | os.PathLike | None = None) -> Prepared:
    """Check the inputs and decide what goes into the repository (nothing is written)."""
    folder = Path(folder).expanduser().resolve()
    if not folder.exists():
        raise NotFoundError(f"model folder not found: {folder}")
    facts = read_model(folder)
    warnings: list[str] = []
    if facts.provenance is None:
        warnings.append(f"warning: {folder} has no {PROVENANCE_FILE}, so it was not made by espresso-export: the card "
                        "will have no lineage" + ("" if verify_report else " and no metrics"))
    if not facts.pooling_declared:
        warnings.append(f"warning: {folder} has no modules.json: sentence-transformers will use mean pooling")
    inside = folder / ONNX_DIR
    if onnx is not None:
        facts.onnx = read_onnx_export(onnx)
    elif (inside / EXPORT_MANIFEST).is_file():
        facts.onnx = read_onnx_export(inside)
    sources, skipped = _model_files(facts, onnx_inside=facts.onnx is not None and facts.onnx.folder == inside.resolve())
    if facts.onnx is not None:
        extra, extra_skipped = _onnx_files(facts.onnx)
        sources.update(extra)
        skipped += extra_skipped
        if onnx is not None and (inside / EXPORT_MANIFEST).is_file() and facts.onnx.folder != inside.resolve():
            skipped.append((f"{ONNX_DIR}/", "replaced by --onnx"))
    report_path = Path(verify_report).expanduser() if verify_report is not None else None
    if report_path is None:
        found = next((folder / n for n in REPORT_NAMES if (folder / n).is_file()), None)
        if found is not None and facts.provenance is None:
            skipped.append((found.name, "not an espresso-export folder: pass --verify-report to publish it"))
        elif found is not None:
            report_path = found
    report = None
    if report_path is not None:
        report = _load_report(report_path)
        facts.metrics = metrics_from_report(report, str(report_path))
        warnings += _report_warnings(facts.metrics, facts, report_path)
    return Prepared(facts=facts, sources=sources, skipped=skipped, report=report, warnings=warnings)


def _report_warnings(metrics: CardMetrics, facts: ModelFacts, where: Path) -> list[str]:
    out = []
    measured = metrics.candidate_path
    mine = {facts.folder} | ({facts.onnx.folder} if facts.onnx else set())
    if measured and Path(measured).expanduser().resolve() not in mine:
        out.append(f"warning: {where} measured {measured}, not {facts.folder}; check that it belongs to this model")
    if metrics.candidate_dim and facts.output_dim and metrics.candidate_dim != facts.output_dim:
        out.append(f"warning: {where} measured a {metrics.candidate_dim}-d model but this one outputs "
                   f"{facts.output_dim}-d")
    if metrics.gate_passed is False:
        out.append(f"warning: {where} records a FAILED quality gate; the card says so")
    return out


def _generated(prepared: Prepared, repo_id: str) -> dict[str, bytes]:
    """Files written by push itself: the card, the public copies of the JSON files, matryoshka configs."""
    facts = prepared.facts
    out: dict[str, bytes] = {"README.md": render_card(facts, repo_id).encode("utf-8")}
    if PROVENANCE_FILE in prepared.sources:
        out[PROVENANCE_FILE] = _json_bytes(_public_paths(_read_json(prepared.sources[PROVENANCE_FILE])))
    manifest = f"{ONNX_DIR}/{EXPORT_MANIFEST}"
    if manifest in prepared.sources:
        out[manifest] = _json_bytes(_public_paths(_read_json(prepared.sources[manifest])))
    if prepared.report is not None:
        out[REPORT_FILE] = _json_bytes(_public_paths(prepared.report))
    dims = facts.matryoshka_dims
    if dims:
        config = f"{facts.transformer_dir}/config.json" if facts.transformer_dir else "config.json"
        cfg = _read_json(prepared.sources[config])
        cfg.setdefault("matryoshka_dimensions", dims)
        out[config] = _json_bytes(cfg)
        st = "config_sentence_transformers.json"
        st_cfg = _read_json(prepared.sources[st]) if st in prepared.sources else {}
        st_cfg.setdefault("matryoshka_dimensions", dims)
        out[st] = _json_bytes(st_cfg)
    return out


def write_staging(prepared: Prepared, dest: Path, repo_id: str, *, link: bool = False,
                  progress: bool = False) -> list[StagedFile]:
    """Write every file of the upload under ``dest``; returns them with sizes and sha256."""
    from espresso_export.core.progress import track

    generated = _generated(prepared, repo_id)
    copies = {k: v for k, v in prepared.sources.items() if k not in generated}
    for rel, data in generated.items():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    items = sorted(copies.items())
    for rel, src in track(items, description="staging" if progress else None, total_items=len(items)):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if link:
            try:
                os.link(src, target)
                continue
            except OSError:
                pass  # another file system: copy instead
        shutil.copyfile(src, target)
    return [StagedFile(path=rel, size=(dest / rel).stat().st_size, sha256=_sha256(dest / rel))
            for rel in sorted([*generated, *copies])]


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
            "card": {"metrics": self.metrics, "onnx": self.onnx, "base_model": self.base_model,
                     "matryoshka_dimensions": self.matryoshka_dimensions},
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


def push(
    folder: str | os.PathLike,
    repo_id: str,
    *,
    private: bool = False,
    create_pr: bool = False,
    revision: str | None = None,
    commit_message: str | None = None,
    token: str | None = None,
    onnx: str | os.PathLike | None = None,
    verify_report: str | os.PathLike | None = None,
    dry_run: str | os.PathLike | None = None,
    overwrite: bool = False,
    progress: bool = False,
) -> PushResult:
    """Stage ``folder`` (+ ONNX export, verify report, model card) and upload it to ``repo_id`` in one commit.

    With ``dry_run=DIR`` the staging folder is written to ``DIR`` (atomically) and nothing is uploaded;
    no token is needed then.
    """
    start = time.perf_counter()
    validate_repo_id(repo_id)
    prepared = prepare(folder, onnx=onnx, verify_report=verify_report)
    facts = prepared.facts
    result = PushResult(
        repo_id=repo_id, folder=facts.folder, files=[], skipped=prepared.skipped, warnings=prepared.warnings,
        metrics=facts.metrics is not None, onnx=facts.onnx is not None,
        matryoshka_dimensions=facts.matryoshka_dims, base_model=facts.base_model, revision=revision,
        private=private, create_pr=create_pr,
    )
    if dry_run is not None:
        inputs = [facts.folder] + ([facts.onnx.folder] if facts.onnx else [])
        with atomic_output(dry_run, overwrite=overwrite, inputs=inputs) as tmp:
            result.files = write_staging(prepared, tmp, repo_id, progress=progress)
        result.dry_run = Path(dry_run).expanduser().resolve()
    else:
        secret = resolve_token(token)
        from huggingface_hub import constants

        if constants.HF_HUB_OFFLINE:
            raise OfflineError("cannot push: HF_HUB_OFFLINE is set; unset it to reach the Hugging Face Hub")
        with tempfile.TemporaryDirectory(prefix="espresso-push-") as tmp:
            result.files = write_staging(prepared, Path(tmp), repo_id, link=True, progress=progress)
            result.url, info = upload(Path(tmp), result.files, repo_id, token=secret, private=private,
                                      create_pr=create_pr, revision=revision, commit_message=commit_message,
                                      progress=progress)
        result.commit_url, result.commit_oid, result.pr_url = info.commit_url, info.oid, info.pr_url
    result.seconds = time.perf_counter() - start
    return result
