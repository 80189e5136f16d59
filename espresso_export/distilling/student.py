"""Phase 3 of ``distill``: the teacher and the student, and the student's initial projection.

The student is a checkpoint of its own, or a copy of the teacher cut to ``student_layers`` (then student
layer ``j`` is teacher layer ``keep[j]``, which layer targets use). The projection to ``dim`` is initialised
from the PCA of the student's *own* embeddings, rotated and scaled onto the teacher's PCA axes by orthogonal
Procrustes: that changes no cosine, so step 0 scores exactly as the plain cut with a PCA head.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from espresso_export.core.errors import ValidationError
from espresso_export.core.types import ProjectionInit
from espresso_export.model.checkpoint import Checkpoint, load
from espresso_export.model.embed import encode
from espresso_export.model.post import renormalized
from espresso_export.shrinking.heads import fit_pca
from espresso_export.shrinking.slicing import cut, select_layers
from espresso_export.distilling.plan import DistillPlan
from espresso_export.distilling.inputs import CorpusSplit
from espresso_export.distilling.targets import pca_size

STUDENT_PCA_SAMPLES = 4096  # at most this many sentences for the student's own PCA (>= 10 x a 384-d width)

# Default peak learning rates (AdamW) when ``lr`` is not given: healing a cut teacher; a separate student (the HPD
# paper's rate: a fresh projection needs a lower one); the pair loss on an already trained student.
HEAL_LR = 1e-3
HPD_LR = 1e-4
PAIR_LR = 5e-5


@dataclass
class Models:
    teacher: Checkpoint | None  # dropped (set to None) once the teacher targets are computed
    student: Checkpoint  # already cut to the kept layers
    teacher_info: dict  # id, weights_sha256, depth, hidden_size: for the provenance after the teacher is gone
    student_sha: str
    from_teacher: bool  # the student is the teacher (cut): "healing"
    keep: list[int] | None  # the teacher's (or student's) kept layers, when cut
    source_depth: int  # the student's depth before the cut
    layer_map: dict[int, int]  # student layer j (0-based) -> teacher layer, with layer targets
    lr: float  # ``lr``, or the default for this kind of run


def _load_model(spec, role: str, pooling, trust_remote_code: bool) -> Checkpoint:
    from espresso_export.core.errors import NotFoundError, UnsupportedModelError

    try:
        return load(spec, pooling=pooling, trust_remote_code=trust_remote_code)
    except (NotFoundError, UnsupportedModelError) as e:
        raise type(e)(f"{role}: {e.message}") from e


def _load_teacher(plan: DistillPlan, n_sentences: int) -> Checkpoint:
    t_ckpt = _load_model(plan.teacher, "teacher", plan.pooling, plan.trust_remote_code)
    pca_size(t_ckpt.output_dim, n_sentences, plan.dim, plan.pca_samples)  # before the teacher pass
    return t_ckpt


def load_models(plan: DistillPlan, n_sentences: int) -> Models:
    """Load the teacher and the student (or copy the teacher), cut the student, and map its layers."""
    t_ckpt = _load_teacher(plan, n_sentences)
    teacher_sha = t_ckpt.weights_sha256()
    if plan.student is None:
        s_ckpt, student_sha, from_teacher = copy.deepcopy(t_ckpt), teacher_sha, True
    else:
        s_ckpt = _load_model(plan.student, "student", None, plan.trust_remote_code)
        student_sha = s_ckpt.weights_sha256()
        from_teacher = student_sha == teacher_sha and s_ckpt.depth == t_ckpt.depth
    lr = plan.lr if plan.lr is not None else PAIR_LR if plan.loss.on_pairs else HEAL_LR if from_teacher else HPD_LR
    source_depth = s_ckpt.depth
    keep: list[int] | None = None
    if plan.student_layers is not None:
        keep = select_layers(source_depth, plan.student_layers, plan.select, ese_trained=s_ckpt.ese_trained,
                             option="--student-layers")
        cut(s_ckpt.model, s_ckpt.arch, keep)
    if plan.layer_targets and plan.loss.on_pairs:
        raise ValidationError(f"--layer-targets works with the mse losses, not --loss {plan.loss.value}")
    if plan.layer_targets and not from_teacher:
        raise ValidationError("--layer-targets needs a student cut from the teacher (--student-layers without "
                              "--student): a different student has no matching teacher layers")
    kept = keep if keep is not None else list(range(source_depth))
    layer_map = {j: kept[j] for j in range(len(kept))} if plan.layer_targets else {}
    teacher_info = {"id": t_ckpt.source, "weights_sha256": teacher_sha, "depth": t_ckpt.depth,
                    "hidden_size": t_ckpt.hidden_size}
    return Models(teacher=t_ckpt, student=s_ckpt, teacher_info=teacher_info, student_sha=student_sha,
                  from_teacher=from_teacher, keep=keep, source_depth=source_depth, layer_map=layer_map, lr=lr)


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


def build_projection(plan: DistillPlan, student: Checkpoint, corpus: CorpusSplit, targets: np.ndarray):
    """The ``torch.nn.Linear`` to ``dim``: the student's own PCA (on a sample of the corpus), aligned to the
    teacher's axes (``targets``: the teacher's PCA targets of every corpus sentence)."""
    import torch

    sentences = corpus.sentences
    m = min(plan.pca_samples, len(sentences), STUDENT_PCA_SAMPLES)
    sample = np.sort(np.random.default_rng(plan.seed + 1).choice(len(sentences), size=m, replace=False))
    saved_post, student.post = student.post, renormalized(student.post)
    try:
        s_emb = encode(student, [sentences[i] for i in sample], batch_size=plan.batch_size,
                       progress="student PCA" if plan.progress else None)
    finally:
        student.post = saved_post
    if m < plan.dim or s_emb.shape[1] < plan.dim:
        raise ValidationError(f"--dim {plan.dim} is larger than the student's width {s_emb.shape[1]} "
                              f"or its PCA sample {m}")
    weight, bias, _ = init_projection(s_emb, np.asarray(targets[sample]), plan.dim, plan.projection_init)
    projection = torch.nn.Linear(s_emb.shape[1], plan.dim, bias=True)
    with torch.no_grad():  # host: copied into the projection's own weights (moved with it)
        projection.weight.copy_(torch.from_numpy(weight))
        projection.bias.copy_(torch.from_numpy(bias))
    return projection
