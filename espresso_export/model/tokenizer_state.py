"""A fast tokenizer's truncation and padding: kept as loaded, put back before a folder is written.

Every call with other settings changes a fast tokenizer's backend state (transformers sets truncation and padding
per call and leaves them), and ``save_pretrained`` writes whatever the last call left into ``tokenizer.json``:
a resumed training run (fewer calls) wrote other bytes than an uninterrupted one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from espresso_export.model.checkpoint import Checkpoint


def tokenizer_state(tokenizer) -> dict | None:
    """Truncation and padding of a fast tokenizer's backend (None for a slow tokenizer)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    return {"truncation": backend.truncation, "padding": backend.padding}


def settle_tokenizer(ckpt: Checkpoint) -> None:
    """Put the tokenizer's truncation and padding back to how they were loaded, truncating at the model's
    ``max_seq_length`` and padding to the longest text of a batch, so the ``tokenizer.json`` written does not
    depend on the calls made before (a resumed run makes other calls than an uninterrupted one: the bytes
    differed)."""
    backend = getattr(ckpt.tokenizer, "backend_tokenizer", None)
    if backend is None or ckpt.tokenizer_state is None:
        return
    truncation, padding, length = ckpt.tokenizer_state["truncation"], ckpt.tokenizer_state["padding"], ckpt.max_seq_length
    if truncation is None:
        backend.no_truncation()
    else:
        backend.enable_truncation(**{**truncation, "max_length": length or truncation["max_length"]})
    if padding is None:
        backend.no_padding()
    else:  # to the batch's longest text: a fixed length (all-MiniLM-L6-v2 ships 128) would pad every text of a
        # tokenizers-level consumer to it; what the folders held before (the last call's state) was this too
        backend.enable_padding(**{**padding, "length": None})
