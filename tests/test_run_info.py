"""run_info.json: every run folder says where and with what it ran, one entry per session."""
import json
import os
import subprocess

import torch

import config
import cpu
import learner
import run_info
from conftest import ROOT, TOY_MODEL


def sessions(folder) -> list:
    with open(os.path.join(folder, run_info.RUN_INFO)) as f:
        return json.load(f)["sessions"]


def test_a_session_names_this_machine_and_this_code(tmp_path):
    s = run_info.record_session(str(tmp_path), 0, "onednn", "vllm")
    assert sessions(tmp_path) == [s]
    assert (s["start_update"], s["matmul"], s["sampler"]) == (0, "onednn", "vllm")
    proc = s["cpu"]
    assert proc["cores"] == os.cpu_count() and proc["usable_cores"] == len(os.sched_getaffinity(0))
    assert proc["torch_capability"] == torch.backends.cpu.get_cpu_capability()
    if os.path.exists("/proc/cpuinfo"):  # the first processor's model name and flags
        fields = [line.split(":", 1) for line in open("/proc/cpuinfo") if ":" in line]
        first = lambda key: next((v.strip() for k, v in fields if k.strip() == key), None)
        assert proc["model"] == first("model name") or first("model name") is None
        flags = set((first("flags") or first("Features") or "").split())
        assert set(proc["isa"]) == flags & set(cpu.KERNEL_ISA)
        assert ("avx2" in proc["isa"]) == ("avx2" in flags)
    assert s["torch_threads"] == torch.get_num_threads()
    assert s["versions"]["torch"] == torch.__version__ and s["versions"]["transformers"]
    assert s["gpu"] is None if not torch.cuda.is_available() else s["gpu"]
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:
        assert s["git"]["commit"] == head.stdout.strip() and isinstance(s["git"]["dirty"], bool)


def test_a_resumed_run_adds_its_session_and_drops_those_whose_rows_were_dropped(tmp_path):
    out = str(tmp_path)
    run_info.record_session(out, 0, "onednn", "vllm")
    run_info.record_session(out, 4, "torch", "transformers")  # resumed from update 4 elsewhere
    assert [(s["start_update"], s["sampler"]) for s in sessions(out)] == [(0, "vllm"), (4, "transformers")]
    # killed before its next checkpoint and resumed from update 4 again: its rows past 4 are gone
    run_info.record_session(out, 4, "onednn", "vllm")
    assert [(s["start_update"], s["sampler"]) for s in sessions(out)] == [(0, "vllm"), (4, "vllm")]
    run_info.record_session(out, 8, "onednn", "vllm")
    assert [s["start_update"] for s in sessions(out)] == [0, 4, 8]
    run_info.record_session(out, 0, "onednn", "vllm")  # a run started again from update 0
    assert [s["start_update"] for s in sessions(out)] == [0]


def test_a_resume_on_another_rounding_path_is_said(tmp_path, monkeypatch, capsys):
    """A run resumed with another thread count (or backend, or library) cannot equal the run
    made without a break: the resume says so, naming what changed; the same setting says nothing."""
    out = str(tmp_path)
    run_info.record_session(out, 0, "onednn", "vllm")
    run_info.record_session(out, 10, "onednn", "vllm")
    assert "warning" not in capsys.readouterr().err
    monkeypatch.setattr(torch, "get_num_threads", lambda: 99)
    run_info.record_session(out, 20, "torch", "vllm")
    err = capsys.readouterr().err
    assert "another rounding path" in err and "from update 10" in err
    assert "torch threads: " in err and "-> 99" in err and "matmul: onednn -> torch" in err
    assert "sampler" not in err


def test_no_git_checkout_is_said_not_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(run_info, "HERE", str(tmp_path))
    got = run_info.git_info()
    assert (got["commit"], got["dirty"]) == (None, None) and got["why"].startswith("not a git checkout")
    monkeypatch.setenv("PATH", str(tmp_path))  # no git at all
    assert run_info.git_info()["commit"] is None


def test_the_matmul_backend_is_the_one_installed(monkeypatch):
    cfg = config.load_config(os.path.join(ROOT, "configs", "toy.yaml"), [f"model={TOY_MODEL}"])
    onednn = learner.load_learner({**cfg, "cpu_matmul": "onednn"})
    assert cpu.matmul_backend(onednn) == ("onednn" if cpu.onednn_linear_works() else "torch")
    assert cpu.matmul_backend(learner.load_learner({**cfg, "cpu_matmul": "torch"})) == "torch"
    monkeypatch.setattr(cpu, "onednn_linear_works", lambda: False)  # e.g. macOS arm64
    assert cpu.matmul_backend(learner.load_learner({**cfg, "cpu_matmul": "onednn"})) == "torch"


def test_a_session_names_the_code_loaded_not_the_checkout_now(tmp_path, monkeypatch):
    """A sweep worker imports the code once and keeps it while the checkout moves on: its
    sessions name the commit of that import (run_info.LOADED_CODE), not the checkout's HEAD at
    the run's start."""
    assert run_info.LOADED_CODE["commit"] == run_info.git_info()["commit"]  # nothing moved here
    loaded = {"commit": "0" * 40, "dirty": False, "changed": []}
    monkeypatch.setattr(run_info, "LOADED_CODE", loaded)
    assert run_info.record_session(str(tmp_path), 0, "onednn", "vllm")["git"] == loaded
