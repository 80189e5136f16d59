"""``run``: carry out a :class:`~espresso_export.pipeline.recipes.Recipe`, each step's output feeding the next.

The run folder holds ``run.json`` (the recipe as run and each step's status, time and summary) and one folder per
step: ``1-shrink/`` (shrink, distill and train write a model folder), ``3-export/``, ``4-verify/`` (report.json,
report.md), ``5-push/`` (the staged upload, or push.json for the commit made).

Wiring: model steps read the previous model (the source at first); export reads the last model; verify measures
the export (else the last model) against ``against`` (default: the source); push uploads the last model with the
export and the report. A distill after a shrink heals the cut: the model the shrink cut is the teacher, cut again
to the same layers, with the shrink's dim. A failed verify gate stops the run before push
(:class:`~espresso_export.core.errors.GateFailedError`, exit 3); the folder rules are in
:mod:`espresso_export.pipeline.state`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from espresso_export.core.extras import require
from espresso_export.pipeline.recipe_extras import recipe_extras
from espresso_export.core.formatting import number
from espresso_export.core.errors import GateFailedError
from espresso_export.core.files import atomic_output, write_text_atomic
from espresso_export.pipeline.recipes import MODEL_STEPS, Recipe, Step
from espresso_export.pipeline.run_log import print_step, step_line
from espresso_export.pipeline.run_plan import plan, selection_warnings
from espresso_export.pipeline.state import (
    REPORT_JSON, STATE_FILE, check_run_folder, fingerprint, read_state, remove_stale, step_paths, write_state,
)

REPORT_MD = "report.md"
PUSH_RECORD = "push.json"


@dataclass
class StepOutcome:
    index: int
    kind: str
    folder: Path
    status: str  # done | reused | gate failed | not run
    summary: str = ""
    seconds: float = 0.0
    result: dict | None = None

    def to_dict(self) -> dict:
        return {**asdict(self), "folder": str(self.folder)}


@dataclass
class RunResult:
    recipe: Recipe
    steps: list[StepOutcome]
    gate_error: str | None = None  # the failed gate's message: the run stopped there
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.gate_error is None

    def raise_for_gate(self) -> None:
        if self.gate_error:
            skipped = [s.kind for s in self.steps if s.status == "not run"]
            raise GateFailedError(self.gate_error + (f"; stopped before {', '.join(skipped)}" if skipped else ""))

    def to_dict(self) -> dict:
        return {"recipe": self.recipe.name, "file": str(self.recipe.path) if self.recipe.path else None,
                "output": str(self.recipe.run_folder), "passed": self.passed, "gate_error": self.gate_error,
                "steps": [s.to_dict() for s in self.steps], "seconds": round(self.seconds, 2)}


# --- running ------------------------------------------------------------------------------------------------

@dataclass
class _Flow:
    """What the steps so far produced."""

    model: str  # the current model: the source, or a step's folder
    source: str
    shrink_input: str | None = None  # the model the shrink step cut
    shrink_folder: Path | None = None
    export: Path | None = None
    report: Path | None = None
    threads: int | None = None


StepListener = Callable[[StepOutcome, int, bool], None]  # (outcome, total steps, finished)


def run_recipe(recipe: Recipe, *, resume: bool = False, overwrite: bool = False, progress: bool = False,
               trust_remote_code: bool = False, on_step: StepListener | None = None) -> RunResult:
    """Run every step of ``recipe`` in its run folder; a failed gate stops the run before push.

    ``trust_remote_code`` allows model code from the Hub for every step (a recipe cannot: only the caller).
    ``on_step(outcome, total, finished)`` hears each step start and end (a kept step: its end only); without it,
    ``progress`` prints :func:`step_line` on stderr, so a long run says which step it is in and what each took.
    Returns the outcome of each step; :meth:`RunResult.raise_for_gate` raises the gate failure (exit code 3).
    """
    import torch

    start = time.perf_counter()
    recipe, previous = _prepare(recipe, resume=resume, overwrite=overwrite, trust_remote_code=trust_remote_code)
    old_steps = {s.get("index"): s for s in previous} if resume else {}
    written_before = {s.get("index"): s.get("kind") for s in previous}  # step folders this tool wrote here
    state = {"recipe": recipe.to_dict(), "steps": []}
    flow = _Flow(model=recipe.source, source=recipe.source, threads=recipe.threads)
    outcomes = [StepOutcome(i, s.kind, recipe.folder(s), "not run") for i, s in enumerate(recipe.steps, start=1)]
    listener = on_step or (print_step if progress else None)
    heard = (lambda o, finished: listener(o, len(outcomes), finished)) if listener else None
    threads_before = torch.get_num_threads()
    if recipe.threads:
        torch.set_num_threads(recipe.threads)
    reusing, gate_error = resume, None
    try:
        for step, outcome in zip(recipe.steps, outcomes):
            record = {"index": outcome.index, "kind": step.kind, "settings": step.to_dict(), "source": recipe.source,
                      "inputs": fingerprint([recipe.source, flow.model, flow.shrink_input, flow.export, flow.report,
                                             *step_paths(step)])}
            old = old_steps.get(outcome.index)
            reusing = reusing and _reusable(step, outcome.folder, old, record)
            gate_error = _do_step(step, outcome, flow, old if reusing else None, heard, resume=resume,
                                  overwrite=overwrite, progress=progress)
            state["steps"].append({**record, "status": outcome.status, "summary": outcome.summary,
                                   "seconds": outcome.seconds, "result": outcome.result})
            write_state(recipe.run_folder, state)
            if gate_error:  # the run stops here: a previous run's later folders (a card saying "passed") go
                remove_stale([(o.index, o.kind, o.folder) for o in outcomes[outcome.index:]], written_before)
                break
    finally:
        torch.set_num_threads(threads_before)
    return RunResult(recipe, outcomes, gate_error=gate_error, seconds=time.perf_counter() - start)


def _prepare(recipe: Recipe, *, resume: bool, overwrite: bool, trust_remote_code: bool) -> tuple[Recipe, list[dict]]:
    """Everything checked before a step runs (folder, extras, a push's token), the run folder with its state file,
    and the previous run's steps."""
    check_run_folder(recipe, resume=resume, overwrite=overwrite)
    if trust_remote_code:
        recipe = _allow_remote_code(recipe)
    require(*recipe_extras(recipe))
    push = recipe.step("push")
    if push is not None and not push.config.dry_run:
        _preflight_push()
    folder = recipe.run_folder
    folder.mkdir(parents=True, exist_ok=True)
    previous = read_state(folder).get("steps", [])
    if not (folder / STATE_FILE).is_file():  # the marker of a run folder, there before any step writes
        write_state(folder, {"recipe": recipe.to_dict(), "steps": []})
    return recipe, previous


def _do_step(step: Step, outcome: StepOutcome, flow: _Flow, kept: dict | None, heard, *, resume: bool,
             overwrite: bool, progress: bool) -> str | None:
    """Run one step, or keep the previous run's record of it (``kept``); returns a verify step's failed gate."""
    t0 = time.perf_counter()
    if kept is not None:
        outcome.status, outcome.summary, outcome.result = "reused", kept.get("summary", ""), kept.get("result")
    else:
        if heard:
            heard(outcome, False)
        outcome.result, outcome.summary = _RUNNERS[step.kind](step, outcome.folder, flow, resume=resume,
                                                              overwrite=overwrite or resume, progress=progress)
        outcome.status = "done"
    _advance(step, outcome.folder, flow)
    outcome.seconds = round(time.perf_counter() - t0, 2)
    gate_error = _gate_error(outcome.folder / REPORT_JSON) if step.kind == "verify" else None
    if gate_error:
        outcome.status = "gate failed"
    if heard:
        heard(outcome, True)
    return gate_error


def _reusable(step: Step, folder: Path, old: dict | None, record: dict) -> bool:
    """A finished step of the previous run is kept when its kind, settings, source and inputs are unchanged and
    its output is complete."""
    return (old is not None and old.get("status") in ("done", "reused") and _complete(step, folder)
            and all(old.get(k) == record[k] for k in ("kind", "settings", "source", "inputs")))


def _allow_remote_code(recipe: Recipe) -> Recipe:
    """``recipe`` with ``trust_remote_code`` on in every step that loads a model."""
    steps = [replace(s, config=replace(s.config, trust_remote_code=True))
             if any(f.name == "trust_remote_code" for f in fields(s.config)) else s for s in recipe.steps]
    return replace(recipe, steps=steps)


def _preflight_push() -> None:
    """Fail before hours of training, not at the end: a real push needs a token and the network."""
    from huggingface_hub import constants

    from espresso_export.core.errors import OfflineError
    from espresso_export.publishing.push import resolve_token

    resolve_token(None)
    if constants.HF_HUB_OFFLINE:
        raise OfflineError("the recipe pushes, but HF_HUB_OFFLINE is set; unset it or use push.dry_run: true")


def _complete(step: Step, folder: Path) -> bool:
    if step.kind == "verify":
        return (folder / REPORT_JSON).is_file()
    if step.kind == "push" and not step.config.dry_run:
        return (folder / PUSH_RECORD).is_file()
    return folder.is_dir()


def _advance(step: Step, folder: Path, flow: _Flow) -> None:
    if step.kind == "auto":  # the answer and its export, as a model step and an export step would leave them
        flow.model, flow.export, flow.report = str(folder / "model"), folder / "export", folder / "verify.json"
        return
    if step.kind == "shrink":
        flow.shrink_input, flow.shrink_folder = flow.model, folder
    if step.kind in MODEL_STEPS:
        flow.model = str(folder)
    elif step.kind == "export":
        flow.export = folder
    elif step.kind == "verify":
        flow.report = folder / REPORT_JSON


def _gate_error(report: Path) -> str | None:
    data = json.loads(report.read_text(encoding="utf-8"))
    gate = data.get("gate") or {}
    if gate.get("passed", True):
        return None
    failed = [c for c in gate.get("checks", []) if not c.get("passed")]
    return "quality gate failed: " + "; ".join(f"{c['name']} = {c['value']}, needs {c['threshold']}" for c in failed)


# --- one function per step: (step, folder, flow) -> (result dict, summary) ----------------------------------

def _run_shrink(step: Step, folder: Path, flow: _Flow, *, resume: bool, overwrite: bool, progress: bool):
    from espresso_export.shrinking.shrink import shrink

    r = shrink(flow.model, folder, step.config, overwrite=overwrite, progress=progress)
    summary = (f"{len(r.layers)} of {r.source_depth} layers {r.layers}, {r.dim}-d, {r.head.value} head, "
               f"{r.params_before / 1e6:.1f}M -> {r.params_after / 1e6:.1f}M parameters")
    return r.to_dict(), summary


def _shrink_cut(flow: _Flow) -> tuple[list[int], int]:
    prov = json.loads((flow.shrink_folder / "espresso.json").read_text(encoding="utf-8"))
    return list(prov["layers"]), int(prov["dim"])


def _run_distill(step: Step, folder: Path, flow: _Flow, *, resume: bool, overwrite: bool, progress: bool):
    from espresso_export.distilling import distill
    from espresso_export.training.loop import read_checkpoint_meta
    from espresso_export.distilling.distill_settings import DistillSettings

    c = step.config
    teacher, student, layers, dim = c.teacher, c.student, c.student_layers, c.dim
    healing = student is None and flow.shrink_folder is not None and flow.model == str(flow.shrink_folder)
    if healing:  # shrink then heal: the teacher cut again like the shrink step cut it
        kept, shrink_dim = _shrink_cut(flow)
        teacher = teacher or flow.shrink_input
        layers = kept if layers is None else layers
        dim = shrink_dim if dim is None else dim
    else:
        teacher = teacher or flow.source
        if student is None and flow.model != flow.source:
            student = flow.model
    run_dir = Path(str(folder) + ".run")
    settings = replace(_settings_only(c, DistillSettings), dim=dim, student=student, student_layers=layers,
                       threads=flow.threads)
    r = distill(teacher, folder, settings, resume=resume and read_checkpoint_meta(run_dir) is not None,
                run_dir=run_dir, overwrite=overwrite, progress=progress)
    if not hasattr(r, "eval"):  # a static model (student: static): its own summary
        return r.to_dict(), _static_summary(r)
    t, h = r.train, r.heldout
    summary = f"{t['steps']} steps on {r.corpus['training_sentences']} sentences, {r.dim}-d"
    if h["sentences"]:
        summary += f", held-out relative MSE {h['relative_mse_before']:.3f} -> {h['relative_mse_after']:.3f}"
    if r.eval:
        summary += f", eval {r.eval.get('score', 'STS')} {r.eval['initial']:.2f} -> best {r.eval['best']:.2f}"
    return r.to_dict(), summary


def _static_summary(r) -> str:
    """The run log's line for a static student (:class:`~espresso_export.distilling.static.StaticResult`)."""
    if not r.healed:
        return f"static model, {r.dim}-d, {r.vocabulary['tokens']} tokens (model2vec's plain distillation)"
    h = r.heldout
    return (f"static model, {r.dim}-d, {r.vocabulary['tokens']} tokens, healed {r.train['steps']} steps on "
            f"{r.corpus.get('training_sentences')} texts"
            + (f", held-out cosine {h['mean_cosine_before']:.3f} -> {h['mean_cosine_after']:.3f}" if h.get("texts")
               else ""))


def _run_train(step: Step, folder: Path, flow: _Flow, *, resume: bool, overwrite: bool, progress: bool):
    from espresso_export.finetuning.train import train_ese
    from espresso_export.training.loop import read_checkpoint_meta
    from espresso_export.finetuning.train_settings import TrainSettings

    c = step.config
    settings = replace(_settings_only(c, TrainSettings), threads=flow.threads)
    run_dir = Path(str(folder) + ".run")
    r = train_ese(flow.model, c.data, folder, settings=settings,
                  resume=resume and read_checkpoint_meta(run_dir) is not None, run_dir=run_dir, overwrite=overwrite,
                  progress=progress)
    summary = f"{'ESE' if r.ese else 'fine-tuning'}: {r.train['steps']} steps on {r.data.get('examples')} examples"
    if r.eval:
        summary += f", eval {r.eval.get('score', 'STS')} {r.eval['initial']:.2f} -> best {r.eval['best']:.2f}"
    return r.to_dict(), summary


def _run_export(step: Step, folder: Path, flow: _Flow, *, resume: bool, overwrite: bool, progress: bool):
    from espresso_export.exporting.export import export

    r = export(flow.model, folder, replace(step.config, threads=step.config.threads or flow.threads,
                                           overwrite=overwrite, progress=progress))
    parts = []
    for f in r.files:
        v = f.get("validation")
        parts.append(f"{f['file']} {f['bytes'] / 1e6:.1f} MB" + (f" (min cos {v['min_cosine']:.4f})" if v else ""))
    return r.to_dict(), "; ".join(parts) or ", ".join(r.formats)


def _run_verify(step: Step, folder: Path, flow: _Flow, *, resume: bool, overwrite: bool, progress: bool):
    from espresso_export.verification.verify import verify

    c = step.config
    candidate = str(flow.export) if flow.export is not None else flow.model
    report = verify(candidate, c.against or flow.source, c, threads=c.threads or flow.threads, progress=progress)
    data = report.to_dict()
    with atomic_output(folder, overwrite=overwrite) as tmp:
        write_text_atomic(tmp / REPORT_JSON, json.dumps(data, indent=2) + "\n")
        write_text_atomic(tmp / REPORT_MD, report.to_markdown())
    avg = report.sts_average or {}
    parts = [f"STS {number(avg.get('candidate_spearman'))} vs {number(avg.get('source_spearman'))} "
             f"(retention {number(avg.get('retention'), '.3f')})"]
    parts += [f"nDCG@10 {row.candidate.ndcg_at_10:.4f} vs {row.source.ndcg_at_10:.4f} on {row.name} "
              f"(retention {number(row.ndcg_retention, '.3f')})" for row in report.retrieval]
    parts += [f"latency ratio at batch {row.batch_size}: {row.latency_ratio:.3f}{'' if row.reliable else '?'}"
              for row in report.latency if row.latency_ratio is not None]
    checks = report.checks
    parts.append("no gate" if not checks else "gate passed" if report.passed else "gate FAILED")
    return {"candidate": candidate, "sts": data["sts"], "retrieval": data["retrieval"], "latency": data["latency"],
            "size_ratios": data["size_ratios"], "gate": data["gate"]}, "; ".join(parts)


def _run_push(step: Step, folder: Path, flow: _Flow, *, resume: bool, overwrite: bool, progress: bool):
    from espresso_export.publishing.push import push
    from espresso_export.publishing.push_settings import PushSettings

    c = step.config
    r = push(flow.model, c.repo_id, _settings_only(c, PushSettings), onnx=flow.export, verify_report=flow.report,
             dry_run=folder if c.dry_run else None, overwrite=overwrite, progress=progress)
    data = r.to_dict()
    if c.dry_run:
        return data, f"dry run: {len(r.files)} files ({r.total_bytes / 1e6:.1f} MB) staged, nothing uploaded"
    with atomic_output(folder, overwrite=overwrite) as tmp:
        write_text_atomic(tmp / PUSH_RECORD, json.dumps(data, indent=2) + "\n")
    return data, f"pushed {len(r.files)} files to {r.repo_id}: {r.pr_url or r.commit_url}"


def _run_auto(step: Step, folder: Path, flow: _Flow, *, resume: bool, overwrite: bool, progress: bool):
    from espresso_export.searching.auto import auto

    c = step.config
    r = auto(flow.model, folder, replace(c, threads=c.threads or flow.threads), overwrite=overwrite,
             progress=progress)
    data = r.to_dict()
    if not r.passed:
        raise GateFailedError(f"auto: no candidate kept {r.target:g} of the source (record: {folder}/auto.json)")
    a = r.answer
    return data, (f"{a.describe()}: known-item retention {a.measured.retention:.3f}, vectors "
                  f"{a.form.dim}-d {a.form.precision}, {r.export['weights']} weights")


def _settings_only(step_config, cls: type):
    """The library's settings object from a recipe step (the step class adds the recipe's own keys)."""
    return cls(**{f.name: getattr(step_config, f.name) for f in fields(cls)})


_RUNNERS = {"shrink": _run_shrink, "distill": _run_distill, "train": _run_train, "export": _run_export,
            "verify": _run_verify, "push": _run_push, "auto": _run_auto}

__all__ = ["RunResult", "StepOutcome", "plan", "print_step", "run_recipe", "selection_warnings", "step_line"]
