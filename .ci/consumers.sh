#!/usr/bin/env bash
# The runtimes an export must load in (tests/test_runtimes.py), installed from their registries:
# - sentence-transformers[onnx], optimum-onnx, fastembed and Playwright (Python) in .ci/venv-consumers: they pin
#   transformers < 4.58 and huggingface-hub < 1, so they cannot share the project's environment;
# - Chromium from the OS packages (Playwright drives it; it never downloads a browser of its own);
# - transformers.js and onnxruntime-web from npm, in examples/browser/node_modules (the browser example's own).
# Tests find the venv at .ci/venv-consumers (or $ESPRESSO_CONSUMER_PYTHON) and skip with the reason without it.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.ci/venv-consumers
pip_quiet=(--quiet --disable-pip-version-check)
[ -x "$venv/bin/python" ] || python -m venv "$venv"
"$venv/bin/python" -m pip install "${pip_quiet[@]}" "torch==2.13.0"
"$venv/bin/python" -m pip install "${pip_quiet[@]}" -r .ci/consumers.txt
if ! command -v chromium >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
# --ignore-scripts: onnxruntime-node's install script would fetch binaries; the npm packages carry what we use
npm ci --prefix examples/browser --ignore-scripts --no-audit --no-fund --loglevel=error
