"""What a long-toy run costs beside a short-toy run, phase by phase, and what its grid costs.

    python bench/toy_long.py [--updates 24] [--loss grpo_tis] [--delay 8] [--out FILE.md]

Runs each toy (configs/toy.yaml, configs/toy_long.yaml) for --updates updates in a process of its
own pinned to one core (one thread: the sweeps' geometry), with one evaluation at update 0, and
reads the phases the loop logs (time/generate, time/learn, time/sync, time/update) from its
metrics.jsonl: the median over the updates that sample (the last N of a run only drain the queue)
after the first two (warm-up), the evaluation's seconds, and what the update-0 evaluation says of
each base model (held-out mean@4, by term count for the long toy, and its response length). Then
a run's cost at each toy's sweep settings (its updates and evaluations, as its sweep file sets
them and train.evaluated_at schedules them) and the hours of the long grid
(lab/sweeps/leaderboard_long_toy.yaml) on one core. Prints a Markdown table (and writes it to
--out, e.g. bench/toy_long.md, which `make leaderboard-long` reads) with the machine it ran on and
the load beside it.
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root
sys.path.insert(0, ROOT)  # the loop's modules
# each toy's sweep: the lr 5e-5 short table (the long grid's comparison) and the long grid
SWEEPS = {"short": "lab/sweeps/leaderboard_lr5e-5_rows_toy.yaml", "long": "lab/sweeps/leaderboard_long_toy.yaml"}
PHASES = ["generate", "learn", "sync", "update"]


def processor() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def measure(path: str, updates: int, loss: str, delay: int, out_dir: str) -> dict:
    """{phase: median seconds, "eval": seconds, "tokens": mean response tokens} of one run of
    the config at `path`."""
    core = sorted(os.sched_getaffinity(0))[0]
    cmd = [sys.executable, os.path.join(ROOT, "train.py"), os.path.join(ROOT, path), f"loss={loss}",
           f"delay={delay}", f"updates={updates}", "eval_every=100000", "eval_from=0",  # update 0 and the end
           f"out_dir={out_dir}", "cpu_matmul=onednn"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(cmd, check=True, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                   preexec_fn=lambda: os.sched_setaffinity(0, {core}))
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    # the updates that sample (the last N only drain the queue), after two of warm-up
    steady = [r for r in rows if "time/generate" in r][2:]
    out = {p: statistics.median(r[f"time/{p}"] for r in steady) for p in PHASES}
    evals = [r for r in rows if any(k.startswith("time/eval/") for k in r)]
    out["eval"] = sum(v for k, v in evals[0].items() if k.startswith("time/eval/"))
    out["base"] = {"all": evals[0]["eval/toy/mean@4"]}  # the base model, held out, and by term count
    out["base"].update({k.split("/")[2]: v for k, v in evals[0].items()
                        if re.fullmatch(r"eval/toy/t\d+/mean@4", k)})
    out["base_len"] = evals[0]["eval/toy/response_len_mean"]
    out["tokens"] = statistics.mean(r["response_len_mean"] for r in steady)
    return out


def sweep_schedule(spec: dict) -> tuple:
    """(updates, evaluations) of a run of the sweep `spec`, as the loop schedules them."""
    import config
    import sweep
    import train
    overrides = [o for o in sweep.expand(spec)[0][1] if not o.startswith("out_dir=")]
    cfg = config.load_config(os.path.join(ROOT, spec["config"]), overrides)
    return cfg["updates"], sum(train.evaluated_at(cfg, t) for t in range(cfg["updates"] + 1))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--updates", type=int, default=24)
    p.add_argument("--loss", default="grpo_tis")
    p.add_argument("--delay", type=int, default=8)
    p.add_argument("--out")
    args = p.parse_args(argv)
    if args.updates - args.delay < 3:  # the updates that sample, after two of warm-up
        p.error(f"--updates {args.updates} at --delay {args.delay} leaves {max(args.updates - args.delay, 0)} "
                f"updates that sample; the timing needs at least 3 (--updates {args.delay + 3} or more)")
    import config
    import sweep
    specs = {}
    for toy, path in SWEEPS.items():
        with open(os.path.join(ROOT, path)) as f:
            specs[toy] = yaml.load(f, Loader=config.YAML_LOADER)  # as sweep.py reads it
    got, load = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        for toy in SWEEPS:
            got[toy] = measure(specs[toy]["config"], args.updates, args.loss, args.delay, os.path.join(tmp, toy))
            load.append(os.getloadavg()[0])  # what else ran on the machine meanwhile
    s, l = got["short"], got["long"]
    schedule = {toy: sweep_schedule(specs[toy]) for toy in SWEEPS}
    run = {toy: schedule[toy][0] * got[toy]["update"] + schedule[toy][1] * got[toy]["eval"] for toy in SWEEPS}
    runs = len(sweep.expand(specs["long"]))
    lines = [f"{args.loss} at N = {args.delay}, {args.updates} updates a toy, one process pinned to "
             f"one core of: {processor()} ({os.cpu_count()} cores); 1-minute load average after "
             f"each toy: {load[0]:.1f}, {load[1]:.1f} (above 1: other processes shared the cores)", "",
             "| | short | long | long / short |", "| --- | --- | --- | --- |",
             f"| response tokens (mean) | {s['tokens']:.1f} | {l['tokens']:.1f} | {l['tokens'] / s['tokens']:.1f} |"]
    lines += [f"| {p}, s/update | {s[p]:.3f} | {l[p]:.3f} | {l[p] / s[p]:.1f} |" for p in PHASES]
    lines += [f"| base model: held-out mean@4 | {s['base']['all']:.3f} | {l['base']['all']:.3f} | |",
              f"| base model: response tokens at evaluation | {s['base_len']:.1f} | {l['base_len']:.1f} | "
              f"{l['base_len'] / s['base_len']:.1f} |"]
    lines += [f"| base model: held-out mean@4, {part} | | {l['base'][part]:.3f} | |"
              for part in sorted(l["base"]) if part.startswith("t")]
    lines += [f"| one evaluation, s | {s['eval']:.1f} | {l['eval']:.1f} | {l['eval'] / s['eval']:.1f} |",
              f"| one sweep run, s | {run['short']:.0f} | {run['long']:.0f} | {run['long'] / run['short']:.1f} |",
              "", f"The long grid ({SWEEPS['long']}): {runs} runs, about {runs * run['long'] / 3600:.1f} "
                  f"core-hours on this processor."]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
