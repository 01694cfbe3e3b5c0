"""Every shipped config loads and validates; sweep files expand to the runs they promise."""
import glob
import json
import math
import os

import pytest
import yaml

import sweep
import config
import losses
from conftest import ROOT

CONFIGS = sorted(glob.glob(os.path.join(ROOT, "configs", "*.yaml")))
SWEEPS = [c for c in CONFIGS if os.path.basename(c).startswith("sweep_")]


@pytest.mark.parametrize("path", [c for c in CONFIGS if c not in SWEEPS], ids=os.path.basename)
def test_config_loads(path):
    cfg = config.load_config(path)
    assert cfg["group_size"] >= 2


def test_study_config_is_the_study_setting():
    cfg = config.load_config(os.path.join(ROOT, "configs", "qwen3_1.7b_base.yaml"))
    assert (cfg["delay"], cfg["group_size"], cfg["updates"], cfg["eval_n"]) == (8, 8, 8000, 32)
    assert cfg["task"] == "math" and cfg["dtype"] == "float32" and cfg["autocast"] == "bfloat16"
    assert cfg["eval_benchmarks"] == ["math500", "aime24", "aime25", "amc23", "minerva"]


@pytest.mark.parametrize("path", SWEEPS, ids=os.path.basename)
def test_sweep_expands_and_every_run_validates(path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)  # sweep files name their base config relative to the repository
    with open(path) as f:
        spec = yaml.safe_load(f)
    runs = sweep.expand(spec)
    grid = spec["grid"]
    n_losses = len(losses.LOSSES) if grid["loss"] == "all" else len(grid["loss"])
    # `only`: extra delays of one objective, or for any other key one set of N per value; a
    # list: one set of N per mapping
    extra = sum(len(v) * len(grid["delay"]) if isinstance(v, list) else
                len(v.get("delay", [])) + sum(len(vs) for k, vs in v.items() if k != "delay")
                * len(grid["delay"]) for v in spec.get("only", {}).values())
    others = [len(v) for k, v in grid.items() if k not in ("loss", "delay", "seed")]
    assert len(runs) == (n_losses * len(grid["delay"]) + extra) \
        * len(grid["seed"]) * math.prod(others)
    assert len({d for d, _ in runs}) == len(runs)
    for _, overrides in runs:
        config.load_config(spec["config"], overrides)
    sweep.main([path, "--print"])
    assert len(capsys.readouterr().out.strip().splitlines()) == len(runs)


def test_sweep_grid_over_any_config_key_names_each_run():
    spec = {"config": os.path.join(ROOT, "configs", "toy.yaml"), "out_root": "r",
            "grid": {"loss": ["ggpo"], "delay": [8], "seed": [0, 1],
                     "loss_args.beta": [0.01, 0.1], "ref_refresh_every": [0, 25]},
            "overrides": {"eval_every": 50}}
    runs = sweep.expand(spec)
    assert [d for d, _ in runs][:3] == ["r/ggpo_N8_s0_beta-0.01_ref_refresh_every-0",
                                        "r/ggpo_N8_s0_beta-0.01_ref_refresh_every-25",
                                        "r/ggpo_N8_s0_beta-0.1_ref_refresh_every-0"]
    assert len(runs) == 8
    cfg = config.load_config(spec["config"], runs[3][1])
    assert (cfg["loss_args"]["beta"], cfg["ref_refresh_every"], cfg["seed"], cfg["eval_every"]) \
        == (0.1, 25, 0, 50)
    assert cfg["loss_args"]["clip_high"] == 0.2  # the other loss_args keep their values
    with pytest.raises(ValueError, match="seed"):
        sweep.expand({**spec, "grid": {"loss": ["grpo"], "delay": [0]}})
    with pytest.raises(ValueError, match="unknown sweep file key.*'overides'"):
        sweep.expand({**spec, "overides": {"updates": 3}})
    # in blocks: seed by seed, within a seed N by N, every objective of a block together
    runs = sweep.expand({**spec, "grid": {"loss": ["grpo", "ggpo"], "delay": [0, 8], "seed": [1, 0]}})
    assert [d for d, _ in runs] == ["r/grpo_N0_s1", "r/ggpo_N0_s1", "r/grpo_N8_s1", "r/ggpo_N8_s1",
                                    "r/grpo_N0_s0", "r/ggpo_N0_s0", "r/grpo_N8_s0", "r/ggpo_N8_s0"]
    # a list under `only`: one variant per mapping, its keys set together, named in order
    runs = sweep.expand({**spec, "grid": {"loss": ["grpo_mis"], "delay": [8], "seed": [0]},
                         "only": {"grpo_mis": [{"loss_args.mis_low": 0.8, "loss_args.mis_high": 1.2}]}})
    assert [d for d, _ in runs] == ["r/grpo_mis_N8_s0", "r/grpo_mis_N8_s0_mis_low-0.8_mis_high-1.2"]
    cfg = config.load_config(spec["config"], runs[1][1])
    assert (cfg["loss_args"]["mis_low"], cfg["loss_args"]["mis_high"]) == (0.8, 1.2)


def test_a_per_kind_block_runs_one_seed_on_a_kind_without_the_rows(tmp_path):
    """per_kind: grpo and grpo_tis at N 8 and 0, seeds 10-11. Kept: grpo_N8_s0 (another sweep's
    seed) on kind A, grpo_tis_N8_s10 on kind B, an unrelated row (gspo) on kind C. A: has the rows,
    nothing; B: began seed 10, the rest of it; C and a new kind D: the first seed nobody began, 11."""
    results = tmp_path / "results"
    for name, kind in (("grpo_N8_s0", "A"), ("grpo_tis_N8_s10", "B"), ("gspo_N8_s10", "C")):
        (results / name).mkdir(parents=True)
        session = {"cpu": {"model": kind, "isa": ["avx2"], "torch_capability": "AVX2"}, "gpu": None}
        (results / name / "run_info.json").write_text(json.dumps({"sessions": [session]}))
    spec = {"config": os.path.join(ROOT, "configs", "toy.yaml"), "out_root": str(tmp_path / "runs"),
            "results": str(results), "per_kind": True,
            "grid": {"loss": ["grpo", "grpo_tis"], "delay": [8, 0], "seed": [10, 11]}}
    todo = [({"seed": int(d.rsplit("_s", 1)[1])}, d, o) for d, o in sweep.expand(spec)
            if not d.endswith("grpo_tis_N8_s10")]
    picked = lambda kind: [os.path.basename(d) for _, d, _ in sweep.one_kind_block(spec, todo, f"{kind} (avx2)")]
    assert picked("A") == []
    assert picked("B") == ["grpo_N8_s10", "grpo_N0_s10", "grpo_tis_N0_s10"]
    assert picked("C") == picked("D") == ["grpo_N8_s11", "grpo_tis_N8_s11", "grpo_N0_s11", "grpo_tis_N0_s11"]
    with pytest.raises(ValueError, match="per_kind: true needs `results:`"):
        sweep.expand({k: v for k, v in spec.items() if k != "results"})


@pytest.mark.parametrize("name", ["sweep_leaderboard_toy.yaml", "sweep_leaderboard_qwen_quick.yaml"])
def test_leaderboard_sweeps_cover_every_registered_objective(name):
    """Every objective of losses.LOSSES plus PPO against the sampler (grpo, behavior anchor) x
    N in {0, 8, 32, 128} x the seeds (toy: 3, qwen: 2) = (objectives + 1) x 4 x seeds runs,
    each with its own folder."""
    import losses
    with open(os.path.join(ROOT, "configs", name)) as f:
        spec = yaml.safe_load(f)
    runs = sweep.expand(spec)
    seeds = len(spec["grid"]["seed"])
    assert seeds == (3 if "toy" in name else 2)
    total = (len(losses.LOSSES) + 1) * 4 * seeds
    assert len(runs) == total and len({d for d, _ in runs}) == total
    assert spec["grid"]["loss"] == "all"  # every registered objective (sweep.expand)
    behavior = [o for d, o in runs if d.endswith("_grpo_anchor-behavior")]
    assert len(behavior) == 4 * seeds and all("loss=grpo" in o and 'loss_args.grpo_anchor="behavior"' in o
                                      for o in behavior)
    assert sorted({o[1] for _, o in runs}) == ["delay=0", "delay=128", "delay=32", "delay=8"]
    if "toy" in name:
        cfg = config.load_config(os.path.join(ROOT, spec["config"]), runs[-1][1])
        assert (cfg["updates"], cfg["task"], cfg["loss"]) == (300, "toy", list(losses.LOSSES)[-1])


def test_the_seeds_3_to_9_sweeps_cover_every_leaderboard_row():
    """The references' file (sweep_leaderboard_v3_toy.yaml: GRPO, GRPO+TIS and PPO against the
    sampler, run first) and the rows' file (sweep_leaderboard_v3_rows_toy.yaml: every row, the
    references skipped there once their results are kept): together every run of the seeds-0-2
    leaderboard grid (configs/sweep_leaderboard_toy.yaml: every registered objective and PPO
    against the sampler x N in {0, 8, 32, 128}) at seeds 3-9, into that grid's results folder
    (results/leaderboard_toy), evaluated at 0, 260, 280 and 300."""
    import losses
    names = {}
    for name in ("sweep_leaderboard_v3_toy.yaml", "sweep_leaderboard_v3_rows_toy.yaml"):
        with open(os.path.join(ROOT, "configs", name)) as f:
            spec = yaml.safe_load(f)
        assert spec["results"] == "results/leaderboard_toy" and spec["grid"]["seed"] == list(range(3, 10))
        assert spec["overrides"] == {"updates": 300, "eval_every": 20, "eval_from": 260, "cpu_matmul": "onednn"}
        names[name] = [os.path.basename(d) for d, _ in sweep.expand(spec)]
    with open(os.path.join(ROOT, "configs", "sweep_leaderboard_toy.yaml")) as f:
        leaderboard = yaml.safe_load(f)
    leaderboard["grid"]["seed"] = list(range(3, 10))
    every = sorted(os.path.basename(d) for d, _ in sweep.expand(leaderboard))
    assert sorted(names["sweep_leaderboard_v3_rows_toy.yaml"]) == every
    assert len(every) == len(set(every)) == (len(losses.LOSSES) + 1) * 4 * 7
    assert set(names["sweep_leaderboard_v3_toy.yaml"]) < set(every)


def test_loss_all_is_every_registered_objective(monkeypatch):
    import losses
    monkeypatch.setattr(losses, "LOSSES", dict(losses.LOSSES))
    losses.register("fifth", label="Fifth")(losses.LOSSES["grpo"].fn)
    runs = sweep.expand({"config": "configs/toy.yaml", "out_root": "r",
                         "grid": {"loss": "all", "delay": [8], "seed": [0]}})
    assert [os.path.basename(d) for d, _ in runs] == [f"{name}_N8_s0" for name in losses.LOSSES]
    assert runs[-1][0] == os.path.join("r", "fifth_N8_s0")


def test_offline_pool_needs_delay_zero():
    with pytest.raises(ValueError, match="delay must be 0"):
        config.load_config(None, ["offline_pool.path=pool.jsonl", "delay=8"])
    cfg = config.load_config(None, ["offline_pool.path=pool.jsonl", "delay=0"])
    assert cfg["offline_pool"] == {"path": "pool.jsonl", "batches": 400, "seed": 0}
