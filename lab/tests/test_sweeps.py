"""The lab's sweep files (lab/sweeps/): each expands to the runs it promises and every run
validates; the leaderboard's grids cover every registered objective."""
import glob
import math
import os

import pytest
import yaml

import config
import losses
import sweep
from lab.tests.conftest import ROOT

SWEEPS_DIR = os.path.join(ROOT, "lab", "sweeps")
SWEEPS = sorted(glob.glob(os.path.join(SWEEPS_DIR, "*.yaml")))


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


@pytest.mark.parametrize("name", ["leaderboard_toy.yaml", "leaderboard_qwen_quick.yaml"])
def test_leaderboard_sweeps_cover_every_registered_objective(name):
    """Every objective of losses.LOSSES plus PPO against the sampler (grpo, behavior anchor) x
    N in {0, 8, 32, 128} x the seeds (toy: 3, qwen: 2) = (objectives + 1) x 4 x seeds runs,
    each with its own folder."""
    import losses
    with open(os.path.join(SWEEPS_DIR, name)) as f:
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
    """The references' file (leaderboard_reference_seeds_toy.yaml: GRPO, GRPO+TIS and PPO against the
    sampler, run first) and the rows' file (leaderboard_row_seeds_toy.yaml: every row, the
    references skipped there once their results are kept): together every run of the seeds-0-2
    leaderboard grid (lab/sweeps/leaderboard_toy.yaml: every registered objective and PPO
    against the sampler x N in {0, 8, 32, 128}) at seeds 3-9, into that grid's results folder
    (results/leaderboard_toy), evaluated at 0, 260, 280 and 300."""
    import losses
    names = {}
    for name in ("leaderboard_reference_seeds_toy.yaml", "leaderboard_row_seeds_toy.yaml"):
        with open(os.path.join(SWEEPS_DIR, name)) as f:
            spec = yaml.safe_load(f)
        assert spec["results"] == "results/leaderboard_toy" and spec["grid"]["seed"] == list(range(3, 10))
        assert spec["overrides"] == {"updates": 300, "eval_every": 20, "eval_from": 260, "cpu_matmul": "onednn"}
        names[name] = [os.path.basename(d) for d, _ in sweep.expand(spec)]
    with open(os.path.join(SWEEPS_DIR, "leaderboard_toy.yaml")) as f:
        leaderboard = yaml.safe_load(f)
    leaderboard["grid"]["seed"] = list(range(3, 10))
    every = sorted(os.path.basename(d) for d, _ in sweep.expand(leaderboard))
    assert sorted(names["leaderboard_row_seeds_toy.yaml"]) == every
    assert len(every) == len(set(every)) == (len(losses.LOSSES) + 1) * 4 * 7
    assert set(names["leaderboard_reference_seeds_toy.yaml"]) < set(every)
