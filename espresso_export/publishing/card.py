"""The Hub model card: facts read from a model folder, rendered as README.md.

Everything here is read without torch: ``modules.json`` and the module
configs (pooling, Dense, Normalize), ``config.json``, the safetensors headers
(parameter counts), ``espresso.json`` (the lineage) and, when given, an
``export.json`` folder and a ``verify`` report. :func:`render_card` turns the
facts into YAML front matter (``library_name``, ``base_model``,
``pipeline_tag``, tags, ``model-index``) and a Markdown body: lineage, the
verification tables, usage for sentence-transformers, plain transformers and
the ONNX runtime, intended use and limitations.

The verify report is read through one adapter, :func:`_metrics_from_report`;
it alone knows the report's JSON field names.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from espresso_export import __version__
from espresso_export.model.architectures import for_model_type
from espresso_export.model.checkpoint import PROVENANCE_FILE, _read_json, _read_st_layout, _weight_files
from espresso_export.data.readers import BUILTIN
from espresso_export.core.errors import CorruptCheckpointError, UnsupportedModelError, ValidationError
from espresso_export.model.aliases import resolve_alias
from espresso_export.core.types import Head, Pooling

EXPORT_MANIFEST = "export.json"
MIN_MATRYOSHKA_DIM = 32  # halvings of the width stop here unless the lineage lists the trained dims
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_ACTIVATIONS = {  # sentence-transformers Dense activation -> code a transformers user writes
    "Identity": None, "Tanh": "torch.tanh(x)", "ReLU": "torch.relu(x)", "GELU": "F.gelu(x)",
    "Sigmoid": "torch.sigmoid(x)",
}


# --- facts about the folder ---------------------------------------------------------------------


@dataclass(frozen=True)
class DenseInfo:
    path: str  # module folder, relative to the model folder
    in_features: int
    out_features: int
    bias: bool
    activation: str  # short name: Identity, Tanh, ...


@dataclass(frozen=True)
class NormalizeInfo:
    """L2 normalisation."""


@dataclass(frozen=True)
class OnnxFacts:
    folder: Path
    graphs: list[tuple[str, int]]  # (file name, bytes)
    manifest: dict


@dataclass
class ModelFacts:
    folder: Path
    transformer_dir: str  # relative; "" when the backbone is at the root
    model_type: str | None
    decoder: bool
    layers: int | None
    hidden_size: int | None
    pooling: Pooling
    pooling_declared: bool  # False: no modules.json, sentence-transformers applies mean pooling
    post: list[DenseInfo | NormalizeInfo]
    module_paths: list[str]  # every module folder named in modules.json
    max_seq_length: int | None
    do_lower_case: bool
    params: int
    weights_bytes: int
    provenance: dict | None
    onnx: OnnxFacts | None = None
    metrics: CardMetrics | None = None

    @property
    def output_dim(self) -> int | None:
        dense = [m for m in self.post if isinstance(m, DenseInfo)]
        return dense[-1].out_features if dense else self.hidden_size

    @property
    def normalized(self) -> bool:
        return bool(self.post) and isinstance(self.post[-1], NormalizeInfo)

    @property
    def lineage(self) -> list[dict]:
        """The provenance chain from the original source (first) to this folder (last)."""
        chain, step = [], self.provenance
        while isinstance(step, dict):
            chain.append(step)
            step = step.get("parent")
        return chain[::-1]

    @property
    def source_id(self) -> str | None:
        chain = self.lineage
        return _step_source(chain[0]) if chain else None

    @property
    def base_model(self) -> str | None:
        """The original source when it is a Hub id (a local folder is not a valid ``base_model``)."""
        ident = resolve_alias(self.source_id) if self.source_id else None
        return ident if is_hub_id(ident) else None

    @property
    def head(self) -> str | None:
        return (self.provenance or {}).get("head")

    @property
    def ese(self) -> Any:
        return (self.provenance or {}).get("ese")

    @property
    def matryoshka_dims(self) -> list[int] | None:
        """Widths a caller may truncate to: declared for truncate-head and ESE-trained models only."""
        if self.head != Head.TRUNCATE.value and not self.ese:
            return None
        width = self.output_dim
        if not width:
            return None
        listed = None
        if isinstance(self.ese, dict):
            listed = next((self.ese[k] for k in ("matryoshka_dimensions", "matryoshka_dims", "dims")
                           if isinstance(self.ese.get(k), list)), None)
        if listed:
            dims = {int(d) for d in listed if isinstance(d, int) and 0 < d <= width} | {width}
        else:
            dims, d = {width}, width // 2
            while d >= MIN_MATRYOSHKA_DIM:
                dims.add(d)
                d //= 2
        return sorted(dims, reverse=True)

    @property
    def dims_listed_by_training(self) -> bool:
        return isinstance(self.ese, dict) and any(isinstance(self.ese.get(k), list)
                                                  for k in ("matryoshka_dimensions", "matryoshka_dims", "dims"))


def is_hub_id(text: str | None) -> bool:
    return bool(text) and bool(_HUB_ID.match(text)) and "--" not in text and ".." not in text


def _step_source(step: dict) -> str | None:
    """The model a provenance step started from: the shrink source, else a distillation's student or teacher."""
    for key in ("source", "student", "teacher", "base"):
        value = step.get(key)
        ident = value.get("id") if isinstance(value, dict) else value
        if isinstance(ident, str) and ident and not ident.endswith("(cut)"):
            return ident
    teacher = step.get("teacher")
    return teacher.get("id") if isinstance(teacher, dict) else None


def _is_local_path(text: str) -> bool:
    return text.startswith(("/", "~", ".")) or "\\" in text or bool(re.match(r"^[A-Za-z]:", text)) or text.count("/") > 1


def _short(ident: str | None) -> str:
    """A Hub id (aliases resolved) as is; a local path by its last component only (no local paths on a public card)."""
    if not ident:
        return "the source"
    ident = resolve_alias(ident)
    return re.split(r"[\\/]", ident.rstrip("/\\"))[-1] if _is_local_path(ident) else ident


def display_id(ident: str | None) -> str:
    """Markdown for a model: a Hub link, or a local folder by its last component."""
    if not ident:
        return "unknown"
    ident = resolve_alias(ident)
    if is_hub_id(ident):
        return f"[{ident}](https://huggingface.co/{ident})"
    return f"`{_short(ident)}`" + (" (a local folder)" if _is_local_path(ident) else "")


def safetensors_params(path: Path) -> int:
    """Parameter count from a safetensors header; also catches files cut short. No torch needed."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            if n > min(size, 100_000_000):
                raise ValueError("header length out of range")
            header = json.loads(fh.read(n))
    except (OSError, ValueError, struct.error, UnicodeDecodeError) as e:
        raise CorruptCheckpointError(f"corrupt or truncated safetensors file {path}: {e}") from e
    total, end = 0, 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        count = 1
        for d in info.get("shape", []):
            count *= int(d)
        total += count
        end = max(end, int(info.get("data_offsets", [0, 0])[1]))
    if 8 + n + end > size:
        raise CorruptCheckpointError(f"corrupt or truncated safetensors file {path}: {size} bytes, header needs {8 + n + end}")
    return total


def _post_modules(layout_post: list[tuple[str, Path]], folder: Path) -> list[DenseInfo | NormalizeInfo]:
    out: list[DenseInfo | NormalizeInfo] = []
    for kind, sub in layout_post:
        if kind == "Normalize":
            out.append(NormalizeInfo())
            continue
        cfg = _read_json(sub / "config.json")
        activation = str(cfg.get("activation_function", "torch.nn.modules.activation.Tanh")).rsplit(".", 1)[-1]
        if activation not in _ACTIVATIONS:
            raise UnsupportedModelError(f"unsupported Dense activation {activation!r} in {sub / 'config.json'}")
        if not (sub / "model.safetensors").is_file():
            raise UnsupportedModelError(f"Dense module {sub} has no model.safetensors (safetensors only)")
        out.append(DenseInfo(path=sub.relative_to(folder).as_posix(), in_features=int(cfg["in_features"]),
                             out_features=int(cfg["out_features"]), bias=bool(cfg.get("bias", True)),
                             activation=activation))
    return out


def read_model(folder: str | Path) -> ModelFacts:
    """Facts about a sentence-transformers or plain transformers folder, read without loading it."""
    folder = Path(folder).expanduser().resolve()
    if not folder.is_dir():
        raise ValidationError(f"{folder} is not a model folder (it does not exist or is a file)")
    layout = _read_st_layout(folder)
    tdir = layout.transformer_dir
    if not (tdir / "config.json").is_file():
        raise ValidationError(f"{folder} is not a model folder: no config.json")
    config = _read_json(tdir / "config.json")
    files = _weight_files(tdir)  # safetensors only; pickle-only folders are refused here
    params = sum(safetensors_params(f) for f in files)
    post = _post_modules(layout.post, folder)
    params += sum(m.in_features * m.out_features + (m.out_features if m.bias else 0)
                  for m in post if isinstance(m, DenseInfo))
    try:
        arch = for_model_type(config.get("model_type"))
        decoder, layers, hidden = arch.decoder, config.get(arch.depth_field), config.get(arch.hidden_field)
    except UnsupportedModelError:
        decoder, layers, hidden = False, config.get("num_hidden_layers"), config.get("hidden_size")
    modules_file = folder / "modules.json"
    module_paths = []
    if modules_file.is_file():
        module_paths = [m.get("path", "") for m in json.loads(modules_file.read_text(encoding="utf-8"))]
    prov_file = folder / PROVENANCE_FILE
    rel = tdir.relative_to(folder).as_posix()
    return ModelFacts(
        folder=folder, transformer_dir="" if rel == "." else rel,
        model_type=config.get("model_type"), decoder=decoder, layers=layers, hidden_size=hidden,
        pooling=layout.pooling or Pooling.MEAN, pooling_declared=layout.pooling is not None, post=post,
        module_paths=[p for p in module_paths if p], max_seq_length=layout.max_seq_length,
        do_lower_case=layout.do_lower_case, params=params, weights_bytes=sum(f.stat().st_size for f in files),
        provenance=_read_json(prov_file) if prov_file.is_file() else None,
    )


def read_onnx_export(folder: str | Path) -> OnnxFacts:
    """An ONNX export folder: ``export.json`` plus one or more ``*.onnx`` graphs (and tokenizer files)."""
    folder = Path(folder).expanduser().resolve()
    if not (folder / EXPORT_MANIFEST).is_file():
        raise ValidationError(f"{folder} is not an ONNX export folder: no {EXPORT_MANIFEST} (made by `espresso-export export`)")
    graphs = sorted(folder.glob("*.onnx"))
    if not graphs:
        raise ValidationError(f"ONNX export folder {folder} has no *.onnx graph")
    manifest = _read_json(folder / EXPORT_MANIFEST)
    if not isinstance(manifest, dict):
        raise ValidationError(f"{folder / EXPORT_MANIFEST} is not a JSON object")
    return OnnxFacts(folder=folder, graphs=[(g.name, g.stat().st_size) for g in graphs], manifest=manifest)


# --- the verify report, through one adapter -----------------------------------------------------


@dataclass(frozen=True)
class StsMetric:
    name: str
    pairs: int | None
    candidate: float | None  # Spearman x100
    source: float | None
    retention: float | None
    smoke: bool


@dataclass(frozen=True)
class LatencyMetric:
    batch_size: int
    candidate_p50_ms: float | None
    source_p50_ms: float | None
    p50_ratio: float | None
    speedup: float | None  # candidate / source sentences per second


@dataclass(frozen=True)
class RetrievalMetric:
    name: str
    index: str | None
    queries: int | None
    docs: int | None
    candidate_mrr: float | None
    source_mrr: float | None
    mrr_retention: float | None
    candidate_recall: float | None
    source_recall: float | None


@dataclass(frozen=True)
class GateCheck:
    name: str
    threshold: str
    value: float | None
    passed: bool


@dataclass
class CardMetrics:
    candidate: str  # what verify measured (a path is shown by its last component)
    candidate_kind: str | None
    candidate_path: str | None
    source: str
    threads: int | None
    size: dict[str, tuple[Any, Any, float | None]]  # label -> (candidate, source, ratio)
    candidate_dim: int | None
    sts: list[StsMetric] = field(default_factory=list)
    latency: list[LatencyMetric] = field(default_factory=list)
    retrieval: list[RetrievalMetric] = field(default_factory=list)
    gate: list[GateCheck] = field(default_factory=list)
    gate_passed: bool | None = None
    version: str | None = None


def _num(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _metrics_from_report(report: dict) -> CardMetrics:
    """Read a ``verify`` report (``VerifyReport.to_dict()``, written by ``verify --json FILE``).

    The only place that knows the report's field names; adapt it here if the schema changes.
    """
    cand, src = report.get("candidate"), report.get("source")
    if not isinstance(cand, dict) or not isinstance(src, dict):
        raise ValidationError("not a verify report: no 'candidate' and 'source' objects (write one with "
                              "`espresso-export verify ... --json report.json`)")
    ratios = report.get("size_ratios") or {}
    size = {
        "parameters": (cand.get("n_params"), src.get("n_params"), _num(ratios.get("n_params"))),
        "bytes on disk": (cand.get("disk_bytes"), src.get("disk_bytes"), _num(ratios.get("disk_bytes"))),
        "bytes per vector": (cand.get("bytes_per_vector"), src.get("bytes_per_vector"),
                             _num(ratios.get("bytes_per_vector"))),
    }
    sts = [StsMetric(name=str(s.get("name", "sts")), pairs=s.get("pairs"), candidate=_num(s.get("candidate_spearman")),
                     source=_num(s.get("source_spearman")), retention=_num(s.get("retention")),
                     smoke=bool(s.get("smoke_set")))
           for s in (report.get("sts") or {}).get("sets", [])]
    lat = report.get("latency") or {}
    latency = [LatencyMetric(batch_size=int(b.get("batch_size", 0)), candidate_p50_ms=_num((b.get("candidate") or {}).get("p50_ms")),
                             source_p50_ms=_num((b.get("source") or {}).get("p50_ms")), p50_ratio=_num(b.get("p50_ratio")),
                             speedup=_num(b.get("throughput_ratio")))
               for b in lat.get("batches", [])]
    retrieval = [RetrievalMetric(name=str(r.get("name", "retrieval")), index=r.get("index"), queries=r.get("queries"),
                                 docs=r.get("docs"), candidate_mrr=_num((r.get("candidate") or {}).get("mrr_at_10")),
                                 source_mrr=_num((r.get("source") or {}).get("mrr_at_10")),
                                 mrr_retention=_num(r.get("mrr_retention")),
                                 candidate_recall=_num((r.get("candidate") or {}).get("recall_at_10")),
                                 source_recall=_num((r.get("source") or {}).get("recall_at_10")))
                 for r in report.get("retrieval") or []]
    gate = report.get("gate") or {}
    checks = [GateCheck(name=str(c.get("name")), threshold=str(c.get("threshold")), value=_num(c.get("value")),
                        passed=bool(c.get("passed"))) for c in gate.get("checks", [])]
    return CardMetrics(
        candidate=str(cand.get("spec", "?")), candidate_kind=cand.get("kind"), candidate_path=cand.get("path"),
        source=str(src.get("spec", "?")), threads=lat.get("threads"), size=size, candidate_dim=cand.get("dim"),
        sts=sts, latency=latency, retrieval=retrieval, gate=checks,
        gate_passed=bool(gate["passed"]) if checks and "passed" in gate else None,
        version=report.get("espresso_version"),
    )


def metrics_from_report(report: Any, where: str) -> CardMetrics:
    if not isinstance(report, dict):
        raise ValidationError(f"{where} is not a verify report: expected a JSON object")
    try:
        return _metrics_from_report(report)
    except ValidationError as e:
        raise ValidationError(f"{where}: {e.message}") from e
    except (TypeError, ValueError, AttributeError) as e:
        raise ValidationError(f"{where} is not a verify report this version reads: {e}") from e


# --- rendering ----------------------------------------------------------------------------------


def _fmt(x: float | None, spec: str = ".2f", none: str = "n/a") -> str:
    return none if x is None else format(x, spec)


def _bytes(n) -> str:
    if not isinstance(n, (int, float)):
        return "n/a"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def _params(n) -> str:
    return f"{n / 1e6:.2f}M" if isinstance(n, (int, float)) else "n/a"


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(v).replace("|", "\\|") for v in row) + " |" for row in rows]
    return lines + [""]


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "set"


def _tags(facts: ModelFacts) -> list[str]:
    tags = ["espresso-export", "sentence-transformers", "feature-extraction", "sentence-similarity"]
    if facts.onnx is not None:
        tags.append("onnx")
    if facts.head:
        tags.append(f"{facts.head}-head")
    steps = {s.get("step") for s in facts.lineage}
    if "shrink" in steps:
        tags.append("layer-pruning")
    if "distill" in steps:
        tags.append("distillation")
    if facts.ese:
        tags.append("ese")
    if facts.matryoshka_dims:
        tags.append("matryoshka")
    return tags


def _model_index(repo_id: str, metrics: CardMetrics) -> list[dict]:
    results = []
    for s in metrics.sts:
        if s.candidate is None:
            continue
        values = [{"type": "spearman_cosine", "value": round(s.candidate / 100, 4), "name": "Spearman (cosine)"}]
        if s.retention is not None:
            values.append({"type": "spearman_cosine_retention", "value": round(s.retention, 4),
                           "name": f"Spearman retention vs {_short(metrics.source)}"})
        results.append({"task": {"type": "semantic-similarity", "name": "Semantic Similarity"},
                        "dataset": {"name": s.name, "type": _slug(s.name)}, "metrics": values})
    for r in metrics.retrieval:
        if r.candidate_mrr is None:
            continue
        values = [{"type": "cosine_mrr@10", "value": round(r.candidate_mrr, 4), "name": "MRR@10 (cosine)"}]
        if r.candidate_recall is not None:
            values.append({"type": "cosine_recall@10", "value": round(r.candidate_recall, 4), "name": "Recall@10 (cosine)"})
        if r.mrr_retention is not None:
            values.append({"type": "cosine_mrr@10_retention", "value": round(r.mrr_retention, 4),
                           "name": f"MRR@10 retention vs {_short(metrics.source)}"})
        results.append({"task": {"type": "information-retrieval", "name": "Information Retrieval"},
                        "dataset": {"name": r.name, "type": _slug(r.name)}, "metrics": values})
    return [{"name": repo_id, "results": results}] if results else []


def front_matter(facts: ModelFacts, repo_id: str) -> dict:
    meta: dict[str, Any] = {"library_name": "sentence-transformers", "pipeline_tag": "sentence-similarity"}
    if facts.base_model:
        meta["base_model"] = facts.base_model
    meta["tags"] = _tags(facts)
    if facts.matryoshka_dims:
        meta["matryoshka_dimensions"] = facts.matryoshka_dims
    if facts.metrics is not None:
        index = _model_index(repo_id, facts.metrics)
        if index:
            meta["model-index"] = index
    return meta


def _step_line(step: dict) -> str:
    kind = step.get("step", "step")
    if kind == "shrink":
        src = step.get("source") or {}
        depth = src.get("depth")
        layers = step.get("layers") or []
        text = (f"**shrink** (espresso-export {step.get('espresso_version', '?')}): kept {len(layers)} of "
                f"{depth if depth is not None else '?'} layers {layers} (select {step.get('select', '?')}), "
                f"{step.get('pooling', '?')} pooling, head `{step.get('head', '?')}` -> {step.get('dim', '?')}-d")
        cal = step.get("calibration")
        if isinstance(cal, dict) and step.get("head") == Head.PCA.value:
            ev = step.get("pca_explained_variance")
            corpus = "espresso-export's built-in corpus" if cal.get("source") == BUILTIN else f"`{_short(str(cal.get('source')))}`"
            text += (f"; the PCA was fitted on {cal.get('size', '?')} calibration sentences ({corpus})"
                     + (f" and keeps {100 * ev:.1f}% of their variance" if ev else ""))
        return text + f"; seed {step.get('seed', '?')}"
    if kind == "distill":
        teacher, student = step.get("teacher") or {}, step.get("student") or {}
        train = step.get("training") or {}
        corpus = step.get("corpus") or {}
        text = (f"**distill** (espresso-export {step.get('espresso_version', '?')}): teacher "
                f"{display_id(teacher.get('id'))}, student {display_id(student.get('id')) if not str(student.get('id', '')).endswith('(cut)') else 'the cut teacher'}"
                + (f" (layers {student['layers']})" if student.get("layers") is not None else "")
                + f", {step.get('dim', '?')}-d, {step.get('pooling', '?')} pooling")
        sizes = [f"{k} {v}" for k, v in corpus.items() if k != "sha256" and isinstance(v, (int, float))]
        if sizes:
            text += f"; corpus: {', '.join(sizes)}"
        keys = ("steps", "epochs", "batch_size", "lr", "loss", "warmup", "max_seq_len", "seed")
        settings = [f"{k} {train[k]}" for k in keys if train.get(k) is not None]
        if settings:
            text += f"; training: {', '.join(settings)}"
        best = step.get("best_eval")
        if isinstance(best, dict) and best.get("best") is not None:
            text += f"; best eval {best['best']:.2f} (from {best.get('initial', float('nan')):.2f}) on {_short(str(best.get('sts')))}"
        return text
    scalars = [f"{k} {v}" for k, v in step.items()
               if k not in ("step", "parent", "espresso_version") and isinstance(v, (str, int, float, bool))
               and not (isinstance(v, str) and v.startswith(("/", "~")))]
    return f"**{kind}** (espresso-export {step.get('espresso_version', '?')})" + (f": {', '.join(scalars)}" if scalars else "")


def _lineage_section(facts: ModelFacts) -> list[str]:
    lines = ["## Lineage", ""]
    chain = facts.lineage
    if not chain:
        return lines + ["This folder has no `espresso.json`: it was not produced by espresso-export, so its "
                        "lineage is unknown.", ""]
    first = chain[0]
    src = first.get("source") if isinstance(first.get("source"), dict) else {}
    desc = display_id(facts.source_id)
    if src.get("depth") and src.get("hidden_size"):
        desc += f", {src['depth']} layers, {src['hidden_size']}-d"
    lines.append(f"1. source: {desc}" + (f", weights sha256 `{src['weights_sha256'][:12]}...`" if src.get("weights_sha256") else ""))
    lines += [f"{i}. {_step_line(step)}" for i, step in enumerate(chain, start=2)]
    lines.append(f"{len(chain) + 2}. published with `espresso-export push` ({__version__}); the full provenance is "
                 "in `espresso.json`.")
    return lines + [""]


def _summary_rows(facts: ModelFacts) -> list[list[str]]:
    rows = [["base model", display_id(facts.source_id) if facts.source_id else "unknown (not an espresso-export folder)"],
            ["architecture", f"{facts.model_type or '?'}, {facts.layers if facts.layers is not None else '?'} layers, "
                             f"{facts.hidden_size or '?'}-d hidden"],
            ["embedding", f"{facts.output_dim or '?'}-d, {facts.pooling.value} pooling"
                          + (", L2-normalised" if facts.normalized else "")],
            ["head", " -> ".join(f"Dense {m.in_features}->{m.out_features}" if isinstance(m, DenseInfo) else "Normalize"
                                 for m in facts.post) or "none"],
            ["max sequence length", f"{facts.max_seq_length} tokens" if facts.max_seq_length else "tokenizer default"],
            ["parameters", _params(facts.params)],
            ["weights (safetensors)", _bytes(facts.weights_bytes)]]
    if facts.onnx is not None:
        rows.append(["ONNX", ", ".join(f"`onnx/{name}` ({_bytes(size)})" for name, size in facts.onnx.graphs)])
    if facts.matryoshka_dims:
        rows.append(["matryoshka dimensions", ", ".join(map(str, facts.matryoshka_dims))])
    return rows


def _verification_section(facts: ModelFacts) -> list[str]:
    m = facts.metrics
    lines = ["## Verification", ""]
    if m is None:
        return lines + ["No `espresso-export verify` report was included, so this card makes no quality or speed "
                        "claims. Measure it with `espresso-export verify MODEL --against SOURCE --json report.json` "
                        "and push again with `--verify-report report.json`.", ""]
    lines += [f"Measured by `espresso-export verify` {m.version or ''} against {display_id(m.source)}, side by side in "
              f"one process{f', {m.threads} thread(s)' if m.threads else ''}; the full report is "
              "`verify_report.json`.", ""]
    rows: list[list[str]] = []
    for s in m.sts:
        rows.append([f"STS Spearman x100, {s.name} ({s.pairs} pairs)", _fmt(s.candidate), _fmt(s.source),
                     f"{_fmt(s.retention, '.4f')} retained"])
    for r in m.retrieval:
        rows.append([f"MRR@10, {r.name} ({r.queries} queries, {r.docs} docs)", _fmt(r.candidate_mrr, ".4f"),
                     _fmt(r.source_mrr, ".4f"), f"{_fmt(r.mrr_retention, '.4f')} retained"])
    for b in m.latency:
        rows.append([f"latency p50, batch {b.batch_size} (ms)", _fmt(b.candidate_p50_ms, ".1f"),
                     _fmt(b.source_p50_ms, ".1f"), f"{_fmt(b.p50_ratio, '.3f')} ({_fmt(b.speedup, '.2f')}x throughput)"])
    for label, (c, s, ratio) in m.size.items():
        show = _params if label == "parameters" else _bytes if label == "bytes on disk" else (lambda v: f"{v} B" if v is not None else "n/a")
        rows.append([label, show(c), show(s), _fmt(ratio, ".3f")])
    lines += _table(["metric", "this model", _short(m.source), "ratio"], rows)
    if m.gate:
        verdict = "passed" if m.gate_passed else "FAILED"
        lines += [f"Quality gate: **{verdict}**.", ""]
        lines += _table(["check", "threshold", "value", "result"],
                        [[c.name, c.threshold, _fmt(c.value, ".4f"), "pass" if c.passed else "FAIL"] for c in m.gate])
    return lines


def _transformers_snippet(facts: ModelFacts, repo_id: str) -> str:
    sub = f' + "/{facts.transformer_dir}"' if facts.transformer_dir else ""
    dense = [(i, m) for i, m in enumerate(facts.post) if isinstance(m, DenseInfo)]
    code = ["import torch", "import torch.nn.functional as F", "from huggingface_hub import snapshot_download"]
    if dense:
        code.append("from safetensors.torch import load_file")
    code += ["from transformers import AutoModel, AutoTokenizer", "",
             f'path = snapshot_download("{repo_id}")',
             f"tokenizer = AutoTokenizer.from_pretrained(path{sub})",
             f"model = AutoModel.from_pretrained(path{sub}).eval()"]
    if facts.decoder:
        code.append("tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token or tokenizer.unk_token")
    for n, (_, m) in enumerate(dense):
        code.append(f'dense{n} = load_file(f"{{path}}/{m.path}/model.safetensors")  # {m.in_features} -> {m.out_features}')
    code += ["", "", "def embed(texts):"]
    if facts.do_lower_case:
        code.append("    texts = [t.lower() for t in texts]")
    max_len = f", max_length={facts.max_seq_length}" if facts.max_seq_length else ""
    code += [f'    batch = tokenizer(texts, padding=True, truncation=True{max_len}, return_tensors="pt")',
             "    with torch.no_grad():",
             '        hidden = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state']
    if facts.pooling in (Pooling.MEAN, Pooling.MAX):
        code.append('    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)')
    pooling = {
        Pooling.MEAN: ["    x = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)  # mean pooling"],
        Pooling.CLS: ["    x = hidden[:, 0]  # CLS pooling"],
        Pooling.MAX: ["    x = hidden.masked_fill(mask == 0, torch.finfo(hidden.dtype).min).max(1).values  # max pooling"],
        Pooling.LAST_TOKEN: ['    positions = torch.arange(hidden.shape[1]).expand_as(batch["attention_mask"])',
                             '    last = (positions * batch["attention_mask"]).argmax(1)  # last real token, any padding side',
                             "    x = hidden[torch.arange(hidden.shape[0]), last]"],
    }[facts.pooling]
    code += pooling
    n = 0
    for m in facts.post:
        if isinstance(m, NormalizeInfo):
            code.append("    x = F.normalize(x, dim=-1)")
            continue
        bias = f', dense{n}["linear.bias"]' if m.bias else ""
        code.append(f'    x = F.linear(x, dense{n}["linear.weight"]{bias})  # {m.path}')
        if _ACTIVATIONS[m.activation]:
            code.append(f"    x = {_ACTIVATIONS[m.activation]}")
        n += 1
    code += ["    return x", "", "",
             'embeddings = embed(["A man is playing a guitar.", "Someone plays an instrument."])',
             "print(embeddings.shape, (embeddings[0] @ embeddings[1]).item())"]
    return "\n".join(code)


def usage_section(facts: ModelFacts, repo_id: str) -> list[str]:
    dim = facts.output_dim
    lines = ["## Usage", "", "### sentence-transformers", "", "```python",
             "from sentence_transformers import SentenceTransformer", "",
             f'model = SentenceTransformer("{repo_id}")',
             'embeddings = model.encode(["A man is playing a guitar.", "Someone plays an instrument."])',
             f"print(embeddings.shape)  # (2, {dim})",
             "print(model.similarity(embeddings, embeddings))"]
    dims = facts.matryoshka_dims
    if dims and len(dims) > 1:
        lines += ["", f"# a smaller vector: the first {dims[1]} dims (see Matryoshka dimensions below)",
                  f'small = SentenceTransformer("{repo_id}", truncate_dim={dims[1]})']
    lines += ["```", "", "### transformers", "",
              "Without sentence-transformers, reproduce the embedding by hand: the backbone, then "
              + _pipeline_words(facts) + ".", "", "```python", _transformers_snippet(facts, repo_id), "```", ""]
    if facts.onnx is not None:
        graph = facts.onnx.graphs[0][0]
        lines += ["### ONNX runtime, no torch", "",
                  f"`onnx/` holds the ONNX export made by `espresso-export export` "
                  f"({', '.join(f'`{g}`' for g, _ in facts.onnx.graphs)}, `export.json` and the files beside them). "
                  "espresso-export's runtime encodes with it without importing torch:", "", "```python",
                  "from huggingface_hub import snapshot_download",
                  "from espresso_export.runtime import OnnxEncoder  # pip install \"espresso-export[onnx]\"", "",
                  f'folder = snapshot_download("{repo_id}", allow_patterns=["onnx/*"])',
                  'encoder = OnnxEncoder(f"{folder}/onnx")',
                  'embeddings = encoder.encode(["A man is playing a guitar.", "Someone plays an instrument."])',
                  f"print(embeddings.shape)  # (2, {dim})", "```", "",
                  f"`onnx/{graph}` is a standard ONNX graph, so other ONNX runtimes can load it too.", ""]
    return lines


def _pipeline_words(facts: ModelFacts) -> str:
    words = [f"{facts.pooling.value} pooling"]
    for m in facts.post:
        words.append("L2 normalisation" if isinstance(m, NormalizeInfo)
                     else f"the Dense layer `{m.path}` ({m.in_features} -> {m.out_features}"
                          + (f", {m.activation}" if m.activation != "Identity" else "") + ")")
    return ", ".join(words)


def _matryoshka_section(facts: ModelFacts) -> list[str]:
    dims = facts.matryoshka_dims
    if not dims:
        return []
    why = ("this model is ESE-trained" if facts.ese else "its head keeps the first dimensions of the source embedding "
           "(`truncate` head), which is meant for Matryoshka/ESE-trained sources")
    lines = ["## Matryoshka dimensions", "",
             f"Declared widths: {', '.join(map(str, dims))}, because {why}. `matryoshka_dimensions` is set in this "
             "card, in `config.json` (read by serving stacks such as vLLM to accept a smaller `dimensions` request) and "
             "in `config_sentence_transformers.json`. Keep the first d values and L2-normalise again "
             "(sentence-transformers: `truncate_dim=d`; cosine similarity needs no renormalisation)."]
    if not facts.dims_listed_by_training:
        lines.append(f"The widths below {dims[0]} are halvings of the full width; "
                     + ("only the full width was measured by `verify`." if facts.metrics else "none was measured."))
    return lines + [""]


def _intended_use(facts: ModelFacts) -> list[str]:
    src = display_id(facts.source_id) if facts.source_id else "the original model"
    lines = ["## Intended use", "",
             "Sentence and short-passage embeddings for semantic similarity, clustering and retrieval where the "
             f"source model is too large or too slow: CPU servers, laptops and edge devices. Languages and domain are "
             f"those of {src}; inputs longer than "
             f"{facts.max_seq_length or 'the tokenizer limit'} tokens are truncated.", "",
             "## Limitations", ""]
    bullets = []
    m = facts.metrics
    if m is None:
        bullets.append("Quality and speed were not measured for this upload (no verify report).")
    else:
        bullets.append("Quality was measured only on the sets in the table above; other tasks and domains can lose more.")
        if m.sts and all(s.smoke for s in m.sts):
            bullets.append("The only STS set is espresso-export's built-in smoke set (173 pairs): a sanity check, not "
                           "a benchmark.")
        if m.gate_passed is False:
            bullets.append("The verification gate FAILED: " + "; ".join(
                f"{c.name} = {_fmt(c.value, '.4f')}, needs {c.threshold}" for c in m.gate if not c.passed) + ".")
    steps = [s.get("step") for s in facts.lineage]
    if steps and "distill" not in steps and "train" not in steps and not facts.ese:
        bullets.append("Layers were removed without retraining (no distillation or fine-tuning step).")
    if facts.head == Head.PCA.value:
        bullets.append("The PCA head was fitted on a general-domain calibration corpus; texts far from it may lose more.")
    bullets.append(f"It inherits the biases and the license terms of {src}.")
    return lines + [f"- {b}" for b in bullets] + [""]


def render_card(facts: ModelFacts, repo_id: str) -> str:
    """The README.md for ``repo_id``: YAML front matter and Markdown body."""
    import yaml

    meta = yaml.safe_dump(front_matter(facts, repo_id), sort_keys=False, allow_unicode=True, width=1000)
    name = repo_id.split("/", 1)[1]
    origin = f"derived from {display_id(facts.source_id)}" if facts.source_id else "published"
    lines = ["---", meta.rstrip(), "---", "", f"# {name}", "",
             f"A compact sentence-embedding model ({facts.layers if facts.layers is not None else '?'} layers, "
             f"{facts.output_dim or '?'}-d embeddings) {origin} with espresso-export.", ""]
    lines += _table(["property", "value"], _summary_rows(facts))
    lines += _lineage_section(facts)
    lines += _verification_section(facts)
    lines += usage_section(facts, repo_id)
    lines += _matryoshka_section(facts)
    lines += _intended_use(facts)
    return "\n".join(lines).rstrip() + "\n"
