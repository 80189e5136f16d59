"""espresso-export: turn a sentence-embedding checkpoint into a small, fast, verified model.

The public API is imported lazily so ``import espresso_export`` (and the CLI's
``--help``) stays instant::

    from espresso_export import shrink
    result = shrink("minilm", "out/minilm-L3-d128", layers=3, dim=128)
"""

from __future__ import annotations

from espresso_export.core.telemetry import no_onnxruntime_telemetry

__version__ = "0.1.0"

no_onnxruntime_telemetry()  # onnxruntime would report usage from its import on (core/telemetry.py)

_LAZY = {
    "shrink": ("espresso_export.shrinking.shrink", "shrink"),
    # each step's settings, declared once (README "Pipeline"): what the commands, recipes and these calls take
    "ShrinkSettings": ("espresso_export.shrinking.shrink_settings", "ShrinkSettings"),
    "DistillSettings": ("espresso_export.distilling.distill_settings", "DistillSettings"),
    "TrainSettings": ("espresso_export.finetuning.train_settings", "TrainSettings"),
    "VerifySettings": ("espresso_export.verification.verify_settings", "VerifySettings"),
    "PushSettings": ("espresso_export.publishing.push_settings", "PushSettings"),
    "ShrinkResult": ("espresso_export.shrinking.shrink", "ShrinkResult"),
    "distill": ("espresso_export.distilling.run", "distill"),
    "DistillResult": ("espresso_export.distilling.write", "DistillResult"),
    "read_corpus": ("espresso_export.data", "read_corpus"),
    "train": ("espresso_export.training.loop", "train"),
    "Trainer": ("espresso_export.training.loop", "Trainer"),
    "LoopSettings": ("espresso_export.training.loop", "LoopSettings"),
    "TrainingTask": ("espresso_export.training.loop", "TrainingTask"),
    "load": ("espresso_export.model.checkpoint", "load"),
    "Checkpoint": ("espresso_export.model.checkpoint", "Checkpoint"),
    "encode": ("espresso_export.model.embed", "encode"),
    "export": ("espresso_export.exporting.export", "export"),
    "ExportSettings": ("espresso_export.exporting.export_settings", "ExportSettings"),
    "ExportResult": ("espresso_export.exporting.export", "ExportResult"),
    "OnnxEncoder": ("espresso_export.runtime", "OnnxEncoder"),
    "is_export_folder": ("espresso_export.runtime", "is_export_folder"),
    "push": ("espresso_export.publishing.push", "push"),
    "PushResult": ("espresso_export.publishing.push", "PushResult"),

    "verify": ("espresso_export.verification.verify", "verify"),
    "VerifyReport": ("espresso_export.verification.report", "VerifyReport"),
    "Thresholds": ("espresso_export.verification.report", "Thresholds"),
    "open_embedder": ("espresso_export.verification.embedders", "open_embedder"),
    "judge": ("espresso_export.verification.judge", "judge"),
    "JudgeSettings": ("espresso_export.verification.judge_settings", "JudgeSettings"),
    "JudgeResult": ("espresso_export.verification.judge", "JudgeResult"),
    "sweep": ("espresso_export.sweeping.sweep", "sweep"),
    "auto": ("espresso_export.searching.auto", "auto"),
    "AutoSettings": ("espresso_export.searching.auto_settings", "AutoSettings"),
    "AutoResult": ("espresso_export.searching.auto_result", "AutoResult"),
    "SweepSettings": ("espresso_export.sweeping.sweep_settings", "SweepSettings"),
    "SweepResult": ("espresso_export.sweeping.sweep_result", "SweepResult"),
    "Recipe": ("espresso_export.pipeline.recipes", "Recipe"),
    "load_recipe": ("espresso_export.pipeline.recipes", "load_recipe"),
    "run_recipe": ("espresso_export.pipeline.recipe_runner", "run_recipe"),
    "RunResult": ("espresso_export.pipeline.recipe_runner", "RunResult"),
    "prune_vocab": ("espresso_export.shrinking.pruning", "prune_vocab"),
    "PruneResult": ("espresso_export.shrinking.pruning", "PruneResult"),
    "EspressoError": ("espresso_export.core.errors", "EspressoError"),
    "PeerFailure": ("espresso_export.training.distributed", "PeerFailure"),
    "Head": ("espresso_export.core.types", "Head"),
    "IndexKind": ("espresso_export.core.types", "IndexKind"),
    "Pooling": ("espresso_export.core.types", "Pooling"),
    "Select": ("espresso_export.core.types", "Select"),
    "Quantize": ("espresso_export.core.types", "Quantize"),
    "Optimize": ("espresso_export.core.types", "Optimize"),
    "ExportFormat": ("espresso_export.core.types", "ExportFormat"),
}

__all__ = ["__version__", *_LAZY]

# names of earlier releases: still importable, with a DeprecationWarning naming the new one
_RENAMED = {
    "ExportOptions": "ExportSettings",
    "VerifyOptions": "VerifySettings",
    "SweepOptions": "SweepSettings",
    "TrainConfig": "LoopSettings",
}


def __getattr__(name: str):
    if name in _RENAMED:
        import warnings

        warnings.warn(f"espresso_export.{name} is now {_RENAMED[name]}; the old name will be removed in 1.0",
                      DeprecationWarning, stacklevel=2)
        name = _RENAMED[name]
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'espresso_export' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The lazy names too: ``dir(espresso_export)`` and a notebook's tab completion showed none of the API."""
    return sorted({*globals(), *__all__})
