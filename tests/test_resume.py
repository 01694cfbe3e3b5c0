"""Runs that survive: exact resume after SIGKILL/SIGTERM, atomic checkpoints, refused bad
input, skipped non-finite updates."""
import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
import yaml

import checkpoint
import config
import cpu
import learner
import losses
import tasks
import train
from conftest import ROOT, TOY_MODEL, sampler_of, toy_config


# ----------------------------------------------------------------------------- helpers

def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def assert_same_metrics(rows, ref_rows):
    """Every update once, in order, and the same numbers as the uninterrupted run (time/* aside)."""
    assert [r["update"] for r in rows] == [r["update"] for r in ref_rows]
    for r, ref in zip(rows, ref_rows):
        keys = {k for k in ref if not k.startswith("time/")}
        assert keys == {k for k in r if not k.startswith("time/")}
        for k in keys:
            if isinstance(ref[k], float):
                assert r[k] == pytest.approx(ref[k], rel=1e-5, abs=1e-7), (r["update"], k)
            else:
                assert r[k] == ref[k], (r["update"], k)


def read_json(path):
    with open(path) as f:
        return json.load(f)


def wait_for(predicate, proc, timeout=240):
    t0 = time.time()
    while not predicate():
        assert proc.poll() is None, f"trainer exited early with {proc.returncode}"
        assert time.time() - t0 < timeout, "trainer too slow"
        time.sleep(0.02)


# ----------------------------------------------------------------------------- exact resume

TINY = dict(updates=10, delay=2, prompts_per_update=2, group_size=4, micro_batch_size=8,
            eval_every=4, eval_toy_size=8, eval_n=2, ckpt_every=2, lr=1e-3, engine_mismatch_every=1)


# train.py in a process where vLLM does not import: sys.modules["vllm"] = None before it runs
WITHOUT_VLLM = ["-c", "import runpy, sys; sys.modules['vllm'] = None; sys.argv = sys.argv[1:]; "
                      "runpy.run_path(sys.argv[0], run_name='__main__')"]


@pytest.mark.parametrize("backend", ["vllm", "transformers"])
def test_sigkill_then_sigterm_then_resume_is_exact(tmp_path, request, backend):
    """SIGKILL after a checkpoint, resume in a new process (a new sampler), SIGTERM it (exit
    143 after a checkpoint), resume again: the same metrics and eval records as a run never
    stopped, every update logged once. transformers: the two processes run without vLLM
    (sampler=auto falls back, saying so), the rest in this one with the transformers sampler."""
    sampler = sampler_of(backend, request)
    run_dir = tmp_path / "run"
    python = [sys.executable] + (WITHOUT_VLLM if backend == "transformers" else [])
    argv = python + [os.path.join(ROOT, "train.py"), os.path.join(ROOT, "configs", "toy.yaml"),
                     f"out_dir={run_dir}", f"model={TOY_MODEL}"] + [f"{k}={v}" for k, v in TINY.items()]
    def start(extra, log):  # stderr to a file, not a pipe: a full pipe would block the trainer
        return subprocess.Popen(argv + extra, cwd=ROOT, stdout=subprocess.DEVNULL,
                                stderr=open(tmp_path / log, "w"))

    first = start([], "first.log")
    wait_for(lambda: checkpoint.latest_checkpoint(str(run_dir)), first)
    first.kill()
    first.wait()
    killed_at = checkpoint.ckpt_update(checkpoint.latest_checkpoint(str(run_dir)))
    assert killed_at < TINY["updates"]
    if backend == "transformers":
        assert "sampler=auto: vLLM does not import (ModuleNotFoundError: import of vllm halted" \
            in open(tmp_path / "first.log").read()

    second = start(["resume=true"], "second.log")
    metrics = run_dir / "metrics.jsonl"
    # the progress bar appears once the loop runs, with the signal handlers installed
    wait_for(lambda: "grpo N=2:" in open(tmp_path / "second.log").read(), second)
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=120) == 128 + signal.SIGTERM, open(tmp_path / "second.log").read()
    assert f"resuming {run_dir} from {run_dir}/ckpt-{killed_at:06d}" in open(tmp_path / "second.log").read()
    stopped_at = checkpoint.ckpt_update(checkpoint.latest_checkpoint(str(run_dir)))
    assert killed_at < stopped_at < TINY["updates"]
    assert read_jsonl(metrics)[-1]["update"] == stopped_at  # the checkpoint is the last update

    cfg = toy_config(run_dir, **TINY)  # sampler=auto, as the run's; the sampler is given here
    rows = train.train({**cfg, "resume": True}, sampler=sampler)  # the shared sampler, a third one
    assert rows[0]["update"] == stopped_at + 1
    sessions = read_json(run_dir / "run_info.json")["sessions"]  # where each process ran, from where
    assert [(s["start_update"], s["sampler"]) for s in sessions] == \
        [(0, backend), (killed_at, backend), (stopped_at, backend)]
    train.train(toy_config(tmp_path / "ref", **TINY), sampler=sampler)
    assert_same_metrics(read_jsonl(metrics), read_jsonl(tmp_path / "ref" / "metrics.jsonl"))
    assert read_jsonl(run_dir / "eval_records.jsonl") == read_jsonl(tmp_path / "ref" / "eval_records.jsonl")
    assert os.listdir(run_dir / "ckpt-000010")  # the final checkpoint and the one before it
    assert sorted(n for n in os.listdir(run_dir) if n.startswith("ckpt-")) == ["ckpt-000008",
                                                                                "ckpt-000010"]


def test_sigterm_in_process_resume_with_reference_refresh(tmp_path, sampler):
    """GGPO with a refreshed reference (saved in the checkpoint) and an N = 2 queue: stopped by
    SIGTERM during update 3, resumed, it matches the run never stopped."""
    kw = dict(loss="ggpo", ref_refresh_every=2, delay=2, updates=6, lr=1e-3, ckpt_every=0)
    calls = {"n": 0}
    original_learn = train.learn

    def learn_then_signal(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            os.kill(os.getpid(), signal.SIGTERM)  # arrives mid-update: the update must finish
        return original_learn(*args, **kwargs)

    cfg = toy_config(tmp_path / "run", **kw)
    train.learn = learn_then_signal
    try:
        rows = train.train(cfg, sampler=sampler)
    finally:
        train.learn = original_learn
    assert checkpoint.STOP["signal"] == signal.SIGTERM
    assert [r["update"] for r in rows] == [1, 2, 3]
    ckpt = checkpoint.latest_checkpoint(cfg["out_dir"])
    assert os.path.basename(ckpt) == "ckpt-000003"
    assert sorted(os.listdir(ckpt)) == ["learner.pt", "manifest.json", "optimizer.pt",
                                        "reference.pt", "state.pt"]
    state = torch.load(os.path.join(ckpt, "state.pt"), weights_only=True)
    assert (state["update"], state["next_batch"], len(state["queue"])) == (3, 5, 2)
    assert [b["index"] for b in state["queue"]] == [3, 4]  # sampled during updates 2 and 3
    assert [b["rollouts"][0]["policy_version"] for b in state["queue"]] == [1, 2]
    assert state["responses_total"] == 5 * 4 * 4

    rows = train.train({**cfg, "resume": True}, sampler=sampler)
    assert checkpoint.STOP["signal"] is None
    assert [r["update"] for r in rows] == [4, 5, 6]
    sessions = read_json(tmp_path / "run" / "run_info.json")["sessions"]
    assert [s["start_update"] for s in sessions] == [0, 3]
    train.train(toy_config(tmp_path / "ref", **kw), sampler=sampler)
    assert_same_metrics(read_jsonl(tmp_path / "run" / "metrics.jsonl"),
                        read_jsonl(tmp_path / "ref" / "metrics.jsonl"))


# ----------------------------------------------------------------------------- checkpoint files

def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    """A crash while writing leaves the previous checkpoint the latest; the next write cleans up."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    out = str(tmp_path)
    checkpoint.save_checkpoint(out, 1, model, opt, None, {"update": 1, "queue": []})

    real_save, calls = torch.save, {"n": 0}

    def save_then_crash(obj, f):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("disk full")
        real_save(obj, f)

    monkeypatch.setattr(torch, "save", save_then_crash)
    with pytest.raises(OSError, match="disk full"):
        checkpoint.save_checkpoint(out, 2, model, opt, None, {"update": 2, "queue": []})
    monkeypatch.setattr(torch, "save", real_save)
    assert checkpoint.latest_checkpoint(out) == os.path.join(out, "ckpt-000001")
    assert sorted(os.listdir(out)) == ["ckpt-000001", "ckpt-000002.tmp"]

    checkpoint.save_checkpoint(out, 3, model, opt, None, {"update": 3, "queue": []}, keep=2)
    assert sorted(os.listdir(out)) == ["ckpt-000001", "ckpt-000003"]
    fresh = torch.nn.Linear(3, 2)
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=0.1)
    state = checkpoint.load_checkpoint(os.path.join(out, "ckpt-000003"), fresh, fresh_opt, None)
    assert state["update"] == 3 and len(state["queue"]) == 0
    assert torch.equal(fresh.weight, model.weight)
    assert torch.equal(fresh_opt.state_dict()["state"][0]["exp_avg"],
                       opt.state_dict()["state"][0]["exp_avg"])


def test_drop_logged_after(tmp_path):
    """Rows past the checkpoint (eval rows and records included) and a torn line are dropped."""
    with open(tmp_path / "metrics.jsonl", "w") as f:
        for u in range(6):
            f.write(json.dumps({"update": u, "surrogate": 0.5 * u}) + "\n")
        f.write('{"update": 6, "lo')  # torn by SIGKILL
    with open(tmp_path / "eval_records.jsonl", "w") as f:
        for u in (0, 2, 4):
            f.write(json.dumps({"update": u, "id": "toy-0", "correct": u}) + "\n")
    checkpoint.drop_logged_after(str(tmp_path), 3)
    assert [r["update"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [0, 1, 2, 3]
    assert read_jsonl(tmp_path / "metrics.jsonl")[3] == {"update": 3, "surrogate": 1.5}
    assert [r["update"] for r in read_jsonl(tmp_path / "eval_records.jsonl")] == [0, 2]
    checkpoint.drop_logged_after(str(tmp_path), -1)  # resume=true without a checkpoint: start over
    assert os.path.getsize(tmp_path / "metrics.jsonl") == 0


# ----------------------------------------------------------------------------- non-finite updates

def test_nonfinite_updates_are_skipped_then_stop(tmp_path, sampler, monkeypatch):
    """A NaN loss never reaches the optimizer: the update is skipped and counted; a streak of
    max_consecutive_skips stops the run with the last checkpoint kept."""
    poisoned, calls, plan = {"on": False}, {"n": 0}, {}
    grpo, learn = losses.LOSSES["grpo"].fn, train.learn

    def grpo_maybe_nan(*args):
        loss, coef, extra = grpo(*args)
        return (loss * math.nan if poisoned["on"] else loss), coef, extra

    def learn_poisoning(cfg, model, ref_model, optimizer, *args):
        calls["n"] += 1
        poisoned["on"] = calls["n"] in plan["nan_at"]
        before = [p.detach().clone() for p in model.parameters()]
        steps = lambda: int(optimizer.state[next(model.parameters())].get("step", 0))
        steps_before = steps()
        metrics = learn(cfg, model, ref_model, optimizer, *args)
        assert steps() == steps_before + (0 if poisoned["on"] else 1)
        if poisoned["on"]:  # a skipped update leaves the weights as they were
            assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
        return metrics

    monkeypatch.setitem(losses.LOSSES, "grpo", dataclasses.replace(losses.LOSSES["grpo"], fn=grpo_maybe_nan))
    monkeypatch.setattr(train, "learn", learn_poisoning)
    cfg = toy_config(tmp_path / "a", delay=0, updates=4, max_consecutive_skips=3)
    plan["nan_at"] = (2, 3)
    rows = train.train(cfg, sampler=sampler)
    assert [r["skipped"] for r in rows] == [0, 1, 1, 0]
    assert [r["skipped_updates"] for r in rows] == [0, 1, 2, 2]
    assert all(math.isfinite(r["grad_norm"]) == (not r["skipped"]) for r in rows)

    calls["n"], plan["nan_at"] = 0, (3, 4)
    cfg = toy_config(tmp_path / "b", delay=0, updates=6, ckpt_every=2, max_consecutive_skips=2)
    with pytest.raises(FloatingPointError, match=r"updates 3..4 all had a non-finite loss or "
                                                 r"gradient .*ckpt-000002, is kept"):
        train.train(cfg, sampler=sampler)
    assert checkpoint.latest_checkpoint(cfg["out_dir"]).endswith("ckpt-000002")
    assert [r["update"] for r in read_jsonl(tmp_path / "b" / "metrics.jsonl")] == [1, 2, 3, 4]


# ----------------------------------------------------------------------------- bad input

BAD_OVERRIDES = [
    (["dealy=3"], ValueError, "unknown config key 'dealy'"),
    (["group_size=2.5"], TypeError, "group_size must be an integer"),
    (["lr=fast"], TypeError, "lr must be a number"),
    (["lr=.inf"], ValueError, "lr must be a finite number"),
    (["resume=maybe"], TypeError, "resume must be true or false"),
    (["adam_betas=0.9"], TypeError, "adam_betas must be a list"),
    (["delay=-1"], ValueError, r"delay \(N\) must be >= 0"),
    (["group_size=1", "micro_batch_size=1"], ValueError, "group_size must be >= 2"),
    (["micro_batch_size=12"], ValueError, "micro_batch_size must be a positive multiple"),
    (["lr=0"], ValueError, "lr must be > 0"),
    (["temperature=0"], ValueError, "temperature must be > 0"),
    (["adam_betas=[0.9, 1.5]"], ValueError, r"adam_betas must be two numbers in \[0, 1\)"),
    (["ckpt_every=-1"], ValueError, "ckpt_every must be >= 0"),
    (["max_consecutive_skips=0"], ValueError, "max_consecutive_skips must be >= 1"),
    (["toy_digits={0: 1}"], ValueError, "toy_digits must map digit counts >= 1"),
    (["loss_args.clip_low=1.5"], ValueError, "loss_args: need 0 <= clip_low < 1"),
    (["loss=ggpo", "loss_args.beta=0"], ValueError, r"beta must be >= 0 \(and > 0 for ggpo"),
]


@pytest.mark.parametrize("overrides,error,message", BAD_OVERRIDES)
def test_bad_config_is_refused(overrides, error, message):
    with pytest.raises(error, match=message):
        config.load_config(os.path.join(ROOT, "configs", "toy.yaml"), overrides)


def test_bad_paths_and_out_dirs_are_refused_before_any_work(tmp_path, monkeypatch):
    """Missing model, unloadable benchmark, an out_dir holding another run (or this one without
    resume=true), a checkpoint past `updates`: refused before the model is loaded."""
    def no_long_work(cfg):
        raise AssertionError("train() started loading the model before refusing bad input")
    monkeypatch.setattr(learner, "load_learner", no_long_work)

    def refused(error, message, **overrides):
        cfg = toy_config(tmp_path / "run", **overrides)
        with pytest.raises(error, match=message):
            train.train(cfg)

    refused(FileNotFoundError, "model path '/nowhere' does not exist", model="/nowhere",
            build_toy_model=False)
    refused(tasks.BenchmarkUnavailable, "benchmark 'mine' is not available: file "
            "'/nowhere.jsonl' does not exist", eval_every=5, eval_benchmarks=["toy", "mine=/nowhere.jsonl"])

    os.makedirs(tmp_path / "run")
    with open(tmp_path / "run" / "config.yaml", "w") as f:
        yaml.safe_dump(toy_config(tmp_path / "run"), f)
    refused(ValueError, r"holds a different run \(delay: 8 -> 3; lr: 0.0002 -> 0.001\). Pick "
                        r"another out_dir", delay=3, lr=1e-3)
    refused(ValueError, "holds a different run", delay=3, resume=True)
    with open(tmp_path / "run" / "metrics.jsonl", "w") as f:
        f.write('{"update": 1}\n')
    refused(ValueError, "already holds this run .metrics but no checkpoint.: pass resume=true",
            updates=7)
    os.makedirs(tmp_path / "run" / "ckpt-000009")
    refused(ValueError, "already holds this run .checkpoint at update 9.: pass resume=true")
    refused(ValueError, "ckpt-000009 is past updates=4; pass updates=9 or more", resume=True)
    # a checkpoint whose run lost its log before it (files deleted, the checkpoints left): a resume
    # would continue exactly but leave row 2 and the first session out of the run's record
    os.rename(tmp_path / "run" / "ckpt-000009", tmp_path / "run" / "ckpt-000002")
    refused(ValueError, r"has a checkpoint at update 2 but lacks metrics.jsonl's rows of update\(s\) "
                        r"2 and run_info.json's first session: resuming would leave that hole",
            resume=True, updates=7)


def test_second_signal_aborts_at_once(monkeypatch):
    """The first SIGINT/SIGTERM asks for a clean stop; a second one kills with the default action."""
    calls = []
    monkeypatch.setattr(checkpoint.signal, "signal", lambda sig, handler: calls.append((sig, handler)))
    monkeypatch.setattr(checkpoint.os, "kill", lambda pid, sig: calls.append((pid, sig)))
    monkeypatch.setitem(checkpoint.STOP, "signal", None)
    checkpoint.on_signal(signal.SIGINT, None)
    assert checkpoint.STOP["signal"] == signal.SIGINT and calls == []
    checkpoint.on_signal(signal.SIGINT, None)
    assert calls == [(signal.SIGINT, signal.SIG_DFL), (os.getpid(), signal.SIGINT)]


# ----------------------------------------------------------------------------- out of memory, no GPU

def test_out_of_memory_skips_the_update_then_resumes_exactly(tmp_path, sampler, monkeypatch):
    """learn() raising torch's OOM error on update 2 (after its backward, before the step): the
    update is skipped and counted, the weights and AdamW untouched, the run goes on; a run
    stopped by SIGTERM in that update (checkpoint 2) and resumed matches the run never stopped."""
    learn, plan = train.learn, {"oom_at": {2}, "n": 0}

    steps = lambda optimizer, model: int(optimizer.state[next(model.parameters())]["step"])

    def learn_oom(cfg, model, ref_model, optimizer, batch, pad_id, fresh=False):
        plan["n"] += 1
        if plan["n"] - 1 in plan["oom_at"]:  # the update after: nothing of the skipped one left
            assert all(p.grad is None for p in model.parameters())
            assert all(torch.equal(a, b) for a, b in zip(plan["weights"], model.parameters()))
            assert steps(optimizer, model) == plan["steps"]
        if plan["n"] == plan.get("stop_at"):
            os.kill(os.getpid(), signal.SIGTERM)  # the loop finishes this update, then stops
        if plan["n"] in plan["oom_at"]:
            plan["weights"] = [p.detach().clone() for p in model.parameters()]
            plan["steps"] = steps(optimizer, model)
            for p in model.parameters():  # the gradients a backward left behind
                p.grad = torch.ones_like(p)
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 73.00 GiB")
        return learn(cfg, model, ref_model, optimizer, batch, pad_id, fresh)

    monkeypatch.setattr(train, "learn", learn_oom)
    kw = dict(loss="ggpo", delay=2, updates=5, lr=1e-3, ckpt_every=2)
    rows = train.train(toy_config(tmp_path / "ref", **kw), sampler=sampler)
    assert [r["skipped"] for r in rows] == [0, 1, 0, 0, 0]
    assert [r["oom_updates"] for r in rows] == [0, 1, 1, 1, 1]
    assert math.isnan(rows[1]["k3"]) and rows[1]["staleness"] == 1

    plan.update(n=0, stop_at=2)  # SIGTERM during the update that runs out of memory
    rows = train.train(toy_config(tmp_path / "run", **kw), sampler=sampler)
    assert [r["update"] for r in rows] == [1, 2] and rows[-1]["skipped"] == 1
    plan.update(n=10)  # no more OOM
    rows = train.train({**toy_config(tmp_path / "run", **kw), "resume": True}, sampler=sampler)
    assert [r["update"] for r in rows] == [3, 4, 5]
    assert_same_metrics(read_jsonl(tmp_path / "run" / "metrics.jsonl"),
                        read_jsonl(tmp_path / "ref" / "metrics.jsonl"))


def test_out_of_memory_streak_stops_naming_what_to_lower(tmp_path, sampler, monkeypatch):
    def always_oom(*args):
        raise torch.OutOfMemoryError("CUDA out of memory")
    monkeypatch.setattr(train, "learn", always_oom)
    cfg = toy_config(tmp_path, delay=0, updates=5, max_consecutive_skips=2)
    with pytest.raises(torch.OutOfMemoryError, match="lower micro_batch_size .* logits_chunk_mib, "
                                                     "or set gradient_checkpointing=true"):
        train.train(cfg, sampler=sampler)
    # those keys may change when the run is resumed
    assert config.config_differences(cfg, {**cfg, "micro_batch_size": 4, "logits_chunk_mib": 64,
                                           "gradient_checkpointing": True}) == []


def test_a_gpu_that_is_expected_but_unusable_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(learner, "load_learner", lambda cfg: pytest.fail("loaded a model"))
    with pytest.raises(learner.DeviceUnavailable, match="driver of branch 580 or newer"):
        train.train(toy_config(tmp_path, device="cuda"))
    with pytest.raises(SystemExit) as stop:
        train.main([os.path.join(ROOT, "configs", "toy.yaml"), "device=cuda", f"out_dir={tmp_path}"])
    message = str(stop.value.code)
    assert message.startswith("error: device=cuda: a GPU is expected, but torch ")
    assert "torch.cuda.is_available() is False" in message and "set device=cpu" in message
    print(message)
    assert learner.pick_device({"device": "cpu"}) == "cpu"


# ----------------------------------------------------------------------------- damaged checkpoints

def truncate(path, keep_fraction=0.5):
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(int(size * keep_fraction))


def test_damaged_latest_checkpoint_resumes_from_the_one_before_exactly(tmp_path, sampler, capsys):
    """SIGTERM during update 4 (checkpoints 2 and 4 kept), then the latest's state.pt truncated
    and the run folder moved: resume=true in its new place says so in one line, resumes from
    checkpoint 2 (dropping updates 3-4 and the update-3 evaluation from the logs, refilling the
    delay queue from its state) and ends equal to the run never stopped, eval records included."""
    kw = dict(delay=2, updates=6, lr=1e-3, ckpt_every=2, eval_every=3, eval_toy_size=8, eval_n=2)
    calls, learn = {"n": 0}, train.learn

    def learn_then_signal(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 4:
            os.kill(os.getpid(), signal.SIGTERM)
        return learn(*args, **kwargs)

    cfg = toy_config(tmp_path / "run", **kw)
    train.learn = learn_then_signal
    try:
        train.train(cfg, sampler=sampler)
    finally:
        train.learn = learn
    assert sorted(n for n in os.listdir(tmp_path / "run") if n.startswith("ckpt-")) == \
        ["ckpt-000002", "ckpt-000004"]
    truncate(tmp_path / "run" / "ckpt-000004" / "state.pt")
    run = tmp_path / "moved"  # out_dir may change on resume: a run folder can be moved or renamed
    os.rename(tmp_path / "run", run)
    capsys.readouterr()
    rows = train.train({**cfg, "out_dir": str(run), "resume": True}, sampler=sampler)
    err = capsys.readouterr().err
    assert f"checkpoint {run}/ckpt-000004 is damaged (state.pt has " in err
    assert "its manifest says" in err and f"resuming from {run}/ckpt-000002 instead" in err
    assert [r["update"] for r in rows] == [3, 4, 5, 6]
    train.train(toy_config(tmp_path / "ref", **kw), sampler=sampler)
    assert_same_metrics(read_jsonl(run / "metrics.jsonl"), read_jsonl(tmp_path / "ref" / "metrics.jsonl"))
    assert read_jsonl(run / "eval_records.jsonl") == read_jsonl(tmp_path / "ref" / "eval_records.jsonl")
    # the damaged one was deleted with the next checkpoint; the last two are kept
    assert sorted(n for n in os.listdir(run) if n.startswith("ckpt-")) == ["ckpt-000004", "ckpt-000006"]


def test_checkpoint_damage_is_found_by_size_or_by_reading(tmp_path, capsys):
    """A truncated file (size not the manifest's) and an unreadable one of the right size are
    each skipped for the checkpoint before (resume_update sees the first without moving it);
    with none usable, one line names every file."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    out = str(tmp_path)
    weights = {}
    for update in (1, 2, 3):
        model(torch.ones(1, 3)).sum().backward()
        opt.step()
        weights[update] = model.weight.detach().clone()
        checkpoint.save_checkpoint(out, update, model, opt, None, {"update": update}, keep=2)
    assert sorted(os.listdir(out)) == ["ckpt-000002", "ckpt-000003"]
    assert json.load(open(tmp_path / "ckpt-000003" / "manifest.json")) == {
        n: os.path.getsize(tmp_path / "ckpt-000003" / n) for n in ("learner.pt", "optimizer.pt", "state.pt")}

    truncate(tmp_path / "ckpt-000003" / "learner.pt")
    assert checkpoint.resume_update(out) == 2  # what the sweep announces, moving nothing
    assert sorted(os.listdir(out)) == ["ckpt-000002", "ckpt-000003"]
    assert checkpoint.usable_checkpoint(out) == os.path.join(out, "ckpt-000002")
    assert "ckpt-000003 is damaged (learner.pt has " in capsys.readouterr().err
    assert sorted(os.listdir(out)) == ["ckpt-000002", "ckpt-000003.damaged"]
    checkpoint.save_checkpoint(out, 3, model, opt, None, {"update": 3}, keep=2)
    assert sorted(os.listdir(out)) == ["ckpt-000002", "ckpt-000003"]  # the damaged one deleted

    with open(tmp_path / "ckpt-000003" / "optimizer.pt", "r+b") as f:  # same size, unreadable
        f.write(b"\0" * 64)
    fresh = torch.nn.Linear(3, 2)
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=0.1)
    path, state = checkpoint.load_usable(out, fresh, fresh_opt, None)
    assert path == os.path.join(out, "ckpt-000002") and state == {"update": 2}
    assert torch.equal(fresh.weight, weights[2])  # ckpt 3's learner.pt, read first, overwritten
    assert "ckpt-000003 is damaged (optimizer.pt cannot be read: " in capsys.readouterr().err

    truncate(tmp_path / "ckpt-000002" / "state.pt")
    os.replace(tmp_path / "ckpt-000003.damaged", tmp_path / "ckpt-000003")
    with pytest.raises(ValueError, match=r"^no usable checkpoint in .*: ckpt-000003: optimizer.pt "
                                         r"cannot be read.*; ckpt-000002: state.pt has \d+ bytes, "
                                         r"its manifest says \d+\. Restore one"):
        checkpoint.load_usable(out, fresh, fresh_opt, None)
    assert sorted(os.listdir(out)) == ["ckpt-000002", "ckpt-000003"]  # none moved
    truncate(tmp_path / "ckpt-000003" / "learner.pt")  # sizes are checked before the model loads
    with pytest.raises(ValueError, match="no usable checkpoint in .*: ckpt-000003: learner.pt has"):
        checkpoint.check_out_dir(toy_config(tmp_path, resume=True))


# ----------------------------------------------------------------------------- OOM in every phase

def inject_oom(monkeypatch, owner, name, at_call):
    """Make owner.name raise torch's OOM error on call number at_call (1-based)."""
    real, calls = getattr(owner, name), {"n": 0}

    def maybe_oom(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == at_call:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.00 GiB")
        return real(*args, **kwargs)
    monkeypatch.setattr(owner, name, maybe_oom)
    return calls


# phase, what raises, its call number in update 2, the knob the message names
STOPPING_PHASES = [
    ("generation", "rollout.sample_batch", 3, "lower vllm.gpu_memory_utilization"),
    ("the behavior pass", "learner.fresh_behavior", 3, "lower micro_batch_size"),
    ("the weight push", "sampler.sync", 3, "lower vllm.gpu_memory_utilization"),
    ("evaluation", "evaluate.run_eval", 2, "lower vllm.gpu_memory_utilization"),
]


@pytest.mark.parametrize("phase,target,at_call,knob", STOPPING_PHASES, ids=[p[0] for p in STOPPING_PHASES])
def test_out_of_memory_outside_learn_stops_keeping_the_checkpoint(tmp_path, sampler, monkeypatch,
                                                                  phase, target, at_call, knob):
    """OOM in update 2's generation, behavior pass, weight push or evaluation (where the run's
    state is half-way through the update): one line naming the phase, the checkpoint kept and
    what to lower; nothing of update 2 is logged. After the generation case, resume=true ends
    equal to the run never stopped."""
    import evaluate
    import rollout
    owners = {"rollout": rollout, "learner": learner, "sampler": sampler, "evaluate": evaluate}
    owner, name = target.split(".")
    kw = dict(delay=1, updates=3, lr=1e-3, ckpt_every=1, eval_every=2, eval_toy_size=8, eval_n=2)
    cfg = toy_config(tmp_path / "run", **kw)
    inject_oom(monkeypatch, owners[owner], name, at_call)
    kept = os.path.join(cfg["out_dir"], "ckpt-000001")
    with pytest.raises(torch.OutOfMemoryError, match=rf"^out of memory in {phase} \(CUDA out of "
                                                     rf"memory.*\); the run stops, its last checkpoint "
                                                     rf"\({kept}\) kept: {knob}"):
        train.train(cfg, sampler=sampler)
    assert checkpoint.latest_checkpoint(cfg["out_dir"]) == kept
    assert [r["update"] for r in read_jsonl(tmp_path / "run" / "metrics.jsonl")] == [0, 1]
    if phase == "generation":
        monkeypatch.undo()
        train.train({**cfg, "resume": True}, sampler=sampler)
        train.train(toy_config(tmp_path / "ref", **kw), sampler=sampler)
        assert_same_metrics(read_jsonl(tmp_path / "run" / "metrics.jsonl"),
                            read_jsonl(tmp_path / "ref" / "metrics.jsonl"))


def test_out_of_memory_in_the_reference_pass_skips_the_update(tmp_path, sampler, monkeypatch):
    """The reference's forward pass runs inside learn(), before any step: its OOM takes the
    skip path (counted in oom_updates), and the run goes on."""
    real, calls = learner.response_logp, {"ref": 0}

    def ref_oom_on_second_update(model, *args, **kwargs):
        if not model.training:  # the reference (eval mode, no gradients)
            calls["ref"] += 1
            if calls["ref"] == 3:  # update 2, first of its two micro-batches
                raise torch.OutOfMemoryError("CUDA out of memory (reference)")
        return real(model, *args, **kwargs)
    monkeypatch.setattr(learner, "response_logp", ref_oom_on_second_update)
    rows = train.train(toy_config(tmp_path, loss="ggpo", delay=1, updates=3, lr=1e-3), sampler=sampler)
    assert [r["skipped"] for r in rows] == [0, 1, 0]
    assert [r["oom_updates"] for r in rows] == [0, 1, 1] and math.isnan(rows[1]["surrogate"])


def test_a_nonfinite_forward_pass_is_a_skipped_update(tmp_path, sampler, monkeypatch, capsys):
    """One weight set to inf (as a bf16 overflow would) for update 2 in the learner, for update 3
    in the reference: each update is skipped and counted in skipped_updates (not an error from
    the loss's input check), the weights and AdamW untouched; update 4 trains."""
    learn, calls = train.learn, {"n": 0}

    def learn_with_an_inf_weight(cfg, model, ref_model, optimizer, *args):
        calls["n"] += 1
        poisoned = {2: model, 3: ref_model}.get(calls["n"])
        if poisoned is None:
            return learn(cfg, model, ref_model, optimizer, *args)
        weight = poisoned.get_input_embeddings().weight
        saved = weight.detach().clone()
        before = [p.detach().clone() for p in model.parameters()]
        with torch.no_grad():
            weight[:, 0] = math.inf
        try:
            return learn(cfg, model, ref_model, optimizer, *args)
        finally:
            with torch.no_grad():
                weight.copy_(saved)
            assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))

    monkeypatch.setattr(train, "learn", learn_with_an_inf_weight)
    rows = train.train(toy_config(tmp_path, loss="ggpo", delay=0, updates=4, lr=1e-3), sampler=sampler)
    assert [r["skipped"] for r in rows] == [0, 1, 1, 0]
    assert [r["skipped_updates"] for r in rows] == [0, 1, 2, 2]
    assert [r["oom_updates"] for r in rows] == [0, 0, 0, 0] and math.isfinite(rows[3]["surrogate"])
    err = capsys.readouterr().err
    assert "update 2: the learner's forward pass gave non-finite log-probs; skipped" in err
    assert "update 3: the reference's forward pass gave non-finite log-probs; skipped" in err
    # the loss itself still refuses NaN inputs from a direct caller
    with pytest.raises(ValueError, match="logp holds NaN/inf"):
        losses.compute_loss("grpo", logp=torch.full((2, 1), math.nan), behavior_logp=torch.zeros(2, 1),
                            ref_logp=None, mask=torch.ones(2, 1), rewards=torch.tensor([0.0, 1.0]),
                            group_size=2)


# ----------------------------------------------------------------------------- cpu_matmul: auto

def test_cpu_matmul_auto_is_a_rule_recorded_with_the_run_and_kept_on_resume(tmp_path, monkeypatch,
                                                                            capsys):
    """auto: torch on Intel, off x86 and on other x86 without AVX-512, onednn on other x86 with
    AVX-512; config.yaml records the backend
    with how it was chosen; a resumed run keeps the recorded one whatever the rule says now, and
    an explicit other backend is taken with a warning (the key may change on resume)."""
    def machine(vendor, arch="x86_64", isa=("avx2",)):
        monkeypatch.setattr(cpu, "cpu_features", lambda: (vendor, list(isa)))
        monkeypatch.setattr(cpu.platform, "machine", lambda: arch)

    machine("GenuineIntel", isa=("amx_tile", "avx2", "avx512f"))
    assert cpu.cpu_matmul_backend("auto")[0] == "torch"
    machine("AuthenticAMD", isa=("avx2", "avx512f"))
    assert cpu.cpu_matmul_backend("auto") == (
        "onednn", "auto: non-Intel x86 processor with AVX-512 (AuthenticAMD, avx2/avx512f): MKL "
                  "would take AVX2, oneDNN AVX-512")
    machine("AuthenticAMD")
    assert cpu.cpu_matmul_backend("auto")[0] == "torch"
    assert cpu.cpu_matmul_backend("torch") == ("torch", "set in the config")
    machine("unknown", arch="aarch64", isa=())
    assert cpu.cpu_matmul_backend("auto")[0] == "torch"

    machine("AuthenticAMD", isa=("avx2", "avx512f"))
    cfg = toy_config(tmp_path / "run", cpu_matmul="auto")
    resolved, note = cpu.resolve_cpu_matmul(cfg)
    assert resolved["cpu_matmul"] == "onednn" and cfg["cpu_matmul"] == "auto"
    checkpoint.write_config(cfg["out_dir"], resolved, notes={"cpu_matmul": note})
    text = (tmp_path / "run" / "config.yaml").read_text()
    assert f"\ncpu_matmul: onednn  # {note}\n" in text
    assert yaml.safe_load(text) == resolved
    machine("GenuineIntel", isa=("avx2", "avx512f"))  # the rule would now say torch
    assert cpu.resolve_cpu_matmul({**cfg, "resume": True}) == ({**resolved, "resume": True}, note)
    assert "warning" not in capsys.readouterr().err
    explicit, _ = cpu.resolve_cpu_matmul({**cfg, "cpu_matmul": "torch"})
    assert explicit["cpu_matmul"] == "torch"
    assert "computed with onednn so far" in capsys.readouterr().err
    checkpoint.write_config(cfg["out_dir"], toy_config(tmp_path / "run", cpu_matmul="torch"))
    assert cpu.resolve_cpu_matmul(cfg)[0]["cpu_matmul"] == "torch"  # older code's record
