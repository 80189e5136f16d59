"""User choices as ``str`` Enums: CLI strings and YAML values validate for free."""

from __future__ import annotations

from enum import Enum


class Pooling(str, Enum):
    CLS = "cls"
    MEAN = "mean"
    LAST_TOKEN = "lasttoken"
    MAX = "max"


class Head(str, Enum):
    PCA = "pca"  # fitted PCA, stored as a sentence-transformers Dense module
    TRUNCATE = "truncate"  # first-k dims (ESE-trained models)
    NONE = "none"  # keep the full width


class Select(str, Enum):
    AUTO = "auto"  # first for ESE-trained models, spread otherwise
    FIRST = "first"  # the first L layers (ESE semantics)
    SPREAD = "spread"  # L layers spread over the depth, always keeping the last


class ExportFormat(str, Enum):
    ONNX = "onnx"  # self-contained ONNX graph (pooling, head and normalisation inside)
    SAFETENSORS = "safetensors"  # the PyTorch sentence-transformers folder
    OPENVINO = "openvino"  # OpenVINO IR converted from the validated ONNX graph (int8: weight-compressed)


class Quantize(str, Enum):
    NONE = "none"
    INT8 = "int8"  # CPU: scheme picked per CPU (exporting/int8_schemes.py), per-channel weights, int8 tables
    FP16 = "fp16"  # GPU users


class Optimize(str, Enum):
    NONE = "none"
    O1 = "O1"  # basic graph optimisations (constant folding, redundant nodes)
    O2 = "O2"  # + transformer fusions (LayerNorm, SkipLayerNorm, Gelu, attention where the pattern matches)
    O3 = "O3"  # + GELU approximation


class Attention(str, Enum):
    """Decoder attention (bidirectional.py)."""

    CAUSAL = "causal"  # leave the model as it is
    ALL = "all"  # every layer bidirectional (ESE's LLM recipe)
    LAST = "last"  # only the last layer bidirectional (BeLLM)


class WithinNoise(str, Enum):
    """What a gate check does when its 95% interval holds the threshold (the set is too small to decide)."""

    VALUE = "value"  # decide on the measured value
    PASS = "pass"  # pass: fail only when the whole interval is below the threshold
    FAIL = "fail"  # fail: pass only when the whole interval is at or above it


class IndexKind(str, Enum):
    FLAT = "flat"  # exact inner-product search
    IVF = "ivf"  # inverted lists: k-means cells, search the nprobe nearest cells


class Loss(str, Enum):
    MSE = "mse"  # HPD: MSE between h_s and h_t
    COSINE_MSE = "cosine+mse"
    PAIR = "pair"  # on related sentence pairs: the student's cosine of each pair matches the teacher's (PCA) cosine
    PAIR_MSE = "pair+mse"
    # in-batch ranking: each text's similarity distribution over the batch's other texts matches the teacher's
    RANK_MSE = "rank+mse"

    @property
    def on_pairs(self) -> bool:
        return self in (Loss.PAIR, Loss.PAIR_MSE)

    @property
    def in_batch(self) -> bool:
        """The loss couples the texts of a batch (several processes gather the batch's vectors)."""
        return self is Loss.RANK_MSE


class ProjectionInit(str, Enum):
    PCA_ALIGNED = "pca-aligned"  # student's PCA, rotated/scaled onto the teacher's axes (Procrustes)
    PCA = "pca"  # student's PCA as is


class CorpusSample(str, Enum):
    """How ``--max-sentences`` picks its subset of the corpus."""

    RANDOM = "random"  # a seeded random subset of all sources together
    IN_ORDER = "in-order"  # sources in the order given, each whole while it fits; the first that does not, sampled


class SweepMetric(str, Enum):
    STS = "sts"  # Spearman x100 on the STS sets
    RETRIEVAL = "retrieval"  # nDCG@10 x100 on the retrieval sets
    AGREEMENT = "agreement"  # agreement@10 x100 with the source's ranking on a corpus


class AutoObjective(str, Enum):
    """What ``auto`` makes as small as it can, once the quality target is met."""

    LATENCY = "latency"  # time per batch of the exported model (fewer layers)
    SIZE = "size"  # bytes of the exported weights (fewer layers, int8)
    BYTES_PER_VECTOR = "bytes-per-vector"  # what the index stores per document (narrower vectors, int8, binary)
