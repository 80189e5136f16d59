"""``shrink``: keep L layers and a k-d embedding, with a PCA or first-k head.

checkpoint -> slice -> head -> folder. The output is a plain sentence-transformers folder
(:mod:`espresso_export.model.save`) with the cut's provenance in ``espresso.json``.
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any
from pathlib import Path

from espresso_export import __version__
from espresso_export.model.bidirectional import describe as describe_attention
from espresso_export.model.bidirectional import switch as switch_attention
from espresso_export.model.checkpoint import Checkpoint, PostModule, load
from espresso_export.data import BUILTIN, read_sentences, sentences_sha256
from espresso_export.model.embed import encode
from espresso_export.model.post import renormalized, with_head
from espresso_export.core.errors import ValidationError
from espresso_export.model.vocabulary import PROVENANCE_KEY
from espresso_export.shrinking.heads import fit_pca, truncation
from espresso_export.core.files import atomic_output, check_output
from espresso_export.model.save import save_checkpoint
from espresso_export.shrinking.pruning import PruneRequest, coverage_hint
from espresso_export.shrinking.slicing import cut, select_layers
from espresso_export.core.settings import resolve
from espresso_export.core.types import Attention, Head, Pooling, Select
from espresso_export.shrinking.shrink_settings import ShrinkSettings

log = logging.getLogger(__name__)

# hints say what to do and where it is explained, never a figure (figures belong to benchmarks/ and go stale)
SPREAD_HINT = (
    "hint: this model is not ESE-trained, and keeping its first layers usually scores lower than --select spread "
    "(docs/methods/heads-and-layers.md)"
)
ESE_CUT_HINT = (
    "hint: this model is ESE-trained, so its first {layers} layers{dims} were kept, as ESE trains them to stand "
    "alone; after a short ESE training, spread layers with a PCA head can score higher (docs/methods/heads-and-layers.md): "
    "measure both on your data (`espresso-export sweep` once with --select first --head truncate, once with "
    "--select spread --head pca) before you pick"
)


@dataclass
class ShrinkResult:
    output: Path | None
    source: str
    layers: list[int]
    source_depth: int
    dim: int
    head: Head
    pooling: Pooling
    params_before: int
    params_after: int
    seconds: float
    explained_variance: float | None = None
    calibration_size: int = 0
    hints: list[str] = field(default_factory=list)
    vocab: dict | None = None  # the vocabulary pruning (prune_corpus), as recorded in the provenance
    checkpoint: Any = field(default=None, repr=False, compare=False)  # the cut model, in memory

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "checkpoint"}
        d["output"] = str(self.output) if self.output else None
        d["head"] = self.head.value
        d["pooling"] = self.pooling.value
        return d


def resolve_head(head: Head | str | None, dim: int | None, ckpt: Checkpoint) -> Head:
    """``None`` means auto: no head without ``--dim``, first-k for ESE-trained models, else PCA."""
    if head is not None and Head(head) is not Head.NONE and dim is None:
        raise ValidationError(f"--head {Head(head).value} needs --dim")
    if head is None:
        if dim is None:
            return Head.NONE
        return Head.TRUNCATE if ckpt.ese_trained else Head.PCA
    head = Head(head)
    if head is Head.NONE and dim is not None and dim != ckpt.output_dim:
        raise ValidationError("--dim needs a head: use --head pca or --head truncate")
    return head


def load_calibration(calibration: str | os.PathLike | None, samples: int, seed: int) -> tuple[list[str], str]:
    """Calibration sentences (sub-sampled with ``seed`` when there are more than ``samples``) and a label."""
    spec = str(calibration) if calibration is not None else BUILTIN
    sentences = read_sentences(spec)
    if len(sentences) > samples:
        sentences = random.Random(seed).sample(sentences, samples)
    return sentences, spec


def build_head(
    ckpt: Checkpoint, head: Head, dim: int | None, sentences: Sequence[str], *, batch_size: int = 64,
    progress: bool = False,
) -> tuple[list[PostModule], float | None]:
    """The post-pooling modules of the shrunk model and the PCA's explained variance (if any).

    PCA is fitted on the unit-normalised output of the (cut) model, the
    vectors cosine similarity sees; the head is then Normalize -> Dense -> Normalize.
    """
    if head is Head.NONE:
        return list(ckpt.post), None
    width = ckpt.output_dim
    if dim is None or dim < 1 or dim > width:
        raise ValidationError(f"--dim must be between 1 and {width} (the embedding width), got {dim}")
    base = renormalized(ckpt.post)
    if head is Head.TRUNCATE:
        return with_head(base[:-1], truncation(width, dim)), None
    if len(sentences) <= dim:
        raise ValidationError(_too_few(len(sentences), dim))
    saved = ckpt.post
    ckpt.post = base
    try:
        x = encode(ckpt, sentences, batch_size=batch_size, progress="calibrating" if progress else None)
    finally:
        ckpt.post = saved
    pca = fit_pca(x, dim)
    return with_head(base, pca.as_dense()), pca.explained_variance


def shrink(
    model: str | os.PathLike | Checkpoint,
    output: str | os.PathLike | None,
    settings: ShrinkSettings | None = None,
    *,
    overwrite: bool = False,
    progress: bool | None = None,
    **kwargs,
) -> ShrinkResult:
    """Cut ``model`` to ``settings.layers`` and ``settings.dim`` and write it to ``output``.

    ``settings`` is a :class:`~espresso_export.shrinking.shrink_settings.ShrinkSettings`; its fields are also accepted as
    keyword arguments (``shrink("minilm", "out", layers=3, dim=128)``). ``layers`` is a count (kept per ``select``)
    or a list of 0-based layer indices. ``attention`` (``all``/``last``) makes a decoder's layers bidirectional
    before the cut, with mean pooling. With ``output=None`` nothing is written and the cut checkpoint is available
    as ``result.checkpoint`` (used by ``sweep``). ``progress``: the PCA's calibration bar on stderr, as the
    command shows it; by default (``None``) only when stderr is a terminal, ``False`` never.
    """
    s = resolve(ShrinkSettings, settings, kwargs, call="shrink")
    if progress is None:
        from espresso_export.core.console import err_console

        progress = err_console().is_terminal
    return _shrink(model, output, s, overwrite=overwrite, progress=progress)


def _shrink(model, output, s: ShrinkSettings, *, overwrite: bool, progress: bool) -> ShrinkResult:
    """The cut itself, with every setting resolved (see :func:`shrink`)."""
    start = time.perf_counter()
    if output is not None:
        check_output(output, overwrite=overwrite, inputs=[model, s.calibration, s.prune_corpus,
                                                          s.prune_keep_file])
    prune = None
    if s.prune_corpus is not None:
        prune = PruneRequest.of(s)
    ckpt = model if isinstance(model, Checkpoint) else load(model, pooling=s.pooling,
                                                             trust_remote_code=s.trust_remote_code)
    if prune is not None:
        prune.check(ckpt)  # an unsupported tokenizer or a bad keep file fails before the cut and the head
    if s.attention is not None:  # decoders: all / last layer(s) bidirectional, before the cut (bidirectional.py)
        switch_attention(ckpt, Attention(s.attention).value)
    if s.pooling is not None:
        ckpt.pooling = Pooling(s.pooling)
    n, dim = ckpt.depth, s.dim
    keep, chosen_head, hints = _choose(ckpt, s.layers, s.select, s.head, dim)
    sentences, cal_label = [], None
    if chosen_head is Head.PCA:
        sentences, cal_label = _pca_calibration(s.calibration, s.calibration_samples, s.seed, dim, hints)
    weights_sha, params_before = ckpt.weights_sha256(), ckpt.n_params
    cut(ckpt.model, ckpt.arch, keep)
    post, explained = build_head(ckpt, chosen_head, dim, sentences, batch_size=s.batch_size, progress=progress)
    ckpt.post = post
    record = prune.apply(ckpt)[1] if prune is not None else None
    if record is not None:
        hints += coverage_hint(record["corpus_coverage"])
    result = ShrinkResult(
        output=None, source=ckpt.source, layers=keep, source_depth=n, dim=ckpt.output_dim, head=chosen_head,
        pooling=ckpt.pooling, params_before=params_before, params_after=ckpt.n_params, seconds=0.0,
        explained_variance=explained, calibration_size=len(sentences), hints=hints,
        vocab={k: v for k, v in record.items() if k != "id_map"} if record is not None else None,
    )
    ckpt.provenance = _provenance(ckpt, result, weights_sha, s.select, sentences, cal_label, s.seed)
    if record is not None:
        ckpt.provenance[PROVENANCE_KEY] = record
    if output is not None:
        with atomic_output(output, overwrite=overwrite, inputs=[ckpt.path]) as tmp:
            save_checkpoint(ckpt, tmp, post=post, provenance=ckpt.provenance)
        result.output = Path(output).expanduser().resolve()
    result.seconds = time.perf_counter() - start
    result.checkpoint = ckpt
    return result


def _choose(ckpt: Checkpoint, layers, select, head, dim: int | None) -> tuple[list[int], Head, list[str]]:
    """The layers kept, the head, and the hints the choice earns (a first-layers cut of a plain model, an ESE cut,
    a first-k width ESE did not train)."""
    n = ckpt.depth
    keep = select_layers(n, layers, select, ese_trained=ckpt.ese_trained)
    chosen_head = resolve_head(head, dim, ckpt)
    if dim is not None and (dim < 1 or dim > ckpt.output_dim):
        raise ValidationError(f"--dim must be between 1 and {ckpt.output_dim} (the embedding width), got {dim}")
    hints: list[str] = []
    if not ckpt.ese_trained and keep == list(range(len(keep))) and len(keep) < n:
        hints.append(SPREAD_HINT)
    auto_select = isinstance(layers, int) and Select(select) is Select.AUTO
    if ckpt.ese_trained and auto_select and len(keep) < n:
        first_k = f" and first {dim} dims" if head is None and chosen_head is Head.TRUNCATE else ""
        hints.append(ESE_CUT_HINT.format(layers=len(keep), dims=first_k))
    trained_k = ((ckpt.provenance or {}).get("ese") or {}).get("compression_dim")
    if chosen_head is Head.TRUNCATE and isinstance(trained_k, int) and dim is not None and trained_k < dim < ckpt.output_dim:
        hints.append(f"warning: ESE trained the first {trained_k} dims (and the full {ckpt.output_dim}); the first {dim} "
                     f"were not trained to stand alone: --dim {trained_k}, or --head pca")
    return keep, chosen_head, hints


def _pca_calibration(calibration, samples: int, seed: int, dim: int, hints: list[str]) -> tuple[list[str], str]:
    """The PCA's calibration sentences and their label; refuses ``dim`` or fewer, adds a hint under 10 x dim."""
    sentences, cal_label = load_calibration(calibration, samples, seed)
    if len(sentences) <= dim:
        raise ValidationError(_too_few(len(sentences), dim))
    if len(sentences) < 10 * dim:
        hints.append(
            f"warning: {len(sentences)} calibration sentences for a {dim}-d PCA; 10 x dim = {10 * dim} or more is advised"
        )
    return sentences, cal_label


def _too_few(n: int, dim: int) -> str:
    """Centred, n sentences span at most n - 1 directions: with n <= dim the head's last ones have no variance (they
    would project new text on directions the calibration never fitted)."""
    return (f"calibration has {n} sentences, too few for --dim {dim}: a PCA to {dim} dims needs at least {dim + 1} "
            "(more with --calibration-samples, or a larger --calibration file)")


def _provenance(ckpt: Checkpoint, result: ShrinkResult, weights_sha: str, select, sentences, cal_label, seed) -> dict:
    previous = ckpt.provenance or {}
    prov = {
        "espresso_version": __version__,
        "step": "shrink",
        "source": {"id": ckpt.source, "weights_sha256": weights_sha, "depth": result.source_depth,
                   "hidden_size": ckpt.hidden_size},
        "layers": result.layers,
        "select": Select(select).value,
        "dim": result.dim,
        "head": result.head.value,
        "pooling": result.pooling.value,
        "seed": seed,
    }
    if result.head is Head.PCA:
        prov["calibration"] = {"source": cal_label, "sha256": sentences_sha256(list(sentences)), "size": len(sentences)}
        prov["pca_explained_variance"] = round(float(result.explained_variance or 0.0), 6)
    if result.head is Head.TRUNCATE:
        prov["truncate_dim"] = result.dim
    if previous.get("ese"):
        prov["ese"] = previous["ese"]
    attention = describe_attention(ckpt.model)
    if attention:
        prov["attention"] = attention
    if previous:
        prov["parent"] = previous
    return prov
