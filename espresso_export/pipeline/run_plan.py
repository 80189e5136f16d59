"""What a recipe would do, without running it: each step's inputs, output folder and settings (``run --plan``),
and the warnings said before anything runs."""

from __future__ import annotations

from espresso_export.pipeline.recipes import MODEL_STEPS, Recipe, Step, step_fields
from espresso_export.pipeline.state import REPORT_JSON


def selection_warnings(recipe: Recipe) -> list[str]:
    """Sets a training step chooses its kept checkpoint on that the verify step also reports on: its retention
    there is optimistic (verify notes it too; said before anything runs)."""
    from espresso_export.data.files import spec_key

    chose = {spec_key(v) for s in recipe.steps if s.kind in ("distill", "train")
             for v in (getattr(s.config, "eval_sts", None), getattr(s.config, "eval_retrieval", None)) if v}
    verify = recipe.step("verify")
    if verify is None or not chose:
        return []
    return [f"verify reports on {spec}, which also chooses the kept checkpoint (eval_sts / eval_retrieval): its "
            "retention there will be optimistic; report on a set training never saw"
            for spec in [*verify.config.sts, *verify.config.retrieval] if spec_key(spec) in chose]


def plan(recipe: Recipe) -> list[dict]:
    """What each step reads and writes, without running anything."""
    rows, model, export, report, cut_from = [], "source", None, None, None
    folders = {s.kind: recipe.folder(s).name for s in recipe.steps}
    for i, s in enumerate(recipe.steps, start=1):
        c = s.config
        if s.kind == "distill":
            if c.student is None and model == folders.get("shrink"):  # shrink, then heal
                teacher = c.teacher or cut_from
                reads = f"teacher {teacher}; student: {cut_from} cut like {model} (healing)"
            else:
                student = c.student or (model if model != "source" else f"source cut to {c.student_layers}")
                reads = f"teacher {c.teacher or 'source'}; student {student}"
        elif s.kind == "verify":
            reads = f"{export or model} against {c.against or 'source'}"
        elif s.kind == "push":
            reads = ", ".join(filter(None, [model, export, report]))
        else:
            reads = model
        if s.kind == "shrink":
            cut_from = model
        if s.kind in MODEL_STEPS:
            model = folders[s.kind]
        elif s.kind == "export":
            export = folders[s.kind]
        elif s.kind == "verify":
            report = f"{folders[s.kind]}/{REPORT_JSON}"
        rows.append({"index": i, "step": s.kind, "reads": reads, "writes": folders[s.kind], "settings": _settings(s)})
    return rows


def _settings(step: Step) -> str:
    """The settings that differ from the library's defaults, and the data a step reads even by default (a gate
    decided on verify's built-in smoke set must show it)."""
    out = []
    for f in step_fields(type(step.config)):
        value = getattr(step.config, f.name)
        data = f.spec.path == "data" and value not in (None, [], ())
        if data or (value != f.default and not (isinstance(value, tuple) and list(value) == f.default)):
            shown = value.value if hasattr(value, "value") else value
            if isinstance(shown, (list, tuple)):
                shown = [v.value if hasattr(v, "value") else v for v in shown]
            out.append(f"{f.name}={shown}")
    return ", ".join(out)


__all__ = ["plan", "selection_warnings"]
