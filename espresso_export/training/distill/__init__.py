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
its share (:mod:`espresso_export.training.distributed`): the corpus is embedded once.

The code follows the phases of a run, one module each: :mod:`.args` (the arguments as one object),
:mod:`.corpus` -> :mod:`.targets` (with :mod:`.cache`) -> :mod:`.student` (models and projection) ->
:mod:`.tasks` (the objectives) -> :mod:`.write`; :mod:`.run` holds ``distill()`` and the training phase.
"""

from espresso_export.core.types import Loss, ProjectionInit
from espresso_export.model.cache import default_cache_dir
from espresso_export.model.post import renormalized
from espresso_export.training.distill.cache import CACHE_FORMAT
from espresso_export.training.distill.corpus import add_pair_sentences, prepare_corpus
from espresso_export.training.distill.run import distill
from espresso_export.training.distill.student import HEAL_LR, HPD_LR, PAIR_LR, STUDENT_PCA_SAMPLES, init_projection
from espresso_export.training.distill.targets import TEACHER_CHUNK, TeacherTargets, teacher_targets
from espresso_export.training.distill.tasks import HealTask, PairHealTask
from espresso_export.training.distill.write import DistillResult

__all__ = [
    "CACHE_FORMAT", "HEAL_LR", "HPD_LR", "PAIR_LR", "STUDENT_PCA_SAMPLES", "TEACHER_CHUNK", "DistillResult",
    "HealTask", "Loss", "PairHealTask", "ProjectionInit", "TeacherTargets", "add_pair_sentences",
    "default_cache_dir", "distill", "init_projection", "prepare_corpus", "teacher_targets",
]


def _base_post(ckpt) -> list:
    """``ckpt``'s post modules renormalized (:func:`~espresso_export.model.post.renormalized`): the old name."""
    return renormalized(ckpt.post)
