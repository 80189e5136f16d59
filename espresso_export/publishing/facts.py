"""Facts about a model folder for its card, read without torch.

``modules.json`` and the module configs (pooling, Dense, Normalize), ``config.json``, the safetensors
headers (parameter counts), ``espresso.json`` (the lineage) and, when given, an ``export.json`` folder.
A static model folder (model2vec's format, :mod:`espresso_export.model.static`) is read from its ``config.json``,
its table's safetensors header and ``espresso.json`` (:class:`StaticFacts`), without model2vec.
The verify report's numbers are attached later (:mod:`espresso_export.publishing.report_metrics`).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from espresso_export.core.errors import CorruptCheckpointError, UnsupportedModelError, ValidationError
from espresso_export.core.types import Head, Pooling
from espresso_export.model.aliases import resolve_alias
from espresso_export.model.architectures import for_model_type
from espresso_export.runtime import EXPORT_FILE, graph_bytes
from espresso_export.model.checkpoint import PROVENANCE_FILE, weight_files
from espresso_export.model.module_chain import read_json, read_st_layout
from espresso_export.model.static import STATIC_STUDENT, is_static_folder
from espresso_export.model.vocabulary import PROVENANCE_KEY as PRUNING_KEY
from espresso_export.publishing.model_ids import is_hub_id, step_source

if TYPE_CHECKING:
    from espresso_export.publishing.report_metrics import CardMetrics

EXPORT_MANIFEST = EXPORT_FILE  # the export folder's manifest, named once in runtime/onnx_encoder.py
MIN_MATRYOSHKA_DIM = 32  # halvings of the width stop here unless the lineage lists the trained dims
ACTIVATION_CODE = {  # sentence-transformers Dense activation -> code a transformers user writes
    "Identity": None, "Tanh": "torch.tanh(x)", "ReLU": "torch.relu(x)", "GELU": "F.gelu(x)",
    "Sigmoid": "torch.sigmoid(x)",
}
_TRAINED_DIMS_KEYS = ("matryoshka_dimensions", "matryoshka_dims", "dims")  # where ESE provenance lists its widths


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
    graphs: list[tuple[str, int]]  # (path in the repository, bytes): onnx/model.onnx, ...
    manifest: dict
    runtimes_layout: bool = False  # True: the layout every runtime loads (onnx/model*.onnx, staged at the root)
    openvino: list[tuple[str, int]] = field(default_factory=list)  # (openvino/NAME.xml, bytes of .xml + .bin)

    @property
    def repo_paths(self) -> list[str]:
        return [name for name, _ in self.graphs]

    def repo_path(self, rel: str) -> str:
        """Where a file of the export folder goes in the repository."""
        return rel if self.runtimes_layout else f"onnx/{rel}"


@dataclass(frozen=True)
class StaticFacts:
    """A static model: a token table in model2vec's format (no attention), and how it was made."""

    tokens: int  # rows of the table
    dtype: str  # the table's dtype on disk (safetensors' name: F32, F16, I8)
    other_bytes: int  # the tokenizer and the configs beside the table
    corpus_words: int | None = None  # words of the user's corpus added as tokens (espresso.json)
    healed_on: int | None = None  # texts the table was trained on against the source's vectors
    healed: bool | None = None  # None: no record of how it was made (no espresso.json)
    heldout: dict = field(default_factory=dict)  # mean cosine to the source on held-out texts, before and after


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
    license: str | None = None  # set by push: --license, else the source's (publishing/license.py)
    static: StaticFacts | None = None  # a static model folder (model2vec's format)

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
    def estimate_kind(self) -> str | None:
        """The kind of model the known-item estimate's error was measured for, read off the lineage
        (:func:`~espresso_export.verification.estimate_error.kind_of_lineage`)."""
        from espresso_export.verification.estimate_error import kind_of_lineage

        return kind_of_lineage(self.provenance)

    @property
    def source_id(self) -> str | None:
        chain = self.lineage
        return step_source(chain[0]) if chain else None

    @property
    def base_model(self) -> str | None:
        """The original source when it is a Hub id (a local folder is not a valid ``base_model``)."""
        ident = resolve_alias(self.source_id) if self.source_id else None
        return ident if is_hub_id(ident) else None

    @property
    def head(self) -> str | None:
        return (self.provenance or {}).get("head")

    @property
    def vocab_pruning(self) -> dict | None:
        """The newest ``prune-vocab`` record of the lineage (sizes before and after, the corpus), if any."""
        return next((s[PRUNING_KEY] for s in reversed(self.lineage) if isinstance(s.get(PRUNING_KEY), dict)), None)

    @property
    def ese(self) -> Any:
        return (self.provenance or {}).get("ese")

    @property
    def trained_dims(self) -> list | None:
        """The widths ESE training listed in the provenance, if it listed any."""
        if not isinstance(self.ese, dict):
            return None
        listed = next((self.ese[k] for k in _TRAINED_DIMS_KEYS if isinstance(self.ese.get(k), list)), None)
        k = self.ese.get("compression_dim")  # `train --ese` records the one width it trained besides the full one
        return listed if listed is not None else [k] if isinstance(k, int) and k > 0 else None

    @property
    def dims_listed_by_training(self) -> bool:
        return self.trained_dims is not None

    @property
    def exported_dims(self) -> list[int] | None:
        """The nested widths ``export --dims`` declared (widest first): ``export.json``'s ``nested_widths``, else
        the export step's record in ``espresso.json`` (a safetensors export); None when it declared none."""
        listed = (self.onnx.manifest.get("nested_widths") if self.onnx else None) or (
            (self.provenance or {}).get("nested_widths") if (self.provenance or {}).get("step") == "export" else None)
        width = self.output_dim
        if not isinstance(listed, list) or len(listed) < 2 or not width:
            return None
        dims = {d for d in listed if isinstance(d, int) and 0 < d <= width} | {width}
        return sorted(dims, reverse=True)

    @property
    def pca_head(self) -> bool:
        """The head is the PCA ``shrink`` fitted, unchanged since: its truncations are exact."""
        from espresso_export.exporting.vectors import is_pca_head

        return is_pca_head(self.provenance)

    @property
    def matryoshka_dims(self) -> list[int] | None:
        """Widths a caller may truncate to: those the export declared (``export --dims``), else those of
        truncate-head and ESE-trained models."""
        if exported := self.exported_dims:
            return exported
        if self.head != Head.TRUNCATE.value and not self.ese:
            return None
        width = self.output_dim
        if not width:
            return None
        listed = self.trained_dims
        if listed:
            dims = {int(d) for d in listed if isinstance(d, int) and 0 < d <= width} | {width}
        else:
            dims, d = {width}, width // 2
            while d >= MIN_MATRYOSHKA_DIM:
                dims.add(d)
                d //= 2
        return sorted(dims, reverse=True)


def safetensors_params(path: Path) -> int:
    """Parameter count from a safetensors header; also catches files cut short. No torch needed."""
    return sum(_count(info) for name, info in _header(path).items() if name != "__metadata__")


def _count(info: dict) -> int:
    count = 1
    for d in info.get("shape", []):
        count *= int(d)
    return count


def _header(path: Path) -> dict:
    """A safetensors file's header (tensor name -> dtype, shape, offsets), checked against the file's size."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            if n > min(size, 100_000_000):
                raise ValueError("header length out of range")
            header = json.loads(fh.read(n))
    except (OSError, ValueError, struct.error, UnicodeDecodeError) as e:
        raise CorruptCheckpointError(f"corrupt or truncated safetensors file {path}: {e}") from e
    end = max((int(info.get("data_offsets", [0, 0])[1]) for name, info in header.items() if name != "__metadata__"),
              default=0)
    if 8 + n + end > size:
        raise CorruptCheckpointError(f"corrupt or truncated safetensors file {path}: {size} bytes, header needs {8 + n + end}")
    return header


def _post_modules(layout_post: list[tuple[str, Path]], folder: Path) -> list[DenseInfo | NormalizeInfo]:
    out: list[DenseInfo | NormalizeInfo] = []
    for kind, sub in layout_post:
        if kind == "Normalize":
            out.append(NormalizeInfo())
            continue
        cfg = read_json(sub / "config.json")
        activation = str(cfg.get("activation_function", "torch.nn.modules.activation.Tanh")).rsplit(".", 1)[-1]
        if activation not in ACTIVATION_CODE:
            raise UnsupportedModelError(f"unsupported Dense activation {activation!r} in {sub / 'config.json'}")
        if not (sub / "model.safetensors").is_file():
            raise UnsupportedModelError(f"Dense module {sub} has no model.safetensors (safetensors only)")
        out.append(DenseInfo(path=sub.relative_to(folder).as_posix(), in_features=int(cfg["in_features"]),
                             out_features=int(cfg["out_features"]), bias=bool(cfg.get("bias", True)),
                             activation=activation))
    return out


def _shape(config: dict) -> tuple[bool, int | None, int | None]:
    """(decoder, layers, hidden size) from ``config.json``; BERT-style field names for unknown types."""
    try:
        arch = for_model_type(config.get("model_type"))
        return arch.decoder, config.get(arch.depth_field), config.get(arch.hidden_field)
    except UnsupportedModelError:
        return False, config.get("num_hidden_layers"), config.get("hidden_size")


def _module_paths(folder: Path) -> list[str]:
    modules_file = folder / "modules.json"
    if not modules_file.is_file():
        return []
    paths = [m.get("path", "") for m in json.loads(modules_file.read_text(encoding="utf-8"))]
    return [p for p in paths if p]


def _static_record(provenance: dict | None) -> dict | None:
    """The ``distill --student static`` step of a lineage (the newest), if any."""
    step = provenance
    while isinstance(step, dict):
        student = step.get("student")
        if step.get("step") == "distill" and isinstance(student, dict) and student.get("id") == STATIC_STUDENT:
            return step
        step = step.get("parent")
    return None


def _read_static(folder: Path) -> ModelFacts:
    """Facts about a static model folder (model2vec's format): the table's shape from its safetensors header, how it
    was made from ``espresso.json``."""
    from espresso_export.model.static import TABLE_KEY

    config = read_json(folder / "config.json")
    weights = folder / "model.safetensors"
    if not weights.is_file():
        raise ValidationError(f"{folder} is a static model folder without model.safetensors (the table)")
    header = _header(weights)
    table = header.get(TABLE_KEY)
    if not isinstance(table, dict) or len(table.get("shape", [])) != 2:
        raise ValidationError(f"{weights} holds no {TABLE_KEY!r} table (tokens x dims): not a model2vec model")
    tokens, dim = (int(d) for d in table["shape"])
    prov_file = folder / PROVENANCE_FILE
    provenance = read_json(prov_file) if prov_file.is_file() else None
    record = _static_record(provenance)
    other = sum(f.stat().st_size for f in folder.iterdir()
                if f.is_file() and f.name not in ("model.safetensors", "README.md") and f.suffix == ".json")
    static = StaticFacts(tokens=tokens, dtype=str(table.get("dtype", "?")), other_bytes=other)
    if record is not None:
        corpus = record.get("corpus") or {}
        texts = corpus.get("training_sentences") or corpus.get("sentences")
        static = replace(static, corpus_words=(record.get("student") or {}).get("corpus_words"),
                         healed=bool(record.get("healed")), healed_on=texts if isinstance(texts, int) else None,
                         heldout=record.get("heldout") or {})
    return ModelFacts(
        folder=folder, transformer_dir="", model_type=config.get("model_type"), decoder=False, layers=0,
        hidden_size=dim, pooling=Pooling.MEAN, pooling_declared=True,
        post=[NormalizeInfo()] if config.get("normalize", True) else [], module_paths=_module_paths(folder),
        max_seq_length=config.get("max_length"), do_lower_case=False, params=safetensors_params(weights),
        weights_bytes=weights.stat().st_size, provenance=provenance, static=static,
    )


def read_model(folder: str | Path) -> ModelFacts:
    """Facts about a sentence-transformers, plain transformers or static (model2vec) folder, read without loading
    it."""
    folder = Path(folder).expanduser().resolve()
    if not folder.is_dir():
        raise ValidationError(f"{folder} is not a model folder (it does not exist or is a file)")
    if is_static_folder(folder):
        return _read_static(folder)
    layout = read_st_layout(folder)
    tdir = layout.transformer_dir
    if not (tdir / "config.json").is_file():
        raise ValidationError(f"{folder} is not a model folder: no config.json")
    config = read_json(tdir / "config.json")
    files = weight_files(tdir)  # safetensors only; pickle-only folders are refused here
    params = sum(safetensors_params(f) for f in files)
    post = _post_modules(layout.post, folder)
    params += sum(m.in_features * m.out_features + (m.out_features if m.bias else 0)
                  for m in post if isinstance(m, DenseInfo))
    decoder, layers, hidden = _shape(config)
    prov_file = folder / PROVENANCE_FILE
    rel = tdir.relative_to(folder).as_posix()
    return ModelFacts(
        folder=folder, transformer_dir="" if rel == "." else rel,
        model_type=config.get("model_type"), decoder=decoder, layers=layers, hidden_size=hidden,
        pooling=layout.pooling or Pooling.MEAN, pooling_declared=layout.pooling is not None, post=post,
        module_paths=_module_paths(folder), max_seq_length=layout.max_seq_length,
        do_lower_case=layout.do_lower_case, params=params, weights_bytes=sum(f.stat().st_size for f in files),
        provenance=read_json(prov_file) if prov_file.is_file() else None,
    )


def read_onnx_export(folder: str | Path) -> OnnxFacts:
    """An ONNX export folder: ``export.json`` plus one or more ``*.onnx`` graphs (and tokenizer files)."""
    folder = Path(folder).expanduser().resolve()
    if not (folder / EXPORT_MANIFEST).is_file():
        raise ValidationError(f"{folder} is not an ONNX export folder: no {EXPORT_MANIFEST} (made by `espresso-export export`)")
    nested = sorted((folder / "onnx").glob("*.onnx"))  # the layout every runtime loads (exporting/export_folder.py)
    graphs = nested or sorted(folder.glob("*.onnx"))  # older export folders: graphs at the top
    if not graphs:
        raise ValidationError(f"ONNX export folder {folder} has no *.onnx graph")
    manifest = read_json(folder / EXPORT_MANIFEST)
    if not isinstance(manifest, dict):
        raise ValidationError(f"{folder / EXPORT_MANIFEST} is not a JSON object")
    openvino = [(f"openvino/{x.name}", graph_bytes(x))  # export --format onnx,openvino
                for x in sorted((folder / "openvino").glob("*.xml"))]
    return OnnxFacts(folder=folder, graphs=[(f"onnx/{g.name}", g.stat().st_size) for g in graphs], manifest=manifest,
                     runtimes_layout=bool(nested), openvino=openvino)

