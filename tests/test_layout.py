"""The layout's promises: no import cycle, one source of each default, and a new objective that
needs losses.py alone (registered, trained through train.py, drawn in the figures)."""
import ast
import glob
import os
import subprocess
import sys

import torch
import yaml

import losses
import plot
import train
from conftest import ROOT, toy_config

MODULES = {os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "*.py"))}


def project_imports(name: str) -> set:
    """The project modules that module `name` imports, at top level or inside functions."""
    tree = ast.parse(open(os.path.join(ROOT, name + ".py")).read())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module.split(".")[0])
    return found & MODULES - {name}


def test_no_import_cycle():
    graph = {m: project_imports(m) for m in MODULES}
    done, on_path = set(), []

    def visit(m):
        assert m not in on_path, f"import cycle: {' -> '.join(on_path[on_path.index(m):] + [m])}"
        if m in done:
            return
        on_path.append(m)
        for dep in graph[m]:
            visit(dep)
        on_path.pop()
        done.add(m)

    for m in sorted(MODULES):
        visit(m)
    # only the scripts that run training import the loop
    assert {m for m in MODULES if "train" in graph[m]} == {"sweep"}


def test_evaluate_and_config_do_not_import_train():
    code = "import sys, config, evaluate; print('train' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_defaults_yaml_loss_args_are_the_losses_defaults():
    with open(os.path.join(ROOT, "configs", "defaults.yaml")) as f:
        assert yaml.safe_load(f)["loss_args"] == losses.DEFAULTS


def test_every_registered_objective_has_its_own_plot_style(monkeypatch):
    monkeypatch.setattr(losses, "LOSSES", dict(losses.LOSSES))
    losses.register("fifth", needs_ref=False, label="Fifth")(losses.LOSSES["grpo"].fn)
    styles = {name: plot.loss_style(name) for name in losses.LOSSES}
    k = len(losses.LOSSES)
    assert len(styles) == k and len({s[1:] for s in styles.values()}) == k  # color + line style
    assert [s[0] for s in styles.values()][:4] + [styles["fifth"][0]] == \
        ["GRPO", "GRPO+TIS", "AGRO", "GGPO", "Fifth"]
    runs = [{"loss": name} for name in ("ggpo", "fifth", "unregistered")]
    assert list(plot.by_loss(runs)) == ["ggpo", "fifth", "unregistered"]


def test_a_fifth_objective_needs_losses_py_only(tmp_path, sampler, monkeypatch):
    """Registered in a test (as a user would in losses.py), it is accepted by the config, trained
    for 2 toy updates through train.train, and drawn in Fig. 1 with its label."""
    monkeypatch.setattr(losses, "LOSSES", dict(losses.LOSSES))

    @losses.register("reinforce_mean", needs_ref=False, label="REINFORCE (group mean)")
    def reinforce_mean(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
        r"""loss = -(1/n) sum_i (r_i - mean_group r) sum_t logp_{i,t}."""
        g = rewards.view(-1, group_size)
        a = (g - g.mean(1, keepdim=True)).view(-1)
        return -(a * (logp * mask).sum(1)).sum() / mask.sum(), a, {}

    cfg = toy_config(tmp_path / "runs" / "reinforce_mean_N0_s0", loss="reinforce_mean", delay=0,
                     updates=2, lr=1e-3, eval_every=2, eval_toy_size=8, eval_n=2)
    rows = train.train(cfg, sampler=sampler)
    assert [r["update"] for r in rows] == [0, 1, 2]
    assert rows[1]["k3"] < 1e-8 and rows[1]["skipped"] == rows[2]["skipped"] == 0
    assert rows[1]["grad_norm"] + rows[2]["grad_norm"] > 0  # (a batch of all-equal groups has none)
    assert rows[2]["logp_diff_max"] < 1e-4  # on-policy: the engine holds the updated weights
    out = str(tmp_path / "fig1.png")
    plot.fig1(str(tmp_path / "runs"), out, delay=0, window=0)
    assert "| REINFORCE (group mean) |" in open(str(tmp_path / "fig1.md")).read()
    assert os.path.getsize(out) > 0
    assert torch.isfinite(torch.tensor(rows[-1]["eval/toy/mean@2"]))
