"""The optional packages a recipe needs, from its steps' settings: checked before its first step runs, so a
missing one fails at once instead of after the training steps (:mod:`espresso_export.core.extras`)."""

from __future__ import annotations

from espresso_export.data import input_extras


def recipe_extras(recipe) -> list[str]:
    """The features of :data:`espresso_export.core.extras.EXTRAS` that ``recipe``'s steps use."""
    needed: list[str] = []
    exported = False
    for step in recipe.steps:
        c = step.config
        if step.kind == "export" and c.onnx:
            needed.append("onnx-export")
            exported = True
        elif step.kind == "verify":
            needed += ["retrieval"] if c.retrieval or c.corpus else []
            needed += ["onnx-runtime"] if exported else []  # verify checks the last export
            needed += input_extras([*c.sts, *c.retrieval], split=True)
        elif step.kind == "train":
            needed += (["lora"] if c.lora else []) + input_extras([c.data, c.eval_sts])
        elif step.kind == "distill":
            needed += input_extras([*(c.corpus or []), *(c.pairs or []), c.eval_sts])
        elif step.kind == "shrink":
            needed += input_extras([c.calibration])
    return list(dict.fromkeys(needed))
