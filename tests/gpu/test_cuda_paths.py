"""Every command path that trains or encodes, on a CUDA device, with tiny random models.

Selected with ``-m cuda`` and skipped (with the reason) where ``torch.cuda.is_available()`` is False, as on CI.
Each test runs a command as a user would (``--device cuda``), then checks what it wrote: exit 0, an output that
loads, finite vectors on the GPU that match the same model on the CPU, and for ``--resume`` a run that continues
from its checkpoint on the same device and on another one (CPU -> CUDA, CUDA -> CPU).
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from espresso_export.cli.app import main
from espresso_export.data import builtin_resource, read_sts
from espresso_export.model.checkpoint import load
from espresso_export.model.embed import encode

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)"),
]

TEXTS = ["a man plays the guitar", "the dog runs in the park", "a child reads a book", "the car is red"]
SMOKE = builtin_resource("sts_smoke.tsv")


def _cli(capsys, *args) -> dict:
    """Run the CLI with ``--json``; exit 0 asserted; its JSON result."""
    code = main([str(a) for a in args] + ["--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err[-3000:]
    return json.loads(captured.out)


def _check_output(folder: Path) -> np.ndarray:
    """The written model loads, encodes finite vectors on the GPU, and the CPU gives the same vectors."""
    ckpt = load(folder)
    on_cpu = encode(ckpt, TEXTS)
    ckpt.model.to("cuda")
    on_gpu = encode(ckpt, TEXTS)
    assert np.isfinite(on_gpu).all() and on_gpu.shape == on_cpu.shape
    np.testing.assert_allclose(on_gpu, on_cpu, atol=2e-3)
    return on_gpu


@pytest.fixture(scope="module")
def data(tmp_path_factory, calibration_file) -> dict:
    """A 300-sentence corpus, related pairs, a small BEIR set, the builtin STS pairs."""
    tmp = tmp_path_factory.mktemp("cuda-data")
    lines = calibration_file.read_text(encoding="utf-8").splitlines()
    pairs = tmp / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"anchor": a, "positive": b}) + "\n"
                             for a, b in zip(lines[0:120:2], lines[1:120:2])), encoding="utf-8")
    beir = tmp / "beir"
    (beir / "qrels").mkdir(parents=True)
    docs, queries = lines[200:260], lines[260:270]
    (beir / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(docs)))
    (beir / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": t}) + "\n"
                                                for i, t in enumerate(queries)))
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(
        f"q{i}\td{i * 3}\t1\n" for i in range(len(queries))))
    return {"corpus": calibration_file, "pairs": pairs, "beir": beir, "tmp": tmp}


DISTILL = {
    "heal": [],
    "hpd-student": ["--student", "{roberta}"],
    "pairs": ["--pairs", "{pairs}", "--loss", "pair+mse"],
    "rank+mse": ["--loss", "rank+mse"],
    "layer-targets": ["--layer-targets"],
    "eval-sts": ["--eval-sts", "builtin"],
    "eval-retrieval": ["--eval-retrieval", "{beir}", "--eval-sts", "builtin"],
    "freeze-embeddings": ["--freeze-embeddings"],
}


@pytest.mark.parametrize("path", DISTILL, ids=list(DISTILL))
def test_distill_runs_on_cuda(path, tiny_models, tiny_bert, data, tmp_path, capsys):
    extra = [a.format(roberta=tiny_models["roberta"], pairs=data["pairs"], beir=data["beir"]) for a in DISTILL[path]]
    cut = [] if path == "hpd-student" else ["--student-layers", "2"]
    out = _cli(capsys, "distill", "--teacher", tiny_bert, *cut, "--dim", "8", "--corpus", data["corpus"], *extra,
               "--batch-size", "16", "--epochs", "1", "--max-steps", "6", "--heldout", "20", "--device", "cuda",
               "--cache-dir", tmp_path / "cache", "-o", tmp_path / "out")
    assert out["train"]["steps"] == 6 and np.isfinite(out["train"]["epoch_mean_loss"])
    assert out["heldout"]["relative_mse_after"] is not None and np.isfinite(out["heldout"]["relative_mse_after"])
    if "--eval-sts" in extra:
        assert out["eval"] is not None and np.isfinite(out["eval"]["best"])
    assert _check_output(tmp_path / "out").shape == (len(TEXTS), 8)


def test_teacher_pass_on_cuda_matches_the_cpu_pass(tiny_bert, data, tmp_path):
    from espresso_export.data import read_corpus
    from espresso_export.distilling import teacher_targets

    sentences = read_corpus([data["corpus"]]).sentences
    kw = {"dim": 8, "pca_samples": 300, "layers": [1], "batch_size": 32}
    cpu = teacher_targets(load(tiny_bert), sentences, cache_dir=tmp_path / "cpu", **kw)
    teacher = load(tiny_bert)
    teacher.model.to("cuda")
    gpu = teacher_targets(teacher, sentences, cache_dir=tmp_path / "gpu", **kw)
    emb = lambda t: np.load(t.folder / "embeddings.npy")  # noqa: E731
    np.testing.assert_allclose(emb(gpu), emb(cpu), atol=1e-4)
    np.testing.assert_allclose(np.asarray(gpu.layers[1], dtype=np.float32), np.asarray(cpu.layers[1], dtype=np.float32),
                               atol=2e-2)
    bf16 = teacher_targets(teacher, sentences, cache_dir=tmp_path / "bf16", precision=torch.bfloat16, **kw)
    assert np.isfinite(np.asarray(bf16.targets)).all()
    assert np.abs(np.load(bf16.folder / "embeddings.npy") - emb(cpu)).max() < 0.05


TRAIN = {
    "ese": ("bert", ["--ese", "-k", "16"]),
    "plain": ("bert", ["-k", "16"]),
    "bidirectional-qwen2": ("qwen2", ["--ese", "-k", "16", "--bidirectional", "all"]),
    "bidirectional-llama": ("llama", ["--ese", "-k", "16", "--bidirectional", "last"]),
    "lora": ("qwen2", ["--ese", "-k", "16", "--bidirectional", "all", "--lora", "--lora-r", "4"]),
}


@pytest.mark.parametrize("path", TRAIN, ids=list(TRAIN))
def test_train_runs_on_cuda_with_eval(path, tiny_models, tmp_path, capsys):
    family, extra = TRAIN[path]
    if "--lora" in extra:
        pytest.importorskip("peft", reason="the lora extra (peft) is not installed")
    if family not in tiny_models:
        pytest.skip(f"no tiny {family} model in tests/tiny_models.py")
    out = _cli(capsys, "train", tiny_models[family], "--data", SMOKE, *extra, "--eval-sts", SMOKE, "--batch-size", "8",
               "--max-steps", "4", "--device", "cuda", "-o", tmp_path / "out")
    assert out["train"]["steps"] == 4
    assert out["eval"] is not None and np.isfinite(out["eval"]["best"])
    _check_output(tmp_path / "out")


def _stop_at(step: int):
    def on_step(done: int) -> None:
        if done == step:
            signal.raise_signal(signal.SIGINT)  # the trainer saves a checkpoint and stops after this step
    return on_step


@pytest.mark.parametrize("first,then", [("cuda", "cuda"), ("cpu", "cuda"), ("cuda", "cpu")])
def test_distill_resume_on_the_same_and_on_another_device(first, then, tiny_bert, data, tmp_path):
    from espresso_export.distilling import distill
    from espresso_export.training.loop import TrainingInterrupted

    kw = {"student_layers": 2, "dim": 8, "corpus": [str(data["corpus"])], "batch_size": 16, "epochs": 2,
          "heldout": 0, "eval_sts": "builtin", "cache_dir": tmp_path / "cache", "checkpoint_every": 0, "seed": 0,
          "max_steps": 12}
    straight = distill(str(tiny_bert), tmp_path / "straight", device=then, **kw)
    with pytest.raises(TrainingInterrupted):
        distill(str(tiny_bert), tmp_path / "part", device=first, on_step=_stop_at(7), **kw)
    resumed = distill(str(tiny_bert), tmp_path / "part", device=then, resume=True, **kw)
    assert resumed.train["resumed_from"] == 7 and resumed.train["steps"] == straight.train["steps"]
    assert np.isfinite(resumed.train["epoch_mean_loss"])
    a, b = _check_output(tmp_path / "straight"), _check_output(tmp_path / "part")
    np.testing.assert_allclose(a, b, atol=5e-3)  # GPU kernels are not bit-deterministic across runs


@pytest.mark.parametrize("first,then", [("cuda", "cuda"), ("cpu", "cuda")])
def test_train_resume_restores_optimizer_state_on_the_device(first, then, tiny_bert, tmp_path):
    from espresso_export.finetuning.ese import EseData, EseObjective, EseObjectiveSettings
    from espresso_export.finetuning.train import EseTask
    from espresso_export.training.loop import LoopSettings, Trainer, TrainingInterrupted

    def task():
        torch.manual_seed(0)
        ckpt = load(tiny_bert)
        objective = EseObjective.from_checkpoint(ckpt, EseObjectiveSettings(compression_dim=16, layer_weights="learned"))
        return EseTask(ckpt, objective, EseData(read_sts(SMOKE)), eval_pairs=read_sts(SMOKE), identity={"t": "cuda"})

    cfg = lambda device: LoopSettings(batch_size=16, lr=1e-3, max_steps=6, checkpoint_every=0, device=device)  # noqa: E731
    with pytest.raises(TrainingInterrupted):
        Trainer(task(), cfg(first), tmp_path / "run").run(on_step=_stop_at(3))
    trainer = Trainer(task(), cfg(then), tmp_path / "run")
    result = trainer.run(resume=True)
    assert result.resumed_from == 3 and result.steps == 6 and np.isfinite(result.epoch_mean_loss)
    states = [s for s in trainer.optimizer.state.values() if "exp_avg" in s]
    assert states and all(s["exp_avg"].device.type == then and s["exp_avg_sq"].device.type == then for s in states)
    assert all(p.device.type == then for p in trainer.task.ckpt.model.parameters())


def test_the_ese_objective_on_cuda_for_every_loss_and_weighting(tiny_bert):
    from espresso_export.finetuning.ese import EseBatch, EseObjective, EseObjectiveSettings

    ckpt = load(tiny_bert)
    ckpt.model.to("cuda")
    scored = EseBatch(TEXTS[:2], TEXTS[2:], scores=[4.5, 0.5], is_positive=[True, False])
    triplets = EseBatch(TEXTS[:2], TEXTS[2:], negative=TEXTS[1::-1])
    for loss in ("angle", "cosent", "infonce"):
        for weights in ("log", "uniform", "learned"):
            objective = EseObjective.from_checkpoint(ckpt, EseObjectiveSettings(compression_dim=16, loss=loss,
                                                                                layer_weights=weights)).to("cuda")
            for batch in (scored, triplets):
                total, parts = objective.loss(batch)
                total.backward()
                assert total.device.type == "cuda" and np.isfinite(parts["total"]), (loss, weights)


def test_verify_encoders_given_a_device(tiny_bert):
    from espresso_export.verification.embedders import open_embedder

    cpu, gpu = open_embedder(str(tiny_bert)), open_embedder(str(tiny_bert), device="cuda")
    assert next(gpu.checkpoint.model.parameters()).device.type == "cuda"
    np.testing.assert_allclose(gpu.encode(TEXTS), cpu.encode(TEXTS), atol=1e-4)
    assert gpu.fingerprint() != cpu.fingerprint()  # vectors computed on the GPU are cached apart


def test_torchrun_nccl_distill_on_cuda(tiny_bert, data, tmp_path):
    if shutil.which("torchrun") is None:
        pytest.skip("torchrun is not on PATH")
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "1", "--master_port", "29531", "-m",
         "espresso_export", "distill", "--teacher", str(tiny_bert), "--student-layers", "2", "--dim", "8", "--corpus",
         str(data["corpus"]), "--batch-size", "16", "--max-steps", "4", "--heldout", "0", "--device", "cuda",
         "--cache-dir", str(tmp_path / "cache"), "-o", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _check_output(tmp_path / "out")
