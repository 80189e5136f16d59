"""``distill``: Homomorphic Projective Distillation (HPD) and "shrink, then heal" (docs/methods.md says how
each works and when to use which).

The code follows the phases of a run, one module each: :mod:`.plan` (one call's plan as one object),
:mod:`.inputs` -> :mod:`.targets` (with :mod:`.teacher_cache`) -> :mod:`.student` (models and projection) ->
:mod:`.tasks` (the objectives) -> :mod:`.write`; :mod:`.run` holds ``distill()`` and the training phase.
The names below are imported on first use, so reading :mod:`.distill_settings` (the CLI's ``--help``, a
recipe) does not import torch.
"""

_LAZY = {
    "distill": "espresso_export.distilling.run",
    "DistillResult": "espresso_export.distilling.write",
    "prepare_corpus": "espresso_export.distilling.inputs",
    "add_pair_sentences": "espresso_export.distilling.inputs",
    "TEACHER_CHUNK": "espresso_export.distilling.targets",
    "TeacherTargets": "espresso_export.distilling.targets",
    "teacher_targets": "espresso_export.distilling.targets",
    "build_static": "espresso_export.distilling.static",
    "StaticResult": "espresso_export.distilling.static",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'espresso_export.distilling' has no attribute {name!r}")
