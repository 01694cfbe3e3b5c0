"""Run a grid of training runs (objectives x N x seeds), one after another, or print them.

    python sweep.py configs/sweep_fig3_toy.yaml            # run every unfinished run here
    python sweep.py configs/sweep_fig3_toy.yaml --print    # one command per run, for a scheduler

A sweep file names a base config, a grid and an output root:

    config: configs/toy.yaml
    out_root: runs/fig3_toy
    grid: {loss: [grpo, agro], delay: [0, 8], seed: [0, 1]}
    overrides: {updates: 300}              # applied to every run
    # grid may add any other config key, dotted for nested ones, e.g. loss_args.beta: [0.01, 0.1]
    per_loss: {grpo_tis: {lr: 1.0e-4}}     # applied to runs of one objective (optional)
    only: {grpo_tis: {delay: [128]}}       # extra grid values for one objective (optional)

Each run goes to <out_root>/<loss>_N<delay>_s<seed>, followed by _<name>-<value> for every other
grid key (name: the last part of a dotted key), e.g. ggpo_N8_s0_beta-0.1_ref_refresh_every-25.
A run whose metrics.jsonl already reaches `updates` is skipped, an unfinished one resumes from
its last checkpoint. Runs here share one vLLM engine (the base model is the same for all).
"""
import argparse
import itertools
import json
import os
import shlex
import sys

import yaml

import config
import rollout
import train


def expand(sweep: dict) -> list:
    """[(out_dir, overrides list)] for every run of the grid, in a fixed order."""
    grid = sweep["grid"]
    missing = {"loss", "delay", "seed"} - set(grid)
    if missing:
        raise ValueError(f"sweep grid must list loss, delay and seed; {sorted(missing)} missing")
    others = [k for k in grid if k not in ("loss", "delay", "seed")]
    runs = []
    for loss in grid["loss"]:
        delays = list(grid["delay"]) + list(sweep.get("only", {}).get(loss, {}).get("delay", []))
        for delay, seed, *values in itertools.product(delays, grid["seed"],
                                                      *(grid[k] for k in others)):
            name = f"{loss}_N{delay}_s{seed}" + "".join(
                f"_{k.split('.')[-1]}-{v}" for k, v in zip(others, values))
            out_dir = os.path.join(sweep["out_root"], name)
            extra = {**sweep.get("overrides", {}), **sweep.get("per_loss", {}).get(loss, {}),
                     **dict(zip(others, values))}
            overrides = [f"loss={loss}", f"delay={delay}", f"seed={seed}", f"out_dir={out_dir}"]
            overrides += [f"{k}={json.dumps(v)}" for k, v in extra.items()]
            runs.append((out_dir, overrides))
    return runs


def finished(out_dir: str, updates: int) -> bool:
    path = os.path.join(out_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return False
    last = 0
    with open(path) as f:
        for line in f:
            last = max(last, json.loads(line).get("update", 0))
    return last >= updates


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", help="sweep YAML file")
    parser.add_argument("--print", action="store_true", help="print one command per run")
    args = parser.parse_args(argv)
    with open(args.sweep) as f:
        sweep = yaml.safe_load(f)
    runs = expand(sweep)
    configs = [config.load_config(sweep["config"], overrides) for _, overrides in runs]
    if args.print:
        for _, overrides in runs:
            print(" ".join(["python", "train.py", sweep["config"], *map(shlex.quote, overrides)]))
        return
    todo = [(cfg, d) for cfg, (d, _) in zip(configs, runs) if not finished(d, cfg["updates"])]
    print(f"{len(runs)} runs, {len(runs) - len(todo)} already finished, {len(todo)} to run",
          file=sys.stderr)
    sampler = None
    for i, (cfg, out_dir) in enumerate(todo):
        print(f"[{i + 1}/{len(todo)}] {out_dir}", file=sys.stderr)
        if sampler is None:
            sampler = rollout.make_sampler(cfg)
        train.train({**cfg, "resume": True}, sampler=sampler)  # an unfinished run continues
        if train.STOP["signal"]:  # SIGINT/SIGTERM: this run checkpointed; rerun to continue
            sys.exit(128 + train.STOP["signal"])


if __name__ == "__main__":
    main()
