"""The ONNX graph: encoder -> pooling -> head -> L2 normalisation, in one file.

``SentenceEmbeddingModule`` (:func:`_module`) wraps a :class:`~espresso_export.model.checkpoint.Checkpoint`
with the same pooling and post modules :func:`espresso_export.model.embed.encode`
applies, so the exported graph's first output is the vector a user should
store and compare - not the token states a caller must still pool (the usual
way an ONNX export silently loses a model's pooling or Dense head).
"""

from __future__ import annotations

import logging
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path

from espresso_export.model.checkpoint import Checkpoint
from espresso_export.model.embed import apply_post, model_inputs, pool
from espresso_export.model.post import normalized_output
from espresso_export.core.errors import RuntimeFailure, UnsupportedModelError, os_error_in, write_failure
from espresso_export.runtime import EMBEDDING_OUTPUT, TOKEN_OUTPUT
from espresso_export.exporting.export_settings import ExportSettings
from espresso_export.exporting.shapes import static_reshapes

log = logging.getLogger(__name__)

INPUT_ORDER = ("input_ids", "attention_mask", "token_type_ids")
TORCHSCRIPT_MAX_OPSET = 20
DYNAMO_MIN_OPSET = 18


@dataclass(frozen=True)
class GraphInfo:
    inputs: list[str]
    outputs: list[str]
    opset: int
    exporter: str
    external_data: bool
    static_reshapes: dict | None = None  # what :func:`~.shapes.static_reshapes` rewrote


def graph_inputs(ckpt: Checkpoint) -> list[str]:
    """The tokenizer outputs the model consumes: exactly what the tokenizer returns (fastembed, optimum and
    transformers.js feed a graph what it declares), token_type_ids only where the model has segment embeddings."""
    accepted = model_inputs(ckpt.model)
    produced = set(getattr(ckpt.tokenizer, "model_input_names", None) or INPUT_ORDER)
    names = [n for n in INPUT_ORDER if n in accepted and (n in produced or n != "token_type_ids")]
    if "token_type_ids" in names and int(getattr(ckpt.config, "type_vocab_size", 1) or 0) == 0:
        names.remove("token_type_ids")  # DeBERTa-v3 and others without segment embeddings
    return names


def _module(ckpt: Checkpoint, names: list[str]):
    import torch

    post = normalized_output(ckpt.post) if ckpt.unit_length_output else list(ckpt.post)

    class SentenceEmbeddingModule(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = ckpt.model
            self.pooling = ckpt.pooling
            self.post = post

        def forward(self, *tensors):
            inputs = dict(zip(names, tensors))
            states = self.encoder(**inputs, return_dict=True).last_hidden_state
            embedding = apply_post(pool(states, inputs["attention_mask"], self.pooling), self.post)
            return embedding, states

    return SentenceEmbeddingModule().eval()


def example_inputs(ckpt: Checkpoint, names: list[str]):
    """A padded batch of two texts: tracing with padding keeps every mask branch in the graph."""
    texts = ["a short text", "a longer example text, so that the first one is padded"]
    batch = ckpt.tokenizer(texts, padding=True, truncation=True, max_length=ckpt.max_seq_length, return_tensors="pt")
    import torch

    return tuple(batch[n] if n in batch else torch.zeros_like(batch["input_ids"]) for n in names)


def export_onnx(ckpt: Checkpoint, path: Path, settings: ExportSettings) -> GraphInfo:
    """Write the self-contained graph of ``ckpt`` to ``path`` (external data beside it when large)."""
    import torch

    names = graph_inputs(ckpt)
    module = _module(ckpt, names)
    args = example_inputs(ckpt, names)
    n_bytes = sum(p.numel() * p.element_size() for p in ckpt.model.parameters())
    external = n_bytes > settings.external_data_threshold
    scratch = path.parent / f".{path.stem}-export"
    scratch.mkdir(exist_ok=True)
    raw = scratch / path.name
    errors: list[str] = []
    try:
        for exporter in _exporters(settings):
            try:
                with torch.no_grad(), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    if exporter == "torchscript":
                        _torchscript(module, args, names, raw, settings.opset)
                    else:
                        _dynamo(module, args, names, raw, max(settings.opset, DYNAMO_MIN_OPSET))
                break
            except Exception as e:  # torch raises many exception types for graphs it cannot export
                if os_error_in(e) is not None:  # the disk, not the model: the other exporter fails the same way
                    raise write_failure(path.name, os_error_in(e)) from e
                errors.append(f"{exporter}: {e.__class__.__name__}: {str(e).splitlines()[0] if str(e) else ''}")
                log.info("ONNX export with %s failed: %s", exporter, errors[-1])
                for leftover in scratch.iterdir():
                    leftover.unlink()
        else:
            raise UnsupportedModelError(f"cannot export {ckpt.arch.family} to ONNX ({'; '.join(errors)})")
        proto = load_model(raw)
        reshapes = static_reshapes(proto)
        inputs = save_model(proto, path, external=external)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    opset = settings.opset if exporter == "torchscript" else max(settings.opset, DYNAMO_MIN_OPSET)
    return GraphInfo(inputs=inputs, outputs=[EMBEDDING_OUTPUT, TOKEN_OUTPUT], opset=opset, exporter=exporter,
                     external_data=external, static_reshapes=reshapes)


def _exporters(settings: ExportSettings) -> list[str]:
    if settings.exporter != "auto":
        return [settings.exporter]
    return ["torchscript", "dynamo"] if settings.opset <= TORCHSCRIPT_MAX_OPSET else ["dynamo"]


def _dynamic_axes(names: list[str]) -> dict:
    axes = {n: {0: "batch", 1: "sequence"} for n in names}
    axes[EMBEDDING_OUTPUT] = {0: "batch"}
    axes[TOKEN_OUTPUT] = {0: "batch", 1: "sequence"}
    return axes


def _torchscript(module, args, names, path: Path, opset: int) -> None:
    import torch

    torch.onnx.export(
        module, args, str(path), input_names=names, output_names=[EMBEDDING_OUTPUT, TOKEN_OUTPUT],
        dynamic_axes=_dynamic_axes(names), opset_version=opset, do_constant_folding=True, dynamo=False,
    )


def _dynamo(module, args, names, path: Path, opset: int) -> None:
    import torch

    batch, seq = torch.export.Dim("batch"), torch.export.Dim("sequence")
    torch.onnx.export(
        module, args, str(path), input_names=names, output_names=[EMBEDDING_OUTPUT, TOKEN_OUTPUT],
        dynamic_shapes=tuple({0: batch, 1: seq} for _ in names), opset_version=opset, dynamo=True,
        external_data=False, verbose=False,
    )


def load_model(path: Path, *, weights: bool = True):
    """An ONNX ModelProto (with its external data, if any)."""
    import onnx

    try:
        return onnx.load(str(path), load_external_data=weights)
    except Exception as e:  # onnx raises DecodeError/ValueError/OSError variants
        raise RuntimeFailure(f"cannot read the ONNX file {path}: {e}") from e


def save_model(proto, path: Path, *, external: bool) -> list[str]:
    """Save ``proto`` as one file, or with its weights in ``<name>.data`` beside it; returns its input names."""
    import onnx

    if external:
        onnx.save_model(proto, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=path.name + ".data", size_threshold=1024)
    else:
        onnx.save_model(proto, str(path))
    return [i.name for i in proto.graph.input]


def needs_external_data(proto, threshold: int) -> bool:
    """True when the initializers of ``proto`` exceed ``threshold`` bytes (protobuf's limit is 2 GB)."""
    import numpy as np

    total = 0
    for t in proto.graph.initializer:
        if t.raw_data:
            total += len(t.raw_data)
        else:
            total += int(np.prod(t.dims, dtype=np.int64)) * 4
    return total > threshold
