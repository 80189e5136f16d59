"""ESE (Espresso Sentence Embeddings): the training objective, as plain torch functions.

A model trained with it can be cut to its first ``L`` layers and first ``k``
dims with no head (seeds 000/003, ``docs/methods.md``). Notation: ``n`` layers,
hidden size ``d``, ``X_i`` the pooled embedding after layer ``i`` (1-based),
``X_i^k`` its first ``k`` dims, ``loss`` a sentence-embedding loss.

* learn-to-express: ``L_le = sum_{i<n} w_i loss(X_i^k) + loss(X_n^k)``;
* learn-to-compress: ``L_lc = sum_{i<n} w_i align(X_i^k, T_i) + align(X_n^k, T_n)``
  with ``align = MSE + KL`` and ``T_i`` the PCA target of :func:`pca_target`;
* total: ``L_task + alpha * L_le + beta * L_lc``.

``L_task = loss(X_n^d)`` is the plain objective on the full-width last layer,
the one a model without ESE is fine-tuned with. The paper's equations do not
write it, but its reference implementation (AnglE's ``AngleESETrainer``)
adds it, and without it nothing trains the full-width output that the uncut
model serves. With ``alpha = beta = 0`` the objective is exactly the control
(plain fine-tuning), which is how the benchmark's control run is made.

Layer weights ``w_i`` (``i`` = absolute layer number, last layer always 1):
``log`` = ``1 / (1 + ln i)`` (the paper's default), ``uniform`` = 1, ``learned``
= ``m * softmax(logits)`` over the ``m`` shallow layers (starts uniform).

Deviations from the reference implementation, on purpose: it sums
``hidden_states[0 .. n-2]``, i.e. the *embedding layer* output with weight 1
and never layer ``n-1``; we use layers ``1 .. n-1`` as the paper writes. It
also divides the shallow-layer sum by ``n - 1``; we keep the paper's plain sum.

The modules: :mod:`.config` (the settings, torch-free), :mod:`.losses` (sentence losses on pairs),
:mod:`.compress` (the PCA target and its alignment), :mod:`.data` (examples and batches),
:mod:`.objective` (:class:`EseObjective`, the whole loss). Import the names from here.
"""

from __future__ import annotations

from espresso_export.finetuning.ese.compress import align_loss, compress_loss, pca_target
from espresso_export.finetuning.ese.config import (
    DEFAULT_SCALE, AngleWeights, EseConfig, LayerWeighting, SentenceLoss, log_layer_weights,
)
from espresso_export.finetuning.ese.data import EseBatch, EseData, check_loss_fits
from espresso_export.finetuning.ese.losses import (
    PairEmbeddings, angle_pairs, angle_term, cosent_loss, cosine_pairs, infonce_loss, ranking_loss, sentence_loss,
)
from espresso_export.finetuning.ese.objective import EseObjective

__all__ = [
    "DEFAULT_SCALE", "AngleWeights", "EseBatch", "EseConfig", "EseData", "EseObjective", "LayerWeighting",
    "PairEmbeddings", "SentenceLoss", "align_loss", "angle_pairs", "angle_term", "check_loss_fits", "compress_loss",
    "cosent_loss", "cosine_pairs", "infonce_loss", "log_layer_weights", "pca_target", "ranking_loss",
    "sentence_loss",
]
