"""The shared training loop: schedule, batches, checkpoints, exact resume, Ctrl-C, best-checkpoint keeping."""

from __future__ import annotations

import json
import signal

import numpy as np
import pytest
import torch

from espresso_export.core.errors import EXIT_INTERRUPTED, ValidationError
from espresso_export.training.loop import (
    BEST_DIR, CHECKPOINT_DIR, LoopSettings, Trainer, TrainingInterrupted, TrainingTask, epoch_batches, train,
)


pytestmark = pytest.mark.usefixtures("one_thread")


class Regression(TrainingTask):
    """y = X w* + noise, learned by a small MLP with dropout (so the RNG state matters on resume)."""

    def __init__(self, n: int = 96, scores: list[float] | None = None):
        g = torch.Generator().manual_seed(123)
        self.x = torch.randn(n, 8, generator=g)
        self.y = self.x @ torch.randn(8, 1, generator=g) + 0.01 * torch.randn(n, 1, generator=g)
        torch.manual_seed(7)
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Dropout(0.2), torch.nn.ReLU(), torch.nn.Linear(16, 1))
        self.scores = list(scores) if scores is not None else None
        self.snapshots: list[dict] = []

    def __len__(self):
        return len(self.x)

    def modules(self):
        return {"net": self.net}

    def loss(self, batch):
        idx = torch.tensor(batch)
        return torch.nn.functional.mse_loss(self.net(self.x[idx]), self.y[idx])

    def full_loss(self) -> float:
        self.net.eval()
        with torch.no_grad():
            return float(torch.nn.functional.mse_loss(self.net(self.x), self.y))

    def lengths(self):
        return [int(i % 7) for i in range(len(self.x))]

    def config(self):
        return {"kind": "regression", "n": len(self.x)}

    def evaluate(self):
        if self.scores is None:
            return None
        self.snapshots.append({k: v.clone() for k, v in self.net.state_dict().items()})
        return self.scores[len(self.snapshots) - 1]


def _weights(task: Regression) -> dict:
    return {k: v.clone() for k, v in task.net.state_dict().items()}


CFG = dict(epochs=3, batch_size=16, lr=5e-2, seed=3, checkpoint_every=0)


def test_training_lowers_the_loss_and_decays_the_lr_to_zero(tmp_path):
    task = Regression()
    before = task.full_loss()
    trainer = Trainer(task, LoopSettings(**CFG), tmp_path / "run")
    result = trainer.run()
    assert result.steps == result.total_steps == 3 * 6
    assert task.full_loss() < 0.5 * before
    assert trainer.scheduler.get_last_lr()[0] == pytest.approx(0.0, abs=1e-12)
    assert result.items_per_second > 0


def test_epoch_batches_are_deterministic_cover_every_item_and_bucket_lengths():
    lengths = [i % 50 for i in range(1000)]
    a = epoch_batches(1000, 10, seed=1, epoch=2, lengths=lengths)
    assert a == epoch_batches(1000, 10, seed=1, epoch=2, lengths=lengths)
    assert a != epoch_batches(1000, 10, seed=1, epoch=3, lengths=lengths)
    assert sorted(i for b in a for i in b) == list(range(1000))
    spread = np.mean([max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in a])
    plain = epoch_batches(1000, 10, seed=1, epoch=2)
    spread_plain = np.mean([max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in plain])
    assert spread < 0.25 * spread_plain


def _interrupt_at(step: int):
    def on_step(s):
        if s == step:
            signal.raise_signal(signal.SIGINT)
    return on_step


def test_ctrl_c_saves_a_checkpoint_and_resume_reproduces_the_uninterrupted_run(tmp_path):
    full = Regression(scores=[0.0, 1.0, 3.0, 2.0])
    full_result = train(full, LoopSettings(**CFG), tmp_path / "a")

    part = Regression(scores=[0.0, 1.0, 3.0, 2.0])
    with pytest.raises(TrainingInterrupted) as info:
        train(part, LoopSettings(**CFG), tmp_path / "b", on_step=_interrupt_at(8))  # mid epoch 2
    assert info.value.exit_code == EXIT_INTERRUPTED and "--resume" in info.value.message
    files = sorted(p.name for p in (tmp_path / "b" / CHECKPOINT_DIR).iterdir())
    assert files == ["model.safetensors", "optimizer.safetensors", "rng.safetensors", "trainer.json"]  # no pickle
    meta = json.loads((tmp_path / "b" / CHECKPOINT_DIR / "trainer.json").read_text())
    assert (meta["step"], meta["epoch"], meta["position"]) == (8, 1, 2)

    resumed = Regression(scores=[0.0, 1.0, 3.0, 2.0])
    resumed.snapshots = part.snapshots[:]  # the scripted scores continue where the first process stopped
    result = train(resumed, LoopSettings(**CFG), tmp_path / "b", resume=True)
    assert result.resumed_from == 8 and result.steps == full_result.steps
    for k, v in _weights(full).items():
        assert torch.equal(v, resumed.net.state_dict()[k]), k
    assert result.history == full_result.history


def test_resume_from_a_periodic_checkpoint_after_a_crash_is_exact(tmp_path):
    full = Regression()
    train(full, LoopSettings(**{**CFG, "checkpoint_every": 4}), tmp_path / "a")

    def crash(step):
        if step == 10:
            raise RuntimeError("power cut")

    with pytest.raises(RuntimeError):
        train(Regression(), LoopSettings(**{**CFG, "checkpoint_every": 4}), tmp_path / "b", on_step=crash)
    assert json.loads((tmp_path / "b" / CHECKPOINT_DIR / "trainer.json").read_text())["step"] == 8
    resumed = Regression()
    result = train(resumed, LoopSettings(**{**CFG, "checkpoint_every": 4}), tmp_path / "b", resume=True)
    assert result.resumed_from == 8
    for k, v in _weights(full).items():
        assert torch.equal(v, resumed.net.state_dict()[k]), k


def test_the_best_evaluated_weights_are_kept(tmp_path):
    task = Regression(scores=[0.5, 2.0, 9.0, 1.0])  # before training, then after epochs 1..3: epoch 2 is best
    result = train(task, LoopSettings(**CFG), tmp_path / "run")
    assert (result.initial_score, result.best_score, result.best_step) == (0.5, 9.0, 12)
    assert [h["score"] for h in result.history] == [0.5, 2.0, 9.0, 1.0]
    assert [h["epoch"] for h in result.history] == [0, 1, 2, 3]  # epochs finished (was 0, 0, 1, 2)
    for k, v in task.snapshots[2].items():
        assert torch.equal(v, task.net.state_dict()[k]), k
    assert (tmp_path / "run" / BEST_DIR / "model.safetensors").is_file()


def test_resume_refuses_another_runs_checkpoint_and_says_why(tmp_path):
    with pytest.raises(TrainingInterrupted):
        train(Regression(), LoopSettings(**CFG), tmp_path / "run", on_step=_interrupt_at(3))
    with pytest.raises(ValidationError, match=r"another run.*lr: 0.05 there, 0.02 now"):
        train(Regression(), LoopSettings(**{**CFG, "lr": 2e-2}), tmp_path / "run", resume=True)
    with pytest.raises(ValidationError, match="nothing to resume"):
        train(Regression(), LoopSettings(**CFG), tmp_path / "empty", resume=True)


def test_bad_training_setups_are_refused(tmp_path):
    with pytest.raises(ValidationError, match="fewer than one batch"):
        train(Regression(n=10), LoopSettings(**CFG), tmp_path / "run")
    with pytest.raises(ValidationError, match="--device cuda"):
        if torch.cuda.is_available():
            raise ValidationError("--device cuda (skipped: CUDA present)")
        train(Regression(), LoopSettings(**{**CFG, "device": "cuda"}), tmp_path / "run")
    with pytest.raises(ValidationError, match="--amp fp16 needs a GPU"):
        train(Regression(), LoopSettings(**{**CFG, "amp": "fp16"}), tmp_path / "run")


def test_bf16_autocast_trains_on_cpu(tmp_path):
    task = Regression()
    before = task.full_loss()
    train(task, LoopSettings(**{**CFG, "amp": "bf16"}), tmp_path / "run")
    assert task.full_loss() < before


def test_progress_goes_to_plain_lines_when_stderr_is_not_a_terminal(tmp_path, capsys, monkeypatch):
    """Logs (CI, nohup) get readable progress lines instead of a live bar that would print nothing."""
    monkeypatch.setenv("ESPRESSO_PROGRESS_SECONDS", "0")
    result = Trainer(Regression(), LoopSettings(**CFG), tmp_path / "run").run(progress="training")
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("training: ")]
    assert len(lines) == result.steps and lines[-1].startswith("training: 18/18 (100%), epoch-mean loss ")
    assert "sent/s" in lines[0] and "ETA" in lines[0] and "\x1b[" not in err


def test_time_in_paused_stays_out_of_the_log_lines_eta(capsys, monkeypatch):
    """An evaluation between steps (distill --eval-retrieval encodes a corpus) made the first ETA hours long."""
    import time

    from espresso_export.core.progress import Bar

    monkeypatch.setenv("ESPRESSO_PROGRESS_SECONDS", "0")
    with Bar("healing", 100) as bar:
        with bar.paused():
            time.sleep(0.5)  # an evaluation: 50x a step's time
        time.sleep(0.01)
        bar.advance(1)
    line = next(x for x in capsys.readouterr().err.splitlines() if x.startswith("healing: 1/100"))
    eta = line.rsplit("ETA ", 1)[1]  # h:mm:ss; about 1 s, not 50 s (the pause counted as work)
    assert int(eta.split(":")[-2]) == 0 and int(eta.split(":")[-1]) < 10, line


def test_a_loss_that_is_not_finite_before_any_update_does_not_blame_the_learning_rate(tmp_path):
    """A NaN at step 1 comes from the data, not from a step size: "lower --lr" sent a user the wrong way."""
    from espresso_export.core.errors import RuntimeFailure

    task = Regression()
    task.y[:] = float("nan")
    with pytest.raises(RuntimeFailure, match="at step 1, before any update") as caught:
        train(task, LoopSettings(**CFG), tmp_path / "run")
    assert "--lr" not in caught.value.message
