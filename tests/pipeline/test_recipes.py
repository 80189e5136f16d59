"""Recipes and ``run``: strict validation (keys, types, files, --set) and a real run on the packaged MiniLM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from espresso_export.cli.app import main
from espresso_export.core.errors import NotFoundError, ValidationError
from espresso_export.pipeline.recipe_runner import plan
from espresso_export.data.corpus import split_weight
from espresso_export.pipeline.headers import recipe_header
from espresso_export.pipeline.recipes import STEP_TYPES, load_recipe, parse_recipe, shipped_recipes
from espresso_export.core.types import Quantize

SHIPPED = shipped_recipes()


def run(capsys, *args):
    code = main(list(map(str, args)))
    out, err = capsys.readouterr()
    return code, out, err


def write(folder: Path, text: str, name: str = "r.yaml") -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


BASIC = """\
source: minilm
steps:
  - shrink:
      layers: 2
      dim: 32
  - export:
      quantize: int8
  - verify:
      min_sts_retention: 0.5
"""


# --- the shipped recipes -----------------------------------------------------------------------------------

def test_the_shipped_recipes_are_found():
    assert {p.stem for p in SHIPPED} >= {"minilm-L3-d128", "mpnet-L4-d128", "hpd-mpnet-minilm-128",
                                         "ese-minilm-L3-d128"}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_recipe_is_valid_and_states_its_expectations(path):
    recipe = load_recipe(path.stem, check_files=False)  # found by name; strict on keys, types, order
    assert recipe.path == path and recipe.name == path.stem
    kinds = [s.kind for s in recipe.steps]
    assert kinds[-1] == "push" and recipe.step("push").config.dry_run is True  # nothing is uploaded by default
    assert "verify" in kinds and recipe.step("verify").config.min_sts_retention is not None  # every recipe has a gate
    verify = recipe.step("verify").config
    assert verify.retrieval and verify.min_retrieval_retention is not None  # and gates on retrieval (nDCG@10) too
    header = " ".join(recipe_header(path))
    assert "Expected" in header and "%" in header or "not measured" in header
    assert [r["step"] for r in plan(recipe)] == kinds


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_recipe_files_exist_in_the_shared_data(path, shared_data):
    """The data paths (../../shared/data from recipes/) resolve to the project's shared data."""
    base = shared_data.parent.parent / "checkout" / "recipes"  # where ../../shared/data is the shared data
    recipe = parse_recipe(path.read_text(encoding="utf-8"), file=str(path), base=base)
    data_files = []
    for step in recipe.steps:
        for key in ("corpus", "data", "sts", "eval_sts", "retrieval"):
            value = getattr(step.config, key, None)
            data_files += value if isinstance(value, list) else [value] if value else []
    data_files = [split_weight(v)[0] for v in data_files]  # corpus.jsonl:0.5 is a share of the mix
    assert data_files and all(Path(v).is_file() or (Path(v) / "corpus.jsonl").is_file() for v in data_files)


# --- strict validation ---------------------------------------------------------------------------------------

def test_unknown_key_names_the_key_and_the_line(tmp_path):
    text = BASIC.replace("      dim: 32\n", "      dim: 32\n      calibraton: cal.txt\n")
    with pytest.raises(ValidationError, match=r"r\.yaml:6: unknown key shrink\.calibraton; did you mean 'calibration'"):
        load_recipe(write(tmp_path, text))


def test_a_recipe_cannot_run_a_judge_program(tmp_path):
    """verify's --judge-command runs a program: a recipe (a YAML file that may come from anyone) cannot carry it."""
    text = BASIC.replace("      min_sts_retention: 0.5\n", "      min_sts_retention: 0.5\n      judge_command: python x.py\n")
    with pytest.raises(ValidationError, match=r"r\.yaml:\d+: unknown key verify\.judge_command"):
        load_recipe(write(tmp_path, text))


def test_unknown_top_level_key_and_unknown_step(tmp_path):
    with pytest.raises(ValidationError, match=r"r\.yaml:1: unknown key 'sorce'; did you mean 'source'"):
        load_recipe(write(tmp_path, "sorce: minilm\n" + BASIC))
    with pytest.raises(ValidationError, match=r"r\.yaml:6: unknown step 'exprot'; did you mean 'export'"):
        load_recipe(write(tmp_path, BASIC.replace("  - export:", "  - exprot:")))


@pytest.mark.parametrize("line, message", [
    ("      layers: three", r"r\.yaml:4: shrink\.layers must be an integer or a list of integers, got 'three'"),
    ("      layers: 2.5", r"r\.yaml:4: shrink\.layers must be an integer or a list of integers, got 2\.5"),
    ("      layers: true", r"shrink\.layers must be an integer .*got True \(bool\)"),
    ("      layers: [1, x]", r"shrink\.layers must be an integer or a list of integers"),
])
def test_wrong_type_names_key_line_and_expected_type(tmp_path, line, message):
    with pytest.raises(ValidationError, match=message):
        load_recipe(write(tmp_path, BASIC.replace("      layers: 2", line)))


@pytest.mark.parametrize("value, expected", [
    ("none", ()), ("null", ()), ("[]", ()), ('"1,8"', (1, 8)), ("[4]", (4,)),
])
def test_a_setting_takes_its_command_line_form_in_a_recipe(tmp_path, value, expected):
    """`timing_batches: none` (the CLI's word) and YAML null both turn the export's timing off."""
    recipe = load_recipe(write(tmp_path, BASIC.replace("quantize: int8", f"quantize: int8\n      timing_batches: {value}")))
    assert recipe.steps[1].config.timing_batches == expected


def test_a_bad_command_line_form_names_the_line(tmp_path):
    with pytest.raises(ValidationError, match=r"r\.yaml:8: export\.timing_batches must be a list of integers, got '1, x'"):
        load_recipe(write(tmp_path, BASIC.replace("quantize: int8", 'quantize: int8\n      timing_batches: "1, x"')))


def test_wrong_enum_value_lists_the_choices(tmp_path):
    with pytest.raises(ValidationError, match=r"r\.yaml:7: export\.quantize must be one of none, int8, fp16, got 'int4'"):
        load_recipe(write(tmp_path, BASIC.replace("quantize: int8", "quantize: int4")))


def test_missing_file_names_key_line_and_path(tmp_path):
    text = BASIC.replace("      dim: 32\n", "      dim: 32\n      calibration: data/cal.txt\n")
    with pytest.raises(NotFoundError, match=r"r\.yaml:6: shrink\.calibration: file not found: .*data/cal\.txt"):
        load_recipe(write(tmp_path, text))
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "cal.txt").write_text("a sentence\n")
    recipe = load_recipe(write(tmp_path, text))  # relative to the recipe's folder, not the cwd
    assert recipe.step("shrink").config.calibration == str(tmp_path / "data" / "cal.txt")


def test_every_missing_file_is_named_at_once_and_the_plan_shows_them(tmp_path, capsys):
    # one at a time, a recipe from another machine took a run per missing file to fix
    text = BASIC.replace("      dim: 32\n", "      dim: 32\n      calibration: data/cal.txt\n").replace(
        "  - export:", "  - distill:\n      corpus: [a.txt, b.txt:0.5]\n  - export:")
    path = write(tmp_path, text)
    with pytest.raises(NotFoundError) as e:
        load_recipe(path)
    message = e.value.message
    assert message.startswith("3 files the recipe reads are missing: ") and "\n" not in message
    assert "r.yaml:6: shrink.calibration: " in message and "r.yaml:8: distill.corpus: " in message
    assert str(tmp_path / "a.txt") in message and str(tmp_path / "b.txt") in message
    assert message.endswith("--set shrink.calibration=PATH --set distill.corpus=PATH")
    code, out, err = run(capsys, "run", path, "--plan", "--json")  # the plan is shown, with what the run lacks
    assert code == 0 and json.loads(out)["missing_files"] == message
    code, out, err = run(capsys, "run", path, "--plan")
    assert code == 0 and "warning: the run would stop here: 3 files" in " ".join(err.split()) and "plan of r" in out
    code, out, err = run(capsys, "run", path)
    assert code == 2 and "3 files the recipe reads are missing" in err and not (tmp_path / "runs").exists()


def test_bounds_are_checked_at_load_and_threads_within_the_machine(tmp_path, capsys):
    # distill.batch_size 0 passed --plan, ran shrink, then failed "ValueError: range() arg 3 must not be zero";
    # --threads 100000 hung the machine (load ~2,400) and crashed on Ctrl-C
    import os

    path = write(tmp_path, BASIC)
    for item, message in (("distill.batch_size=0", "distill.batch_size must be at least 1, got 0"),
                          ("distill.heldout=-3", "distill.heldout must be at least 0, got -3"),
                          ("shrink.dim=-5", "shrink.dim must be at least 1, got -5"),
                          (f"threads={(os.cpu_count() or 1) + 1}", "this machine's CPUs")):
        text = BASIC.replace("  - export:", "  - distill:\n      corpus: [builtin]\n  - export:") \
            if item.startswith("distill") else BASIC
        path = write(tmp_path, text)
        code, out, err = run(capsys, "run", path, "--plan", "--set", item)
        assert code == 2 and message in err and "--set " + item.split("=")[0] in err, (item, err)
    code, out, err = run(capsys, "distill", "--teacher", "minilm", "--student-layers", "2", "--dim", "8", "--corpus",
                         "x.txt", "--threads", "100000", "-o", tmp_path / "never")
    assert code == 2 and "--threads must be at most" in err and not (tmp_path / "never").exists()


def test_missing_required_setting_and_bad_order(tmp_path):
    with pytest.raises(ValidationError, match=r"step 'shrink' needs layers"):
        load_recipe(write(tmp_path, BASIC.replace("      layers: 2\n", "")))
    with pytest.raises(ValidationError, match=r"export must come after every model step \(shrink follows it\)"):
        load_recipe(write(tmp_path, "source: minilm\nsteps:\n  - export: {}\n  - shrink: {layers: 2}\n"))
    with pytest.raises(ValidationError, match=r"distill needs a student, student_layers"):
        load_recipe(write(tmp_path, "source: minilm\nsteps:\n  - distill: {corpus: builtin, dim: 8}\n"))
    with pytest.raises(ValidationError, match=r"r\.yaml:3: step 'distill' needs corpus \(sentences\) or pairs"):
        load_recipe(write(tmp_path, "source: minilm\nsteps:\n  - distill: {student: minilm, dim: 8}\n"))
    (tmp_path / "pairs.tsv").write_text("a\tb\nc\td\n")
    recipe = load_recipe(write(tmp_path, "source: mpnet\nsteps:\n  - distill: {student: minilm, dim: 8, "
                                         "pairs: [pairs.tsv]}\n"))
    c = recipe.step("distill").config
    assert c.pairs == [str(tmp_path / "pairs.tsv")] and c.corpus is None and c.loss is None
    with pytest.raises(ValidationError, match=r"r\.yaml:5: duplicate key 'steps.0.shrink.layers'"):
        load_recipe(write(tmp_path, BASIC.replace("      layers: 2\n", "      layers: 2\n      layers: 3\n")))


def test_push_settings_are_checked_before_anything_runs(tmp_path):
    with pytest.raises(ValidationError, match=r"r\.yaml:11: push\.repo_id: --repo-id must be owner/name"):
        load_recipe(write(tmp_path, BASIC + "  - push:\n      repo_id: not-a-repo-id\n"))
    with pytest.raises(ValidationError, match=r"push\.token: a token never belongs in a recipe"):
        load_recipe(write(tmp_path, BASIC + "  - push: {repo_id: me/x, token: hf_secret}\n"))


def test_verify_gates_are_checked_before_anything_runs(tmp_path):
    """A retrieval gate with no retrieval set failed only at the verify step, after shrink, distill and export."""
    gated = BASIC.replace("      min_sts_retention: 0.5\n", "      min_sts_retention: 0.5\n      min_retrieval_retention: 0.7\n")
    with pytest.raises(ValidationError, match=r"r\.yaml:8: verify: the retrieval gate .* needs a retrieval set"):
        load_recipe(write(tmp_path, gated))
    with pytest.raises(ValidationError, match=r"verify: verify needs at least one STS set"):
        load_recipe(write(tmp_path, BASIC), overrides=["verify.sts=[]"])
    # a retention in percent was a gate no model passes, found out as a failed gate (exit 3) after every step
    with pytest.raises(ValidationError, match=r"--min-sts-retention is a ratio .* got 95: did you mean 0\.95\?"):
        load_recipe(write(tmp_path, BASIC), overrides=["verify.min_sts_retention=95"])


def test_every_step_schema_mirrors_its_library_call():
    """Each step's keys are parameters of the call it makes (same names), so the docs of one apply to the other.
    The calls take their settings object or its fields as keywords (tests/project/test_settings.py checks the rest)."""
    import inspect
    from dataclasses import fields

    from espresso_export.exporting.export_settings import ExportSettings
    from espresso_export.publishing.push import push
    from espresso_export.publishing.push_settings import PushSettings
    from espresso_export.shrinking.shrink_settings import ShrinkSettings
    from espresso_export.shrinking.shrink import shrink
    from espresso_export.distilling import distill
    from espresso_export.distilling.distill_settings import DistillSettings

    calls = {"shrink": (shrink, ShrinkSettings), "distill": (distill, DistillSettings),
             "export": (ExportSettings, ExportSettings), "push": (push, PushSettings)}
    for kind, (call, settings) in calls.items():
        params = set(inspect.signature(call).parameters) | {f.name for f in fields(settings)}
        keys = {f for f in STEP_TYPES[kind].__dataclass_fields__}
        assert keys <= params, (kind, keys - params)


# --- --set ------------------------------------------------------------------------------------------------------

def test_set_overrides_are_type_checked_and_resolved_against_the_cwd(tmp_path, monkeypatch):
    path = write(tmp_path, BASIC)
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "cal.txt").write_text("one\ntwo\n")
    monkeypatch.chdir(other)
    recipe = load_recipe(path, overrides=["shrink.layers=[0, 2]", "export.quantize=none", "verify.sts_limit=20",
                                          "shrink.calibration=cal.txt", "threads=1", "output=out"])
    shrink = recipe.step("shrink").config
    assert shrink.layers == [0, 2] and shrink.calibration == str(other / "cal.txt")
    assert recipe.step("export").config.quantize is Quantize.NONE and recipe.step("verify").config.sts_limit == 20
    assert recipe.threads == 1 and recipe.run_folder == other / "out"
    with pytest.raises(ValidationError, match=r"--set verify\.min_sts_retention=high: verify\.min_sts_retention must be a number"):
        load_recipe(path, overrides=["verify.min_sts_retention=high"])
    with pytest.raises(ValidationError, match=r"--set shrink\.dimm=8: unknown key shrink\.dimm; did you mean 'dim'"):
        load_recipe(path, overrides=["shrink.dimm=8"])
    with pytest.raises(ValidationError, match=r"the recipe has no 'distill' step"):
        load_recipe(path, overrides=["distill.lr=1e-3"])
    with pytest.raises(ValidationError, match=r"--set needs key=value"):
        load_recipe(path, overrides=["shrink.layers"])


def test_set_replaces_a_missing_file_before_it_is_looked_for(tmp_path, monkeypatch):
    """A recipe written for another machine's data runs here with --set pointing at local files."""
    path = write(tmp_path, BASIC.replace("      min_sts_retention: 0.5\n", "      min_sts_retention: 0.5\n      sts: [/nowhere/sts.csv]\n"))
    with pytest.raises(NotFoundError, match=r"verify\.sts: file not found: /nowhere/sts\.csv"):
        load_recipe(path)
    assert load_recipe(path, overrides=["verify.sts=[builtin]"]).step("verify").config.sts == ["builtin"]


# --- the CLI ------------------------------------------------------------------------------------------------------

def test_run_list_and_plan(tmp_path, capsys):
    code, out, _ = run(capsys, "run", "--list", "--json")
    assert code == 0 and {r["name"] for r in json.loads(out)} == {p.stem for p in SHIPPED}
    path = write(tmp_path, BASIC)
    code, out, _ = run(capsys, "run", path, "--plan", "--json", "-o", tmp_path / "runs")
    rows = json.loads(out)["plan"]
    assert code == 0 and [r["writes"] for r in rows] == ["1-shrink", "2-export", "3-verify"]
    assert rows[2]["reads"] == "2-export against source" and not (tmp_path / "runs").exists()
    assert rows[2]["settings"].startswith("sts=['builtin']")  # the gate's data, shown though it is the default
    shipped = ("run", "minilm-L3-d128", "--plan", "--set", "distill.corpus=builtin", "--set", "verify.sts=[builtin]",
               "--set", "verify.retrieval=[builtin]")
    code, out, _ = run(capsys, *shipped, "--json")  # a shipped recipe, its data replaced by --set
    rows = json.loads(out)["plan"]
    assert code == 0 and rows[1]["reads"].endswith("(healing)") and rows[4]["reads"].endswith("4-verify/report.json")
    code, out, _ = run(capsys, *shipped)  # the table, under the recipe's header (what it gives, as measured)
    assert code == 0 and "shrink" in out and "push" in out and "Expected (measured" in out
    code, _, err = run(capsys, *shipped, "--set", "distill.eval_retrieval=builtin")  # chosen and reported on
    assert code == 0 and "verify reports on builtin, which also chooses the kept checkpoint" in err
    code, out, _ = run(capsys, "run", "--list")  # what each recipe does in a paragraph (was ~170 lines of numbers)
    flat = " ".join(out.split())
    assert code == 0 and all(p.stem in out for p in SHIPPED) and "Expected (measured" not in out
    assert "healed by distillation from itself" in flat and "run NAME --plan" in flat


def test_run_bad_recipe_is_one_line_exit_2(tmp_path, capsys):
    code, _, err = run(capsys, "run", write(tmp_path, BASIC.replace("dim: 32", "dim: wide")))
    assert code == 2 and "shrink.dim must be an integer, got 'wide'" in err and "Traceback" not in err
    code, _, err = run(capsys, "run", "no-such-recipe")
    assert code == 2 and "recipe not found: no-such-recipe" in err and "minilm-L3-d128" in err


def test_real_push_needs_a_token_before_anything_runs(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # no saved login
    code, _, err = run(capsys, "run", write(tmp_path, BASIC + "  - push: {repo_id: me/x}\n"), "-o", tmp_path / "o")
    assert code == 2 and "no Hugging Face token" in err and not (tmp_path / "o").exists()


# --- a real run: MiniLM -> shrink -> distill -> export int8 -> verify (gate) -> push --dry-run -----------------

E2E = """\
name: tiny-minilm
source: minilm
threads: 1
steps:
  - shrink:
      layers: 2
      dim: 32
      calibration: {calibration}
      calibration_samples: 200
  - distill:
      corpus: {calibration}
      max_sentences: 120
      max_steps: 2
      batch_size: 16
      pca_samples: 120
      heldout: 16
      lr: 1.0e-3
  - export:
      quantize: int8
  - verify:
      sts_limit: 24
      latency_texts: 8
      latency_rounds: 1
      latency_budget: 0
      batch_sizes: [4]
      min_sts_retention: 0.999
  - push:
      repo_id: me/tiny-minilm
      dry_run: true
"""


@pytest.mark.slow  # 28 s on a real MiniLM; resuming from a changed step runs by default (test_resume_keeps_...)
def test_run_end_to_end_gate_stops_before_push_then_resume(minilm_path, calibration_file, tmp_path, capsys, one_thread):
    recipe = write(tmp_path, E2E.format(calibration=calibration_file))
    out_dir = tmp_path / "run"
    # 1. a gate that cannot hold: every step up to verify runs, push does not, exit 3
    code, _, err = run(capsys, "run", recipe, "-o", out_dir, "--json")
    assert code == 3 and "quality gate failed: STS retention" in err and "stopped before push" in err
    state = json.loads((out_dir / "run.json").read_text())
    assert [s["status"] for s in state["steps"]] == ["done", "done", "done", "gate failed"]
    assert not (out_dir / "5-push").exists()
    distilled = json.loads((out_dir / "2-distill" / "espresso.json").read_text())
    shrunk = json.loads((out_dir / "1-shrink" / "espresso.json").read_text())
    assert distilled["step"] == "distill" and distilled["student"]["layers"] == shrunk["layers"]  # healed the cut
    assert {"model.onnx", "model_quantized.onnx"} <= {p.name for p in (out_dir / "3-export" / "onnx").iterdir()}
    timing = json.loads((out_dir / "3-export" / "export.json").read_text())["timing"]
    assert timing["threads"] == 1 and timing["streams"] is None  # the recipe's threads: 1 (the export used them all)
    report = json.loads((out_dir / "4-verify" / "report.json").read_text())
    assert report["candidate"]["path"] == str(out_dir / "3-export") and report["gate"]["passed"] is False

    # 2. an existing run folder is refused without --resume / --overwrite
    code, _, err = run(capsys, "run", recipe, "-o", out_dir)
    assert code == 2 and "already exists; pass --resume" in err

    # 3. --resume with a gate that holds: the model steps are kept, verify runs again, push stages the upload
    code, out, _ = run(capsys, "run", recipe, "-o", out_dir, "--resume", "--set", "verify.min_sts_retention=0.5",
                       "--set", "verify.retrieval=[builtin]", "--json")
    result = json.loads(out)
    assert code == 0 and result["passed"]
    assert [s["status"] for s in result["steps"]] == ["reused", "reused", "reused", "done", "done"]
    verified = result["steps"][3]  # its retrieval numbers are in the run's result, not only in report.json
    (ret,) = verified["result"]["retrieval"]
    assert ret["candidate"]["ndcg_at_10"] > 0 and "nDCG@10 " in verified["summary"]
    staged = out_dir / "5-push"
    files = {p.relative_to(staged).as_posix() for p in staged.rglob("*") if p.is_file()}
    assert {"README.md", "model.safetensors", "verify_report.json", "onnx/model_quantized.onnx", "espresso.json",
            "export.json", "tokenizer_config.json"} <= files
    card = (staged / "README.md").read_text()
    assert "2 layers" in card and "32-d" in card and "license: apache-2.0" in card  # MiniLM's license
    assert "model-index" not in card  # verify ran on the built-in smoke sets only (STS, retrieval): no benchmark
    pushed_report = json.loads((staged / "verify_report.json").read_text())
    assert pushed_report["gate"]["passed"] is True and pushed_report["gate"]["thresholds"]["min_sts_retention"] == 0.5

    # 4. verify again with a gate that fails: the staged upload of step 3 (its card says "passed") is stale, gone
    code, _, err = run(capsys, "run", recipe, "-o", out_dir, "--resume", "--set", "verify.min_sts_retention=0.999")
    assert code == 3 and "stopped before push" in err
    assert not staged.exists() and (out_dir / "3-export").is_dir()  # the steps before verify were reused, kept


ESE_THEN_CUT = """\
source: {model}
steps:
  - train: {{ese: true, data: {data}, compression_dim: 16, max_steps: 2, batch_size: 16, lr: 1.0e-3}}
  - shrink: {{layers: 2, dim: 16}}
  - export: {{}}
  - verify: {{sts_limit: 20, latency_texts: 4, latency_rounds: 1, latency_budget: 0, batch_sizes: [2]}}
  - push: {{repo_id: me/ese-cut, dry_run: true}}
"""


def test_ese_then_cut_declares_matryoshka_dimensions(tiny_bert, tmp_path, capsys, one_thread):
    """train (ESE) -> shrink: the cut of an ESE-trained model keeps the first layers and first-k dims, and the
    staged card and config declare the widths a caller may truncate to."""
    from espresso_export.data import builtin_resource

    text = ESE_THEN_CUT.format(model=tiny_bert, data=builtin_resource("sts_smoke.tsv"))
    code, out, _ = run(capsys, "run", write(tmp_path, text), "-o", tmp_path / "run", "--json")
    assert code == 0, out
    steps = json.loads(out)["steps"]
    assert [s["status"] for s in steps] == ["done"] * 5
    shrunk = json.loads((tmp_path / "run" / "2-shrink" / "espresso.json").read_text())
    assert shrunk["layers"] == [0, 1] and shrunk["head"] == "truncate" and shrunk["parent"]["step"] == "train"
    config = json.loads((tmp_path / "run" / "5-push" / "config.json").read_text())
    assert config["matryoshka_dimensions"] == [16]


def test_train_choices_are_checked_at_load(tmp_path):
    with pytest.raises(ValidationError, match=r"r\.yaml:3: train\.loss must be one of angle, cosent, infonce, got 'nope'"):
        load_recipe(write(tmp_path, "source: minilm\nsteps:\n  - train: {data: builtin, loss: nope}\n"))


def test_resume_keeps_unchanged_steps_and_reruns_from_the_first_change(tiny_bert, tmp_path, capsys, one_thread):
    recipe = write(tmp_path, f"source: {tiny_bert}\nsteps:\n  - shrink: {{layers: 2}}\n  - export: {{}}\n")
    out_dir = tmp_path / "run"

    def statuses(*extra):
        code, out, err = run(capsys, "run", recipe, "-o", out_dir, "--json", *extra)
        assert code == 0, err
        return [s["status"] for s in json.loads(out)["steps"]]

    assert statuses() == ["done", "done"]
    assert statuses("--resume") == ["reused", "reused"]
    assert statuses("--resume", "--set", "export.opset=14") == ["reused", "done"]
    assert json.loads((out_dir / "2-export" / "export.json").read_text())["opset"] == 14
    assert statuses("--resume", "--set", "shrink.layers=3") == ["done", "done"]  # a changed step reruns what follows
    assert statuses("--overwrite") == ["done", "done"]
    code, _, err = run(capsys, "run", recipe, "-o", out_dir, "--resume", "--overwrite")
    assert code == 2 and "exclude each other" in err


def test_run_defaults_to_runs_name_and_refuses_a_folder_that_is_not_a_run_folder(tmp_path, capsys, monkeypatch):
    """`run minilm-L3-d128` used to default to ./minilm-L3-d128, the folder the README's `shrink` writes, and
    `--resume` then wrote run.json and 1-shrink/ into that model folder."""
    monkeypatch.chdir(tmp_path)
    recipe = load_recipe(write(tmp_path, "name: small\n" + BASIC))
    assert recipe.run_folder == tmp_path / "runs" / "small"
    model = tmp_path / "small"  # what `shrink ... -o small` leaves: a model folder, not a run folder
    model.mkdir()
    (model / "config.json").write_text("{}")
    for flags in ([], ["--resume"], ["--overwrite"], ["--plan"]):  # --plan approved it; the run then refused
        code, _, err = run(capsys, "run", tmp_path / "r.yaml", "-o", model, *flags)
        assert code == 2 and "is not a run folder (no run.json)" in err, flags
        assert sorted(p.name for p in model.iterdir()) == ["config.json"]
