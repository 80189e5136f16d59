#!/usr/bin/env bash
# The GPU check of the training and encode paths, in one script (under 8 minutes on one H100).
#
#   bash benchmarks/gpu.sh prepare   # here, with the shared data and the MiniLM package: fills .gpu-carry/
#   bash benchmarks/gpu.sh run       # on the GPU machine (carry .gpu-carry): writes $OUT/gpu-results.json
#   DEVICE=cpu BUDGET=tiny bash benchmarks/gpu.sh run   # the same steps on the CPU, small: checks the script
#
# prepare: all-MiniLM-L6-v2 as float16 safetensors (with its tokenizer and configs), a 10,000-sentence slice of
# the shared corpora and STS-B dev, into the git-ignored .gpu-carry/ (well under the 64 MiB a run carries).
# run: restores float32 weights from the float16 copy, installs the project (pip install --no-deps -e .), runs
# the cuda tests (tests/gpu), the encode comparison with sentence-transformers (benchmarks/encode_speed.py) and a
# MiniLM L3 heal (batch 128, 64 tokens) with the GPU's busy fraction sampled by nvidia-smi; one JSON of results.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CARRY=${CARRY:-$ROOT/.gpu-carry}
DEVICE=${DEVICE:-cuda}
BUDGET=${BUDGET:-full}
OUT=${OUT:-$ROOT/benchmarks/.out/gpu}
PY=${PYTHON:-python}

prepare() {
  "$PY" - "$CARRY" <<'PY'
import gzip, shutil, sys
from pathlib import Path

sys.path.insert(0, "benchmarks")
from _models import SHARED, minilm
from safetensors.torch import load_file, save_file

carry = Path(sys.argv[1])
model, dest = minilm(), carry / "minilm-fp16"
if dest.exists():
    shutil.rmtree(dest)
dest.mkdir(parents=True)
weights = {k: v.half().contiguous() if v.is_floating_point() else v for k, v in load_file(model / "model.safetensors").items()}
save_file(weights, str(dest / "model.safetensors"), metadata={"format": "pt"})
for p in model.iterdir():  # tokenizer, configs, pooling: everything but the weights and the card
    if p.is_dir():
        shutil.copytree(p, dest / p.name)
    elif p.suffix in (".json", ".txt") and p.name != "README.md":
        shutil.copy2(p, dest / p.name)
data = carry / "data"
data.mkdir(exist_ok=True)
seen = {}
for name in ("multi30k-captions.txt.gz", "tatoeba-eng.txt.gz"):
    with gzip.open(SHARED / "corpus" / name, "rt", encoding="utf-8") as fh:
        for line in fh:
            if line.strip() and len(seen) < 10_000:
                seen.setdefault(line.strip())
(data / "corpus-10k.txt").write_text("\n".join(seen) + "\n", encoding="utf-8")
shutil.copy2(SHARED / "stsb" / "sts-dev.csv", data / "sts-dev.csv")
total = sum(p.stat().st_size for p in carry.rglob("*") if p.is_file())
print(f"{carry}: {total / 2**20:.1f} MiB")
assert total < 56 * 2**20, "the carried folder must leave room for the working tree within 64 MiB"
PY
}

run() {
  mkdir -p "$OUT"
  local work; work=$(mktemp -d)
  local model=$work/minilm
  local start=$SECONDS
  [ -d "$CARRY/minilm-fp16" ] || { echo "no $CARRY/minilm-fp16: run 'bash benchmarks/gpu.sh prepare' first" >&2; exit 2; }
  "$PY" - "$CARRY/minilm-fp16" "$model" <<'PY'
import shutil, sys
from pathlib import Path
from safetensors.torch import load_file, save_file

src, dest = Path(sys.argv[1]), Path(sys.argv[2])
shutil.copytree(src, dest)
weights = {k: v.float().contiguous() if v.is_floating_point() else v for k, v in load_file(src / "model.safetensors").items()}
save_file(weights, str(dest / "model.safetensors"), metadata={"format": "pt"})
PY
  if [ "${INSTALL:-$([ "$DEVICE" = cpu ] && echo 0 || echo 1)}" = 1 ]; then
    "$PY" -m pip install --no-deps --no-build-isolation -q -e "$ROOT" > "$OUT/pip.log" 2>&1 || \
      "$PY" -m pip install --no-deps -q -e "$ROOT" >> "$OUT/pip.log" 2>&1
  fi
  local n=10000 st_n=10000 epochs=3 steps="" tests_timeout=240
  if [ "$BUDGET" = tiny ]; then n=400; st_n=256; epochs=1; steps="--max-steps 3"; tests_timeout=120; fi

  # 1. the cuda tests (skipped, with the reason, on a machine without CUDA)
  (cd "$ROOT" && timeout "$tests_timeout" "$PY" -m pytest -q -m cuda tests/gpu -p no:cacheprovider \
      --junitxml="$OUT/cuda-tests.xml" > "$OUT/cuda-tests.log" 2>&1); echo $? > "$OUT/cuda-tests.rc"
  # 2. our encode paths against sentence-transformers' encode, same model, texts, length and batch
  timeout 150 "$PY" "$ROOT/benchmarks/encode_speed.py" --model "$model" --device "$DEVICE" --sentences "$st_n" \
      --batch-size 256 --max-seq-len 64 --repeats 3 --amp --tokenizer --corpus "$CARRY/data/corpus-10k.txt" \
      --json "$OUT/encode-speed.json" > "$OUT/encode-speed.log" 2>&1; echo $? > "$OUT/encode-speed.rc"
  # 3. MiniLM L3/d128 heal at batch 128, 64 tokens; nvidia-smi samples the GPU's busy fraction meanwhile
  local smi=""
  if [ "$DEVICE" = cuda ] && command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 200 > "$OUT/gpu-util.txt" 2>/dev/null &
    smi=$!
  fi
  timeout 180 "$PY" -m espresso_export distill --teacher "$model" --student-layers 3 --dim 128 \
      --corpus "$CARRY/data/corpus-10k.txt" --max-sentences "$n" --batch-size 128 --max-seq-len 64 \
      --eval-sts "$CARRY/data/sts-dev.csv" --heldout 0 --epochs "$epochs" $steps --device "$DEVICE" \
      --cache-dir "$work/cache" -o "$work/heal" --json > "$OUT/heal.json" 2> "$OUT/heal.log"; echo $? > "$OUT/heal.rc"
  [ -n "$smi" ] && kill "$smi" 2>/dev/null
  "$PY" - "$OUT" "$DEVICE" "$((SECONDS - start))" <<'PY'
import json, re, sys
from pathlib import Path

out, device, seconds = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
def read(name):
    try:
        return json.loads((out / name).read_text())
    except (OSError, ValueError):
        return None
rc = {k: int((out / f"{k}.rc").read_text()) for k in ("cuda-tests", "encode-speed", "heal") if (out / f"{k}.rc").exists()}
log = (out / "cuda-tests.log").read_text() if (out / "cuda-tests.log").exists() else ""
counts = dict((k, int(v)) for v, k in re.findall(r"(\d+) (passed|failed|skipped|error|errors|deselected)", log))
heal = read("heal.json")
util = [float(x) for x in (out / "gpu-util.txt").read_text().split()] if (out / "gpu-util.txt").exists() else []
speed = read("encode-speed.json")
result = {
    "device": device, "seconds": seconds, "exit_codes": rc,
    "cuda_tests": {"counts": counts, "summary": log.strip().splitlines()[-1] if log.strip() else None},
    "encode_speed": speed,
    "heal": None if heal is None else {
        "train_sentences_per_s": heal["train"]["items_per_second"], "train_seconds": heal["train"]["seconds"],
        "steps": heal["train"]["steps"], "teacher_seconds": heal["teacher_seconds"],
        "teacher_sentences_per_s": round(heal["corpus"].get("training_sentences", 0) / max(heal["teacher_seconds"], 1e-9), 1),
        "precision": heal["precision"], "eval": heal["eval"], "total_seconds": heal["seconds"]},
    "gpu_busy_fraction": round(sum(u > 0 for u in util) / len(util), 3) if util else None,
    "gpu_mean_utilization_pct": round(sum(util) / len(util), 1) if util else None,
}
(out / "gpu-results.json").write_text(json.dumps(result, indent=2) + "\n")
print(json.dumps(result, indent=2))
PY
  rm -rf "$work"
}

case "${1:-run}" in
  prepare) prepare ;;
  run) run ;;
  *) echo "usage: bash benchmarks/gpu.sh prepare|run" >&2; exit 2 ;;
esac
