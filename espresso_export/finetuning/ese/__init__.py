"""ESE (Espresso Sentence Embeddings): the training objective, as plain torch functions.

A model trained with it can be cut to its first layers and first ``k`` dims with no head (docs/methods.md
explains the method and where this implementation follows the paper or its reference code). The total loss is
``L_task + alpha * L_le + beta * L_lc``: the plain objective on the full-width last layer, learn-to-express on
every trained layer's first ``k`` dims, and learn-to-compress towards their PCA targets; ``alpha = beta = 0`` is
plain fine-tuning, the control.

The modules: :mod:`.config` (the objective's settings, torch-free), :mod:`.losses` (sentence losses on pairs),
:mod:`.compress` (the PCA target and its alignment), :mod:`.data` (examples and batches), :mod:`.objective`
(:class:`EseObjective`, the whole loss). Import the names from here.
"""

from __future__ import annotations

from espresso_export.core.renamed import old_names
from espresso_export.finetuning.ese.compress import align_loss, compress_loss, pca_target
from espresso_export.finetuning.ese.config import (
    DEFAULT_SCALE, AngleWeights, EseObjectiveSettings, LayerWeighting, SentenceLoss, log_layer_weights,
)
from espresso_export.finetuning.ese.data import EseBatch, EseData, check_loss_fits
from espresso_export.finetuning.ese.losses import (
    PairEmbeddings, angle_pairs, angle_term, cosent_loss, cosine_pairs, infonce_loss, ranking_loss, sentence_loss,
)
from espresso_export.finetuning.ese.objective import EseObjective

__all__ = [
    "DEFAULT_SCALE", "AngleWeights", "EseBatch", "EseData", "EseObjective", "EseObjectiveSettings", "LayerWeighting",
    "PairEmbeddings", "SentenceLoss", "align_loss", "angle_pairs", "angle_term", "check_loss_fits", "compress_loss",
    "cosent_loss", "cosine_pairs", "infonce_loss", "log_layer_weights", "pca_target", "ranking_loss",
    "sentence_loss",
]


__getattr__ = old_names(__name__, {"EseConfig": ("EseObjectiveSettings", lambda: EseObjectiveSettings)})
