"""Parity of every written ONNX file with the PyTorch model it came from.

Each file is run the way a user runs it - through :class:`~espresso_export.runtime.onnx_encoder.OnnxEncoder`,
so the tokenizer file, padding and batching are checked too - on a probe set
(short and max-length texts, non-ASCII, at batch 1 and in ragged batches of 7)
plus the sentences of the built-in STS probe, and compared with the PyTorch
model's vectors:

=========  ==============  ====================================
precision  min cosine      STS probe Spearman vs PyTorch
=========  ==============  ====================================
fp32       >= 0.9999       reported
int8       >= 0.99         within 1.0 point
fp16       >= 0.999        within 1.0 point
=========  ==============  ====================================

A NaN or infinite vector on either side fails the file: no comparison with NaN passes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from espresso_export.model.checkpoint import Checkpoint
from espresso_export.data import BUILTIN, read_sts
from espresso_export.model.embed import encode
from espresso_export.core.metrics import cosine_rows, sts_spearman
from espresso_export.core.vectors import l2_normalised
from espresso_export.runtime import OnnxEncoder
from espresso_export.core.types import Quantize

MIN_COSINE = {Quantize.NONE: 0.9999, Quantize.INT8: 0.99, Quantize.FP16: 0.999}
MAX_STS_DELTA = {Quantize.NONE: None, Quantize.INT8: 1.0, Quantize.FP16: 1.0}
RAGGED_BATCH = 7

PROBE_TEXTS = (
    "a",
    "Hi!",
    "The cat sits on the mat.",
    "A man is playing a guitar on the street while people walk by.",
    "Café, naïve façade; the über-déjà-vu résumé.",
    "Пример предложения на русском языке.",
    "日本語の文も正しく埋め込まれるべきです。",
    "مرحبا بالعالم",
    "Emoji and symbols 🙂👍 ∑ ≤ € — “quotes”",
    "12345 67.89 3.14159 2024-06-01",
    "   leading and trailing spaces   ",
    "UPPER CASE AND lower case MiXeD",
    "a b c d e f g h i j k l m n o p",
)


def long_text(words: int = 2000) -> str:
    """A text longer than any model's maximum length, so truncation is exercised."""
    base = "the quick brown fox jumps over the lazy dog while music plays in the city and"
    parts = base.split()
    return " ".join(parts[i % len(parts)] for i in range(words))


def probe_texts() -> list[str]:
    return [*PROBE_TEXTS, long_text(), long_text(300)]


@dataclass
class Reference:
    """The PyTorch model's unit vectors for the probe texts and the STS probe."""

    probe: list[str]
    probe_vectors: np.ndarray
    sts_name: str
    sts_first: list[str]
    sts_second: list[str]
    sts_scores: list[float]
    sts_vectors: np.ndarray  # first sentences, then second sentences
    sts_spearman: float


def reference(ckpt: Checkpoint) -> Reference:
    probe = probe_texts()
    pairs = read_sts(BUILTIN)
    texts = pairs.sentence1 + pairs.sentence2
    probe_vectors = l2_normalised(encode(ckpt, probe, batch_size=1))
    sts_vectors = l2_normalised(encode(ckpt, texts, batch_size=32))
    n = len(pairs)
    return Reference(
        probe=probe, probe_vectors=probe_vectors, sts_name=BUILTIN, sts_first=pairs.sentence1,
        sts_second=pairs.sentence2, sts_scores=pairs.scores, sts_vectors=sts_vectors,
        sts_spearman=sts_spearman(sts_vectors[:n], sts_vectors[n:], pairs.scores),
    )


def check_file(folder: Path, file: str, precision: Quantize, ref: Reference, *, min_cosine: float | None = None) -> dict:
    """Compare one ONNX file of ``folder`` with the reference; returns the result for export.json."""
    enc = OnnxEncoder(folder, file)
    runs = {  # the graph against the PyTorch model on the same texts: no prompt on either side
        "batch 1": enc.encode(ref.probe, batch_size=1, prompt=""),
        f"ragged batch {RAGGED_BATCH}": enc.encode(ref.probe, batch_size=RAGGED_BATCH, prompt=""),
    }
    sts_vectors = enc.encode(ref.sts_first + ref.sts_second, batch_size=32, prompt="")
    result = compare(runs, sts_vectors, ref, precision, min_cosine=min_cosine)
    if not _token_output_ok(enc, ref.probe[:RAGGED_BATCH]):
        result["failures"].append(f"output {enc.token_output} has the wrong shape")
        result["passed"] = False
    return result


def _finite_failures(runs: dict[str, np.ndarray], sts_vectors: np.ndarray, ref: Reference) -> list[str]:
    """A non-finite vector on either side: NaN compares false with every threshold, so it is named here."""
    if not (np.isfinite(ref.probe_vectors).all() and np.isfinite(ref.sts_vectors).all()):
        return ["the PyTorch model's own vectors are not finite (NaN or inf): its weights hold non-finite values"]
    vectors = np.concatenate([*runs.values(), sts_vectors])
    bad = int((~np.isfinite(vectors).all(axis=1)).sum())
    return [f"{bad} of {len(vectors)} vectors are not finite (NaN or inf)"] if bad else []


def compare(runs: dict[str, np.ndarray], sts_vectors: np.ndarray, ref: Reference, precision: Quantize, *,
            min_cosine: float | None = None) -> dict:
    """The parity result of a file's vectors (``runs``: name -> probe vectors; ``sts_vectors``: the STS probe's)
    against the reference. Every threshold is written so that a NaN fails it: a file passes only on finite
    vectors, a finite min cosine at or above the gate and a finite Spearman within the allowed delta."""
    with np.errstate(invalid="ignore", over="ignore"):  # a non-finite vector is reported below, not warned about
        cos = {name: cosine_rows(v, ref.probe_vectors) for name, v in runs.items()}
        sts_cos = cosine_rows(sts_vectors, ref.sts_vectors)
    diffs = [float(np.abs(v - ref.probe_vectors).max()) for v in runs.values()]
    texts = ref.sts_first + ref.sts_second
    n = len(ref.sts_first)
    spearman = sts_spearman(sts_vectors[:n], sts_vectors[n:], ref.sts_scores)
    all_cos = np.concatenate([*cos.values(), sts_cos])
    min_cos = float(all_cos.min())
    delta = spearman - ref.sts_spearman
    need_cos = MIN_COSINE[precision] if min_cosine is None else min_cosine
    need_sts = MAX_STS_DELTA[precision]
    not_finite = _finite_failures(runs, sts_vectors, ref)
    failures = list(not_finite)
    if not not_finite and not min_cos >= need_cos:
        worst_text = (ref.probe * len(cos) + texts)[int(np.argmin(all_cos))]
        failures.append(f"min cosine {min_cos:.5f} < {need_cos} (worst text: {worst_text[:40]!r})")
    if not not_finite and need_sts is not None and not abs(delta) <= need_sts:
        failures.append(f"STS probe Spearman {spearman:.2f} vs PyTorch {ref.sts_spearman:.2f} "
                        f"(delta {delta:+.2f}, allowed {need_sts})")
    return {
        "passed": not failures,
        "failures": failures,
        "min_cosine": round(min_cos, 6),
        "mean_cosine": round(float(all_cos.mean()), 6),
        "max_abs_diff": float(f"{max(diffs + [float(np.abs(sts_vectors - ref.sts_vectors).max())]):.3g}"),
        "min_cosine_by_run": {name: round(float(c.min()), 6) for name, c in cos.items()}
        | {"sts probe, batch 32": round(float(sts_cos.min()), 6)},
        "probe_texts": len(ref.probe),
        "sts_probe": {
            "name": ref.sts_name, "pairs": n, "spearman_pytorch": round(ref.sts_spearman, 3),
            "spearman_onnx": round(spearman, 3), "delta": round(delta, 3),
        },
        "thresholds": {"min_cosine": need_cos, "max_sts_delta": need_sts},
    }


def _token_output_ok(enc: OnnxEncoder, texts: list[str]) -> bool:
    encodings = enc.tokenize(texts)
    tokens = enc.run(encodings, outputs=[enc.token_output])[0]
    width = max(len(e.ids) for e in encodings)
    return tokens.ndim == 3 and tokens.shape[:2] == (len(texts), width)
