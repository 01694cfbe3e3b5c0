"""sweep.py --jobs: runs in pinned worker processes give the numbers of one job with as many
threads, a failing run stops none of the others, and the auto rule's plan on a few machines."""
import json
import os

import pytest
import yaml

import sweep
from conftest import ROOT, TOY_MODEL

SMALL = dict(updates=3, eval_every=0, prompts_per_update=4, group_size=4, micro_batch_size=8,
             model=TOY_MODEL)


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def write_sweep(tmp_path, name: str, losses: list) -> str:
    """`losses` at N = 1, 3 updates; a grpo_tis run has a missing model folder: it passes the
    config checks and fails when it starts (its engine, or preflight)."""
    spec = {"config": os.path.join(ROOT, "configs", "toy.yaml"), "out_root": str(tmp_path / name),
            "results": str(tmp_path / f"{name}_results"),
            "grid": {"loss": losses, "delay": [1], "seed": [0]}, "overrides": SMALL,
            "per_loss": {"grpo_tis": {"model": str(tmp_path / "missing"), "build_toy_model": False}}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs 2 cores to pin 2 workers")
def test_two_pinned_jobs_give_one_jobs_numbers_and_a_failed_run_stops_no_other(tmp_path, capfd,
                                                                               monkeypatch):
    """--jobs 2: a worker on each core (1 thread); the run that fails is named with its log, the
    others finish, exit code 1. One job pinned to one core (the same thread count: a run's
    rounding depends on it) then gives both runs' numbers value for value."""
    monkeypatch.chdir(ROOT)
    two = write_sweep(tmp_path, "two", ["grpo", "ggpo", "grpo_tis"])
    with pytest.raises(SystemExit) as stop:
        sweep.main([two, "--jobs", "2"])
    assert stop.value.code == 1
    err = capfd.readouterr().err
    bad = str(tmp_path / "two" / "grpo_tis_N1_s0")
    assert f"FAILED {bad}: FileNotFoundError" in err and f"log {bad}/train.log" in err, err[-3000:]
    assert "2 of 3 runs done" in err and "2 job(s) of 1 core(s)" in err
    assert "Traceback" in open(os.path.join(bad, "train.log")).read()
    # each run that finished kept its results as it finished, the failed one none
    assert sorted(os.listdir(tmp_path / "two_results")) == ["ggpo_N1_s0", "grpo_N1_s0"]
    assert sweep.finished(str(tmp_path / "two_results" / "grpo_N1_s0"), 3)
    logs = [open(tmp_path / "two" / f"{loss}_N1_s0" / "train.log").read() for loss in ("grpo", "ggpo")]
    assert sorted(log.split("cores ")[1].split(",")[0] for log in logs) == ["0", "1"]  # one core each
    assert all(", 1 threads" in log for log in logs)
    with open(two) as f:
        assert [d for _, d, _ in sweep.unfinished(yaml.safe_load(f))] == [bad]  # rerun: that one

    one = write_sweep(tmp_path, "one", ["grpo", "ggpo"])
    sweep.main([one, "--jobs", "1", "--cores-per-job", "1"])  # no SystemExit: all finished
    compared = 0
    for loss in ("grpo", "ggpo"):
        a = read_jsonl(tmp_path / "two" / f"{loss}_N1_s0" / "metrics.jsonl")
        b = read_jsonl(tmp_path / "one" / f"{loss}_N1_s0" / "metrics.jsonl")
        assert [r["update"] for r in a] == [r["update"] for r in b] == [1, 2, 3]
        for x, y in zip(a, b):
            assert set(x) == set(y)
            for k in x:
                if not k.startswith("time/"):
                    assert x[k] == y[k], (loss, x["update"], k)
                    compared += 1
    assert compared > 100


def test_auto_plan_by_cores_memory_and_gpus(monkeypatch):
    """auto: one core per CPU job, bounded by the runs and the memory; one job per GPU."""
    import config
    import torch
    cfg = config.load_config(None, ["device=auto", f"model={TOY_MODEL}"])
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)

    def plan(cores, free_gib, runs=100, jobs="auto", **kw):
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
        monkeypatch.setattr(sweep, "memory_available_gib", lambda: free_gib)
        return sweep.plan_jobs(jobs, runs, cfg, **kw)[0]

    assert [p["cores"] for p in plan(2, 20)] == [[0], [1]]
    assert len(plan(8, 24)) == 8
    assert len(plan(64, 60)) == 41  # 60 GiB // 1.455 GiB a job (KV cache 0.125, process 1.3, 8 x 4 MB)
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")  # the user's cache size counts instead
    assert len(plan(64, 60)) == 25  # 60 // 2.33
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE")
    assert [p["cores"] for p in plan(64, 500, runs=3)] == [[0], [1], [2]]  # still 1 core each
    assert plan(16, 64, jobs="1") == [{"cores": None, "gpu": None}]  # one job: not pinned
    assert [p["cores"] for p in plan(16, 64, jobs="2")] == [list(range(8)), list(range(8, 16))]
    # the last run left, or one resumed alone, keeps the share (the thread count) it had
    assert [p["cores"] for p in plan(16, 64, jobs="2", runs=1)] == [list(range(8))]
    assert [p["cores"] for p in plan(2, 20, jobs="2", runs=1)] == [[0]]
    assert [p["cores"] for p in plan(16, 64, jobs="1", cores_per_job=1)] == [[0]]
    with pytest.raises(ValueError, match="need more than the 2 cores"):
        plan(2, 20, jobs="3")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    gpu_plan = plan(32, 500)
    assert [(p["gpu"], len(p["cores"])) for p in gpu_plan] == [(str(i), 8) for i in range(4)]
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert plan(32, 500) == [{"cores": None, "gpu": None}]  # one GPU: one job, as before


def test_the_cpu_engines_kv_cache_is_sized_to_its_batches():
    """The toy model: 2 (K, V) x 4 layers x 2 KV heads x head dim 32 x 4 bytes = 2,048 bytes a
    token; its 64-token context takes one 256-token block; 256 sequences: 128 MiB. A tiny
    context of a tiny model still gets the 16 MiB floor."""
    import rollout
    assert rollout.cpu_kv_cache_bytes(TOY_MODEL, "float32", 64) == 256 * 256 * 2048 == 128 * 2 ** 20
    assert rollout.cpu_kv_cache_bytes(TOY_MODEL, "bfloat16", 300) == 256 * 512 * 1024
    assert rollout.cpu_kv_cache_bytes(TOY_MODEL, "float32", 64, max_num_seqs=8) == 16 * 2 ** 20
