"""``distill`` and ``train`` on torch.distributed: real processes, real gloo, on the CPU, 127.0.0.1 only.

* 2 processes under ``torchrun`` train the same weights as 1 process with the same global batch and seed;
* the teacher cache they write in shards equals, byte for byte, the one a single process writes (a distill
  whose student and teacher truncate alike starts near its optimum and amplifies 1e-8 target differences);
* a rank that dies or hangs ends the run within the collective timeout, with one clear line, and the
  checkpoint it leaves resumes on another number of processes to the same weights.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():
    pytest.skip("this torch build has no torch.distributed", allow_module_level=True)

from espresso_export.cli.app import main  # noqa: E402
from espresso_export.data import builtin_resource  # noqa: E402
from espresso_export.training.distributed import ENV_TIMEOUT, Dist, timeout_seconds  # noqa: E402
from espresso_export.core.errors import ValidationError  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

ROOT = Path(__file__).resolve().parents[2]  # subprocesses import this tree, not another checkout
SMOKE = builtin_resource("sts_smoke.tsv")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                           "MASTER_PORT")}
    env.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]), **extra)
    return env


def torchrun(nproc: int, args: list[str], timeout: float = 180) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--master_addr",
           "127.0.0.1", "--master_port", str(free_port()), "-m", "espresso_export", *args]
    return subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout)


def distill_args(tiny_bert, corpus, out: Path, cache: Path, *extra: str, epochs: int = 2) -> list[str]:
    # the default length (from the corpus: 64) truncates 14% of the texts like the teacher does, so training
    # starts near its optimum, where 1e-8 differences in the teacher's targets would show in the weights.
    # fp32 (--amp off): under bf16 (auto on a bf16 CPU) a rank's half-batch products round otherwise than the
    # whole batch's, so 1 and 2 processes agree only to ~4e-3 (measured), not to the 2e-4 checked here
    return ["distill", "--teacher", str(tiny_bert), "--student-layers", "2", "--dim", "8", "--corpus", str(corpus),
            "--batch-size", "32", "--lr", "1e-3", "--epochs", str(epochs), "--heldout", "0", "--threads", "1",
            "--seed", "3", "--amp", "off", "-o", str(out), "--cache-dir", str(cache), *extra]


def weights(folder: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    out = {f"model/{k}": v for k, v in load_file(str(folder / "model.safetensors")).items()}
    dense = folder / "3_Dense" / "model.safetensors"
    if dense.is_file():
        out.update({f"dense/{k}": v for k, v in load_file(str(dense)).items()})
    return out


def assert_same_weights(a: dict, b: dict, *, atol: float) -> None:
    assert a.keys() == b.keys()
    worst = max(float(np.abs(a[k] - b[k]).max()) for k in a)
    assert worst <= atol, f"largest weight difference {worst:.3g} > {atol}"


# --- 2 processes == 1 process ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def one_and_two(tiny_bert, calibration_file, tmp_path_factory):
    """The same distill run on 1 process (in this one) and on 2 gloo processes under torchrun."""
    tmp = tmp_path_factory.mktemp("dist")
    one = distill_args(tiny_bert, calibration_file, tmp / "one", tmp / "cache1", "--json")
    assert main(one) == 0
    two = torchrun(2, distill_args(tiny_bert, calibration_file, tmp / "two", tmp / "cache2", "--json"))
    assert two.returncode == 0, two.stderr[-3000:]
    return tmp, two


def test_two_gloo_processes_train_the_weights_one_process_trains(one_and_two, tiny_bert):
    tmp, two = one_and_two
    report = json.loads(two.stdout)  # exactly one report: rank 0's (rank 1 prints nothing)
    assert report["train"]["steps"] == 20 and report["output"] == str((tmp / "two").resolve())
    a, b = weights(tmp / "one"), weights(tmp / "two")
    assert_same_weights(a, b, atol=2e-4)  # float noise amplified by Adam on near-zero gradients
    # ... and the runs did train: the weights moved far more than the tolerance
    from safetensors.numpy import load_file

    start = load_file(str(Path(tiny_bert) / "model.safetensors"))
    moved = max(float(np.abs(b[k] - start[k[6:]]).max()) for k in b if k.startswith("model/embeddings."))
    assert moved > 20 * 2e-4
    p1, p2 = (json.loads((tmp / n / "espresso.json").read_text())["training"] for n in ("one", "two"))
    assert (p1["processes"], p2["processes"]) == (1, 2) and p1["steps"] == p2["steps"]
    assert sorted(p.name for p in tmp.iterdir() if p.name.startswith("two")) == ["two"]  # run folder removed


def test_the_in_batch_ranking_loss_trains_the_same_weights_on_two_processes(one_and_two, tiny_bert, calibration_file):
    """``rank+mse`` couples a batch's texts: the ranks gather the global batch, so 2 processes train what 1 does
    (the teacher cache of the fixture's runs is reused: same teacher, corpus and settings)."""
    tmp, _ = one_and_two
    extra = ("--loss", "rank+mse", "--json")
    assert main(distill_args(tiny_bert, calibration_file, tmp / "rank1", tmp / "cache1", *extra, epochs=1)) == 0
    two = torchrun(2, distill_args(tiny_bert, calibration_file, tmp / "rank2", tmp / "cache2", *extra, epochs=1))
    assert two.returncode == 0, two.stderr[-3000:]
    assert json.loads(two.stdout)["train"]["steps"] == 10
    a, b = weights(tmp / "rank1"), weights(tmp / "rank2")
    assert_same_weights(a, b, atol=2e-4)
    # ... and the ranking term is in the gradient: the same epoch with mse alone ends elsewhere
    assert main(distill_args(tiny_bert, calibration_file, tmp / "mse1", tmp / "cache1", "--json", epochs=1)) == 0
    mse_only = weights(tmp / "mse1")
    assert max(float(np.abs(a[k] - mse_only[k]).max()) for k in a) > 20 * 2e-4


def test_the_sharded_teacher_cache_equals_the_single_process_cache(one_and_two):
    from safetensors.numpy import load_file

    tmp, _ = one_and_two
    (c1,), (c2,) = list((tmp / "cache1").iterdir()), list((tmp / "cache2").iterdir())
    assert c1.name == c2.name  # same key: same teacher, corpus and settings
    files = sorted(p.name for p in c1.iterdir())
    assert files == sorted(p.name for p in c2.iterdir()) and any(f.startswith("targets-") for f in files)
    for name in files:
        if name.endswith(".npy"):
            x, y = np.load(c1 / name), np.load(c2 / name)
            assert x.shape == y.shape and x.shape[0] == 300
            np.testing.assert_array_equal(y, x, err_msg=name)  # ranks take whole teacher chunks: same bytes
        elif name.endswith(".safetensors"):
            x, y = load_file(str(c1 / name)), load_file(str(c2 / name))
            for k in x:
                np.testing.assert_array_equal(y[k], x[k], err_msg=f"{name}:{k}")
        else:
            assert (c1 / name).read_text() == (c2 / name).read_text()


# --- faults ------------------------------------------------------------------------------------------

def _start_ranks(args: list[str], n: int = 2, **env) -> list[subprocess.Popen]:
    """Ranks started by hand, as torchrun would start them but without its agent (which would stop them itself)."""
    port = free_port()
    return [subprocess.Popen([sys.executable, "-m", "espresso_export", *args], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             env=_env(RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1",
                                      MASTER_PORT=str(port), **env))
            for r in range(n)]


def _wait_for(path: Path, procs: list[subprocess.Popen], seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not path.is_file():
        assert procs[0].poll() is None, procs[0].communicate()[1][-2000:]
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


@pytest.mark.parametrize("fault", ["killed", pytest.param("stopped", marks=pytest.mark.slow)])
def test_a_dead_or_stuck_rank_ends_the_run_within_the_timeout_and_resumes_on_one_process(
        fault, tiny_bert, calibration_file, tmp_path):
    args = distill_args(tiny_bert, calibration_file, tmp_path / "out", tmp_path / "cache", "--checkpoint-every", "0",
                        epochs=6)
    # a timeout no healthy step reaches on a slow, busy machine; the bound below is that and the current step
    procs = _start_ranks(args, **{ENV_TIMEOUT: "10"})
    try:
        ckpt = tmp_path / "out.run" / "checkpoint" / "trainer.json"
        _wait_for(ckpt, procs)  # the first epoch is done: training is under way
        procs[1].send_signal(signal.SIGSTOP if fault == "stopped" else signal.SIGKILL)
        t0 = time.monotonic()
        _, err = procs[0].communicate(timeout=60)
        waited = time.monotonic() - t0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.communicate()
    assert procs[0].returncode == 1, err[-2000:]
    assert waited < 10 + 40, waited  # the timeout plus the current step, not forever
    line = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(line) == 1 and "rank 0 of 2" in line[0] and ENV_TIMEOUT in line[0] and "--resume" in line[0], err[-2000:]
    assert "Traceback" not in err
    step = json.loads(ckpt.read_text())["step"]
    assert 10 <= step < 60

    if fault == "stopped":
        return
    # the checkpoint is the global state (world-size independent): 1 process continues it to the same weights
    assert main([*args, "--resume"]) == 0
    ref = distill_args(tiny_bert, calibration_file, tmp_path / "ref", tmp_path / "cache", "--checkpoint-every", "0",
                       epochs=6)
    assert main(ref) == 0
    assert_same_weights(weights(tmp_path / "out"), weights(tmp_path / "ref"), atol=2e-4)


@pytest.mark.slow
def test_ctrl_c_on_one_rank_stops_every_rank_after_the_same_step(tiny_bert, calibration_file, tmp_path):
    args = distill_args(tiny_bert, calibration_file, tmp_path / "out", tmp_path / "cache", "--checkpoint-every", "0",
                        epochs=6)
    procs = _start_ranks(args)
    try:
        ckpt = tmp_path / "out.run" / "checkpoint" / "trainer.json"
        _wait_for(ckpt, procs)
        procs[1].send_signal(signal.SIGINT)
        outs = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [130, 130], [o[1][-1500:] for o in outs]
    steps = {int(o[1].split("interrupted at step ")[1].split("/")[0]) for o in outs}
    assert len(steps) == 1 and json.loads(ckpt.read_text())["step"] == steps.pop()
    assert "Traceback" not in outs[0][1] + outs[1][1]


def test_the_pair_loss_on_two_processes_matches_one_process(tiny_bert, calibration_file, tmp_path):
    """The pair loss is a mean over pairs: each rank's share, weighted by its size, sums to the global loss."""
    extra = ("--pairs", str(SMOKE), "--loss", "pair+mse", "--max-steps", "6", "--json")
    assert main(distill_args(tiny_bert, calibration_file, tmp_path / "one", tmp_path / "c1", *extra)) == 0
    two = torchrun(2, distill_args(tiny_bert, calibration_file, tmp_path / "two", tmp_path / "c2", *extra))
    assert two.returncode == 0, two.stderr[-3000:]
    assert json.loads(two.stdout)["corpus"]["training_pairs"] > 100
    assert_same_weights(weights(tmp_path / "one"), weights(tmp_path / "two"), atol=2e-4)


# --- train --ese ---------------------------------------------------------------------------------------

@pytest.mark.slow
def test_ese_on_two_processes_matches_one_process(tiny_bert, tmp_path):
    """In-batch negatives, rankings and the batch PCA span the global batch: each rank gathers the others'
    embeddings, so 2 ranks follow the 1-process run (learned layer weights included)."""
    model = tmp_path / "model"  # train keeps the model's dropout: off here, so both runs are deterministic
    shutil.copytree(tiny_bert, model)
    config = json.loads((model / "config.json").read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (model / "config.json").write_text(json.dumps(config))
    args = ["train", str(model), "--ese", "--data", str(SMOKE), "--compression-dim", "16", "--layer-weights",
            "learned", "--batch-size", "16", "--lr", "1e-3", "--max-steps", "6", "--threads", "1", "--json"]
    assert main([*args, "-o", str(tmp_path / "one")]) == 0
    two = torchrun(2, [*args, "-o", str(tmp_path / "two")])
    assert two.returncode == 0, two.stderr[-3000:]
    assert json.loads(two.stdout)["train"]["steps"] == 6
    assert_same_weights(weights(tmp_path / "one"), weights(tmp_path / "two"), atol=2e-4)


# --- the pieces ----------------------------------------------------------------------------------------

def test_global_batches_split_into_contiguous_deterministic_slices():
    bounds = Dist(rank=0, world=3).shard_bounds(10)
    assert bounds == [(0, 4), (4, 7), (7, 10)]
    batch = list(range(100, 110))
    assert [Dist(rank=r, world=3).shard(batch) for r in range(3)] == [batch[0:4], batch[4:7], batch[7:10]]
    assert [Dist(rank=r, world=4).shard([1, 2]) for r in range(4)] == [[1], [2], [], []]  # short last batch
    assert Dist().shard(batch) == batch and not Dist().enabled
    # whole blocks (the teacher pass's chunks): the same blocks, hence the same bytes, on any number of ranks
    assert Dist(rank=0, world=2).shard_bounds(5000, align=2048) == [(0, 4096), (4096, 5000)]
    assert Dist(rank=0, world=3).shard_bounds(300, align=2048) == [(0, 300), (300, 300), (300, 300)]
    assert Dist(rank=0, world=3).shard_bounds(10, align=1) == bounds


def test_the_collective_timeout_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv(ENV_TIMEOUT, raising=False)
    assert timeout_seconds() == 600
    monkeypatch.setenv(ENV_TIMEOUT, "2.5")
    assert timeout_seconds() == 2.5
    for bad in ("soon", "0", "-3"):
        monkeypatch.setenv(ENV_TIMEOUT, bad)
        with pytest.raises(ValidationError, match=ENV_TIMEOUT):
            timeout_seconds()
