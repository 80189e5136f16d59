"""``distill --student static``: the source distilled to a static model with model2vec, healed on the user's texts.

1. The teacher's vectors of the texts, from the teacher cache the cuts use (:func:`.targets.teacher_targets`:
   computed once, shared with every ``distill`` and heal on the same teacher and texts).
2. model2vec's distillation (one forward pass per token) at the teacher's width, float32, with the corpus's
   frequent words added as tokens (``static_vocabulary``); model2vec's SIF weights folded into the rows as it does.
3. The token table trained on the texts (:class:`.static_task.StaticHealTask`) with the training engine
   (progress, ``--resume``, Ctrl-C), then reduced to ``dim`` by a PCA of the trained sentence vectors.
4. Written atomically in model2vec's format (``StaticModel.save_pretrained``, which sentence-transformers loads
   as ``StaticEmbedding``) with ``espresso.json``.

Without texts (no ``corpus``, no ``sentences``) it is model2vec's plain distillation at ``dim``.
:func:`build_static` is the API; :func:`~espresso_export.distilling.run.distill` calls it for ``student="static"``.
"""

from __future__ import annotations

import copy
import functools
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from espresso_export import __version__
from espresso_export.core.errors import ValidationError
from espresso_export.core.extras import require
from espresso_export.core.files import atomic_output, check_output, write_json
from espresso_export.core.settings import as_kwargs, resolve as resolve_settings
from espresso_export.distilling.distill_settings import DistillSettings
from espresso_export.distilling.static_task import StaticHealTask, corpus_words, reduce_table
from espresso_export.model.checkpoint import PROVENANCE_FILE, Checkpoint
from espresso_export.model.static import STATIC_STUDENT, char_limit

STATIC_LR = 0.05  # Adam's step per element; rows are in the teacher's units (token outputs, about 0.1-1 each)
STATIC_BATCH = 256  # texts per step when --batch-size is left at distill's default
STATIC_EPOCHS = 5  # passes when --epochs is left at the engine's default of 1 ...
STATIC_MIN_STEPS = 90  # ... and more until this many steps: on business-reports (604 texts) 15 steps left the held-out
# cosine at 0.73, 60 and 150 reached 0.82; dbpedia-5k's 5 epochs are 95 steps
MIN_HEAL_TEXTS = 16
# distill's options that mean nothing for a static student: each refused with this reason
_REFUSED = {"pairs": "a pair loss", "student_layers": "a cut", "layer_targets": "layer targets",
            "loss": "another loss", "eval_retrieval": "checkpoint selection", "eval_sts": "checkpoint selection",
            "prune_corpus": "vocabulary pruning (prune-vocab works on the folder)", "augment": "augmentation",
            "max_seq_len": "a training length (a static model reads up to model2vec's max_length)"}


@dataclass
class StaticResult:
    """What :func:`build_static` did; ``model`` is the ``model2vec.StaticModel`` (in memory with ``output=None``)."""

    output: Path | None
    teacher: str
    dim: int
    vocabulary: dict  # tokens, added corpus words
    corpus: dict  # the texts' counts (empty: a plain distillation)
    healed: bool
    teacher_seconds: float
    targets_cached: bool
    distill_seconds: float
    train: dict | None
    heldout: dict  # mean cosine to the teacher on held-out texts, before and after
    pca_explained_variance: float | None
    params: int
    seconds: float
    run_dir: str | None = None
    student: str = STATIC_STUDENT
    hints: list[str] = field(default_factory=list)
    model: Any = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict:
        d = {f.name: copy.deepcopy(getattr(self, f.name)) for f in fields(self) if f.name != "model"}
        d["output"] = str(self.output) if self.output else None
        return d


@dataclass
class _Texts:
    sentences: list[str]
    counts: dict
    held: np.ndarray
    items: np.ndarray
    picked: np.ndarray | None = None  # texts given in memory: the kept ones' positions (empty and repeated dropped)


def check_static_settings(s: DistillSettings) -> None:
    """Refuse the distill options a static student has no use for (one line naming them)."""
    defaults = DistillSettings(dim=s.dim)
    used = [name for name in _REFUSED if getattr(s, name) != getattr(defaults, name)]
    if used:
        flags = ", ".join(f"--{n.replace('_', '-')} ({_REFUSED[n]})" for n in used)
        raise ValidationError(f"--student static takes no {flags}")
    if s.dim is None:
        raise ValidationError("--student static needs --dim")


def _texts(teacher, s: DistillSettings, sentences: Sequence[str] | None) -> _Texts | None:
    """The healing texts (``sentences``, else read from ``corpus`` as distill reads it) and the held-out split."""
    from espresso_export.distilling.inputs import _hold_out, load_corpus
    from espresso_export.distilling.plan import DistillPlan

    if sentences is not None:
        first = {t: i for i, t in reversed(list(enumerate(sentences))) if t and t.strip()}  # text -> first index
        picked = np.array(sorted(first.values()), dtype=np.int64)
        kept = [sentences[i] for i in picked]
        split = _hold_out(kept, {"read": len(sentences), "given": True}, None, s.heldout,
                          min(s.batch_size, max(1, len(kept) // 2)), s.seed)
        return _checked(_Texts(split.sentences, split.counts, split.held, split.items, picked))
    elif s.corpus:
        plan = DistillPlan(teacher=teacher, output=None, **as_kwargs(replace(s, student=None)))
        split = load_corpus(plan)
    else:
        return None
    return _checked(_Texts(split.sentences, split.counts, split.held, split.items))


def _checked(texts: _Texts) -> _Texts:
    if len(texts.items) < MIN_HEAL_TEXTS:
        raise ValidationError(f"{len(texts.items)} texts to heal a static model on; give at least {MIN_HEAL_TEXTS}")
    return texts


def _teacher_vectors(ckpt: Checkpoint, texts: _Texts, s: DistillSettings, progress: bool):
    """The teacher's unit vectors of the texts from the shared teacher cache: ``(vectors, seconds, reused)``."""
    from espresso_export.data import sentences_sha256
    from espresso_export.distilling.targets import _cache_folder, teacher_targets
    from espresso_export.training.schedule import amp_dtype, cpu_auto_amp, resolve_device

    device = resolve_device(s.device)
    precision = amp_dtype(cpu_auto_amp(s.amp, s.device), device)
    sha = ckpt.weights_sha256()
    folder = _cache_folder(ckpt, sha, sentences_sha256(texts.sentences), s.cache_dir, precision)
    reused = (folder / "embeddings.npy").is_file()  # the vectors a cut's distill (or an earlier run) computed
    ckpt.model.to(device)
    found = teacher_targets(ckpt, texts.sentences, dim=s.dim, pca_samples=s.pca_samples, seed=s.seed,
                            cache_dir=s.cache_dir, teacher_sha=sha, batch_size=s.batch_size, progress=progress,
                            precision=precision)
    ckpt.model.cpu()
    return np.load(found.folder / "embeddings.npy", mmap_mode="r"), found.seconds, reused


def _pooling_mode(ckpt: Checkpoint) -> str:
    from espresso_export.core.types import Pooling

    modes = {Pooling.MEAN: "mean", Pooling.CLS: "first", Pooling.LAST_TOKEN: "last"}
    if ckpt.pooling not in modes:
        raise ValidationError(f"a static model distils mean, cls or last-token pooling, not {ckpt.pooling.value}")
    return modes[ckpt.pooling]


def _post_rows(ckpt: Checkpoint, rows: np.ndarray) -> np.ndarray:
    """The teacher's Dense modules applied to every token's output (Normalize is left to the model's own)."""
    from espresso_export.model.post import DenseLayer

    for m in ckpt.post:
        if isinstance(m, DenseLayer):
            if not m.activation.endswith("Identity"):
                raise ValidationError(f"{ckpt.source} ends in a Dense module with {m.activation}: a static model "
                                      "distils only linear heads")
            rows = rows @ m.weight.detach().cpu().numpy().T.astype(np.float32)
            if m.bias is not None:
                rows = rows + m.bias.detach().cpu().numpy().astype(np.float32)
    return rows


def distil_static(ckpt: Checkpoint, *, words: Sequence[str], dim: int | None, device: str = "cpu",
                  progress: bool = False):
    """model2vec's distillation of ``ckpt`` (its Dense head included): a ``StaticModel`` of float32 rows at
    ``dim`` by model2vec's PCA of the token rows, or at the teacher's width with ``dim=None``."""
    import logging

    from model2vec import StaticModel
    from model2vec.distill import distill_from_model
    from model2vec.distill import inference
    from model2vec.distill.inference import apply_pca, compute_weights

    sif = 1e-4  # model2vec's default weighting, applied after the head as model2vec applies it after its pass
    quiet = [logging.getLogger(n) for n in ("model2vec", "skeletoken")]
    levels = [q.level for q in quiet]
    for q in quiet:
        q.setLevel(logging.ERROR)
    bar = inference.tqdm
    # model2vec's own bar, shown with ours only, and only on a terminal: written to a file, its carriage-return
    # redraws make one line of thousands of updates (ours print their finished lines there)
    inference.tqdm = functools.partial(bar, disable=not (progress and sys.stderr.isatty()))
    try:
        raw = distill_from_model(copy.deepcopy(ckpt.model), ckpt.tokenizer, vocabulary=list(words) or None,
                                 device=device, pca_dims=None, sif_coefficient=None, quantize_to="float32",
                                 pooling=_pooling_mode(ckpt))
    finally:
        inference.tqdm = bar
        for q, level in zip(quiet, levels):
            q.setLevel(level)
    rows = _post_rows(ckpt, np.asarray(raw.embedding, dtype=np.float32))
    if dim is not None:
        rows = apply_pca(rows, dim).astype(np.float32)
    rows = (rows * compute_weights(len(rows), sif_coefficient=sif)[:, None]).astype(np.float32)
    config = {**raw.config, "apply_pca": dim, "sif_coefficient": sif, "hidden_dim": int(rows.shape[1]),
              "pooling": _pooling_mode(ckpt), "tokenizer_name": str(ckpt.source)}
    return StaticModel(vectors=rows, tokenizer=raw.tokenizer, config=config, normalize=True,
                       base_model_name=str(ckpt.source), language=raw.language)


def _token_ids(model, sentences: Sequence[str]) -> list[np.ndarray]:
    """Each text's token ids exactly as ``model.encode`` reads them (cut to model2vec's character limit)."""
    limit = char_limit(model)
    cut = [t[:limit] for t in sentences] if limit is not None else list(sentences)
    return [np.asarray(ids, dtype=np.int64) for ids in model.tokenize(cut)]


def _loop_settings(s: DistillSettings, items: int):
    """The engine's settings: distill's, with a static table's own defaults where distill's are left as they are
    (:data:`STATIC_BATCH` texts a step, at most all of them; :data:`STATIC_EPOCHS`, more on a small corpus until
    :data:`STATIC_MIN_STEPS`; :data:`STATIC_LR`)."""
    from espresso_export.training.loop import LoopSettings

    default = DistillSettings(dim=s.dim)
    batch = min(STATIC_BATCH, items) if s.batch_size == default.batch_size else s.batch_size
    per_epoch = -(-items // batch)
    epochs = max(STATIC_EPOCHS, -(-STATIC_MIN_STEPS // per_epoch)) if s.epochs == default.epochs else s.epochs
    return LoopSettings(epochs=epochs, batch_size=batch, lr=STATIC_LR if s.lr is None else s.lr,
                        weight_decay=s.weight_decay, warmup=s.warmup, max_grad_norm=s.max_grad_norm, seed=s.seed,
                        bucket=s.bucket, max_steps=s.max_steps, amp="off", checkpoint_every=s.checkpoint_every,
                        device=s.device)


def _heal(model, texts: _Texts, vectors: np.ndarray, s: DistillSettings, run_dir: Path, *, resume: bool,
          progress: bool, identity: dict):
    """Train the table on the texts; returns the task (trained) and what the training did."""
    from espresso_export.training.loop import Trainer

    ids = _token_ids(model, texts.sentences)
    task = StaticHealTask(model.embedding, ids, vectors, texts.items, identity)
    before = task.mean_cosine(texts.held)
    config = _loop_settings(s, len(texts.items))
    trainer = Trainer(task, config, run_dir)
    result = trainer.run(resume=resume, progress="healing (static)" if progress else None)
    after = task.mean_cosine(texts.held)
    info = {**result.to_dict(), "batch_size": config.batch_size, "lr": config.lr, "epochs_planned": config.epochs,
            "loss": "cosine", "device": s.device}
    return task, trainer, info, {"texts": int(len(texts.held)), "mean_cosine_before": before,
                                 "mean_cosine_after": after}


def _reduce(model, task: StaticHealTask, texts: _Texts, dim: int, s: DistillSettings):
    """The trained table at ``dim``: a PCA of the trained vectors of (at most ``pca_samples``) texts."""
    from model2vec import StaticModel

    rng = np.random.default_rng(s.seed)
    n = len(texts.sentences)
    sample = np.sort(rng.choice(n, size=min(n, s.pca_samples), replace=False))
    if len(sample) < dim + 1:
        raise ValidationError(f"too few texts ({len(sample)}) for a PCA to --dim {dim}; add texts or lower --dim")
    rows, pca = reduce_table(task.table(), task.vectors(sample), dim)
    config = {**model.config, "apply_pca": dim, "hidden_dim": dim}
    return StaticModel(vectors=rows, tokenizer=model.tokenizer, config=config, normalize=True,
                       base_model_name=model.base_model_name, language=model.language), pca


def _provenance(ckpt: Checkpoint, teacher_sha: str, result: StaticResult, s: DistillSettings, identity: dict) -> dict:
    prov = {"espresso_version": __version__, "step": "distill",
            "teacher": {"id": ckpt.source, "weights_sha256": teacher_sha, "depth": ckpt.depth,
                        "hidden_size": ckpt.hidden_size},
            "student": {"id": STATIC_STUDENT, "library": "model2vec", **result.vocabulary},
            "dim": result.dim, "pooling": "mean", "healed": result.healed,
            "corpus": {"sha256": identity.get("corpus_sha256"), **result.corpus},
            "pca": {"explained_variance": result.pca_explained_variance, "seed": s.seed},
            "training": result.train, "heldout": result.heldout}
    if ckpt.provenance:
        prov["parent"] = ckpt.provenance
    return prov


def _write(model, output, prov: dict, overwrite: bool, inputs) -> Path:
    with atomic_output(output, overwrite=overwrite, inputs=inputs) as tmp:
        model.save_pretrained(tmp)
        write_json(tmp / PROVENANCE_FILE, prov)
    return Path(output).expanduser().resolve()


def build_static(
    teacher: str | os.PathLike | Checkpoint,
    output: str | os.PathLike | None,
    settings: DistillSettings | None = None,
    *,
    sentences: Sequence[str] | None = None,
    teacher_vectors: np.ndarray | None = None,
    resume: bool = False,
    run_dir: str | os.PathLike | None = None,
    overwrite: bool = False,
    progress: bool = False,
    **kwargs,
) -> StaticResult:
    """A static model of ``teacher`` at ``dim``, healed on texts when there are any; see the module's docstring.

    ``settings`` (or its fields as keywords: ``dim``, ``corpus``, ``static_vocabulary``, ``epochs``, ``lr``,
    ``batch_size``, ``cache_dir``, ...) are distill's. ``sentences`` replaces ``corpus`` with texts already read;
    ``teacher_vectors`` (one unit vector per sentence, in order) replaces the teacher pass. ``output=None`` writes
    nothing (the training checkpoints then go to ``run_dir``, required) and leaves the model in ``result.model``.
    """
    start = time.perf_counter()
    s = resolve_settings(DistillSettings, settings, {**kwargs, "student": STATIC_STUDENT}, call="distill")
    check_static_settings(s)
    require("static")
    inputs = [teacher if not isinstance(teacher, Checkpoint) else teacher.path, s.corpus, s.cache_dir]
    if output is not None:
        check_output(output, overwrite=overwrite, inputs=inputs)
    ckpt = teacher if isinstance(teacher, Checkpoint) else _load_teacher(teacher, s)
    if s.dim > ckpt.output_dim:
        raise ValidationError(f"--dim {s.dim} is larger than the teacher's embedding width {ckpt.output_dim}")
    texts = _texts(ckpt.source, s, sentences)
    if texts is None:
        return _plain(ckpt, output, s, start, overwrite, inputs, progress)
    return _healed(ckpt, output, s, texts, teacher_vectors, start, inputs,
                   dict(resume=resume, run_dir=run_dir, overwrite=overwrite, progress=progress))


def _load_teacher(spec, s: DistillSettings) -> Checkpoint:
    from espresso_export.model.checkpoint import load

    return load(spec, pooling=s.pooling, trust_remote_code=s.trust_remote_code)


def _plain(ckpt: Checkpoint, output, s: DistillSettings, start: float, overwrite: bool, inputs,
           progress: bool) -> StaticResult:
    """model2vec's own distillation at ``dim``, no texts."""
    t0 = time.perf_counter()
    model = distil_static(ckpt, words=(), dim=s.dim, device=s.device, progress=progress)
    result = StaticResult(output=None, teacher=str(ckpt.source), dim=s.dim,
                          vocabulary={"tokens": len(model.tokens), "corpus_words": 0}, corpus={}, healed=False,
                          teacher_seconds=0.0, targets_cached=False, distill_seconds=round(time.perf_counter() - t0, 2),
                          train=None, heldout={}, pca_explained_variance=None, params=int(model.embedding.size),
                          seconds=0.0, model=model,
                          hints=["no --corpus: model2vec's plain distillation, not healed on your texts"])
    if output is not None:
        result.output = _write(model, output, _provenance(ckpt, ckpt.weights_sha256(), result, s, {}), overwrite,
                               inputs)
    result.seconds = round(time.perf_counter() - start, 2)
    return result


def _healed(ckpt: Checkpoint, output, s: DistillSettings, texts: _Texts, vectors, start: float, inputs,
            run: dict) -> StaticResult:
    from espresso_export.data import sentences_sha256
    from espresso_export.training.run_folder import prepare_run

    teacher_sha = ckpt.weights_sha256()
    identity = {"teacher_sha256": teacher_sha, "corpus_sha256": sentences_sha256(texts.sentences), "dim": s.dim,
                "static_vocabulary": s.static_vocabulary, "heldout": int(len(texts.held)), "student": STATIC_STUDENT}
    with prepare_run(output, run["run_dir"], resume=run["resume"], overwrite=run["overwrite"],
                     inputs=inputs) as run_dir:
        seconds, reused = 0.0, False
        picked = texts.picked
        if vectors is None:
            vectors, seconds, reused = _teacher_vectors(ckpt, texts, s, run["progress"])
        elif picked is None or len(vectors) != texts.counts["read"]:
            raise ValidationError(f"{len(vectors)} teacher vectors for {texts.counts.get('read')} texts: give one "
                                  "per text of sentences=, in order")
        else:  # empty and repeated texts were dropped: their vectors with them
            vectors = np.asarray(vectors, dtype=np.float32)[picked]
        t0 = time.perf_counter()
        words = corpus_words([texts.sentences[i] for i in texts.items], ckpt.tokenizer.backend_tokenizer,
                             s.static_vocabulary)
        wide = distil_static(ckpt, words=words, dim=None, device=s.device, progress=run["progress"])
        distill_seconds = time.perf_counter() - t0
        task, trainer, train, heldout = _heal(wide, texts, vectors, s, run_dir, resume=run["resume"],
                                              progress=run["progress"], identity=identity)
        model, pca = _reduce(wide, task, texts, s.dim, s)
        result = StaticResult(
            output=None, teacher=str(ckpt.source), dim=s.dim,
            vocabulary={"tokens": len(model.tokens), "corpus_words": len(words)}, corpus=texts.counts, healed=True,
            teacher_seconds=round(seconds, 2), targets_cached=reused, distill_seconds=round(distill_seconds, 2),
            train=train, heldout=heldout, pca_explained_variance=round(pca.explained_variance, 6),
            params=int(model.embedding.size), seconds=0.0, run_dir=str(run_dir), model=model)
        if output is not None:
            result.output = _write(model, output, _provenance(ckpt, teacher_sha, result, s, identity),
                                   run["overwrite"], inputs)
        if not s.keep_checkpoints:  # the run's checkpoints go once the model is written (or in memory)
            trainer.cleanup()
    result.seconds = round(time.perf_counter() - start, 2)
    return result
