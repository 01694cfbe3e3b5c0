"""Every shipped run config loads and validates; a sweep expands to the runs it promises."""
import glob
import json
import os

import pytest

import sweep
import config
import losses
from conftest import ROOT

CONFIGS = sorted(glob.glob(os.path.join(ROOT, "configs", "*.yaml")))


@pytest.mark.parametrize("path", CONFIGS, ids=os.path.basename)
def test_config_loads(path):
    cfg = config.load_config(path)
    assert cfg["group_size"] >= 2


def test_study_config_is_the_study_setting():
    cfg = config.load_config(os.path.join(ROOT, "configs", "qwen3_1.7b_base.yaml"))
    assert (cfg["delay"], cfg["group_size"], cfg["updates"], cfg["eval_n"]) == (8, 8, 8000, 32)
    assert cfg["task"] == "math" and cfg["dtype"] == "float32" and cfg["autocast"] == "bfloat16"
    assert cfg["eval_benchmarks"] == ["math500", "aime24", "aime25", "amc23", "minerva"]


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


def test_a_seed_begun_on_another_kind_is_held(tmp_path):
    """Kept: grpo_N8_s0 on kind A, grpo_N8_s1 on kinds A and B (resumed there), an unrelated row
    at seed 2 on kind A. On kind B: seed 0 held (begun on A alone), seed 1 runs (B is among its
    kinds), seed 2 runs (no run of this grid kept) and seed 3 too; on A, all of them."""
    results = tmp_path / "results"
    for name, kinds in (("grpo_N8_s0", "A"), ("grpo_N8_s1", "AB"), ("gspo_N8_s2", "A")):
        (results / name).mkdir(parents=True)
        sessions = [{"cpu": {"model": k, "isa": ["avx2"], "torch_capability": "AVX2"}, "gpu": None} for k in kinds]
        (results / name / "run_info.json").write_text(json.dumps({"sessions": sessions}))
    spec = {"config": os.path.join(ROOT, "configs", "toy.yaml"), "out_root": str(tmp_path / "runs"),
            "results": str(results), "grid": {"loss": ["grpo"], "delay": [8, 0], "seed": [0, 1, 2, 3]}}
    todo = [({"seed": int(d.rsplit("_s", 1)[1])}, d, o) for d, o in sweep.expand(spec)
            if not d.endswith(("grpo_N8_s0", "grpo_N8_s1"))]
    picked = lambda kind: [os.path.basename(d) for _, d, _ in sweep.hold_other_kinds(spec, todo, f"{kind} (avx2)")]
    assert picked("B") == ["grpo_N0_s1", "grpo_N8_s2", "grpo_N0_s2", "grpo_N8_s3", "grpo_N0_s3"]
    assert picked("A") == ["grpo_N0_s0"] + picked("B")


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


def test_seeds_cut_a_grid_to_whole_blocks_of_those_seeds():
    """--seeds 2,0 on a grid of seeds 0-2 runs seed 0's blocks then seed 2's (the grid's order);
    a seed outside the grid is refused."""
    spec = {"config": os.path.join(ROOT, "configs", "toy.yaml"), "out_root": "runs/x",
            "grid": {"loss": ["grpo", "gspo"], "delay": [8, 0], "seed": [0, 1, 2]}}
    names = [os.path.basename(d) for d, _ in sweep.expand(sweep.pick_seeds(spec, "2,0"))]
    assert names == ["grpo_N8_s0", "gspo_N8_s0", "grpo_N0_s0", "gspo_N0_s0",
                     "grpo_N8_s2", "gspo_N8_s2", "grpo_N0_s2", "gspo_N0_s2"]
    assert spec["grid"]["seed"] == [0, 1, 2]
    with pytest.raises(ValueError, match="pick among the grid's seeds"):
        sweep.pick_seeds(spec, "3")
