"""The card's "Vector sizes" section: the widths and precisions the export declares, the bytes one vector takes
at each, and how to get the vectors at a width and precision (``OnnxEncoder``, or sentence-transformers'
``truncate_dim`` and ``quantize_embeddings`` with the ranges the export stored)."""

from __future__ import annotations

from espresso_export.core.formatting import markdown_table
from espresso_export.publishing.facts import ModelFacts
from espresso_export.publishing.usage import EXAMPLE_TEXTS
from espresso_export.runtime import EXPORT_FILE
from espresso_export.runtime.precision import bytes_per_vector

CALIBRATION_KEY = "vector_calibration"  # export.json: int8/uint8 ranges per width (exporting/vectors.py)


def declared_widths(facts: ModelFacts) -> list[int]:
    """The widths the card lists: the declared nested widths, else the full width alone."""
    return facts.matryoshka_dims or ([facts.output_dim] if facts.output_dim else [])


def stored_ranges(facts: ModelFacts) -> dict:
    """``export.json``'s ``vector_calibration`` (width -> ranges), empty for exports that predate it."""
    stored = facts.onnx.manifest.get(CALIBRATION_KEY) if facts.onnx else None
    return stored if isinstance(stored, dict) else {}


def _rows(widths: list[int], ranges: dict) -> list[list[str]]:
    rows = []
    for w in widths:
        scalar = f"{bytes_per_vector('int8', w)} B" if str(w) in ranges else "n/a (no stored ranges)"
        rows.append([f"{w}", f"{bytes_per_vector('float32', w)} B", scalar, f"{bytes_per_vector('binary', w)} B"])
    return rows


def _snippet(facts: ModelFacts, repo_id: str, width: int) -> list[str]:
    manifest = facts.onnx.repo_path(EXPORT_FILE)
    folder = "path" if facts.onnx.runtimes_layout else 'f"{path}/onnx"'
    return ["```python", "import json", "", "import numpy as np",
            "from huggingface_hub import snapshot_download",
            "from sentence_transformers import SentenceTransformer, quantize_embeddings",
            "from espresso_export.runtime import OnnxEncoder", "",
            f'path = snapshot_download("{repo_id}")',
            f"encoder = OnnxEncoder({folder})",
            f'codes = encoder.encode({EXAMPLE_TEXTS}, precision="int8", dim={width})  # int8, (2, {width})',
            f'bits = encoder.encode({EXAMPLE_TEXTS}, precision="binary")  # packed signs, 1 bit a dimension', "",
            "# the same int8 codes with sentence-transformers and the ranges the export stored",
            f'ranges = json.load(open(f"{{path}}/{manifest}"))["{CALIBRATION_KEY}"]["{width}"]["ranges"]',
            f'model = SentenceTransformer("{repo_id}", truncate_dim={width})',
            f"vectors = model.encode({EXAMPLE_TEXTS}, normalize_embeddings=True)",
            'st_codes = quantize_embeddings(vectors, precision="int8", ranges=np.array(ranges))', "```"]


def vectors_section(facts: ModelFacts, repo_id: str) -> list[str]:
    """Markdown: bytes per vector at each declared width and precision, and the code that makes them (only for an
    export that stored its int8 ranges)."""
    ranges = stored_ranges(facts)
    widths = declared_widths(facts)
    if not ranges or not widths:
        return []
    samples = next((r.get("samples") for r in ranges.values() if isinstance(r, dict)), None)
    lines = ["## Vector sizes", "",
             ("Bytes one vector takes at each width and precision (sentence-transformers' `quantize_embeddings` "
              "names: int8/uint8 one byte a dimension, binary/ubinary one bit), for the index a vector database or "
              "faiss holds:"), ""]
    lines += markdown_table(["width", "float32", "int8 / uint8", "binary / ubinary"], _rows(widths, ranges))
    lines += [(f"The int8/uint8 buckets are the ranges stored in `{facts.onnx.repo_path(EXPORT_FILE)}` "
               f"(`{CALIBRATION_KEY}`, per width, fitted once on {samples or 'the'} calibration sentences as this "
               "model encodes them), so documents and queries encoded at different times share buckets. "
               "A smaller width keeps the first dimensions and renormalises them."), ""]
    smallest = widths[-1] if str(widths[-1]) in ranges else widths[0]
    return lines + _snippet(facts, repo_id, smallest) + [""]
