"""Staging for ``push``: decide what goes into the repository, then write it to a folder.

The upload is assembled in a staging folder first, so what is uploaded is exactly a folder you can
inspect (``push --dry-run DIR`` keeps it and uploads nothing)::

    STAGING/
      README.md                          generated model card (espresso_export.publishing.card)
      config.json, model.safetensors     backbone (safetensors only), tokenizer files
      modules.json, 1_Pooling/, 3_Dense/ sentence-transformers config files and module folders
      espresso.json                      provenance
      onnx/                              the ONNX export (export.json, model*.onnx, tokenizer), if any
      verify_report.json                 the verify report, if any

Pickle or other non-safetensors weights, the folder's own README.md, hidden files and folders that are
not modules are left out (and listed). Absolute local paths inside the staged JSON files are cut to their
last component, so no local directory names are published.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from espresso_export.core.errors import NotFoundError, ValidationError
from espresso_export.model.cache import file_sha256
from espresso_export.model.checkpoint import PROVENANCE_FILE
from espresso_export.model.module_chain import read_json
from espresso_export.publishing.card import render_card
from espresso_export.publishing.facts import EXPORT_MANIFEST, ModelFacts, OnnxFacts, read_model, read_onnx_export
from espresso_export.publishing.report_metrics import CardMetrics, metrics_from_report

REPORT_FILE = "verify_report.json"  # name of the verify report in the repo
REPORT_NAMES = (REPORT_FILE, "verify.json")  # found in the model folder when --verify-report is not given
ONNX_DIR = "onnx"
ROOT_SUFFIXES = (".json", ".safetensors", ".txt", ".model", ".jinja")  # configs, weights, tokenizer files
OTHER_WEIGHTS = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle", ".h5", ".msgpack", ".joblib")
_ABS_PATH = re.compile(r"^(/|~|[A-Za-z]:[\\/])")


def public_paths(obj: Any) -> Any:
    """Cut absolute local paths in JSON values to their last component."""
    if isinstance(obj, dict):
        return {k: public_paths(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [public_paths(v) for v in obj]
    if isinstance(obj, str) and _ABS_PATH.match(obj):
        return re.split(r"[\\/]", obj.rstrip("/\\"))[-1] or obj
    return obj


def _json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2) + "\n").encode("utf-8")


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


# --- what goes in -------------------------------------------------------------------------------


def _openvino_weights(rel: str) -> bool:
    """An OpenVINO IR's weights (``openvino/NAME.bin`` beside ``NAME.xml``, ``export --format onnx,openvino``):
    raw tensors OpenVINO maps, no pickle; the IR does not load without them."""
    return rel.startswith("openvino/") and rel.lower().endswith(".bin")


def _skip_reason(rel: str) -> str | None:
    parts = rel.split("/")
    if any(p.startswith(".") for p in parts):
        return "hidden file"
    if rel.lower().endswith(OTHER_WEIGHTS) and not _openvino_weights(rel):
        return "weights other than safetensors are never uploaded"
    return None


def _model_file_reason(rel: str, modules: set[str]) -> str | None:
    """Why a file of the model folder stays out, or None to upload it."""
    reason = _skip_reason(rel)
    if reason is not None:
        return reason
    if rel == "README.md":
        return "replaced by the generated model card"
    if "/" not in rel:
        return None if rel.endswith(ROOT_SUFFIXES) else "not a model, tokenizer or config file"
    if rel.split("/")[0] not in modules:
        return "not a module folder listed in modules.json"
    return None


def _link_roots(folder: Path) -> list[Path]:
    """Where the files of ``folder`` may live: in it, or (a Hub cache snapshot, whose files are links) in the
    ``blobs/`` of the same model's cache folder."""
    snapshots = folder.parent
    if snapshots.name == "snapshots" and snapshots.parent.name.startswith("models--"):
        return [folder, snapshots.parent / "blobs"]
    return [folder]


def _check_inside(f: Path, rel: str, roots: list[Path]) -> None:
    """Refuse a file that is a link to something outside ``roots``: push must not publish a token file or a
    private document a link points at."""
    target = f.resolve()
    if not any(target.is_relative_to(root) for root in roots):
        raise ValidationError(f"{roots[0] / rel} links to {target}, outside {roots[0]}: push uploads only files "
                              "inside the folder (copy the file in if it belongs to the model)")


def _model_files(facts: ModelFacts, onnx_inside: bool) -> tuple[dict[str, Path], list[tuple[str, str]]]:
    folder = facts.folder
    modules = {p.split("/")[0] for p in facts.module_paths}
    if facts.transformer_dir:
        modules.add(facts.transformer_dir.split("/")[0])
    keep: dict[str, Path] = {}
    skipped: list[tuple[str, str]] = []
    roots = _link_roots(folder)
    for f in sorted(folder.rglob("*")):
        rel = f.relative_to(folder).as_posix()
        if onnx_inside and rel.split("/")[0] == ONNX_DIR:
            continue  # staged from the export folder
        if f.is_dir() and f.is_symlink():
            skipped += _linked_folder(f, rel, modules, roots)
        if not f.is_file():
            continue
        if rel in REPORT_NAMES:
            continue  # the verify report is staged on its own
        reason = _model_file_reason(rel, modules)
        if reason:
            skipped.append((rel, reason))
        else:
            _check_inside(f, rel, roots)
            keep[rel] = f
    return keep, skipped


def _linked_folder(f: Path, rel: str, modules: set[str], roots: list[Path]) -> list[tuple[str, str]]:
    """A link to a folder is not walked into: a module's is refused when it leads outside the model folder (the
    module would be missing from the repository), any other is listed as skipped."""
    if rel in modules:
        _check_inside(f, rel, roots)
    return [(rel + "/", "a link to a folder: not followed")]


def _onnx_files(onnx: OnnxFacts) -> tuple[dict[str, Path], list[tuple[str, str]]]:
    """The export's files: at the repository's root in the runtimes' layout (so sentence-transformers,
    optimum, fastembed and transformers.js load the repository), under ``onnx/`` for older exports."""
    keep: dict[str, Path] = {}
    skipped: list[tuple[str, str]] = []
    roots = _link_roots(onnx.folder)
    for f in sorted(onnx.folder.rglob("*")):
        rel = f.relative_to(onnx.folder).as_posix()
        if f.is_dir() and f.is_symlink():
            skipped.append((onnx.repo_path(rel) + "/", "a link to a folder: not followed"))
        if not f.is_file():
            continue
        reason = _skip_reason(rel)
        if reason:
            skipped.append((onnx.repo_path(rel), reason))
        elif not (onnx.runtimes_layout and rel == "README.md"):
            _check_inside(f, rel, roots)
            keep[onnx.repo_path(rel)] = f
    return keep, skipped


def _load_report(path: Path) -> dict:
    if not path.is_file():
        raise NotFoundError(f"verify report not found: {path}")
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValidationError(f"cannot read the verify report {path}: {e}") from e
    return report


def _folder_warnings(facts: ModelFacts, with_report: bool) -> list[str]:
    warnings: list[str] = []
    if facts.provenance is None:
        warnings.append(f"warning: {facts.folder} has no {PROVENANCE_FILE}, so it was not made by espresso-export: "
                        "the card will have no lineage" + ("" if with_report else " and no metrics"))
    if not facts.pooling_declared:
        warnings.append(f"warning: {facts.folder} has no modules.json: sentence-transformers will use mean pooling")
    return warnings


def _report_path(facts: ModelFacts, verify_report, skipped: list[tuple[str, str]]) -> Path | None:
    """``--verify-report``, else a report in the folder (only in an espresso-export folder; else it is skipped)."""
    if verify_report is not None:
        return Path(verify_report).expanduser()
    found = next((facts.folder / n for n in REPORT_NAMES if (facts.folder / n).is_file()), None)
    if found is not None and facts.provenance is None:
        skipped.append((found.name, "not an espresso-export folder: pass --verify-report to publish it"))
        return None
    if found is not None:
        _check_inside(found, found.name, _link_roots(facts.folder))
    return found


def prepare(folder: str | os.PathLike, *, onnx: str | os.PathLike | None = None,
            verify_report: str | os.PathLike | None = None) -> Prepared:
    """Check the inputs and decide what goes into the repository (nothing is written)."""
    folder = Path(folder).expanduser().resolve()
    if not folder.exists():
        raise NotFoundError(f"model folder not found: {folder}")
    facts = read_model(folder)
    warnings = _folder_warnings(facts, with_report=bool(verify_report))
    inside = folder / ONNX_DIR
    if onnx is not None:
        facts.onnx = read_onnx_export(onnx)
    elif (inside / EXPORT_MANIFEST).is_file():
        facts.onnx = read_onnx_export(inside)
    elif (folder / EXPORT_MANIFEST).is_file():  # `export --format onnx,safetensors`: the folder is the export
        facts.onnx = read_onnx_export(folder)
    sources, skipped = _model_files(facts, onnx_inside=facts.onnx is not None and facts.onnx.folder in (inside.resolve(), folder))
    if facts.onnx is not None:
        extra, extra_skipped = _onnx_files(facts.onnx)
        sources.update(extra)
        skipped += extra_skipped
        if onnx is not None and (inside / EXPORT_MANIFEST).is_file() and facts.onnx.folder != inside.resolve():
            skipped.append((f"{ONNX_DIR}/", "replaced by --onnx"))
    report_path = _report_path(facts, verify_report, skipped)
    report = None
    if report_path is not None:
        report = _load_report(report_path)
        facts.metrics = metrics_from_report(report, str(report_path))
        warnings += _report_warnings(facts.metrics, facts, report_path)
    return Prepared(facts=facts, sources=sources, skipped=skipped, report=report, warnings=warnings)


def _report_warnings(metrics: CardMetrics, facts: ModelFacts, where: Path) -> list[str]:
    out = []
    candidate = metrics.candidate_path
    mine = {facts.folder} | ({facts.onnx.folder} if facts.onnx else set())
    if candidate and Path(candidate).expanduser().resolve() not in mine:
        out.append(f"warning: {where} measured {candidate}, not {facts.folder}; check that it belongs to this model")
    if metrics.candidate_dim and facts.output_dim and metrics.candidate_dim != facts.output_dim:
        out.append(f"warning: {where} measured a {metrics.candidate_dim}-d model but this one outputs "
                   f"{facts.output_dim}-d")
    if metrics.gate_passed is False:
        out.append(f"warning: {where} records a FAILED quality gate; the card says so")
    return out


# --- writing the staging folder -----------------------------------------------------------------


def _matryoshka_configs(prepared: Prepared, dims: list[int]) -> dict[str, bytes]:
    """``config.json`` and ``config_sentence_transformers.json`` with ``matryoshka_dimensions`` added."""
    facts = prepared.facts
    out: dict[str, bytes] = {}
    config = f"{facts.transformer_dir}/config.json" if facts.transformer_dir else "config.json"
    cfg = read_json(prepared.sources[config])
    cfg.setdefault("matryoshka_dimensions", dims)
    out[config] = _json_bytes(cfg)
    st = "config_sentence_transformers.json"
    st_cfg = read_json(prepared.sources[st]) if st in prepared.sources else {}
    st_cfg.setdefault("matryoshka_dimensions", dims)
    out[st] = _json_bytes(st_cfg)
    return out


def _generated(prepared: Prepared, repo_id: str) -> dict[str, bytes]:
    """Files written by push itself: the card, the public copies of the JSON files, matryoshka configs."""
    facts = prepared.facts
    out: dict[str, bytes] = {"README.md": render_card(facts, repo_id).encode("utf-8")}
    if PROVENANCE_FILE in prepared.sources:
        out[PROVENANCE_FILE] = _json_bytes(public_paths(read_json(prepared.sources[PROVENANCE_FILE])))
    manifest = facts.onnx.repo_path(EXPORT_MANIFEST) if facts.onnx else None
    if manifest in prepared.sources:
        out[manifest] = _json_bytes(public_paths(read_json(prepared.sources[manifest])))
    if prepared.report is not None:
        out[REPORT_FILE] = _json_bytes(public_paths(prepared.report))
    dims = facts.matryoshka_dims
    if dims:
        out.update(_matryoshka_configs(prepared, dims))
    return out


def _copy(src: Path, target: Path, link: bool) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if link:
        try:
            os.link(src, target)
            return
        except OSError:
            pass  # another file system: copy instead
    shutil.copyfile(src, target)


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
    for rel, src in track(items, description="copying the model's files" if progress else None, total_items=len(items)):
        _copy(src, dest / rel, link)
    return [StagedFile(path=rel, size=(dest / rel).stat().st_size, sha256=file_sha256(dest / rel))
            for rel in sorted([*generated, *copies])]
