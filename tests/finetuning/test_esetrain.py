"""``train --ese`` on the shared loop: output, provenance read by shrink, exact resume, and the CLI."""

from __future__ import annotations

import json
import os
import signal

import pytest
import torch

from espresso_export.data import builtin_resource, read_sts
from espresso_export.model.checkpoint import load
from espresso_export.finetuning.ese import EseData, EseObjective, EseObjectiveSettings
from espresso_export.finetuning.train import EseTask, train_ese
from espresso_export.training.loop import LoopSettings, Trainer, TrainingInterrupted

SMOKE = builtin_resource("sts_smoke.tsv")


def test_train_ese_writes_an_ese_model_that_shrink_cuts_first_k(tiny_bert, tmp_path):
    from espresso_export.shrinking.shrink import shrink

    out = tmp_path / "ese"
    result = train_ese(tiny_bert, SMOKE, out, ese=True, compression_dim=16, batch_size=16, lr=1e-3, max_steps=4,
                       eval_sts=SMOKE, eval_limit=60)
    assert result.ese and result.train["steps"] == 4 and result.eval["best"] is not None
    assert set(result.eval["last"]) == {"L4/full", "L1/16", "L2/16", "L3/16", "L4/16"}
    prov = json.loads((out / "espresso.json").read_text())
    assert prov["step"] == "train" and prov["ese"]["compression_dim"] == 16
    # the epochs trained, not the epochs asked for (4 steps of 16 on the smoke set's pairs are under one epoch;
    # the card said "steps 4, epochs 1")
    assert 0 < prov["training"]["epochs"] < 1 and prov["training"]["epochs_requested"] == 1
    assert not (tmp_path / "ese.run").exists()  # checkpoints removed after success
    ckpt = load(out)
    assert ckpt.ese_trained
    cut = shrink(out, tmp_path / "cut", layers=2, dim=16)
    assert cut.layers == [0, 1] and cut.head.value == "truncate" and not any("ESE trained" in h for h in cut.hints)
    # the automatic ESE cut says it was chosen and how to check it against spread + PCA (it can score lower)
    assert any(h.startswith("hint: this model is ESE-trained, so its first 2 layers and first 16 dims") for h in cut.hints)
    chosen = shrink(out, tmp_path / "chosen", layers=[0, 1], dim=16, head="truncate")
    assert not any("ESE-trained" in h for h in chosen.hints)  # the user picked: nothing to say
    wider = shrink(out, tmp_path / "wider", layers=2, dim=24)  # past the trained k: said, not silent
    assert any(h.startswith("warning: ESE trained the first 16 dims") for h in wider.hints)
    # the card's lineage says what training did (it printed "**train**: pooling mean" and nothing of ESE)
    from espresso_export.publishing.lineage_section import lineage_section
    from espresso_export.publishing.facts import read_model

    lineage = " ".join(lineage_section(read_model(tmp_path / "cut")))
    assert "**train** (espresso-export " in lineage and "ESE (first 16 dims and every layer from" in lineage
    assert "data: " in lineage and f"training: steps 4, epochs {prov['training']['epochs']}," in lineage


def test_control_run_is_not_marked_ese(tiny_bert, tmp_path):
    out = tmp_path / "ctl"
    result = train_ese(tiny_bert, SMOKE, out, compression_dim=16, batch_size=16, lr=1e-3, max_steps=2)
    assert not result.ese and "ese" not in json.loads((out / "espresso.json").read_text())
    assert not load(out).ese_trained


def _task(tiny_bert):
    torch.manual_seed(0)
    ckpt = load(tiny_bert)
    data = EseData(read_sts(SMOKE))
    objective = EseObjective.from_checkpoint(ckpt, EseObjectiveSettings(compression_dim=16, layer_weights="learned"))
    return EseTask(ckpt, objective, data, identity={"test": "resume"})


def test_resume_continues_exactly(tiny_bert, tmp_path):
    cfg = LoopSettings(batch_size=32, lr=1e-3, max_steps=5, checkpoint_every=0)
    straight = _task(tiny_bert)
    Trainer(straight, cfg, tmp_path / "a").run()

    interrupted = _task(tiny_bert)

    def ctrl_c(step):
        if step == 2:
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(TrainingInterrupted):
        Trainer(interrupted, cfg, tmp_path / "b").run(on_step=ctrl_c)
    resumed = _task(tiny_bert)
    result = Trainer(resumed, cfg, tmp_path / "b").run(resume=True)
    assert result.resumed_from == 2 and result.steps == 5
    want = dict(straight.ckpt.model.named_parameters())
    for name, p in resumed.ckpt.model.named_parameters():
        assert torch.allclose(p, want[name], atol=1e-6), name
    assert torch.allclose(resumed.objective.logits, straight.objective.logits, atol=1e-6)


def test_train_cli(tiny_bert, tmp_path, capsys):
    from espresso_export.cli.app import main

    out = tmp_path / "cli"
    code = main(["train", str(tiny_bert), "--ese", "--data", str(SMOKE), "-k", "16", "--max-steps", "2",
                 "--batch-size", "16", "--lr", "1e-3", "-o", str(out), "--json"])
    assert code == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["ese"] is True and payload["objective"]["compression_dim"] == 16
    code = main(["train", str(tiny_bert), "--ese", "--data", str(SMOKE), "--loss", "nope", "-o", str(tmp_path / "x")])
    assert code == 2


def test_a_dense_head_is_refused(tiny_bert, tmp_path):
    from espresso_export.core.errors import ValidationError
    from espresso_export.shrinking.shrink import shrink

    shrink(tiny_bert, tmp_path / "pca", layers=2, dim=8, head="pca")  # writes a Dense projection head
    with pytest.raises(ValidationError, match="Dense head"):
        train_ese(tmp_path / "pca", SMOKE, tmp_path / "out", ese=True, compression_dim=8, batch_size=16, max_steps=1)
    assert not (tmp_path / "out").exists()


def test_train_ese_names_its_eval_a_mean_over_cut_points(tiny_bert, tmp_path, capsys):
    """`train --ese` printed "eval 66.78 before" for a score that is the mean over the full width and every
    layer's first k dims: the table, the progress line and the JSON now say so."""

    from espresso_export.cli.app import main

    code = main(["train", str(tiny_bert), "--ese", "--data", str(SMOKE), "-k", "16", "--max-steps", "2",
                 "--batch-size", "16", "--eval-sts", str(SMOKE), "--eval-limit", "40", "-o", str(tmp_path / "o")])
    out, err = capsys.readouterr()
    assert code == 0
    assert "before training: eval (mean of 5 cut points) " in err
    assert "eval (STS Spearman, mean of 5 cut points)" in out
    result = train_ese(tiny_bert, SMOKE, tmp_path / "api", ese=True, compression_dim=16, batch_size=16, max_steps=1,
                       eval_sts=SMOKE, eval_limit=40)
    assert result.eval["cut_points"] == ["L4/full", "L1/16", "L2/16", "L3/16", "L4/16"]
    assert result.eval["score"] == "mean STS Spearman x100 over the cut points"


def test_training_on_a_test_split_is_warned_about(tiny_bert, tmp_path):
    """`train --data sts-test.csv` was accepted in silence (distill already warned on its --eval-sts)."""
    import shutil

    data = tmp_path / "sts-test.tsv"
    shutil.copy(SMOKE, data)
    result = train_ese(tiny_bert, data, tmp_path / "out", ese=True, compression_dim=16, batch_size=16, lr=1e-3,
                       max_steps=1)
    assert any(h.startswith("warning: --data sts-test.tsv reads like a test split") for h in result.hints)


def test_the_objective_and_the_loop_take_their_defaults_from_the_declared_settings():
    """Declared once: EseObjectiveSettings and LoopSettings repeat no default of TrainSettings/TrainerSettings."""
    from dataclasses import fields

    from espresso_export.core.settings import settings_fields
    from espresso_export.finetuning.train_settings import TrainSettings
    from espresso_export.training.trainer_settings import TrainerSettings

    declared = {f.name: f.default for f in settings_fields(TrainSettings)}
    objective = EseObjectiveSettings()
    for name in ("loss", "compression_dim", "alpha", "beta", "layer_weights", "layers_from"):
        assert getattr(objective, name) == declared[name], name
    loop = LoopSettings(batch_size=8, lr=1e-3)
    shared = {f.name for f in settings_fields(TrainerSettings)} & {f.name for f in fields(LoopSettings)}
    assert shared == {"epochs", "weight_decay", "warmup", "max_grad_norm", "seed", "max_steps", "amp",
                      "checkpoint_every", "device"}
    for name in shared:
        assert getattr(loop, name) == declared[name], name
    plain = TrainSettings()  # the command's settings give the objective and the loop
    assert (plain.objective().alpha, plain.objective().beta) == (0.0, 0.0)  # no --ese: the control
    assert (plain.loop().batch_size, plain.loop().lr) == (declared["batch_size"], declared["lr"])


def test_the_earlier_names_and_keywords_still_work_with_a_deprecation(tiny_bert, tmp_path):
    import espresso_export
    from espresso_export.training import loop

    with pytest.warns(DeprecationWarning, match="LoopSettings"):
        assert espresso_export.TrainConfig is LoopSettings
    with pytest.warns(DeprecationWarning, match="LoopSettings"):
        assert loop.TrainConfig is LoopSettings
    with pytest.warns(DeprecationWarning, match="EseObjectiveSettings"):
        from espresso_export.finetuning.ese import EseConfig
    assert EseConfig is EseObjectiveSettings
    with pytest.warns(DeprecationWarning, match="objective=..., training=..."):
        result = train_ese(tiny_bert, SMOKE, tmp_path / "old", objective=EseObjectiveSettings(compression_dim=16),
                           training=LoopSettings(batch_size=16, lr=1e-3, max_steps=1))
    assert result.ese and result.objective["compression_dim"] == 16 and result.train["steps"] == 1


def test_train_refuses_a_run_folder_another_run_holds(tiny_bert, tmp_path, capsys):
    """The run-folder lock is the shared loop's: `train` is refused at once as `distill` is."""
    import subprocess
    import sys

    from espresso_export.cli.app import main

    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from pathlib import Path; "
                               "from espresso_export.training.run_files import held\n"
                               "with held(Path(sys.argv[1])):\n print('held', flush=True); time.sleep(600)",
                               str(tmp_path / "o.run")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        code = main(["train", str(tiny_bert), "--data", str(SMOKE), "--max-steps", "1", "-o", str(tmp_path / "o")])
        err = capsys.readouterr().err
        assert code == 2 and f"is in use by another run (process {holder.pid} " in err
    finally:
        holder.kill()
        holder.wait()
    assert not (tmp_path / "o").exists()
