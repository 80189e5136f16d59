"""What an export declares about its output vectors: the nested widths (``export --dims``) and the int8/uint8
calibration ranges for each of them.

The ranges are fitted once (:meth:`~espresso_export.runtime.precision.CalibrationRanges.fit`) on the vectors users
get: the calibration sentences encoded by the folder's default file, truncated and renormalised for each nested
width. Stored in ``export.json`` (``vector_calibration``), they put documents and queries in the same buckets
whenever and wherever they are encoded (``OnnxEncoder.encode(..., precision="int8")``, or sentence-transformers'
``quantize_embeddings(..., ranges=...)``). The widths go where loaders and servers read them: ``nested_widths`` in
``export.json`` and ``matryoshka_dimensions`` in ``config.json`` (vLLM's key).
"""

from __future__ import annotations

import json
from pathlib import Path

from espresso_export.core.errors import ValidationError
from espresso_export.core.files import write_json
from espresso_export.model.checkpoint import Checkpoint

VECTOR_CALIBRATION_SAMPLES = 1000  # sentences of the shipped calibration corpus the ranges are fitted on
CONFIG_KEY = "matryoshka_dimensions"  # config.json: the widths vLLM accepts as a `dimensions` request
VERIFY_WIDTHS_HINT = ("the model's head is not a PCA fitted by `shrink`, so its leading dimensions were not fitted to "
                      "stand alone: check each width with `espresso-export verify EXPORT --against SOURCE --dims {dims}`")


def calibration_sentences(limit: int, seed: int = 0) -> list[str]:
    """A seeded sample of at most ``limit`` sentences of the shipped calibration corpus (the int8 graph's
    activation ranges and the vectors' int8 ranges are both measured on it), sampled as ``shrink`` samples its own."""
    from espresso_export.shrinking.shrink import load_calibration

    return load_calibration(None, limit, seed)[0]


def nested_widths(full: int, dims: list[int]) -> list[int]:
    """``[full, w1, w2, ...]`` (widest first): the full width and the ``--dims`` below it. A width above the full
    one, or below 1, is refused (exit 2)."""
    bad = [d for d in dims if not 1 <= d <= full]
    if bad:
        raise ValidationError(f"--dims {','.join(map(str, bad))}: a nested width must be between 1 and the "
                              f"model's {full}-d output")
    return [full] + sorted({d for d in dims if d < full}, reverse=True)


def is_pca_head(provenance: dict | None) -> bool:
    """The head is the PCA ``shrink`` fitted, unchanged since (``export`` and ``prune-vocab`` leave it as it is; a
    later ``distill`` or ``train`` moves it): its first k components are the PCA at k, so a truncated vector is
    exactly the vector of the k-d model."""
    step = provenance
    while isinstance(step, dict) and step.get("step") in ("export", "prune-vocab"):
        step = step.get("parent")
    return isinstance(step, dict) and step.get("step") == "shrink" and step.get("head") == "pca"


def width_hints(ckpt: Checkpoint, widths: list[int]) -> list[str]:
    """What the summary says about declared widths: nothing for a PCA head (exact), a verify hint otherwise."""
    if len(widths) < 2 or is_pca_head(ckpt.provenance):
        return []
    dims = ",".join(map(str, widths[1:]))
    return [f"note: --dims {dims}: " + VERIFY_WIDTHS_HINT.format(dims=dims)]


def fit_ranges(vectors, widths: list[int]) -> dict:
    """``{"<width>": {"ranges": [[mins], [maxs]], "samples": n}}``: the full width's vectors as they are, each
    nested width's truncated and renormalised (what ``OnnxEncoder.encode(dim=...)`` returns)."""
    from espresso_export.runtime.precision import CalibrationRanges, truncate

    full = vectors.shape[1]
    return {str(w): CalibrationRanges.fit(vectors if w == full else truncate(vectors, w)).to_dict() for w in widths}


def vector_calibration(folder: Path, file: str, widths: list[int],
                       limit: int = VECTOR_CALIBRATION_SAMPLES) -> dict:
    """The ranges for ``widths``, fitted on the calibration sentences as ``file`` of ``folder`` encodes them
    (one encoding pass, with the model's default prompt, as ``OnnxEncoder.encode`` applies it)."""
    from espresso_export.runtime import OnnxEncoder

    vectors = OnnxEncoder(folder, file).encode(calibration_sentences(limit))
    return fit_ranges(vectors, widths)


def declare_in_config(folder: Path, widths: list[int]) -> None:
    """``config.json``'s ``matryoshka_dimensions``: the declared widths when there are nested ones; without them, a
    list the source's config carried over is dropped when it names widths this model does not have."""
    path = folder / "config.json"
    if not path.is_file():
        return
    config = json.loads(path.read_text(encoding="utf-8"))
    if len(widths) > 1:
        config[CONFIG_KEY] = widths
    elif CONFIG_KEY in config and not _fits(config[CONFIG_KEY], widths[0]):
        del config[CONFIG_KEY]
    else:
        return
    write_json(path, config)


def _fits(listed, full: int) -> bool:
    return isinstance(listed, list) and all(isinstance(d, int) and 1 <= d <= full for d in listed)
