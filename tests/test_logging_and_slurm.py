"""Watching runs live and sending grids to SLURM: TensorBoard and W&B hold exactly metrics.jsonl's
numbers, once per step across a kill and a resume; submitit jobs requeue and finish a grid."""
import glob
import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest

import checkpoint
import loggers
import sweep
import train
from conftest import ROOT, TOY_MODEL, toy_config

TINY = dict(updates=8, delay=2, prompts_per_update=2, group_size=4, micro_batch_size=8,
            eval_every=4, eval_toy_size=8, eval_n=2, ckpt_every=2, lr=1e-3, engine_mismatch_every=1)


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def last_logged_update(out_dir) -> int:
    """The last update in a live run's metrics.jsonl (-1: none); a line being written is skipped."""
    path = os.path.join(out_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return -1
    updates = []
    with open(path) as f:
        for line in f:
            try:
                updates.append(json.loads(line)["update"])
            except json.JSONDecodeError:  # torn: the trainer is writing it right now
                pass
    return max(updates, default=-1)


def tensorboard_scalars(log_dir: str) -> dict:
    """{tag: [(step, value)]} as TensorBoard's own reader serves them (purged steps dropped)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(log_dir, size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_tensorboard_and_wandb_hold_every_metric_once_across_a_kill(tmp_path, sampler):
    """A toy run logging to both, SIGKILLed after a checkpoint and resumed in a new process: every
    non-null value of metrics.jsonl is in TensorBoard (float32) and in the offline W&B run files
    (exactly), at its update, once; and the same as a run never stopped."""
    run_dir = tmp_path / "run"
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    argv = [sys.executable, os.path.join(ROOT, "train.py"), os.path.join(ROOT, "configs", "toy.yaml"),
            f"out_dir={run_dir}", f"model={TOY_MODEL}", "log_to=[tensorboard, wandb]"] + \
        [f"{k}={v}" for k, v in TINY.items()]
    first = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                             stderr=open(tmp_path / "first.log", "w"))
    t0 = time.time()
    while not (checkpoint.latest_checkpoint(str(run_dir))
               and last_logged_update(str(run_dir)) >= 3):
        assert first.poll() is None and time.time() - t0 < 240, open(tmp_path / "first.log").read()
        time.sleep(0.02)
    first.kill()
    first.wait()
    resumed = subprocess.run(argv + ["resume=true"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    rows = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["update"] for r in rows] == list(range(0, 9))
    reference = train.train(toy_config(tmp_path / "ref", **TINY), sampler=sampler)
    assert [r["update"] for r in reference] == list(range(0, 9))
    expected = {(r["update"], k): v for r in rows for k, v in r.items()
                if k != "update" and v is not None}
    for r in reference:  # the killed and resumed run computed what an unstopped one did
        for k, v in r.items():
            if not k.startswith("time/") and k != "update" and isinstance(v, float) and math.isfinite(v):
                assert expected[(r["update"], k)] == pytest.approx(v, rel=1e-5, abs=1e-7)

    scalars = tensorboard_scalars(str(run_dir / "tensorboard"))
    seen = {}
    for tag, points in scalars.items():
        steps = [s for s, _ in points]
        assert len(steps) == len(set(steps)), (tag, steps)  # each step once
        seen.update({(s, tag): v for s, v in points})
    assert set(seen) == set(expected)
    for key, value in expected.items():
        assert seen[key] == pytest.approx(value, rel=1e-6, abs=1e-30), key

    wandb_id = open(run_dir / "wandb_id.txt").read().strip()
    files = sorted(glob.glob(str(run_dir / "wandb" / f"offline-run-*-{wandb_id}" / f"run-{wandb_id}.wandb")))
    assert len(files) == 2  # the killed process and the resumed one, one W&B run id
    history = [h for f in files for h in loggers.read_wandb_history(f)]
    steps = [s for s, _ in history]
    assert sorted(steps) == sorted(set(steps)) and set(steps) <= set(range(0, 9))
    logged = {(s, k): v for s, items in history for k, v in items.items() if not k.startswith("_")}
    assert set(logged) == set(expected)
    for key, value in logged.items():
        assert value == expected[key], key


def test_a_missing_logger_package_or_login_is_refused_first(tmp_path, monkeypatch):
    import builtins
    real_import = builtins.__import__

    def no_wandb(name, *args, **kwargs):
        if name == "wandb":
            raise ImportError("No module named 'wandb'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    with pytest.raises(ImportError, match="pip install wandb"):
        train.train(toy_config(tmp_path, log_to=["wandb"]))
    monkeypatch.setattr(builtins, "__import__", real_import)
    import wandb
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setattr(type(wandb.api), "api_key", property(lambda self: None))
    with pytest.raises(PermissionError, match="wandb login.*WANDB_MODE=offline"):
        loggers.check(toy_config(tmp_path, log_to=["wandb"]))


def test_sweep_jobs_through_submitit_requeue_and_finish(tmp_path, sampler, monkeypatch):
    """A 2-run grid through submitit's local executor (the same job code as on SLURM): one job is
    interrupted with SLURM's timeout signal, checkpoints, requeues itself and finishes; both end
    with the metrics of the same runs made directly with train.py."""
    monkeypatch.chdir(ROOT)
    grid = {"config": os.path.join(ROOT, "configs", "toy.yaml"), "out_root": str(tmp_path / "grid"),
            "grid": {"loss": ["grpo", "ggpo"], "delay": [1], "seed": [0]},
            "overrides": {**{k: v for k, v in TINY.items() if k != "delay"}, "updates": 6,
                          "eval_every": 0, "model": TOY_MODEL},
            "slurm": {"cluster": "local", "gpus": 0, "cpus": 1, "time_min": 30, "signal_delay_s": 1}}
    executor = sweep.make_executor(grid, {})
    jobs = sweep.submit(grid, executor)
    assert len(jobs) == 2
    interrupted = str(tmp_path / "grid" / "grpo_N1_s0")
    t0 = time.time()
    while not checkpoint.latest_checkpoint(interrupted):
        assert time.time() - t0 < 300 and not jobs[0].done(), jobs[0].stderr()
        time.sleep(0.05)
    # SIGUSR2 to the job's task, as SLURM sends it before the time limit (submitit's local
    # controller does not forward it, so to the controller's child directly)
    task = subprocess.run(["pgrep", "-P", str(jobs[0]._process.pid)], capture_output=True, text=True)
    os.kill(int(task.stdout.split()[0]), signal.SIGUSR2)
    assert [job.result() for job in jobs] == [interrupted, str(tmp_path / "grid" / "ggpo_N1_s0")]
    log = jobs[0].stderr() or ""
    assert "SIGUSR2: finishing this update" in log and "Requeued job" in (jobs[0].stdout() or "") + log
    assert f"resuming {interrupted} from {interrupted}/ckpt-" in log  # the requeued job went on
    assert sweep.unfinished(grid) == []
    for (_, out_dir, overrides), job in zip([(None, d, o) for d, o in sweep.expand(grid)], jobs):
        direct = train.train(toy_config(tmp_path / "direct" / os.path.basename(out_dir),
                                        **{k: v for k, v in grid["overrides"].items()},
                                        loss=os.path.basename(out_dir).split("_N")[0], delay=1),
                             sampler=sampler)
        submitted = read_jsonl(os.path.join(out_dir, "metrics.jsonl"))
        assert [r["update"] for r in submitted] == [r["update"] for r in direct] == list(range(1, 7))
        for a, b in zip(submitted, direct):
            for k, v in b.items():
                if not k.startswith("time/") and isinstance(v, float) and math.isfinite(v):
                    assert a[k] == pytest.approx(v, rel=1e-5, abs=1e-7), (out_dir, a["update"], k)


def test_slurm_submission_parameters(tmp_path, monkeypatch):
    """What --slurm hands to sbatch, seen through a stand-in sbatch on PATH: one array of the
    grid's unfinished runs with the sweep file's resources and SIGUSR2 ahead of the time limit;
    without sbatch, a clear error."""
    grid = {"config": os.path.join(ROOT, "configs", "toy.yaml"), "out_root": str(tmp_path / "grid"),
            "grid": {"loss": ["grpo", "ggpo"], "delay": [0, 8], "seed": [0]},
            "slurm": {"partition": "gpu", "account": "mylab", "time_min": 1440, "gpus": 1,
                      "cpus": 16, "mem_gb": 200, "max_parallel": 3}}
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(FileNotFoundError, match="sbatch is not on this machine's PATH"):
        sweep.make_executor(grid, {})
    with pytest.raises(ValueError, match=r"unknown slurm setting\(s\) \['gpu'\]"):
        sweep.make_executor({**grid, "slurm": {"gpu": 1}}, {})
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(f"#!/bin/sh\ncp \"$1\" {tmp_path}/submitted.sh\n"
                                    "echo Submitted batch job 4242\n")
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")  # submitit looks for it
    for name in ("sbatch", "srun"):
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}:/usr/bin:/bin")
    os.makedirs(tmp_path / "grid" / "ggpo_N8_s0")  # one finished run is skipped
    with open(tmp_path / "grid" / "ggpo_N8_s0" / "metrics.jsonl", "w") as f:
        f.write(json.dumps({"update": 300}) + "\n")
    jobs = sweep.submit(grid, sweep.make_executor(grid, {"time_min": 2880}))
    assert [job.job_id for job in jobs] == ["4242_0", "4242_1", "4242_2"]
    script = (tmp_path / "submitted.sh").read_text()
    for line in ["#SBATCH --partition=gpu", "#SBATCH --account=mylab", "#SBATCH --time=2880",
                 "#SBATCH --gpus-per-node=1", "#SBATCH --cpus-per-task=16", "#SBATCH --mem=200GB",
                 "#SBATCH --signal=USR2@600", "#SBATCH --array=0-2%3", "#SBATCH --nodes=1"]:
        assert line in script, (line, script)
