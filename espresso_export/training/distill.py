"""``distill``: Homomorphic Projective Distillation (HPD) and "shrink, then heal".

The teacher is frozen. Its (unit-normalised) embeddings of the corpus are
compressed by a PCA fitted on ``pca_samples`` of them; the PCA coordinates
``h_t = W_t (e_t - mean)`` are the targets. The student (any checkpoint, or
the teacher cut to L layers) gets a linear projection with bias to ``dim``,
initialised from the PCA of the student's *own* embeddings (rotated and scaled
onto the teacher's axes by orthogonal Procrustes, which changes no cosine:
step 0 scores exactly as the plain cut with a PCA head), and learns
``h_s ~ h_t`` (MSE, optionally + cosine).

With related sentence pairs (``pairs=``, e.g. STS or NLI files, their labels
unused), the pair loss instead pulls the student's cosine of each pair towards
the cosine of the teacher's targets: the part of the teacher's geometry that
similarity search uses. An already sentence-trained student (all-MiniLM-L6-v2
under all-mpnet-base-v2) loses STS under plain MSE at CPU-sized corpora and
gains under the pair loss (benchmarks/README.md, "distill", b).

For a cut teacher, student layer ``j`` is teacher layer ``keep[j]``; with
layer targets on (``layer_targets=True``), each student layer's pooled state is
also pulled towards the teacher's pooled state after that layer (standardised
per dimension). Which settings heal fastest is measured in benchmarks/README.md.

Teacher outputs are computed once and cached as memory-mapped ``.npy`` files
keyed by the teacher's weights hash and the corpus hash; the PCA targets are
keyed by those plus the PCA settings. Epochs, reruns and other dims reuse them.
Under ``torchrun`` each rank embeds its contiguous share of the corpus into the
same cache files, rank 0 fits the PCA and broadcasts it, and each rank projects
its share (:mod:`espresso_export.distributed`): the corpus is embedded once.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import os
import random
import time
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from espresso_export import __version__
from espresso_export.training import distributed
from espresso_export.model.checkpoint import Checkpoint, DenseLayer, Normalize, load
from espresso_export.data.readers import Corpus, read_corpus, read_sentence_pairs, read_sts, sentences_sha256
from espresso_export.model.embed import apply_post, encode, encode_layers, model_inputs, pool
from espresso_export.core.errors import ValidationError
from espresso_export.shrinking.heads import PCAFit, fit_pca
from espresso_export.model.layout import write_json
from espresso_export.core.metrics import sts_spearman
from espresso_export.core.progress import track
from espresso_export.shrinking.slicing import cut, select_layers
from espresso_export.training.loop import TrainConfig, Trainer, TrainingTask, prepare_run, write_trained
from espresso_export.core.types import CorpusSample, Loss, Pooling, ProjectionInit, Select

log = logging.getLogger(__name__)

CACHE_FORMAT = 1
TEACHER_CHUNK = 2048  # sentences per teacher pass chunk (bounds memory)
STUDENT_PCA_SAMPLES = 4096  # at most this many sentences for the student's own PCA (>= 10 x a 384-d width)


def default_cache_dir() -> Path:
    env = os.environ.get("ESPRESSO_CACHE")
    if env:
        return Path(env).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "espresso-export"


def _sha(*parts) -> str:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()[:20]


def _base_post(ckpt: Checkpoint) -> list:
    """The checkpoint's post modules without its Normalize layers, then one Normalize."""
    return [m for m in ckpt.post if not isinstance(m, Normalize)] + [Normalize()]


# --- teacher targets -----------------------------------------------------------------------------------

@dataclass
class TeacherTargets:
    targets: np.ndarray  # (n, dim) float32 memmap: h_t
    pca: PCAFit
    layers: dict[int, np.ndarray]  # teacher layer index (0-based) -> (n, hidden) float16 memmap of pooled states
    folder: Path
    reused: bool  # targets came from the cache (no teacher pass, no PCA)
    seconds: float


def _atomic_npy(path: Path, array_like_writer) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        array_like_writer(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


@contextmanager
def _shared_memmaps(files: dict, n: int, what: str):
    """``.npy`` memmaps of ``n`` rows (``files``: key -> (path, width, dtype)) filled by every rank, each its
    contiguous share of the rows, and renamed into place once all shares are written.

    Yields ``(arrays, start, stop)``: this rank writes rows ``start:stop``. One process writes all rows."""
    dist = distributed.current()
    token = dist.broadcast_json(str(os.getpid()), what=what)  # one temp name per file, shared by the ranks
    tmps = {k: p.with_name(f".{p.name}.tmp-{token}") for k, (p, _, _) in files.items()}
    arrays: dict = {}
    try:
        if dist.main:
            for k, (_, width, dtype) in files.items():
                np.lib.format.open_memmap(tmps[k], mode="w+", dtype=dtype, shape=(n, width)).flush()
        dist.barrier(what)
        arrays.update({k: np.load(tmps[k], mmap_mode="r+") for k in files})
        start, stop = dist.shard_bounds(n)[dist.rank]
        yield arrays, start, stop
        for arr in arrays.values():
            arr.flush()
        arrays.clear()
        dist.barrier(f"{what}: waiting for every rank's share")
        if dist.main:
            for k, (path, _, _) in files.items():
                os.replace(tmps[k], path)
        dist.barrier(what)
    finally:
        arrays.clear()
        if dist.main:
            for tmp in tmps.values():
                if tmp.exists():
                    tmp.unlink()


def _teacher_pass(teacher: Checkpoint, sentences: Sequence[str], folder: Path, need_final: bool,
                  layers: Sequence[int], batch_size: int, progress: bool) -> None:
    """One forward pass of the teacher over the corpus, writing embeddings.npy and layer-<i>.npy.

    Under torchrun every rank embeds its contiguous share of the corpus into the same files."""
    import torch

    n, depth = len(sentences), teacher.depth
    post = _base_post(teacher)
    files = {}
    if need_final:
        files["final"] = (folder / "embeddings.npy", teacher.output_dim, np.float32)
    for i in layers:
        files[i] = (folder / f"layer-{i}.npy", teacher.hidden_size, np.float16)
    wanted = sorted({depth} | {i + 1 for i in layers})  # encode_layers counts depth, 1-based
    with _shared_memmaps(files, n, "the teacher pass") as (arrays, start, stop):
        chunks = [range(s, min(s + TEACHER_CHUNK, stop)) for s in range(start, stop, TEACHER_CHUNK)]
        for rng in track(chunks, description="teacher targets" if progress else None, total_items=stop - start,
                         count=len):
            texts = [sentences[i] for i in rng]
            pooled = encode_layers(teacher, texts, wanted, batch_size=batch_size)
            if need_final:
                with torch.inference_mode():
                    final = apply_post(torch.from_numpy(pooled[depth]), post).numpy()
                arrays["final"][rng.start : rng.stop] = final
            for i in layers:
                arrays[i][rng.start : rng.stop] = pooled[i + 1].astype(np.float16)


def teacher_targets(
    teacher: Checkpoint,
    sentences: Sequence[str],
    *,
    dim: int,
    pca_samples: int,
    seed: int = 0,
    layers: Sequence[int] = (),
    cache_dir: str | os.PathLike | None = None,
    teacher_sha: str | None = None,
    batch_size: int = 64,
    progress: bool = False,
) -> TeacherTargets:
    """PCA targets ``h_t`` (and pooled per-layer states) of the teacher on ``sentences``, cached on disk."""
    start = time.perf_counter()
    width = teacher.output_dim
    if dim < 1 or dim > width:
        raise ValidationError(f"--dim {dim} is larger than the teacher's embedding width {width}" if dim > width
                              else f"--dim must be at least 1, got {dim}")
    m = min(pca_samples, len(sentences))
    if m < dim:
        raise ValidationError(f"a PCA to {dim} dims needs at least {dim} sentences; --pca-samples {pca_samples} "
                              f"on a corpus of {len(sentences)} gives {m}")
    teacher_sha = teacher_sha or teacher.weights_sha256()
    corpus_sha = sentences_sha256(list(sentences))
    key = _sha(CACHE_FORMAT, teacher_sha, corpus_sha, teacher.pooling.value, teacher.max_seq_length,
               [type(p).__name__ for p in teacher.post])
    folder = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    folder = folder / f"teacher-{key}"
    dist = distributed.current()
    folder.mkdir(parents=True, exist_ok=True)
    dist.check_shared(folder, purpose="the teacher cache (--cache-dir)")
    pca_key = _sha(dim, m, seed)
    targets_file, pca_file = folder / f"targets-{pca_key}.npy", folder / f"pca-{pca_key}.safetensors"
    # rank 0 decides what is missing: every rank then takes the same path
    todo = dist.broadcast_json({
        "reused": targets_file.is_file() and pca_file.is_file(),
        "need_final": not (folder / "embeddings.npy").is_file(),
        "missing": [i for i in layers if not (folder / f"layer-{i}.npy").is_file()],
    } if dist.main else None, what="the teacher cache")
    reused, missing = todo["reused"], todo["missing"]
    need_final = not reused and todo["need_final"]
    if need_final or missing:
        _teacher_pass(teacher, sentences, folder, need_final, missing, batch_size, progress)
    if dist.main:
        write_json(folder / "meta.json", {"format": CACHE_FORMAT, "teacher": teacher.source,
                                          "teacher_sha256": teacher_sha, "corpus_sha256": corpus_sha,
                                          "sentences": len(sentences)})
    if reused:
        pca = _load_pca(pca_file)
    else:  # rank 0 fits the PCA, every rank projects its share of the embeddings
        emb = np.load(folder / "embeddings.npy", mmap_mode="r")
        fitted = None
        if dist.main:
            idx = np.sort(np.random.default_rng(seed).choice(len(sentences), size=m, replace=False))
            fitted = _pca_arrays(fit_pca(np.asarray(emb[idx]), dim))
        pca = _pca_from_arrays(dist.broadcast_arrays(fitted, what="the teacher PCA"))
        files = {"targets": (targets_file, dim, np.float32)}
        with _shared_memmaps(files, len(sentences), "the PCA targets") as (arrays, lo, hi):
            for s in range(lo, hi, 65536):
                e = min(s + 65536, hi)
                arrays["targets"][s:e] = pca.transform(emb[s:e]).astype(np.float32)
        if dist.main:
            _save_pca(pca, pca_file)
    return TeacherTargets(
        targets=np.load(targets_file, mmap_mode="r"), pca=pca,
        layers={i: np.load(folder / f"layer-{i}.npy", mmap_mode="r") for i in layers},
        folder=folder, reused=reused, seconds=time.perf_counter() - start,
    )


def _pca_arrays(pca: PCAFit) -> dict[str, np.ndarray]:
    return {"mean": pca.mean, "components": pca.components, "explained_variance_ratio": pca.explained_variance_ratio,
            "n_samples": np.array([pca.n_samples], dtype=np.int64)}


def _pca_from_arrays(t: dict[str, np.ndarray]) -> PCAFit:
    return PCAFit(mean=t["mean"], components=t["components"], explained_variance_ratio=t["explained_variance_ratio"],
                  n_samples=int(t["n_samples"][0]))


def _save_pca(pca: PCAFit, path: Path) -> None:
    from safetensors.numpy import save_file

    _atomic_npy(path, lambda tmp: save_file(_pca_arrays(pca), str(tmp)))


def _load_pca(path: Path) -> PCAFit:
    from safetensors.numpy import load_file

    return _pca_from_arrays(load_file(str(path)))


# --- the student -------------------------------------------------------------------------------------

def _procrustes(source: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, float]:
    """Rotation ``R`` and scale ``s`` minimising ``|s * source @ R.T - target|`` (both centred)."""
    u, sv, vt = np.linalg.svd(target.T @ source)
    rot = u @ vt
    scale = float(sv.sum() / max((source**2).sum(), 1e-12))
    return rot, scale


def init_projection(student_emb: np.ndarray, teacher_targets: np.ndarray, dim: int, mode: ProjectionInit):
    """``(weight, bias, student PCA)`` of the initial projection from the student's own embeddings."""
    pca = fit_pca(student_emb, dim)
    weight = pca.components
    if ProjectionInit(mode) is ProjectionInit.PCA_ALIGNED:
        coords = pca.transform(student_emb)
        rot, scale = _procrustes(coords, np.asarray(teacher_targets, dtype=np.float64))
        weight = scale * rot @ pca.components
    bias = -weight @ pca.mean
    return weight.astype(np.float32), bias.astype(np.float32), pca


class HealTask(TrainingTask):
    """The HPD objective as a :class:`~espresso_export.training.TrainingTask`."""

    def __init__(self, student: Checkpoint, projection, sentences: Sequence[str], targets: TeacherTargets, *,
                 loss: Loss = Loss.MSE, layer_map: dict[int, int] | None = None, layer_weight: float = 1.0,
                 max_seq_len: int = 128, dropout: bool = False, eval_pairs=None, identity: dict | None = None,
                 items: Sequence[int] | None = None):
        import torch

        self.student = student
        self.projection = projection
        self.sentences = list(sentences)
        self.items = np.arange(len(self.sentences)) if items is None else np.asarray(items)  # trained-on indices
        self.targets = targets
        self.loss_kind = Loss(loss)
        self.layer_map = dict(layer_map or {})  # student layer j (0-based) -> teacher layer index
        self.layer_weight = layer_weight
        self.max_seq_len = max_seq_len
        self.dropout = dropout
        self.eval_pairs = eval_pairs
        self._identity = identity or {}
        self.post = _base_post(student)
        self.inputs = model_inputs(student.model)
        self.target_energy = float(np.mean(np.square(targets.targets[: min(len(self.sentences), 65536)], dtype=np.float64))
                                   * targets.targets.shape[1])
        self.layer_stats = {}
        for j, t in self.layer_map.items():
            sample = np.asarray(targets.layers[t][: min(len(self.sentences), 65536)], dtype=np.float32)
            mean = sample.mean(0)
            std = sample.std(0) + 1e-3 * float(sample.std(0).mean()) + 1e-6
            self.layer_stats[j] = (torch.from_numpy(mean), torch.from_numpy(std))
        self.history_mse: list[float] = []

    def __len__(self) -> int:
        return len(self.items)

    def modules(self) -> dict[str, Any]:
        return {"student": self.student.model, "projection": self.projection}

    def lengths(self) -> list[int]:
        return [len(self.sentences[i]) for i in self.items]

    def config(self) -> dict:
        return self._identity

    @property
    def device(self):
        return self.projection.weight.device

    def _tokens(self, texts: Sequence[str], max_len: int | None):
        ckpt = self.student
        if ckpt.do_lower_case:
            texts = [t.lower() for t in texts]
        enc = ckpt.tokenizer(list(texts), padding=True, truncation=True, max_length=max_len, return_tensors="pt")
        return {k: v.to(self.device) for k, v in enc.items() if k in self.inputs}

    def forward(self, texts: Sequence[str], *, max_len: int | None = None, hidden: bool = False):
        """``(h_s, per-layer pooled states or None)`` for ``texts``."""
        batch = self._tokens(texts, max_len)
        out = self.student.model(**batch, output_hidden_states=hidden, return_dict=True)
        mask = batch["attention_mask"]
        emb = apply_post(pool(out.last_hidden_state, mask, self.student.pooling), self.post)
        h = self.projection(emb)
        states = None
        if hidden:
            states = {j: pool(out.hidden_states[j + 1], mask, self.student.pooling) for j in self.layer_map}
        return h, states

    def loss(self, batch: Sequence[int]):
        import torch
        import torch.nn.functional as F

        idx = np.sort(self.items[np.asarray(batch)])
        h_s, states, h_t = self._train_forward(idx, hidden=bool(self.layer_map))
        loss = self._mse(h_s, h_t)
        if self.loss_kind is Loss.COSINE_MSE:
            loss = loss + (1 - F.cosine_similarity(h_s, h_t, dim=1)).mean()
        if self.layer_map:
            layer_losses = []
            for j, t in self.layer_map.items():
                mean, std = (s.to(h_s.device) for s in self.layer_stats[j])
                target = torch.from_numpy(np.asarray(self.targets.layers[t][idx], dtype=np.float32)).to(h_s.device)
                layer_losses.append((((states[j].float() - target) / std) ** 2).mean())
            loss = loss + self.layer_weight * torch.stack(layer_losses).mean()
        return loss

    def _train_forward(self, idx: np.ndarray, hidden: bool = False):
        """``(h_s, layer states, h_t)`` for the corpus sentences ``idx``, in training mode."""
        import torch

        if not self.dropout:
            self.student.model.eval()
        h_s, states = self.forward([self.sentences[i] for i in idx], max_len=self.max_seq_len, hidden=hidden)
        h_t = torch.from_numpy(np.asarray(self.targets.targets[idx], dtype=np.float32)).to(h_s.device)
        return h_s.float(), states, h_t

    def _mse(self, h_s, h_t):
        return ((h_s - h_t) ** 2).sum(1).mean() / self.target_energy  # relative: 1.0 = predicting the mean

    @property
    def ckpt_post(self) -> list:
        """The post modules of the finished model: base post, the projection as Dense, Normalize."""
        w = self.projection.weight.detach().float().cpu().clone()
        b = self.projection.bias.detach().float().cpu().clone()
        return self.post + [DenseLayer(weight=w, bias=b, activation="torch.nn.modules.linear.Identity"), Normalize()]

    def embed(self, texts: Sequence[str], batch_size: int = 128) -> np.ndarray:
        import torch

        texts = list(texts)
        out = np.empty((len(texts), self.projection.out_features), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        with torch.inference_mode():
            for s in range(0, len(order), batch_size):
                idx = order[s : s + batch_size]
                h, _ = self.forward([texts[i] for i in idx], max_len=self.student.max_seq_length)
                out[idx] = h.float().cpu().numpy()
        return out

    def mse(self, indices: Sequence[int]) -> float:
        """Relative MSE of the current student on the corpus items ``indices`` (1.0 = predicting the mean)."""
        idx = np.sort(np.asarray(indices))
        h = self.embed([self.sentences[i] for i in idx])
        return float(np.square(h - np.asarray(self.targets.targets[idx])).sum(1).mean() / self.target_energy)

    def evaluate(self) -> float | None:
        if self.eval_pairs is None:
            return None
        p = self.eval_pairs
        return sts_spearman(self.embed(p.sentence1), self.embed(p.sentence2), p.scores)


class PairHealTask(HealTask):
    """HPD on related pairs: the student's cosine of each pair is pulled to the cosine of the teacher's targets.

    Items are pairs (rows of ``pairs``: two sentence indices); ``Loss.PAIR_MSE`` adds the MSE on both sentences.
    """

    item_unit = "pairs"

    def __init__(self, *args, pairs: np.ndarray, **kwargs):
        super().__init__(*args, **kwargs)
        self.pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)

    def __len__(self) -> int:
        return len(self.pairs)

    def lengths(self) -> list[int]:
        return [len(self.sentences[a]) + len(self.sentences[b]) for a, b in self.pairs]

    def loss(self, batch: Sequence[int]):
        import torch.nn.functional as F

        idx = self.pairs[np.asarray(batch)].reshape(-1)  # a0 b0 a1 b1 ...
        h_s, _, h_t = self._train_forward(idx)
        s, t = F.normalize(h_s, dim=1), F.normalize(h_t, dim=1)
        loss = ((s[0::2] * s[1::2]).sum(1) - (t[0::2] * t[1::2]).sum(1)).pow(2).mean()
        if self.loss_kind is Loss.PAIR_MSE:
            loss = loss + self._mse(h_s, h_t)
        return loss


# --- the API -----------------------------------------------------------------------------------------

@dataclass
class DistillResult:
    output: Path | None
    teacher: str
    student: str
    layers: list[int] | None  # kept layers when the student is a cut
    dim: int
    corpus: dict
    pca_explained_variance: float
    targets_cached: bool
    teacher_seconds: float
    train: dict
    eval: dict | None
    heldout: dict
    params: int
    seconds: float
    run_dir: str | None = None
    hints: list[str] = field(default_factory=list)
    task: Any = field(default=None, repr=False, compare=False)

    @property
    def sentences_per_second(self) -> float:
        """Training throughput in sentences (a pair-loss item is two sentences)."""
        return self.train["items_per_second"] * (2 if "training_pairs" in self.corpus else 1)

    def to_dict(self) -> dict:
        d = {f.name: copy.deepcopy(getattr(self, f.name)) for f in fields(self) if f.name != "task"}
        d["output"] = str(self.output) if self.output else None
        return d


def _weights_sha(ckpt: Checkpoint) -> str:
    return ckpt.weights_sha256()


def _load_model(spec, role: str, pooling, trust_remote_code: bool) -> Checkpoint:
    from espresso_export.core.errors import NotFoundError, UnsupportedModelError

    try:
        return load(spec, pooling=pooling, trust_remote_code=trust_remote_code)
    except (NotFoundError, UnsupportedModelError) as e:
        raise type(e)(f"{role}: {e.message}") from e


def _capped(c: Corpus, max_sentences: int, sample: CorpusSample, seed: int) -> list[int]:
    """Indices of the ``max_sentences`` corpus sentences ``sample`` keeps, in corpus order."""
    if sample is CorpusSample.RANDOM:
        return sorted(random.Random(seed).sample(range(len(c.sentences)), max_sentences))
    keep: list[int] = []
    start = 0
    for src in c.sources:  # each source's sentences are one contiguous run of the corpus
        run = range(start, start + src.kept)
        start += src.kept
        room = max_sentences - len(keep)
        if room <= 0:
            break
        keep.extend(run if len(run) <= room else sorted(random.Random(seed).sample(run, room)))
    return keep


def prepare_corpus(corpus, *, field: str | None = None, column: str | None = None, max_sentences: int | None = None,
                   sample: CorpusSample | str = CorpusSample.RANDOM, augment_kinds: Sequence[str] = (),
                   augment_copies: int = 1, seed: int = 0) -> tuple[list[str], dict]:
    """The training sentences (deduplicated, optionally capped and augmented) and their counts."""
    c = corpus if isinstance(corpus, Corpus) else read_corpus(corpus, field=field, column=column)
    sentences = list(c.sentences)
    counts = c.counts()
    if max_sentences is not None and len(sentences) > max_sentences:
        sentences = [sentences[i] for i in _capped(c, max_sentences, CorpusSample(sample), seed)]
        counts["capped_to"] = max_sentences
        counts["sample"] = CorpusSample(sample).value
    if augment_kinds:
        from espresso_export.data.augment import augment

        extra = augment(sentences, augment_kinds, copies=augment_copies, seed=seed)
        sentences += extra
        counts["augmented"] = len(extra)
    counts["training_sentences"] = len(sentences)
    return sentences, counts


def add_pair_sentences(sentences: list[str], pairs: Sequence[tuple[str, str]]) -> tuple[list[str], np.ndarray, int]:
    """``sentences`` extended by the pair sentences it lacks, the pairs as index rows, and how many were added."""
    sentences = list(sentences)
    pos = {t: i for i, t in enumerate(sentences)}
    before = len(sentences)
    rows = np.empty((len(pairs), 2), dtype=np.int64)
    for r, pair in enumerate(pairs):
        for c, text in enumerate(pair):
            i = pos.get(text)
            if i is None:
                i = pos[text] = len(sentences)
                sentences.append(text)
            rows[r, c] = i
    return sentences, rows, len(sentences) - before


# Default peak learning rates (AdamW), used when ``lr`` is not given. Healing a cut teacher converged best
# at 1e-3 of the rates tried (1e-4 / 3e-4 / 1e-3, benchmarks/README.md "distill": the ablation, a and c);
# a separate student follows the HPD paper's 1e-4; the pair loss on an already trained student, 5e-5 (b).
HEAL_LR = 1e-3
HPD_LR = 1e-4
PAIR_LR = 5e-5


def distill(
    teacher: str | os.PathLike,
    output: str | os.PathLike | None,
    *,
    dim: int,
    corpus=None,
    pairs=None,
    student: str | os.PathLike | None = None,
    student_layers: int | Sequence[int] | None = None,
    select: Select | str = Select.AUTO,
    corpus_field: str | None = None,
    corpus_column: str | None = None,
    max_sentences: int | None = None,
    sample: CorpusSample | str = CorpusSample.RANDOM,
    augment: Sequence[str] = (),
    augment_copies: int = 1,
    pca_samples: int = 20000,
    epochs: int = 1,
    batch_size: int = 64,
    lr: float | None = None,
    warmup: float = 0.1,
    weight_decay: float = 0.01,
    max_grad_norm: float = 1.0,
    max_seq_len: int = 128,
    max_steps: int | None = None,
    loss: Loss | str | None = None,
    layer_targets: bool | None = None,
    layer_weight: float = 1.0,
    projection_init: ProjectionInit | str = ProjectionInit.PCA_ALIGNED,
    dropout: bool = False,
    bucket: bool = True,
    eval_sts: str | os.PathLike | None = None,
    eval_limit: int | None = None,
    heldout: int = 256,
    seed: int = 0,
    resume: bool = False,
    device: str = "cpu",
    amp: str = "auto",
    checkpoint_every: int = 200,
    run_dir: str | os.PathLike | None = None,
    keep_checkpoints: bool = False,
    cache_dir: str | os.PathLike | None = None,
    pooling: Pooling | str | None = None,
    overwrite: bool = False,
    trust_remote_code: bool = False,
    threads: int | None = None,
    progress: bool = False,
    on_step=None,
) -> DistillResult:
    """Distil ``teacher`` into ``student`` (or into the teacher cut to ``student_layers``) at ``dim`` dims.

    ``corpus``: sentence specs (:func:`~espresso_export.data.read_corpus`). ``pairs``: pair files
    (:func:`~espresso_export.data.read_sentence_pairs`) for the pair losses; their sentences join the
    corpus, and ``corpus`` may then be omitted. ``loss`` defaults to ``pair`` with pairs, else ``mse``.
    With a pair loss, a batch of ``batch_size`` sentences holds ``batch_size // 2`` pairs.

    Writes a sentence-transformers folder to ``output`` (Pooling, Normalize, Dense
    projection, Normalize) with provenance; ``output=None`` writes nothing and
    leaves the trained task in ``result.task``. Raises
    :class:`~espresso_export.training.TrainingInterrupted` on Ctrl-C after saving
    a checkpoint that ``resume=True`` continues exactly.
    """
    import torch

    start = time.perf_counter()
    loss = Loss(loss) if loss is not None else (Loss.PAIR if pairs is not None else Loss.MSE)
    projection_init = ProjectionInit(projection_init)
    if threads is not None:
        if threads < 1:
            raise ValidationError(f"--threads must be at least 1, got {threads}")
        torch.set_num_threads(threads)
    dist = distributed.setup(device)  # under torchrun: join the group; one process: nothing
    progress = progress and dist.main  # bars and tables on rank 0 only
    if student is None and student_layers is None:
        raise ValidationError("give a --student, or --student-layers L to heal the teacher cut to L layers")
    if dim is None or dim < 1:
        raise ValidationError(f"--dim must be at least 1, got {dim}")
    if pca_samples < 1:
        raise ValidationError(f"--pca-samples must be at least 1, got {pca_samples}")
    if corpus is None and pairs is None:
        raise ValidationError("give a --corpus of sentences, or --pairs for a pair loss")
    if loss.on_pairs != (pairs is not None):
        raise ValidationError(f"--loss {loss.value} needs --pairs" if loss.on_pairs else
                              f"--pairs trains with a pair loss (pair or pair+mse), not --loss {loss.value}")
    if loss.on_pairs and augment:
        raise ValidationError("--augment adds single sentences, which a pair loss does not train on; "
                              "drop --augment or the pairs")
    run_dir = prepare_run(output, run_dir, resume=resume, overwrite=overwrite)

    if corpus is not None:
        sentences, counts = prepare_corpus(corpus, field=corpus_field, column=corpus_column,
                                           max_sentences=max_sentences, sample=sample, augment_kinds=augment,
                                           augment_copies=augment_copies, seed=seed)
    else:
        sentences, counts = [], {}
    pair_rows = None
    if pairs is not None:
        pair_list, pair_counts = read_sentence_pairs(pairs)
        sentences, pair_rows, added = add_pair_sentences(sentences, pair_list)
        counts.update(pairs=pair_counts, pair_sentences_added=added, training_sentences=len(sentences))
    n_held = min(heldout, len(sentences) // 10)
    held = np.sort(np.random.default_rng([seed, 7]).choice(len(sentences), size=n_held, replace=False))
    items = np.setdiff1d(np.arange(len(sentences)), held)
    if pair_rows is not None:  # train on the pairs with no held-out sentence
        pair_rows = pair_rows[~np.isin(pair_rows, held).any(axis=1)]
        counts["training_pairs"] = int(len(pair_rows))
        if len(pair_rows) < max(1, batch_size // 2):
            raise ValidationError(f"{len(pair_rows)} pairs are left for training after {n_held} held-out sentences, "
                                  f"fewer than one batch ({max(1, batch_size // 2)} pairs at --batch-size "
                                  f"{batch_size}); lower --batch-size or add pairs")
    elif len(items) < batch_size:
        raise ValidationError(f"the corpus has {len(sentences)} sentences ({len(items)} for training after "
                              f"{n_held} held out), fewer than one batch (--batch-size {batch_size}); "
                              "lower --batch-size or add sentences")
    eval_pairs = read_sts(eval_sts, limit=eval_limit) if eval_sts is not None else None

    t_ckpt = _load_model(teacher, "teacher", pooling, trust_remote_code)
    width = t_ckpt.output_dim
    if dim > width:
        raise ValidationError(f"--dim {dim} is larger than the teacher's embedding width {width}")
    if min(pca_samples, len(sentences)) < dim:
        raise ValidationError(f"a PCA to {dim} dims needs at least {dim} sentences: --pca-samples {pca_samples} "
                              f"on a corpus of {len(sentences)} sentences gives {min(pca_samples, len(sentences))}")
    teacher_sha = _weights_sha(t_ckpt)

    keep: list[int] | None = None
    if student is None:
        s_ckpt, student_sha, from_teacher = copy.deepcopy(t_ckpt), teacher_sha, True
    else:
        s_ckpt = _load_model(student, "student", None, trust_remote_code)
        student_sha = _weights_sha(s_ckpt)
        from_teacher = student_sha == teacher_sha and s_ckpt.depth == t_ckpt.depth
    if lr is None:
        lr = PAIR_LR if loss.on_pairs else HEAL_LR if from_teacher else HPD_LR
    source_depth = s_ckpt.depth
    if student_layers is not None:
        keep = select_layers(source_depth, student_layers, select, ese_trained=s_ckpt.ese_trained)
        cut(s_ckpt.model, s_ckpt.arch, keep)
    if layer_targets is None:
        layer_targets = False
    if layer_targets and loss.on_pairs:
        raise ValidationError(f"--layer-targets works with the mse losses, not --loss {loss.value}")
    if layer_targets and not from_teacher:
        raise ValidationError("--layer-targets needs a student cut from the teacher (--student-layers without "
                              "--student): a different student has no matching teacher layers")
    kept = keep if keep is not None else list(range(source_depth))
    layer_map = {j: kept[j] for j in range(len(kept))} if layer_targets else {}

    targets = teacher_targets(t_ckpt, sentences, dim=dim, pca_samples=pca_samples, seed=seed,
                              layers=sorted(set(layer_map.values())), cache_dir=cache_dir, teacher_sha=teacher_sha,
                              batch_size=batch_size, progress=progress)
    t_source, t_depth, t_hidden = t_ckpt.source, t_ckpt.depth, t_ckpt.hidden_size
    del t_ckpt

    # the projection: the student's own PCA (on the same sample the teacher's PCA used), aligned to the teacher's axes
    m = min(pca_samples, len(sentences), STUDENT_PCA_SAMPLES)
    sample = np.sort(np.random.default_rng(seed + 1).choice(len(sentences), size=m, replace=False))
    saved_post, s_ckpt.post = s_ckpt.post, _base_post(s_ckpt)
    try:
        s_emb = encode(s_ckpt, [sentences[i] for i in sample], batch_size=batch_size,
                       progress="student PCA" if progress else None)
    finally:
        s_ckpt.post = saved_post
    if m < dim or s_emb.shape[1] < dim:
        raise ValidationError(f"--dim {dim} is larger than the student's width {s_emb.shape[1]} or its PCA sample {m}")
    weight, bias, _ = init_projection(s_emb, np.asarray(targets.targets[sample]), dim, projection_init)
    projection = torch.nn.Linear(s_emb.shape[1], dim, bias=True)
    with torch.no_grad():
        projection.weight.copy_(torch.from_numpy(weight))
        projection.bias.copy_(torch.from_numpy(bias))

    identity = {
        "teacher_sha256": teacher_sha, "student_sha256": student_sha, "layers": keep, "dim": dim,
        "corpus_sha256": sentences_sha256(sentences), "pca_samples": min(pca_samples, len(sentences)),
        "loss": loss.value, "layer_targets": sorted(layer_map.items()), "layer_weight": layer_weight,
        "max_seq_len": max_seq_len, "dropout": dropout, "projection_init": projection_init.value, "heldout": n_held,
        "eval": None if eval_pairs is None else sentences_sha256(eval_pairs.sentence1 + eval_pairs.sentence2),
    }
    task_kwargs = dict(loss=loss, layer_map=layer_map, layer_weight=layer_weight, max_seq_len=max_seq_len,
                       dropout=dropout, eval_pairs=eval_pairs, identity=identity, items=items)
    if pair_rows is not None:
        identity["pairs"] = hashlib.sha256(pair_rows.tobytes()).hexdigest()[:20]
        task = PairHealTask(s_ckpt, projection, sentences, targets, pairs=pair_rows, **task_kwargs)
    else:
        task = HealTask(s_ckpt, projection, sentences, targets, **task_kwargs)
    mse_before = task.mse(held) if n_held and dist.main else None
    config = TrainConfig(epochs=epochs, batch_size=max(1, batch_size // 2) if pair_rows is not None else batch_size, lr=lr, weight_decay=weight_decay, warmup=warmup,
                         max_grad_norm=max_grad_norm, seed=seed, bucket=bucket, max_steps=max_steps, amp=amp,
                         checkpoint_every=checkpoint_every, device=device)
    trainer = Trainer(task, config, run_dir)
    result = trainer.run(resume=resume, progress=("healing" if from_teacher else "distilling") if progress else None,
                         on_step=on_step)
    task.projection.cpu()
    s_ckpt.model.cpu()
    mse_after = task.mse(held) if n_held and dist.main else None
    heldout_info = {"sentences": n_held, "relative_mse_before": mse_before, "relative_mse_after": mse_after}

    s_ckpt.post = task.ckpt_post
    hints = []
    eval_info = None if eval_pairs is None else {
        "sts": str(eval_sts), "pairs": len(eval_pairs), "initial": result.initial_score, "best": result.best_score,
        "best_step": result.best_step, "history": result.history,
    }
    prov = {
        "espresso_version": __version__,
        "step": "distill",
        "teacher": {"id": t_source, "weights_sha256": teacher_sha, "depth": t_depth, "hidden_size": t_hidden},
        "student": {"id": s_ckpt.source if student is not None else f"{t_source} (cut)", "weights_sha256": student_sha,
                    "depth": source_depth, "hidden_size": s_ckpt.hidden_size, "layers": keep},
        "dim": dim, "pooling": s_ckpt.pooling.value,
        "corpus": {"sha256": identity["corpus_sha256"], **counts},
        "pca": {"samples": identity["pca_samples"], "explained_variance": round(targets.pca.explained_variance, 6),
                "seed": seed},
        "training": {"steps": result.steps, "epochs": result.epochs, "batch_size": batch_size,
                     "pairs_per_batch": config.batch_size if pair_rows is not None else None,
                     "training_pairs": None if pair_rows is None else int(len(pair_rows)), "lr": lr,
                     "warmup": warmup, "weight_decay": weight_decay, "max_grad_norm": max_grad_norm,
                     "max_seq_len": max_seq_len, "loss": loss.value, "layer_targets": {str(k): v for k, v in layer_map.items()},
                     "layer_weight": layer_weight, "projection_init": projection_init.value, "dropout": dropout,
                     "augment": list(augment), "seed": seed, "device": device, "processes": dist.world},
        "best_eval": eval_info,
        "heldout": heldout_info,
    }
    output = write_trained(s_ckpt, output, prov, overwrite=overwrite, trainer=trainer,
                           keep_checkpoints=keep_checkpoints)
    return DistillResult(
        output=output, teacher=t_source, student=prov["student"]["id"], layers=keep, dim=dim, corpus=counts,
        pca_explained_variance=targets.pca.explained_variance, targets_cached=targets.reused,
        teacher_seconds=round(targets.seconds, 2), train=result.to_dict(), eval=eval_info, heldout=heldout_info,
        params=sum(p.numel() for p in s_ckpt.model.parameters()) + projection.weight.numel() + projection.bias.numel(),
        seconds=round(time.perf_counter() - start, 2), run_dir=str(run_dir), hints=hints, task=task,
    )
