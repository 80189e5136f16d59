"""espresso-export: turn a sentence-embedding checkpoint into a small, fast, verified model.

The public API is imported lazily so ``import espresso_export`` (and the CLI's
``--help``) stays instant::

    from espresso_export import shrink
    result = shrink("minilm", "out/minilm-L3-d128", layers=3, dim=128)
"""

from __future__ import annotations

__version__ = "0.1.0"

_LAZY = {
    "shrink": ("espresso_export.shrinking", "shrink"),
    "ShrinkResult": ("espresso_export.shrinking", "ShrinkResult"),
    "distill": ("espresso_export.distillation", "distill"),
    "DistillResult": ("espresso_export.distillation", "DistillResult"),
    "read_corpus": ("espresso_export.data", "read_corpus"),
    "train": ("espresso_export.training", "train"),
    "Trainer": ("espresso_export.training", "Trainer"),
    "TrainConfig": ("espresso_export.training", "TrainConfig"),
    "TrainingTask": ("espresso_export.training", "TrainingTask"),
    "load": ("espresso_export.checkpoint", "load"),
    "Checkpoint": ("espresso_export.checkpoint", "Checkpoint"),
    "encode": ("espresso_export.embed", "encode"),
    "export": ("espresso_export.exporting.pipeline", "export"),
    "ExportOptions": ("espresso_export.exporting.options", "ExportOptions"),
    "ExportResult": ("espresso_export.exporting.pipeline", "ExportResult"),
    "OnnxEncoder": ("espresso_export.runtime", "OnnxEncoder"),
    "is_export_folder": ("espresso_export.runtime", "is_export_folder"),
    "push": ("espresso_export.hub", "push"),
    "PushResult": ("espresso_export.hub", "PushResult"),

    "verify": ("espresso_export.verification.runner", "verify"),
    "VerifyOptions": ("espresso_export.verification.runner", "VerifyOptions"),
    "VerifyReport": ("espresso_export.verification.report", "VerifyReport"),
    "Thresholds": ("espresso_export.verification.report", "Thresholds"),
    "open_embedder": ("espresso_export.verification.embedders", "open_embedder"),
    "sweep": ("espresso_export.sweeping", "sweep"),
    "SweepOptions": ("espresso_export.sweeping", "SweepOptions"),
    "SweepResult": ("espresso_export.sweeping", "SweepResult"),
    "Recipe": ("espresso_export.recipes", "Recipe"),
    "load_recipe": ("espresso_export.recipes", "load_recipe"),
    "run_recipe": ("espresso_export.recipe_runner", "run_recipe"),
    "RunResult": ("espresso_export.recipe_runner", "RunResult"),
    "prune_vocab": ("espresso_export.pruning", "prune_vocab"),
    "PruneResult": ("espresso_export.pruning", "PruneResult"),
    "EspressoError": ("espresso_export.errors", "EspressoError"),
    "PeerFailure": ("espresso_export.distributed", "PeerFailure"),
    "Head": ("espresso_export.types", "Head"),
    "IndexKind": ("espresso_export.types", "IndexKind"),
    "Pooling": ("espresso_export.types", "Pooling"),
    "Select": ("espresso_export.types", "Select"),
    "Quantize": ("espresso_export.types", "Quantize"),
    "Optimize": ("espresso_export.types", "Optimize"),
    "ExportFormat": ("espresso_export.types", "ExportFormat"),
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'espresso_export' has no attribute {name!r}")
