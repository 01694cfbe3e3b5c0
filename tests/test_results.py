"""Kept results (sweep.keep_results): what a finished run leaves in results/, and that a sweep
skips a run whose results are kept."""
import gzip
import json
import os

import yaml

import config
import sweep

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOY = os.path.join(ROOT, "configs", "toy.yaml")


def finished_run(folder, seed=0, updates=4):
    """A run folder as train.py leaves it: config, metrics with per-phase timings, evaluations at
    updates 0 and `updates` (two problems each), run_info.json."""
    cfg = config.load_config(TOY, [f"seed={seed}", "delay=0", f"updates={updates}", f"out_dir={folder}"])
    os.makedirs(folder)
    with open(os.path.join(folder, "config.yaml"), "w") as f:
        yaml.safe_dump(cfg, f)
    rows = [{"update": 0, "eval/toy/mean@4": 0.25}]
    rows += [{"update": t, "k3": 1 / 3 * t, "surrogate": -0.123456789012, "time/update": 0.123456789,
              "time/learn": 0.05, "responses_total": 128 * t} for t in range(1, updates + 1)]
    rows[-1]["eval/toy/mean@4"] = 0.5 + seed / 100
    with open(os.path.join(folder, "metrics.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    with open(os.path.join(folder, "eval_records.jsonl"), "w") as f:
        for update in (0, updates):
            f.writelines(json.dumps({"update": update, "benchmark": "toy", "id": f"toy-{i}", "n": 4,
                                     "correct": i + update // updates}) + "\n" for i in range(2))
    with open(os.path.join(folder, "run_info.json"), "w") as f:
        json.dump({"sessions": []}, f)
    os.makedirs(os.path.join(folder, "ckpt-000004"))  # not kept


def read_gz(path):
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f]


def test_keep_results_is_compact_and_the_same_bytes_every_time(tmp_path):
    run, dest = str(tmp_path / "runs" / "grpo_N0_s0"), str(tmp_path / "results" / "grpo_N0_s0")
    finished_run(run)
    sweep.keep_results(run, dest)
    assert sorted(os.listdir(dest)) == ["config.yaml", "eval_records.jsonl.gz", "metrics.jsonl.gz",
                                        "run_info.json"]
    rows = read_gz(os.path.join(dest, "metrics.jsonl.gz"))
    assert len(rows) == 5 and rows[-1]["eval/toy/mean@4"] == 0.5
    assert rows[3] == {"update": 3, "k3": 1.0, "surrogate": -0.1234568, "time/update": 0.1234568,
                       "responses_total": 384}  # 7 digits, per-phase timings left out
    assert read_gz(os.path.join(dest, "eval_records.jsonl.gz")) == [
        {"update": 4, "benchmark": "toy", "id": "toy-0", "n": 4, "correct": 1},
        {"update": 4, "benchmark": "toy", "id": "toy-1", "n": 4, "correct": 2}]  # the final eval
    first = {n: open(os.path.join(dest, n), "rb").read() for n in os.listdir(dest)}
    sweep.keep_results(run, dest)
    assert {n: open(os.path.join(dest, n), "rb").read() for n in os.listdir(dest)} == first
    assert sweep.finished(dest, 4) and not sweep.finished(dest, 5)


def test_a_sweep_skips_kept_results_and_keeps_those_of_finished_runs(tmp_path, monkeypatch, capsys):
    """Seeds 0-2: seed 0 has only its kept results (committed from another checkout), seed 1 a
    finished run folder and no results yet (they are written now), seed 2 nothing: only seed 2
    is left to run."""
    monkeypatch.chdir(tmp_path)
    spec = {"config": TOY, "out_root": "runs/lb", "results": "results/lb",
            "grid": {"loss": ["grpo"], "delay": [0], "seed": [0, 1, 2]}, "overrides": {"updates": 4}}
    finished_run("elsewhere/grpo_N0_s0", seed=0)
    sweep.keep_results("elsewhere/grpo_N0_s0", "results/lb/grpo_N0_s0")
    finished_run("runs/lb/grpo_N0_s1", seed=1)
    todo = sweep.unfinished(spec)
    assert [out_dir for _, out_dir, _ in todo] == ["runs/lb/grpo_N0_s2"]
    assert "3 runs, 2 already finished (1 in results/lb, 1 copied there now), 1 to run" in capsys.readouterr().err
    assert sorted(os.listdir("results/lb")) == ["grpo_N0_s0", "grpo_N0_s1"]
    assert [read_gz(f"results/lb/grpo_N0_s{seed}/metrics.jsonl.gz")[-1]["eval/toy/mean@4"]
            for seed in (0, 1)] == [0.5, 0.51]
    assert len(sweep.unfinished({k: v for k, v in spec.items() if k != "results"})) == 2


def test_a_run_kept_by_another_sweep_after_this_one_started_is_not_run_again(tmp_path, monkeypatch,
                                                                               capsys):
    """Two sweep processes share a `results:` folder: the run this one listed as unfinished has
    its results kept by the other before a worker takes it, so it is skipped, not run twice."""
    monkeypatch.chdir(tmp_path)
    spec = {"config": TOY, "out_root": "runs/lb", "results": "results/lb",
            "grid": {"loss": ["grpo"], "delay": [0], "seed": [3]}, "overrides": {"updates": 4}}
    path = tmp_path / "lb.yaml"
    path.write_text(yaml.safe_dump(spec))
    listed = sweep.unfinished

    def list_then_the_other_sweep_keeps_it(s):
        todo = listed(s)
        finished_run("other/grpo_N0_s3", seed=3)
        sweep.keep_results("other/grpo_N0_s3", "results/lb/grpo_N0_s3")
        return todo

    monkeypatch.setattr(sweep, "unfinished", list_then_the_other_sweep_keeps_it)
    sweep.main([str(path), "--jobs", "1", "--cores-per-job", "1"])  # no SystemExit: nothing failed
    err = capsys.readouterr().err
    assert "1 to run" in err and "skip grpo_N0_s3: its results landed in results/lb/grpo_N0_s3" in err
    assert "0 of 1 runs done" in err and "1 kept meanwhile by another sweep" in err
    assert not os.path.exists("runs/lb/grpo_N0_s3")  # no worker started it
