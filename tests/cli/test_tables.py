"""Every CLI table at 80 columns (what output gets when it is not a terminal) against a stored rendering in
tests/data/tables/, no line over 80, no word cut; and a wide terminal gets the grid.

Regenerate the expectations after an intended change with ``ESPRESSO_UPDATE_TABLES=1 pytest tests/cli/test_tables.py``
and read the diff.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from espresso_export.cli import tables
from espresso_export.core.types import Head, Select
from espresso_export.sweeping.sweep_result import SweepPoint, SweepResult

EXPECTED = Path(__file__).parents[1] / "data" / "tables"
PLAN = [("1", "shrink", "source", "1-shrink", "layers=3, dim=128"),
        ("2", "distill", "teacher source; student: source cut like 1-shrink (healing)", "2-distill",
         ("corpus=['../../shared/data/stsb/sts-train.csv', '../../shared/data/corpus/tatoeba-eng.txt.gz'], "
          "max_sentences=10000, batch_size=32, lr=0.001")),
        ("3", "export", "2-distill", "3-export", "quantize=int8"),
        ("4", "verify", "3-export against source", "4-verify", "min_sts_retention=0.95, max_latency_ratio=0.5"),
        ("5", "push", "2-distill, 3-export, 4-verify/report.json", "5-push",
         "repo_id=your-name/all-MiniLM-L3-d128-int8, dry_run=True")]
PLAN_HEADERS = ("#", "step", "reads", "writes", "settings")


def _render(*renderables, width: int = 80) -> str:
    from rich.console import Console

    console = Console(width=width, file=io.StringIO(), color_system=None, force_terminal=False)
    for r in renderables:
        console.print(r, soft_wrap=False)
    return "\n".join(line.rstrip() for line in console.file.getvalue().splitlines()) + "\n"


def _sweep() -> SweepResult:
    def point(layers, kept, dim, spearman, speed, params, pareto=False):
        return SweepPoint(layers=layers, kept=kept, dim=dim, spearman=spearman, per_set={}, retention=spearman / 82.03,
                          sentences_per_s=speed, p50_ms=10.0, params=params, bytes_per_vector=4 * dim,
                          pareto=pareto, meets_target=spearman / 82.03 >= 0.8)
    points = [point(2, [2, 5], 64, 61.25, 2105.4, 12_910_000), point(2, [2, 5], 128, 63.02, 2105.4, 12_960_000),
              point(3, [1, 3, 5], 64, 67.81, 1430.9, 14_690_000, True),
              point(3, [1, 3, 5], 128, 69.72, 1430.9, 14_740_000, True)]
    return SweepResult(source="minilm", source_depth=6, source_dim=384, source_spearman=82.03, source_per_set={},
                       source_sentences_per_s=731.2, source_p50_ms=43.8, source_params=22_710_000, head=Head.PCA,
                       select=Select.SPREAD, select_auto=True, sets=[], calibration=None, threads=2, latency={},
                       target_retention=0.8, points=points)


def _recipes():
    header = ("all-MiniLM-L6-v2 -> 3 layers (1, 3, 5) x 128 dims, healed by distillation from itself, exported "
              "to int8 ONNX. Report: benchmarks/results/recipe-hpd-mpnet-minilm-128-verify.{json,md}. Run: "
              "espresso-export run minilm-L3-d128 -o runs/minilm-L3-d128")
    return [("minilm-L3-d128", header), ("mpnet-L4-d128", "all-mpnet-base-v2 -> 4 layers x 128 dims, healed.")]


def _models():
    from espresso_export.model.aliases import ALIASES
    from espresso_export.model.architectures import ARCHITECTURES

    return ([(a.name, a.hub_id, a.note, a.name == "minilm") for a in ALIASES],
            [(a.family, ", ".join(a.model_types)) for a in ARCHITECTURES])


CASES = {
    "sweep": lambda w: [tables.sweep_table(_sweep(), w), *tables.sweep_picks(_sweep())],
    "models": lambda w: tables.model_tables(*_models(), w),
    "run-list": lambda w: [tables.recipe_list(_recipes())],
    "run-plan": lambda w: [tables.grid("plan of minilm-L3-d128 -> /home/me/espresso-export/runs/minilm-L3-d128 "
                                       "(nothing run)", PLAN_HEADERS, PLAN, w, whole=("#", "step", "writes"),
                                       heading=2)],
    "summary": lambda w: [tables.key_values("distill", [
        ("teacher", "sentence-transformers/all-MiniLM-L6-v2"),
        ("student", "sentence-transformers/all-MiniLM-L6-v2 (cut), layers [1, 3, 5]"),
        ("corpus", "10000 sentences (12718 read, 0 empty and 120 duplicates dropped, capped to 10000 (random))"),
        ("training", "313 steps (1.0 epochs), 41 sentences/s, epoch-mean loss 0.3765"),
        ("output", "/home/me/espresso-export/out/minilm-L3-d128-healed-with-a-rather-long-folder-name-x"),
        ("time", "512.3 s")])],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_table_at_80_columns_matches_its_stored_rendering(name):
    text = _render(*CASES[name](80))
    assert max(len(line) for line in text.splitlines()) <= 80
    path = EXPECTED / f"{name}.txt"
    if os.environ.get("ESPRESSO_UPDATE_TABLES") == "1":
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8")


def test_no_id_or_path_is_cut_at_80_columns():
    """Hub ids, folder names and paths are whole words on one line, not folded mid-word or cut with '…'."""
    rendered = {name: _render(*make(80)) for name, make in CASES.items()}
    for hub_id in ("sentence-transformers/all-MiniLM-L12-v2", "princeton-nlp/sup-simcse-roberta-large"):
        assert hub_id in rendered["models"]
    assert "benchmarks/results/recipe-hpd-mpnet-minilm-128-verify.{json,md}." in rendered["run-list"]
    assert "repo_id=your-name/all-MiniLM-L3-d128-int8," in rendered["run-plan"]
    assert "…" not in "".join(rendered.values())
    header = next(line.split() for line in rendered["sweep"].splitlines() if line.strip().startswith("kept"))
    assert header == ["kept", "dim", "Spearman", "ret.", "sent/s", "speed", "params", "B/vec", "*"]  # abbreviated
    assert tables.SWEEP_LEGEND.format(metric="Spearman").split(";")[0] in rendered["sweep"]  # ... and explained


def test_a_wide_terminal_gets_the_grid_and_its_full_width():
    wide = _render(*CASES["run-plan"](160), width=160)
    assert sum(1 for line in wide.splitlines() if line.lstrip().startswith(("1 ", "2 ", "3 ", "4 ", "5 "))) == 5
    assert max(len(line) for line in wide.splitlines()) > 100
    assert "retention" in _render(*CASES["sweep"](160), width=160)  # the full headers when they fit
