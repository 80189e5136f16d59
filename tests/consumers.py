"""The runtimes our users load an export with, run as those users run them: in their own environment.

sentence-transformers' ONNX extra (optimum-onnx) and fastembed pin transformers and huggingface-hub versions
that conflict with this project's, so they live in a separate virtual environment (``.ci/run`` builds it in
``.ci/venv-consumers``; ``ESPRESSO_CONSUMER_PYTHON`` points at another one). Code runs there in a subprocess,
without espresso-export on its path: what a consumer of the published files has. transformers.js runs in
Node and in headless Chromium, from ``examples/browser/node_modules`` (``npm ci`` there).
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import subprocess
import textwrap
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
BROWSER_EXAMPLE = ROOT / "examples" / "browser"
NODE_MODULES = BROWSER_EXAMPLE / "node_modules"
CONSUMER_ENV = "ESPRESSO_CONSUMER_PYTHON"
CHROMIUM_ENV = "ESPRESSO_CHROMIUM"
# the network is closed and the profile is throw-away: nothing may phone home or wait for it
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def consumer_python() -> str | None:
    path = os.environ.get(CONSUMER_ENV) or str(ROOT / ".ci" / "venv-consumers" / "bin" / "python")
    return path if Path(path).is_file() else None


@functools.cache
def _importable(python: str, module: str) -> bool:
    return subprocess.run([python, "-c", f"import {module}"], capture_output=True, timeout=300,
                          check=False).returncode == 0


def require_consumer(*modules: str) -> str:
    """The consumer interpreter, or skip (with how to get it) when it or one of ``modules`` is missing."""
    python = consumer_python()
    if python is None:
        pytest.skip(f"no consumer environment: run .ci/run, or set {CONSUMER_ENV} to a python with "
                    "sentence-transformers[onnx], fastembed and playwright")
    missing = [m for m in modules if not _importable(python, m)]
    if missing:
        pytest.skip(f"{python} lacks {', '.join(missing)}")
    return python


def chromium() -> str | None:
    found = os.environ.get(CHROMIUM_ENV) or shutil.which("chromium") or shutil.which("chromium-browser")
    return found if found and Path(found).is_file() else None


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")
    return env


def run_python(python: str, code: str, cwd: Path, timeout: int = 900) -> str:
    """Run ``code`` with the consumer interpreter (espresso-export not on its path); returns stdout."""
    script = cwd / "consumer_script.py"
    script.write_text(code, encoding="utf-8")
    proc = subprocess.run([python, str(script)], capture_output=True, text=True, cwd=cwd, env=_env(), timeout=timeout,
                          check=False)
    assert proc.returncode == 0, f"consumer script {script} failed:\n{proc.stderr[-3000:]}"
    return proc.stdout


def run_snippets(python: str, snippets: dict[str, str], cwd: Path) -> dict[str, np.ndarray]:
    """Run each Python snippet (one process, one namespace each); returns its ``embeddings`` as float32."""
    out = cwd / "embeddings.npz"
    body = ["import numpy as np", "results = {}"]
    for name, code in snippets.items():
        body += ["namespace = {}", f"exec(compile({code!r}, {name!r}, 'exec'), namespace)",
                 "e = namespace['embeddings']",
                 f"results[{name!r}] = np.asarray(e.detach().numpy() if hasattr(e, 'detach') else e, dtype=np.float32)"]
    body.append(f"np.savez({str(out)!r}, **results)")
    run_python(python, "\n".join(body) + "\n", cwd)
    with np.load(out) as data:
        return {k: data[k] for k in data.files}


def localise(code: str, repo_id: str, folder: Path, texts: list[str], example: str) -> str:
    """A card snippet pointed at a staged folder instead of the Hub, on ``texts`` instead of the example."""
    code = code.replace(f'snapshot_download("{repo_id}")', repr(str(folder)))
    code = code.replace(f'"{repo_id}"', json.dumps(str(folder)))
    return code.replace(example, json.dumps(texts, ensure_ascii=False))


def run_node(script: str, cwd: Path) -> str:
    """Run an ES module with Node, resolving packages from the browser example's node_modules."""
    if shutil.which("node") is None or not (NODE_MODULES / "@huggingface" / "transformers").is_dir():
        pytest.skip("transformers.js is not installed: npm ci --prefix examples/browser (.ci/run does it)")
    path = BROWSER_EXAMPLE / f".test-{os.getpid()}-{threading.get_ident()}.mjs"  # beside node_modules
    path.write_text(script, encoding="utf-8")
    try:
        proc = subprocess.run(["node", str(path)], capture_output=True, text=True, cwd=cwd, env=_env(), timeout=600,
                              check=False)
    finally:
        path.unlink()
    assert proc.returncode == 0, f"node failed:\n{proc.stderr[-3000:]}"
    return proc.stdout


class _Quiet(http.server.SimpleHTTPRequestHandler):
    extensions_map: ClassVar[dict[str, str]] = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                      ".js": "text/javascript", ".mjs": "text/javascript", ".wasm": "application/wasm"}

    def log_message(self, *args) -> None:
        pass


@contextmanager
def serve(root: Path):
    """A static file server for ``root`` on 127.0.0.1 (a free port); yields its base URL."""
    handler = functools.partial(_Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def browser_script(url: str, texts: list[str], query: str, screenshot: Path, chromium_path: str) -> str:
    """Playwright (with the system Chromium, nothing downloaded) drives the example page and prints JSON."""
    return textwrap.dedent(f"""
        import json
        from playwright.sync_api import sync_playwright

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path={chromium_path!r}, args={CHROMIUM_ARGS!r})
            page = browser.new_page(viewport={{"width": 1100, "height": 900}})
            page.goto({url!r})
            page.wait_for_function("window.espresso && (window.espresso.ready || window.espresso.error)",
                                   timeout=300000)
            error = page.evaluate("window.espresso.error || null")
            if error:
                raise SystemExit("page error: " + error)
            vectors = page.evaluate("texts => window.espresso.embed(texts)", {texts!r})
            page.evaluate("document.querySelector('#results').replaceChildren(); "
                          "document.querySelector('#status').textContent = ''")
            page.fill("#query", {query!r})
            page.click("#rank")
            page.wait_for_function("document.querySelector('#status').textContent.includes('ranked') && "
                                   "document.querySelector('#results li')", timeout=300000)
            page.wait_for_timeout(50)
            sentences = [s.strip() for s in page.input_value("#sentences").split("\\n") if s.strip()]
            ranking = [li.evaluate("e => e.lastChild.textContent") for li in page.query_selector_all("#results li")]
            page.screenshot(path={str(screenshot)!r}, full_page=True)
            browser.close()
        print(json.dumps({{"vectors": vectors, "sentences": sentences, "ranking": ranking}}))
    """)
