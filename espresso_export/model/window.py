"""How much of a corpus a model reads: the share of its texts longer than the model's window.

A transformer encoder reads at most ``max_seq_length`` tokens of a text and drops the rest without a word
(sentence-transformers does the same), so a corpus of long passages is searched by its first few hundred tokens.
:func:`window_cut` counts the texts past the window (special tokens included, as the model sees them), on a
seeded sample of at most :data:`LIMIT` texts, so ``verify --corpus`` and ``auto`` can say so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

LIMIT = 2_000  # texts tokenised at most (a seeded sample beyond): a share's binomial interval stays narrow
WORTH_SAYING = 0.01  # below this share the cut texts change no figure a report gives


@dataclass(frozen=True)
class WindowCut:
    """Of ``texts`` tokenised, ``longer`` have more than ``window`` tokens; the longest has ``longest``."""

    window: int
    texts: int
    longer: int
    longest: int

    @property
    def share(self) -> float:
        return self.longer / self.texts if self.texts else 0.0

    @property
    def worth_saying(self) -> bool:
        return self.share >= WORTH_SAYING

    def line(self, what: str) -> str:
        sampled = "" if self.texts < LIMIT else f" (a sample of {self.texts:,})"
        return (f"{self.share:.0%} of {what}{sampled} are longer than the source's window of {self.window} tokens "
                f"(the longest {self.longest:,}): it reads only their first {self.window} (as sentence-transformers "
                "does); split them into shorter passages to search all their text")

    def to_dict(self) -> dict:
        return {"window_tokens": self.window, "texts_measured": self.texts, "longer": self.longer,
                "share": round(self.share, 4), "longest_tokens": self.longest}

    @classmethod
    def of(cls, record: dict | None) -> WindowCut | None:
        """From :meth:`to_dict`'s record; None from an empty one (a model without a window)."""
        if not record:
            return None
        return cls(record["window_tokens"], record["texts_measured"], record["longer"], record["longest_tokens"])


def token_lengths(tokenizer, texts: Sequence[str], *, lower: bool = False, batch: int = 1024) -> np.ndarray:
    """Each text's length in tokens as the model sees it (special tokens included, not truncated), for a
    transformers tokenizer or a ``tokenizers.Tokenizer``."""
    from tokenizers import Tokenizer

    fast = tokenizer if hasattr(tokenizer, "to_str") else getattr(tokenizer, "backend_tokenizer", None)
    texts = [t.lower() for t in texts] if lower else list(texts)
    if fast is None:  # a slow (Python) transformers tokenizer
        ids = tokenizer(texts, add_special_tokens=True, truncation=False, verbose=False)["input_ids"]
        return np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
    backend = Tokenizer.from_str(fast.to_str())  # a copy: the model's own keeps its truncation and padding
    backend.no_padding()
    backend.no_truncation()
    out = []
    for start in range(0, len(texts), batch):
        out += [len(e.ids) for e in backend.encode_batch(texts[start : start + batch], add_special_tokens=True)]
    return np.asarray(out, dtype=np.int64)


def seeded_sample(texts: Sequence[str], limit: int, seed: int, stream: int) -> list[str]:
    """At most ``limit`` of ``texts``, in their order: all of them, or a sample drawn from ``[seed, stream]`` (each
    caller its own stream, so one caller's draw does not move with another's)."""
    if len(texts) <= limit:
        return list(texts)
    picks = np.sort(np.random.default_rng([seed, stream]).choice(len(texts), size=limit, replace=False))
    return [texts[i] for i in picks]


def window_cut(tokenizer, window: int | None, texts: Sequence[str], *, lower: bool = False, seed: int = 0
               ) -> WindowCut | None:
    """How many of ``texts`` (a seeded sample of at most :data:`LIMIT`) are longer than ``window`` tokens; None
    for a model without a window (a static model reads every token) or no texts."""
    if not window or not texts:
        return None
    lengths = token_lengths(tokenizer, seeded_sample(texts, LIMIT, seed, 23), lower=lower)
    return WindowCut(int(window), len(lengths), int((lengths > window).sum()), int(lengths.max()))
