"""The hostile-input matrix: bad inputs, lying checkpoints, symlinks, signals and a user's own files, each run
end to end through the installed CLI as a user would (a fresh ``python -m espresso_export`` per case, tiny
random models, no network), with what must hold afterwards.

    python benchmarks/hostile_inputs.py              # every case; exit 1 if any fails
    python benchmarks/hostile_inputs.py -k overwrite # the cases whose id or title contains "overwrite"
    python benchmarks/hostile_inputs.py --json out/hostile.json

Each case states the exit code a user must get and what must survive (their files, byte for byte), not the
wording of a message. The unit tests of each fix live beside its package in ``tests/``; this script replays the
cases as a walk-through would, in a few minutes on two cores.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # tiny_models: the same tiny random models the tests build

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "COLUMNS": "120",
       "ESPRESSO_CACHE": ""}  # set per run in main()


@dataclass
class Outcome:
    rc: int | None
    out: str
    err: str
    seconds: float


def cli(*args, cwd: Path | None = None, timeout: float = 240, stdin: str | None = None) -> Outcome:
    """One CLI command in a fresh interpreter, as a user runs it."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "espresso_export", *map(str, args)], cwd=cwd, env=ENV,
                          capture_output=True, text=True, timeout=timeout, input=stdin)
    return Outcome(proc.returncode, proc.stdout, proc.stderr, time.perf_counter() - start)


def lines(text: str) -> list[str]:
    return [line for line in text.strip().split("\n") if line.strip()]


class Fixture:
    """What every case reads: a tiny BERT (plain transformers folder), a shrunk sentence-transformers folder
    with a PCA head, a calibration file, a small STS file. Built once, never modified by a case."""

    def __init__(self, root: Path):
        from tiny_models import build

        self.root = root
        self.tiny = build("bert", root / "tiny")
        words = ("the dog runs fast", "a cat sleeps today", "the man plays guitar", "a woman eats food",
                 "the child reads a book", "a red car is slow", "the blue river is big", "music plays in the city")
        sentences = [f"{a} and {b} {i}" for i, (a, b) in enumerate(zip(words * 40, reversed(words * 40)))]
        self.calibration = root / "cal.txt"
        self.calibration.write_text("\n".join(sentences) + "\n", encoding="utf-8")
        self.sts = root / "sts.csv"
        rows = [f"{a},{b},{(i % 5) + (i % 3) * 0.1:.1f}" for i, (a, b) in enumerate(zip(words * 4, words[1:] * 4))]
        self.sts.write_text("sentence1,sentence2,score\n" + "\n".join(rows) + "\n", encoding="utf-8")
        self.st = root / "st"
        done = cli("shrink", self.tiny, "--layers", "2", "--dim", "8", "--calibration", self.calibration,
                   "-o", self.st)
        if done.rc != 0:
            raise SystemExit(f"the fixture's shrink failed:\n{done.err}")

    def copy_st(self, dest: Path) -> Path:
        shutil.copytree(self.st, dest, symlinks=True)
        return dest

    def shrink_args(self, out: Path, *extra) -> list:
        return ["shrink", self.tiny, "--layers", "2", "--dim", "8", "--calibration", self.calibration, "-o", out,
                *extra]


@dataclass
class Case:
    id: str
    title: str
    run: Callable[[Fixture, Path], tuple[bool, str]]  # (held, what was seen)


CASES: list[Case] = []


def case(id: str, title: str):
    def register(fn):
        CASES.append(Case(id, title, fn))
        return fn
    return register


def expect(o: Outcome, rc: int, *, one_line: bool = True) -> tuple[bool, str]:
    seen = f"exit {o.rc} in {o.seconds:.1f}s: {lines(o.err)[-1] if lines(o.err) else '(no stderr)'}"
    ok = o.rc == rc and (not one_line or rc == 0 or len(lines(o.err)) >= 1)
    return ok, seen


# --- data loss and trust ----------------------------------------------------------------------------------------

for _name in ("report.json", "run.json", "espresso.json", "export.json", "sweep.json"):
    def _overwrite_user_folder(fx: Fixture, tmp: Path, name=_name):
        d = tmp / "d"
        d.mkdir()
        (d / name).write_text('{"my": "data"}')
        (d / "thesis.txt").write_text("four years of work")
        o = cli(*fx.shrink_args(d, "--overwrite"))
        ok, seen = expect(o, 2)
        kept = (d / "thesis.txt").is_file() and (d / name).read_text() == '{"my": "data"}'
        return ok and kept, seen + ("" if kept else "; the user's files are gone")
    case(f"overwrite-{_name}", f"--overwrite on a user's folder holding {_name} and thesis.txt: refused, "
                               "both kept")(_overwrite_user_folder)


@case("overwrite-own", "--overwrite replaces the tool's own previous output")
def _overwrite_own(fx, tmp):
    out = tmp / "out"
    first = cli(*fx.shrink_args(out))
    again = cli(*fx.shrink_args(out, "--overwrite"))
    return first.rc == 0 and again.rc == 0, f"first exit {first.rc}, again exit {again.rc}"


def _tiny_recipe(fx: Fixture, tmp: Path, extra: str = "") -> Path:
    recipe = tmp / "tiny.yaml"
    recipe.write_text(f"name: tiny\nsource: {fx.tiny}\nsteps:\n  - shrink:\n      layers: 2\n      dim: 8\n"
                      f"      calibration: {fx.calibration}\n{extra}", encoding="utf-8")
    return recipe


@case("resume-user-run-json", "run --resume on a folder holding the user's own run.json: refused, file kept")
def _resume_user_run_json(fx, tmp):
    d = tmp / "d"
    d.mkdir()
    (d / "run.json").write_text('{"my": "data"}')
    o = cli("run", _tiny_recipe(fx, tmp), "-o", d, "--resume")
    ok, seen = expect(o, 2)
    kept = (d / "run.json").read_text() == '{"my": "data"}'
    return ok and kept, seen + ("" if kept else "; run.json replaced")


@case("run-dir-user-folder", "distill --run-dir on a folder of the user's: refused before work, file kept")
def _run_dir_user(fx, tmp):
    runs = tmp / "runs"
    runs.mkdir()
    (runs / "notes.txt").write_text("mine")
    o = cli("distill", "--teacher", fx.tiny, "--student-layers", "2", "--dim", "8", "--corpus", fx.calibration,
            "--max-steps", "2", "--heldout", "0", "--run-dir", runs, "-o", tmp / "out")
    ok, seen = expect(o, 2)
    return ok and (runs / "notes.txt").read_text() == "mine", seen


@case("corrupt-run-json", "run --resume over a truncated run.json of its own: refused (exit 2)")
def _corrupt_run_json(fx, tmp):
    recipe = _tiny_recipe(fx, tmp)
    d = tmp / "d"
    first = cli("run", recipe, "-o", d)
    text = (d / "run.json").read_text()
    (d / "run.json").write_text(text[: len(text) // 2])
    o = cli("run", recipe, "-o", d, "--resume")
    ok, seen = expect(o, 2)
    return first.rc == 0 and ok, seen


@case("distill-onto-teacher", "distill -o the teacher's own folder: refused before any work")
def _distill_onto_teacher(fx, tmp):
    teacher = fx.copy_st(tmp / "teacher")
    before = sorted(p.name for p in teacher.iterdir())
    o = cli("distill", "--teacher", teacher, "--student-layers", "1", "--dim", "8", "--corpus", fx.calibration,
            "--max-steps", "2", "--heldout", "0", "-o", teacher, "--overwrite")
    ok, seen = expect(o, 2)
    return ok and sorted(p.name for p in teacher.iterdir()) == before and o.seconds < 60, seen


@case("umask", "outputs follow the umask (022: folders 755, files 644)")
def _umask(fx, tmp):
    out = tmp / "out"
    proc = subprocess.run(["sh", "-c", f"umask 022 && {sys.executable} -m espresso_export shrink {fx.tiny} "
                                       f"--layers 2 --dim 8 --calibration {fx.calibration} -o {out}"],
                          env=ENV, capture_output=True, text=True)
    modes = {oct(out.stat().st_mode & 0o777), oct((out / "model.safetensors").stat().st_mode & 0o777)} \
        if proc.returncode == 0 else set()
    return modes == {"0o755", "0o644"}, f"exit {proc.returncode}, modes {sorted(modes)}"


# --- non-finite weights and lying checkpoints --------------------------------------------------------------------

def _dense_folder(folder: Path) -> Path:
    modules = json.loads((folder / "modules.json").read_text())
    return folder / next(m["path"] for m in modules if m["type"].endswith("Dense"))


def _nan_head(fx: Fixture, tmp: Path) -> Path:
    from safetensors.numpy import load_file, save_file

    st = fx.copy_st(tmp / "nan-head")
    weights = _dense_folder(st) / "model.safetensors"
    tensors = load_file(str(weights))
    key = next(k for k in tensors if k.endswith("weight"))
    tensors[key][0, 0] = float("nan")
    save_file(tensors, str(weights))
    return st


@case("nan-head-export", "a NaN in the Dense head: export refuses it (never exit 0)")
def _nan_export(fx, tmp):
    o = cli("export", _nan_head(fx, tmp), "-o", tmp / "onnx")
    return o.rc not in (0, None) and not (tmp / "onnx").exists(), f"exit {o.rc}: {(lines(o.err) or [''])[-1]}"


@case("nan-head-verify", "a NaN in the Dense head: verify does not pass it")
def _nan_verify(fx, tmp):
    o = cli("verify", _nan_head(fx, tmp), "--against", fx.tiny, "--sts", fx.sts, "--batch-sizes", "none")
    return o.rc not in (0, None), f"exit {o.rc}: {(lines(o.err) or [''])[-1]}"


@case("nan-head-shrink", "a NaN in the Dense head: shrink --head none refuses it (exit 2)")
def _nan_shrink(fx, tmp):
    return expect(cli("shrink", _nan_head(fx, tmp), "--layers", "1", "--head", "none", "-o", tmp / "out"), 2)


@case("config-fewer-layers", "config.json says 1 layer over weights of 2: refused or the ignored tensors named")
def _config_lies_layers(fx, tmp):
    model = fx.copy_st(tmp / "m")
    config = json.loads((model / "config.json").read_text())
    config["num_hidden_layers"] = 1
    (model / "config.json").write_text(json.dumps(config))
    o = cli("shrink", model, "--layers", "1", "--dim", "8", "--calibration", fx.calibration, "-o", tmp / "out")
    said = "layer.1" in o.err or "ignor" in o.err.lower()
    return (o.rc == 2) or (o.rc == 0 and said), f"exit {o.rc}: {(lines(o.err) or [''])[-1][:100]}"


@case("tensor-shape-mismatch", "a tensor whose shape does not match config.json: exit 2 naming the tensor")
def _shape_mismatch(fx, tmp):
    model = fx.copy_st(tmp / "m")
    config = json.loads((model / "config.json").read_text())
    config["intermediate_size"] = config["intermediate_size"] * 2
    (model / "config.json").write_text(json.dumps(config))
    o = cli("shrink", model, "--layers", "1", "--dim", "8", "--calibration", fx.calibration, "-o", tmp / "out")
    ok, seen = expect(o, 2)
    return ok and "intermediate" in o.err, seen


@case("remote-code-unflagged", "config.json with auto_map (custom code), no --trust-remote-code: exit 2")
def _auto_map(fx, tmp):
    model = fx.copy_st(tmp / "m")
    config = json.loads((model / "config.json").read_text())
    config["auto_map"] = {"AutoModel": "modeling_custom.CustomModel"}
    (model / "config.json").write_text(json.dumps(config))
    o = cli("shrink", model, "--layers", "1", "--dim", "8", "--calibration", fx.calibration, "-o", tmp / "out")
    ok, seen = expect(o, 2)
    return ok and "--trust-remote-code" in o.err, seen


@case("layers-zero", "--layers 0 / 1,1: exit 2 stating the model's depth")
def _bad_layers(fx, tmp):
    a = cli("shrink", fx.tiny, "--layers", "0", "-o", tmp / "a")
    b = cli("shrink", fx.tiny, "--layers", "1,1", "-o", tmp / "b")
    return a.rc == 2 and b.rc == 2 and "4" in a.err, f"exits {a.rc}, {b.rc}: {(lines(a.err) or [''])[-1][:90]}"


@case("sts-all-equal", "an STS file whose scores are all equal: refused as unusable input (exit 2)")
def _sts_equal(fx, tmp):
    flat = tmp / "flat.csv"
    flat.write_text("sentence1,sentence2,score\n" + "".join(f"a dog {i},a cat {i},3.0\n" for i in range(20)))
    return expect(cli("verify", fx.st, "--against", fx.tiny, "--sts", flat, "--batch-sizes", "none"), 2)


@case("k-calibration", "shrink --dim 8 with exactly 8 calibration sentences: refused (a zero-variance head)")
def _k_calibration(fx, tmp):
    few = tmp / "few.txt"
    few.write_text("\n".join(fx.calibration.read_text().split("\n")[:8]) + "\n")
    return expect(cli("shrink", fx.tiny, "--layers", "2", "--dim", "8", "--calibration", few, "-o", tmp / "o"), 2)


# --- publishing ------------------------------------------------------------------------------------------------

@case("push-symlink-module", "push: a module folder symlinked outside the model folder: exit 2")
def _push_symlinked_module(fx, tmp):
    st = fx.copy_st(tmp / "st")
    dense = _dense_folder(st)
    outside = tmp / "outside-dense"
    shutil.move(str(dense), outside)
    dense.symlink_to(outside, target_is_directory=True)
    return expect(cli("push", st, "--repo-id", "me/m", "--dry-run", tmp / "staged", "--license", "mit"), 2)


@case("modules-dotdot", "modules.json path with '..': push, export and verify refuse it (exit 2)")
def _modules_dotdot(fx, tmp):
    st = fx.copy_st(tmp / "st")
    outside = tmp / "elsewhere"
    dense = _dense_folder(st)
    shutil.copytree(dense, outside)
    modules = json.loads((st / "modules.json").read_text())
    for m in modules:
        if m["path"] == dense.name:
            m["path"] = "../elsewhere"
    (st / "modules.json").write_text(json.dumps(modules))
    rcs = [cli("push", st, "--repo-id", "me/m", "--dry-run", tmp / "staged", "--license", "mit").rc,
           cli("export", st, "-o", tmp / "onnx").rc,
           cli("verify", st, "--against", fx.tiny, "--sts", fx.sts, "--batch-sizes", "none").rc]
    return rcs == [2, 2, 2], f"exits {rcs}"


@case("push-report-symlink", "push: verify_report.json symlinked outside the folder: not staged (exit 2)")
def _push_report_symlink(fx, tmp):
    st = fx.copy_st(tmp / "st")
    secret = tmp / "secret.json"
    secret.write_text('{"token": "hf_secret"}')
    (st / "verify_report.json").symlink_to(secret)
    o = cli("push", st, "--repo-id", "me/m", "--dry-run", tmp / "staged", "--license", "mit")
    leaked = any("hf_secret" in p.read_text(errors="ignore") for p in (tmp / "staged").rglob("*") if p.is_file()) \
        if (tmp / "staged").exists() else False
    return o.rc == 2 and not leaked, f"exit {o.rc}, secret staged: {leaked}"


@case("push-symlink-vocab", "push: a tokenizer file symlinked to a file outside the folder: exit 2")
def _push_symlink_vocab(fx, tmp):
    st = fx.copy_st(tmp / "st")
    secret = tmp / "private.txt"
    secret.write_text("a private document")
    (st / "vocab.txt").unlink(missing_ok=True)
    (st / "vocab.txt").symlink_to(secret)
    return expect(cli("push", st, "--repo-id", "me/m", "--dry-run", tmp / "staged", "--license", "mit"), 2)


@case("push-no-tokenizer", "push: a folder without a tokenizer: exit 2")
def _push_no_tokenizer(fx, tmp):
    st = fx.copy_st(tmp / "st")
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        (st / name).unlink(missing_ok=True)
    return expect(cli("push", st, "--repo-id", "me/m", "--dry-run", tmp / "staged", "--license", "mit"), 2)


# --- recipes -----------------------------------------------------------------------------------------------------

@case("yaml-alias-bomb", "a YAML alias bomb under run --plan: exit 2 at once")
def _alias_bomb(fx, tmp):
    levels = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for i, name in enumerate("bcdefghi"):
        prev = "abcdefghi"[i]
        levels.append(f"{name}: &{name} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, "
                      f"*{prev}]")
    bomb = tmp / "bomb.yaml"
    bomb.write_text("\n".join(levels) + f"\nname: bomb\nsource: {fx.tiny}\nsteps: []\n")
    o = cli("run", bomb, "--plan", timeout=60)
    ok, seen = expect(o, 2)
    return ok and o.seconds < 30, seen


@case("recipe-writes-outside", "a recipe's distill.cache_dir: ../elsewhere: refused (exit 2), nothing written")
def _recipe_cache_dir(fx, tmp):
    target = tmp / "elsewhere"
    recipe = _tiny_recipe(fx, tmp, "  - distill:\n      corpus: [" + str(fx.calibration) + "]\n"
                                   "      max_steps: 2\n      heldout: 0\n      cache_dir: ../elsewhere\n")
    o = cli("run", recipe, "-o", tmp / "runs" / "r")
    ok, seen = expect(o, 2)
    return ok and not target.exists(), seen


@case("recipe-remote-code", "a recipe setting trust_remote_code: refused (only the command line may)")
def _recipe_remote_code(fx, tmp):
    recipe = tmp / "r.yaml"
    recipe.write_text(f"name: r\nsource: {fx.tiny}\nsteps:\n  - shrink:\n      layers: 2\n"
                      "      trust_remote_code: true\n")
    return expect(cli("run", recipe, "--plan"), 2)


@case("set-parse-error", "run --set with a bad value: one line, exit 2")
def _set_parse(fx, tmp):
    o = cli("run", _tiny_recipe(fx, tmp), "--plan", "--set", "shrink.layers=[1, 2")
    ok, seen = expect(o, 2)
    return ok and len(lines(o.err)) == 1, seen + f" ({len(lines(o.err))} lines)"


# --- real data that must be read whole ---------------------------------------------------------------------------

LINE_BREAKS = ["\u0085", "\u2028", "\u2029", "\u000b", "\u000c", "\u001c", "\u001d", "\u001e"]


@case("unicode-line-breaks", "a BEIR corpus.jsonl with U+0085, U+2028... inside its strings: verify reads it")
def _unicode_breaks(fx, tmp):
    beir = tmp / "beir"
    (beir / "qrels").mkdir(parents=True)
    docs = [{"_id": f"d{i}", "title": "", "text": f"the dog{c}runs fast {i}"} for i, c in enumerate(LINE_BREAKS * 3)]
    (beir / "corpus.jsonl").write_text("\n".join(json.dumps(d, ensure_ascii=False) for d in docs) + "\n")
    (beir / "queries.jsonl").write_text("\n".join(json.dumps({"_id": f"q{i}", "text": f"dog {i}"})
                                                  for i in range(4)) + "\n")
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" +
                                             "".join(f"q{i}\td{i}\t1\n" for i in range(4)))
    o = cli("verify", fx.st, "--against", fx.tiny, "--retrieval", beir, "--batch-sizes", "none")
    return o.rc in (0, 3), f"exit {o.rc}: {(lines(o.err) or [''])[-1][:100]}"


@case("bom-sts", "an STS csv saved by Excel (UTF-8 with a BOM): read, not refused")
def _bom(fx, tmp):
    bom = tmp / "bom.csv"
    bom.write_text("\ufeff" + fx.sts.read_text(), encoding="utf-8")
    o = cli("verify", fx.st, "--against", fx.tiny, "--sts", bom, "--batch-sizes", "none")
    return o.rc in (0, 3), f"exit {o.rc}: {(lines(o.err) or [''])[-1][:100]}"


# --- corpora of every shape, under verify --corpus and auto --------------------------------------------------------

AUTO_QUICK = ["--time-budget", "1s", "--threads", "1", "--layers", "1,2", "--sample-documents", "80",
              "--sample-queries", "24"]


def _corpus(shape: str, tmp: Path) -> Path:
    from corpus_shapes import write_not_text, write_shape  # tests/corpus_shapes.py: the tests' own corpora

    return write_not_text(shape, tmp / "data") if shape in ("nan", "number", "list") else write_shape(shape, tmp / "data")


def _verify_corpus(fx: Fixture, corpus: Path, *extra) -> Outcome:
    return cli("verify", fx.st, "--against", fx.tiny, "--sts", fx.sts, "--batch-sizes", "none", "--corpus", corpus,
               *extra)


def _auto_corpus(fx: Fixture, corpus: Path, out: Path) -> Outcome:
    return cli("auto", fx.tiny, "--corpus", corpus, "-o", out, *AUTO_QUICK)


def _searched(o: Outcome, out: Path) -> tuple[bool, str]:
    """A usable corpus: the search ends with an answer (0) or without one (3), its record written; never 2."""
    seen = f"exit {o.rc} in {o.seconds:.1f}s: {(lines(o.err) or ['(no stderr)'])[-1][:90]}"
    return o.rc in (0, 3) and (out / "auto.json").is_file() and "Traceback" not in o.err, seen


def _refused_at_once(o: Outcome, tmp: Path, *names: str) -> tuple[bool, str]:
    """Refused with one line naming what to give (exit 2), before any model work (no source vectors written)."""
    ok, seen = expect(o, 2)
    said = (lines(o.err) or [""])[-1]
    early = not list(tmp.rglob("source-vectors.npz"))
    return ok and len(lines(o.err)) == 1 and all(n in said for n in names) and early, \
        seen + ("" if early else "; the source was encoded first")


for _shape, _title in (("lines", "one short text a line (with repeats)"), ("lines-gz", "one short text a line, gzipped"),
                       ("cjk", "Chinese text, one a line"), ("five", "five documents"),
                       ("beir-no-qrels", "a BEIR folder without qrels"), ("passages", "passages of three sentences")):
    def _verify_usable(fx, tmp, shape=_shape):
        o = _verify_corpus(fx, _corpus(shape, tmp))
        return o.rc in (0, 3) and "Traceback" not in o.err, f"exit {o.rc} in {o.seconds:.1f}s"
    case(f"corpus-{_shape}-verify", f"verify --corpus {_title}: measured (exit 0 or 3)")(_verify_usable)

for _shape, _title in (("lines", "one short text a line (with repeats)"), ("cjk-many", "Chinese text, one a line"),
                       ("beir-no-qrels", "a BEIR folder without qrels")):
    def _auto_usable(fx, tmp, shape=_shape):
        return _searched(_auto_corpus(fx, _corpus(shape, tmp), tmp / "out"), tmp / "out")
    case(f"corpus-{_shape}-auto", f"auto --corpus {_title}: searched (exit 0 or 3, auto.json), never 2")(_auto_usable)


@case("corpus-duplicates-verify", "verify --corpus with repeated texts: each read once, the repeats counted")
def _duplicates_verify(fx, tmp):
    report = tmp / "r.json"
    o = _verify_corpus(fx, _corpus("lines", tmp), "--json", report)
    row = json.loads(report.read_text())["agreement"][0] if report.is_file() else {}
    return o.rc in (0, 3) and row.get("duplicates_dropped") == 20, \
        f"exit {o.rc}, duplicates_dropped {row.get('duplicates_dropped')}"


@case("corpus-words-verify", "verify --corpus of one word a line: refused (exit 2) naming --queries")
def _words_verify(fx, tmp):
    o = _verify_corpus(fx, _corpus("words", tmp))
    ok, seen = expect(o, 2)
    return ok and "--queries" in o.err and len(lines(o.err)) == 1, seen


@case("corpus-words-auto", "auto --corpus of one word a line: refused at once (exit 2) naming --corpus")
def _words_auto(fx, tmp):
    return _refused_at_once(_auto_corpus(fx, _corpus("words", tmp), tmp / "out"), tmp, "--corpus")


@case("corpus-five-auto", "auto --corpus of five documents: refused at once (exit 2), too few to score on")
def _five_auto(fx, tmp):
    return _refused_at_once(_auto_corpus(fx, _corpus("five", tmp), tmp / "out"), tmp, "--corpus")


for _kind in ("nan", "number", "list"):
    def _not_text_verify(fx, tmp, kind=_kind):
        o = _verify_corpus(fx, _corpus(kind, tmp), "--agreement-from", "passage")
        ok, seen = expect(o, 2)
        return ok and f"{kind}.jsonl:2" in o.err and len(lines(o.err)) == 1, seen
    case(f"corpus-text-{_kind}-verify", f"verify --corpus: a JSON Lines text of {_kind}: refused with its line")(
        _not_text_verify)

    def _not_text_auto(fx, tmp, kind=_kind):
        o = _auto_corpus(fx, _corpus(kind, tmp), tmp / "out")
        ok, seen = _refused_at_once(o, tmp, f"{kind}.jsonl:2")
        return ok, seen
    case(f"corpus-text-{_kind}-auto", f"auto --corpus: a JSON Lines text of {_kind}: refused at once with its "
                                      "line")(_not_text_auto)


@case("auto-output-inside-input", "auto -o inside the model's folder: refused (exit 2), nothing written there")
def _auto_inside_input(fx, tmp):
    model = shutil.copytree(fx.tiny, tmp / "model")
    before = sorted(p.name for p in model.iterdir())
    o = cli("auto", model, "--corpus", _corpus("passages", tmp), "-o", model / "small", *AUTO_QUICK)
    ok, seen = expect(o, 2)
    return ok and sorted(p.name for p in model.iterdir()) == before, seen


@case("auto-refused-no-work-folder", "auto refused before any work (an empty corpus): no OUT.auto-work left")
def _auto_refused_clean(fx, tmp):
    empty = tmp / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    o = _auto_corpus(fx, empty, tmp / "out")
    ok, seen = expect(o, 2)
    return ok and sorted(p.name for p in tmp.iterdir()) == ["empty.txt"], seen


@case("auto-few-queries", "auto on a sample giving 6 known-item queries: never exit 0 (refused at once)")
def _auto_few_queries(fx, tmp):
    docs = tmp / "few.jsonl"
    docs.write_text("".join(json.dumps({"_id": str(i), "title": f"record {i} title", "text": f"the body of {i}"})
                            + "\n" for i in range(6)), encoding="utf-8")
    return _refused_at_once(_auto_corpus(fx, docs, tmp / "out"), tmp, "fewer than the 10", "--sample-documents")


@case("auto-interrupted-resumed", "SIGINT during auto: exit 130 naming the work folder kept; the rerun says what "
                                  "it reuses and ends 0 or 3")
def _auto_interrupted(fx, tmp):
    corpus, out = _corpus("passages", tmp), tmp / "out"
    search = ["auto", fx.tiny, "--corpus", corpus, "-o", out, "--threads", "1", "--sample-documents", "80",
              "--sample-queries", "24"]
    args = [sys.executable, "-m", "espresso_export", *search, "--time-budget", "10m", "--min-retention", "0.999"]
    proc = subprocess.Popen(list(map(str, args)), env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    state = tmp / "out.auto-work" / "auto-state.json"
    deadline = time.time() + 240
    while time.time() < deadline and not (state.is_file() and '"plain-' in state.read_text()):
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    stopped = proc.returncode == 130 and f"kept {tmp / 'out.auto-work'}" in err and ".tmp-" not in err
    again = cli(*search, "--time-budget", "1s")
    reused = "continuing the search in" in again.err and again.rc in (0, 3)
    return stopped and reused, (f"stop: exit {proc.returncode}: {(lines(err) or ['(no stderr)'])[-1][:70]}; "
                                f"rerun: exit {again.rc}")


# --- smaller: concurrency, unwritable places ---------------------------------------------------------------------

@case("report-under-a-file", "verify --json under a file (unwritable): exit 2 before measuring")
def _report_unwritable(fx, tmp):
    blocker = tmp / "blocker"
    blocker.write_text("x")
    o = cli("verify", fx.st, "--against", fx.tiny, "--sts", fx.sts, "--json", blocker / "r.json")
    ok, seen = expect(o, 2)
    return ok and "Spearman" not in o.out, seen


@case("two-distills-one-output", "two distills to the same -o at once: the second stops at the start (exit 2)")
def _two_distills(fx, tmp):
    args = [sys.executable, "-m", "espresso_export", "distill", "--teacher", fx.tiny, "--student-layers", "2",
            "--dim", "8", "--corpus", fx.calibration, "--epochs", "3", "--batch-size", "4", "--heldout", "0",
            "-o", tmp / "out"]
    first = subprocess.Popen(list(map(str, args)), env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not (tmp / "out.run").exists():
        time.sleep(0.2)
    second = cli(*args[3:])
    first.wait(timeout=300)
    return second.rc == 2 and first.returncode == 0, f"first exit {first.returncode}, second exit {second.rc}"


@case("two-distills-one-cache", "two distills of one teacher and corpus at once, other widths and outputs: both finish")
def _two_distills_one_cache(fx, tmp):
    def args(dim):
        return [sys.executable, "-m", "espresso_export", "distill", "--teacher", fx.tiny, "--student-layers", "2",
                "--dim", str(dim), "--corpus", fx.calibration, "--epochs", "1", "--batch-size", "16", "--heldout", "0",
                "--cache-dir", tmp / "cache", "-o", tmp / f"out{dim}"]
    procs = [subprocess.Popen(list(map(str, args(dim))), env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for dim in (8, 16)]
    codes = [p.wait(timeout=300) for p in procs]
    return codes == [0, 0], f"exits {codes}"


# --- signals -------------------------------------------------------------------------------------------------------

@case("sigterm-distill", "SIGTERM during distill: exit 143, a resumable checkpoint, no temp file left")
def _sigterm_distill(fx, tmp):
    args = [sys.executable, "-m", "espresso_export", "distill", "--teacher", fx.tiny, "--student-layers", "2",
            "--dim", "8", "--corpus", fx.calibration, "--epochs", "50", "--batch-size", "4", "--heldout", "0",
            "--checkpoint-every", "5", "-o", tmp / "out"]
    proc = subprocess.Popen(list(map(str, args)), env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.time() + 240  # a distill of another case may hold the shared teacher cache meanwhile
    while time.time() < deadline and not list(tmp.glob("out.run/checkpoint*")):
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    left = [p for p in tmp.rglob(".*") if ".tmp-" in p.name]
    return proc.returncode == 143 and not left and not (tmp / "out").exists(), \
        f"exit {proc.returncode}, temps left {len(left)}"


@case("sigint-export", "Ctrl-C during export: exit 130, one line, nothing written")
def _sigint_export(fx, tmp):
    args = [sys.executable, "-m", "espresso_export", "export", fx.st, "-o", tmp / "onnx", "--quantize", "int8"]
    proc = subprocess.Popen(list(map(str, args)), env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not any(p.name.startswith(".onnx.tmp-") for p in tmp.iterdir()):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    return proc.returncode == 130 and not (tmp / "onnx").exists() and len(lines(err)) >= 1, \
        f"exit {proc.returncode}: {(lines(err) or ['(no stderr)'])[-1][:90]}"


def run_case(c: Case, fx: Fixture, root: Path) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix=f"{c.id}-", dir=root))
    start = time.perf_counter()
    try:
        held, seen = c.run(fx, tmp)
    except Exception as e:  # a case that crashes is a failed case, reported with its error
        held, seen = False, f"{type(e).__name__}: {e}"
    return {"id": c.id, "title": c.title, "held": bool(held), "seen": seen,
            "seconds": round(time.perf_counter() - start, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-k", default="", help="only the cases whose id or title contains this")
    parser.add_argument("--jobs", type=int, default=2, help="cases run side by side")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    cases = [c for c in CASES if args.k in c.id or args.k in c.title]
    with tempfile.TemporaryDirectory(prefix="hostile-") as root:
        ENV["ESPRESSO_CACHE"] = str(Path(root) / "cache")
        start = time.perf_counter()
        fx = Fixture(Path(root) / "fixture")
        with ThreadPoolExecutor(args.jobs) as pool:
            results = list(pool.map(lambda c: run_case(c, fx, Path(root)), cases))
        total = time.perf_counter() - start
    width = max(len(r["id"]) for r in results)
    for r in results:
        print(f"{'ok  ' if r['held'] else 'FAIL'} {r['id']:<{width}} {r['seconds']:>6.1f}s  {r['seen'][:110]}")
    failed = [r for r in results if not r["held"]]
    print(f"\n{len(results) - len(failed)} of {len(results)} cases held in {total:.0f} s "
          f"({args.jobs} side by side)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"seconds": round(total, 1), "cases": results}, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
