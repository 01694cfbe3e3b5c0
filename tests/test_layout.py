"""The layout's promises: the loop at the root imports neither the lab (lab/) nor the benchmarks
(bench/), no import cycle, one source of each default, and a new objective that needs losses.py
alone (registered and trained through train.py; lab/tests draws it)."""
import ast
import glob
import os
import subprocess
import sys

import torch
import yaml

import losses
import train
from conftest import ROOT, toy_config

MODULES = {os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "*.py"))}  # the loop
# the folders beside it, and their modules by their own names (as a path hack would import them)
BESIDE = {folder: {folder} | {os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, folder, "*.py"))}
          for folder in ("lab", "bench")}


def imports(path: str) -> set:
    """The top-level names of every module the file at `path` imports, at top level or inside
    functions."""
    tree = ast.parse(open(path).read())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module.split(".")[0])
    return found


def project_imports(name: str) -> set:
    """The root modules that root module `name` imports."""
    return imports(os.path.join(ROOT, name + ".py")) & MODULES - {name}


def test_no_root_module_imports_the_lab_or_the_benchmarks():
    """The loop stands alone: lab/ and bench/ read it, never the other way round."""
    assert BESIDE["lab"] >= {"lab", "plot", "stats"} and BESIDE["bench"] >= {"bench", "bench_learner"}
    for m in sorted(MODULES):
        for folder, names in BESIDE.items():
            assert not imports(os.path.join(ROOT, m + ".py")) & (names - MODULES), f"{m}.py imports {folder}/"


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


def test_a_fifth_objective_needs_losses_py_only(tmp_path, sampler, monkeypatch):
    """Registered in a test (as a user would in losses.py), it is accepted by the config and
    trained for 2 toy updates through train.train (lab/tests/test_plot.py draws one in Fig. 1)."""
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
    assert torch.isfinite(torch.tensor(rows[-1]["eval/toy/mean@2"]))


def test_no_function_is_over_120_lines():
    """Outside the tests no function runs over 120 lines, train.train over 160: each reads on a
    screen or two."""
    long = []
    for path in sorted(glob.glob(os.path.join(ROOT, "*.py")) + glob.glob(os.path.join(ROOT, "lab", "*.py"))
                       + glob.glob(os.path.join(ROOT, "bench", "*.py"))):
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                most = 160 if (os.path.basename(path), node.name) == ("train.py", "train") else 120
                if node.end_lineno - node.lineno + 1 > most:
                    long.append(f"{os.path.relpath(path, ROOT)}:{node.lineno} {node.name}")
    assert long == []
