"""Every shipped config loads and validates; sweep files expand to the runs they promise."""
import glob
import os

import pytest
import yaml

import sweep
import train
from conftest import ROOT

CONFIGS = sorted(glob.glob(os.path.join(ROOT, "configs", "*.yaml")))
SWEEPS = [c for c in CONFIGS if os.path.basename(c).startswith("sweep_")]


@pytest.mark.parametrize("path", [c for c in CONFIGS if c not in SWEEPS], ids=os.path.basename)
def test_config_loads(path):
    cfg = train.load_config(path)
    assert cfg["group_size"] >= 2


def test_study_config_is_the_study_setting():
    cfg = train.load_config(os.path.join(ROOT, "configs", "qwen3_1.7b_base.yaml"))
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
    extra = sum(len(v.get("delay", [])) for v in spec.get("only", {}).values()) * len(grid["seed"])
    assert len(runs) == len(grid["loss"]) * len(grid["delay"]) * len(grid["seed"]) + extra
    assert len({d for d, _ in runs}) == len(runs)
    for _, overrides in runs:
        train.load_config(spec["config"], overrides)
    sweep.main([path, "--print"])
    assert len(capsys.readouterr().out.strip().splitlines()) == len(runs)
