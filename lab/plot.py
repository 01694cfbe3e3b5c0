"""Figures of the study from run folders, as PNG, each with a Markdown table of its numbers (.md).

    python lab/plot.py fig1  runs/fig1_toy   --out lab/figures/fig1_toy.png   # dynamics at one N (--delay 8)
    python lab/plot.py fig3  runs/fig3_toy   --out lab/figures/fig3_toy.png   # final accuracy against N
    python lab/plot.py fig2  runs/fig3_toy   --out lab/figures/fig2_toy.png   # sampling budget
    python lab/plot.py fig5  runs/fig3_toy   --out lab/figures/fig5_toy.png   # difficulty split (at --delay 8)
    python lab/plot.py fig7  runs/fig3_toy   --out lab/figures/fig7_toy.png   # diagnostics against N
    python lab/plot.py fig4  runs/fig4_toy   --out lab/figures/fig4_toy.png   # offline training on a fixed pool
    python lab/plot.py fig8  runs/fig8_toy   --out lab/figures/fig8_toy.png   # GGPO: beta x reference refresh
    python lab/plot.py fig9  runs/fig8_toy   --out lab/figures/fig9_toy.png   # ESS of GGPO's weights on successes
    python lab/plot.py fig10 runs/fig10_toy  --out lab/figures/fig10_toy.png  # GGPO: original vs detached update
    python lab/plot.py leaderboard results/leaderboard_toy --out lab/figures/leaderboard_v3_toy.png  # every objective vs N, in tiers
    python lab/plot.py numerics runs/numerics_toy --out lab/figures/numerics_toy.png  # engine vs learner precision
    python lab/plot.py direction results/direction_toy --out lab/figures/direction_toy.png  # the direction ablation
    python lab/plot.py processors results/processor_toy --against results/leaderboard_toy \
        --out lab/figures/processor_toy.png  # the same runs on two processors
    python lab/plot.py drift results/leaderboard_toy --against results/leaderboard_toy_lr5e-5 \
        --out lab/figures/drift_toy.png  # accuracy against the drift its batches carry, two step sizes
    python lab/plot.py tidy results/leaderboard_toy --out lab/figures/runs_leaderboard_toy.csv  # one row per run
    python lab/plot.py row lab/figures/leaderboard_v3_toy.md --row grpo_tis --set tis_cap=5  # one row's line

A run folder holds config.yaml and metrics.jsonl (train.py writes them; sweep.py lays folders out
as <loss>_N<delay>_s<seed>[_<key>-<value>...]); a folder of kept results (results/<sweep>/<run>,
metrics.jsonl.gz) reads the same, so `make tables` remakes the committed tables from results/. Runs that differ only in seed are averaged;
per-update metrics are smoothed with a moving average of --window updates. Accuracy is the
problem-weighted average over benchmarks (eval/avg/...) when several are evaluated, else the
one benchmark's (MATH-500 first). Without --out a figure goes to lab/figures/<figure>.png.
"""
import argparse
import glob
import gzip
import json
import math
import os
import re
import sys
from collections import defaultdict

if not __package__:  # run as `python lab/plot.py`: the loop and the lab import from the root
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import matplotlib  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import yaml  # noqa: E402

import config  # noqa: E402
import losses  # noqa: E402
from lab import stats  # noqa: E402
from run_info import processor_kind  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

FIGURES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "figures")

# colors and line styles of the study's four objectives; any other objective (registered in
# losses.py, or found in a run folder) gets a spare color, so it shows in every figure
STUDY_STYLE = {"grpo": ("tab:orange", "-"), "grpo_tis": ("tab:purple", "--"),
               "agro": ("tab:green", "-"), "ggpo": ("tab:blue", "-")}
SPARE_COLORS = ["tab:red", "tab:brown", "tab:pink", "tab:olive", "tab:cyan", "tab:gray", "black",
                "gold", "navy", "lime"]
SPARE_LINES = ["-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1))]  # one per round of the spare colors
# Fig. 7: training-time metrics, averaged over the last 10% of each run's updates
DIAGNOSTICS = [("k3", 1e3, "K3 (x1e-3)"), ("entropy", 1, "entropy"), ("clip_frac", 1, "clip fraction"),
               ("tis_weight_mean", 1, "TIS weight mean"), ("ggpo_ess_success", 1, "GGPO ESS (successes)"),
               ("grad_norm", 1, "grad norm"), ("reward_mean", 1, "training reward"),
               ("response_len_mean", 1, "response length")]


# ----------------------------------------------------------------------------- run folders

def load_runs(root: str) -> list:
    """[{name, cfg, loss, delay, seed, rows}] for every run folder under root."""
    runs = []
    paths = sorted(glob.glob(os.path.join(root, "*", "metrics.jsonl"))
                   + glob.glob(os.path.join(root, "*", "metrics.jsonl.gz")))  # run folders, kept results
    for path in paths:
        folder = os.path.dirname(path)
        with open(os.path.join(folder, "config.yaml")) as f:
            cfg = yaml.load(f, Loader=config.YAML_LOADER)
        try:
            with (gzip.open if path.endswith(".gz") else open)(path, "rt") as f:
                rows = [json.loads(line) for line in f if line.strip()]
        except (EOFError, OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"{folder}: its metrics file {os.path.basename(path)} is damaged "
                             f"({type(e).__name__}: {e}). Remove the folder and rerun its sweep, which "
                             f"reruns a run that is not kept") from e
        sessions = []  # a run folder without run_info.json: no sessions known
        if os.path.exists(os.path.join(folder, "run_info.json")):
            with open(os.path.join(folder, "run_info.json")) as f:
                sessions = json.load(f)["sessions"]
        runs.append({"name": os.path.basename(folder), "cfg": cfg, "loss": cfg["loss"],
                     "delay": cfg["delay"], "seed": cfg["seed"], "rows": rows,
                     "sessions": sessions})
    if not runs:
        raise FileNotFoundError(f"no run folders (config.yaml + metrics.jsonl) in {root}")
    # A stopped sweep leaves runs whose "final" numbers are only their latest: say which.
    unfinished = []
    for r in runs:
        last = max((row.get("update", 0) for row in r["rows"]), default=0)
        if last < r["cfg"]["updates"]:
            unfinished.append(f"{r['name']} (update {last} of {r['cfg']['updates']})")
    if unfinished:
        print(f"lab/plot.py: {len(unfinished)} of {len(runs)} runs in {root} are unfinished, so their "
              f"final values are their latest: {', '.join(unfinished)}", file=sys.stderr)
    return runs


def eval_key(rows: list, stat: str, average: bool = False) -> str:
    """The metric eval/<benchmark>/<stat>... to plot (stat: 'mean@', 'best@', 'partial_mean@',
    'unsolved_solved_frac'). average: the problem-weighted average over benchmarks (Figs. 2, 3)
    when several were evaluated; otherwise MATH-500 (Figs. 1, 4, 5), else the only benchmark."""
    keys = sorted(k for k in set().union(*rows)  # eval/<benchmark>/<stat>, not the toy's eval/toy/d2/...
                  if k.startswith("eval/") and k.count("/") == 2 and k.split("/")[-1].startswith(stat))
    if not keys:
        raise ValueError(f"no eval/*/{stat} metric in the run: was eval_every 0?")
    avg = [k for k in keys if k.startswith("eval/avg/")]
    benchmarks = [k for k in keys if k not in avg]
    math500 = [k for k in benchmarks if k.startswith("eval/math500/")]
    if len(benchmarks) == 1:
        return benchmarks[0]
    return ((avg if average else []) + math500 + avg + keys)[0]


def series(rows: list, key: str, x: str = "update"):
    kept = [r for r in rows if r.get(key) is not None]
    return [r[x] for r in kept], [r[key] for r in kept]


def smooth(ys: list, window: int) -> list:
    out, acc = [], 0.0
    for i, y in enumerate(ys):
        acc += y - (ys[i - window] if i >= window else 0.0)
        out.append(acc / min(i + 1, window))
    return out


def over_seeds(runs: list, key: str, x: str = "update"):
    """xs, and per x the values of every seed (truncated to the shortest run)."""
    all_xs, all_ys = zip(*(series(r["rows"], key, x) for r in runs))
    n = min(map(len, all_ys))
    return list(all_xs[0][:n]), [[ys[i] for ys in all_ys] for i in range(n)]


def mean(values: list) -> float:
    return sum(values) / len(values)


def by(runs: list, label) -> dict:
    """{label(run): [runs]} in order of first appearance: runs that differ only in seed."""
    groups = defaultdict(list)
    for r in runs:
        groups[label(r)].append(r)
    return dict(groups)


def loss_order(runs: list = ()) -> list:
    """Registered objectives in registration order, then those of runs that are not registered."""
    return list(losses.LOSSES) + sorted({r["loss"] for r in runs} - set(losses.LOSSES))


def loss_style(loss: str, runs: list = ()) -> tuple:
    """(label, color, line style) of an objective in every figure."""
    label = losses.LOSSES[loss].label if loss in losses.LOSSES else loss
    if loss in STUDY_STYLE:
        return (label, *STUDY_STYLE[loss])
    others = [name for name in loss_order(runs) if name not in STUDY_STYLE]
    return label, *spare_style(others.index(loss))


def spare_style(i: int) -> tuple:
    """(color, line style) of the i-th objective outside the study's four: every pair distinct
    for the first len(SPARE_COLORS) * len(SPARE_LINES) of them."""
    color, line = i % len(SPARE_COLORS), i // len(SPARE_COLORS) % len(SPARE_LINES)
    return SPARE_COLORS[color], SPARE_LINES[line]


def by_loss(runs: list) -> dict:
    """{objective: its runs} for the objectives that have runs, in loss_order."""
    return {loss: [r for r in runs if r["loss"] == loss] for loss in loss_order(runs)
            if any(r["loss"] == loss for r in runs)}


def curve(ax, runs, key, scale=1.0, window=0, band=False, x="update", **style):
    """Mean over seeds of one metric against x (smoothed if window), the min-max band if asked."""
    xs, per_x = over_seeds(runs, key, x)
    lo, mid, hi = ([scale * f(v) for v in per_x] for f in (min, mean, max))
    if window:
        lo, mid, hi = (smooth(ys, window) for ys in (lo, mid, hi))
    if band and len(runs) > 1:
        ax.fill_between(xs, lo, hi, color=style.get("color"), alpha=0.15)
    ax.plot(xs, mid, **style)
    return xs, per_x


def last_fraction(rows: list, key: str, fraction: float = 0.1):
    """Mean of a per-update metric over the last `fraction` of the run's updates (None: absent)."""
    last = max(r["update"] for r in rows)
    values = [r[key] for r in rows if r["update"] > (1 - fraction) * last and r.get(key) is not None]
    return mean(values) if values else None


def machines(runs: list) -> tuple:
    """(the line naming the machines behind a table, a warning or None). Counts runs per
    processor kind (a run resumed on another kind counts under each), then the library
    versions, matmul backends, samplers and commits of their sessions; runs without a
    run_info.json (made before it existed) are on an "unknown machine". The warning: the runs
    span several processor kinds, whose numbers agree only within the seed spread."""
    kinds, unknown = defaultdict(int), 0
    seen = defaultdict(set)
    for r in runs:
        if not r["sessions"]:
            unknown += 1
        for kind in {processor_kind(s) for s in r["sessions"]}:
            kinds[kind] += 1
        for s in r["sessions"]:
            for lib in ("torch", "vllm", "transformers"):
                seen[lib].add(s["versions"][lib] or "none")
            seen["matmul"].add(s["matmul"])
            seen["sampler"].add(s["sampler"])
            seen["threads"].add(str(s.get("torch_threads")))
            git = s["git"]
            seen["commits"].add((git["commit"] or "no git")[:7] + (" (dirty)" if git["dirty"] else ""))
    where = [f"{n} on {kind}" for kind, n in sorted(kinds.items(), key=lambda kv: -kv[1])]
    where += [f"{unknown} on unknown machine (no run_info.json)"] if unknown else []
    used = [f"{key} {', '.join(sorted(values))}" for key, values in seen.items()]
    line = f"runs: {', '.join(where)}" + "".join(f"; {u}" for u in used)
    warning = None
    if len(kinds) > 1:
        warning = (f"warning: this table mixes {len(kinds)} processor kinds ({'; '.join(kinds)}): "
                   f"runs on different processors agree only within the seed spread")
    return line, warning


def finish(fig, axes, out: str, title: str, table: list = (), runs: list = ()) -> None:
    """Legend, title, PNG; and the table (Markdown lines) to <out>.md and stdout, with a line
    under it naming the machines of `runs` (and a warning, also to stderr, when they mix
    processor kinds)."""
    axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)
    if table:
        notes = [n for n in machines(runs) if n] if runs else []
        if len(notes) > 1:
            print(f"lab/plot.py: {out}: {notes[1]}", file=sys.stderr)
        md = os.path.splitext(out)[0] + ".md"
        with open(md, "w") as f:
            f.write(title + "\n\n" + "\n".join(table) + "\n" + "".join("\n" + n + "\n" for n in notes))
        print("\n".join(table + notes))
    print(f"wrote {out}")


def seeds_note(runs: list) -> str:
    n = len({r["seed"] for r in runs})
    return f"{n} seed{'s' if n > 1 else ''}"


def delays_note(runs: list) -> str:
    return ", ".join(map(str, sorted({r["delay"] for r in runs})))


def fmt(values: list, scale: float = 100) -> str:
    """'mean (min-max)' over seeds, or the one value: percentages to 0.1, others to 4 digits."""
    spec = ".1f" if scale == 100 else ".4g"
    if len(values) == 1:
        return f"{scale * values[0]:{spec}}"
    return f"{scale * mean(values):{spec}} ({scale * min(values):{spec}}-{scale * max(values):{spec}})"


# ----------------------------------------------------------------------------- figures

def at_delay(runs: list, delay: int, root: str) -> list:
    kept = [r for r in runs if r["delay"] == delay]
    if not kept:
        raise ValueError(f"no run with delay {delay} in {root} (pick N with --delay)")
    return kept


def fig1(root: str, out: str, window: int = 20, delay: int = 8, **_) -> None:
    """Dynamics at one N: K3, entropy, best@k, mean@k against updates, one line per objective."""
    runs = at_delay(load_runs(root), delay, root)
    mean_key, best_key = eval_key(runs[0]["rows"], "mean@"), eval_key(runs[0]["rows"], "best@")
    panels = [("k3", 1e3, "token-mean K3 (x1e-3)", window), ("entropy", 1, "policy entropy", window),
              (best_key, 100, best_key[5:] + " (%)", 0), (mean_key, 100, mean_key[5:] + " (%)", 0)]
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6))
    table = ["| objective | K3 x1e-3 (last 10%) | entropy (last 10%) | final best | final mean |",
             "| --- | --- | --- | --- | --- |"]
    for loss, group in by_loss(runs).items():
        label, color, style = loss_style(loss, runs)
        for ax, (key, scale, title, w) in zip(axes, panels):
            curve(ax, group, key, scale, w, band=True, color=color, linestyle=style, label=label)
            ax.set_title(title, fontsize=10)
            ax.set_xlabel("optimizer updates")
        finals = [over_seeds(group, k)[1][-1] for k in (best_key, mean_key)]
        table.append(f"| {label} | {fmt([last_fraction(r['rows'], 'k3') for r in group], 1e3)} | "
                     f"{fmt([last_fraction(r['rows'], 'entropy') for r in group], 1)} | "
                     f"{fmt(finals[0])} | {fmt(finals[1])} |")
    finish(fig, axes, out, f"Training dynamics at N = {delay} ({seeds_note(runs)})", table, runs)


def final_mean(run: dict) -> float:
    """A run's last evaluated mean@k (eval_key's choice of benchmark, averaged over several)."""
    return series(run["rows"], eval_key(run["rows"], "mean@", average=True))[1][-1]


def final_accuracy(runs: list) -> dict:
    """{(loss, delay): [final mean@k of each seed]}."""
    table = defaultdict(list)
    for r in runs:
        table[(r["loss"], r["delay"])].append(final_mean(r))
    return table


def fig3(root: str, out: str, **_) -> None:
    """Final mean@k against N on equally spaced positions, mean over seeds with min-max band."""
    runs = load_runs(root)
    table = final_accuracy(runs)
    delays = sorted({d for _, d in table})
    fig, ax = plt.subplots(figsize=(6, 4))
    lines = ["| objective | " + " | ".join(f"N={d}" for d in delays) + " |",
             "| --- |" + " --- |" * len(delays)]
    for loss in by_loss(runs):
        label, color, style = loss_style(loss, runs)
        points = [(delays.index(d), v) for (l, d), v in sorted(table.items()) if l == loss]
        if not points:
            continue
        xs = [x for x, _ in points]
        ax.fill_between(xs, [100 * min(v) for _, v in points], [100 * max(v) for _, v in points],
                        color=color, alpha=0.15)
        ax.plot(xs, [100 * mean(v) for _, v in points], style, marker="o", color=color, label=label)
        cells = {delays[x]: fmt(v) for x, (_, v) in zip(xs, points)}
        lines.append(f"| {label} | " + " | ".join(cells.get(d, "") for d in delays) + " |")
    ax.set_xticks(range(len(delays)), [str(d) for d in delays])
    ax.set_xlabel("synchronization delay N")
    ax.set_ylabel("final mean accuracy (%)")
    finish(fig, [ax], out, f"Final mean accuracy (%) against N ({seeds_note(runs)}, min-max)", lines, runs)


def fig2(root: str, out: str, **_) -> None:
    """Sampling budget: generated responses against updates (one line per N: it does not depend on
    the objective), and mean@k against generated responses, one panel per objective."""
    runs = load_runs(root)
    delays = sorted({r["delay"] for r in runs})
    colors = {d: plt.cm.viridis(i / max(1, len(delays) - 1)) for i, d in enumerate(delays)}
    groups = by_loss(runs)
    fig, axes = plt.subplots(1, 1 + len(groups), figsize=(4 * (1 + len(groups)), 3.6))
    table = ["| N | responses before update 1 | responses at the end |", "| --- | --- | --- |"]
    for r in runs:  # runs logged before the update-0 row carried the count: none generated yet
        r["rows"] = [{"responses_total": 0, **row} for row in r["rows"]]
    for d in delays:
        rows = next(r for r in runs if r["delay"] == d)["rows"]
        xs, ys = series(rows, "responses_total")
        axes[0].plot(xs, [y / 1e6 for y in ys], color=colors[d], label=f"N={d}")
        at = dict(zip(xs, ys))  # update 1 trained on the first of N + 1 batches sampled so far
        warmup = at[1] - (at[2] - at[1]) if 2 in at else at[1]
        table.append(f"| {d} | {warmup:,} | {ys[-1]:,} |")
    axes[0].set(title="generated responses (M)", xlabel="optimizer updates")
    for ax, (loss, group) in zip(axes[1:], groups.items()):
        key = eval_key(group[0]["rows"], "mean@", average=True)
        for d in delays:
            same_n = [r for r in group if r["delay"] == d]
            if same_n:
                xs, per_x = over_seeds(same_n, key, x="responses_total")
                ax.plot([x / 1e6 for x in xs], [100 * mean(v) for v in per_x], marker=".",
                        color=colors[d], label=f"N={d}")
        ax.set(title=f"{loss_style(loss, runs)[0]}: {key[5:]} (%)", xlabel="generated responses (M)")
    finish(fig, axes, out, f"Sampling budget ({seeds_note(runs)}): every response the sampler "
                           f"generated, warm-up batches included", table, runs)


def fig5(root: str, out: str, delay: int = 8, **_) -> None:
    """Difficulty split at one N: mean@k on the problems the base model solves part of the time
    (0 < p0 <= 0.75), and the fraction of the initially unsolved problems now solved."""
    runs = at_delay(load_runs(root), delay, root)
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    keys = [eval_key(runs[0]["rows"], "partial_mean@"), eval_key(runs[0]["rows"], "unsolved_solved_frac")]
    rows0 = next(r for r in runs[0]["rows"] if keys[0] in r and r["update"] > 0)
    bench = keys[0].split("/")[1]
    sizes = (rows0[f"eval/{bench}/partial_count"], rows0[f"eval/{bench}/unsolved_count"])
    table = ["| objective | final partial mean (%) | final unsolved solved (%) |", "| --- | --- | --- |"]
    for loss, group in by_loss(runs).items():
        label, color, style = loss_style(loss, runs)
        finals = []
        for ax, key in zip(axes, keys):
            xs, per_x = curve(ax, group, key, 100, band=True, color=color, linestyle=style,
                              marker=".", label=label)
            finals.append(fmt(per_x[-1]))
        table.append(f"| {label} | " + " | ".join(finals) + " |")
    axes[0].set(title=f"{keys[0][5:]} on {sizes[0]} partial problems (%)", xlabel="optimizer updates")
    axes[1].set(title=f"unsolved solved, of {sizes[1]} (%)", xlabel="optimizer updates")
    finish(fig, axes, out, f"Difficulty split at N = {delay} ({seeds_note(runs)}, min-max)", table, runs)


def fig7(root: str, out: str, **_) -> None:
    """Every training-time diagnostic, averaged over the last 10% of updates, against N."""
    runs = load_runs(root)
    delays = sorted({r["delay"] for r in runs})
    fig, axes = plt.subplots(2, 4, figsize=(16, 6.5))
    table = ["| objective | N | " + " | ".join(t for _, _, t in DIAGNOSTICS) + " |",
             "| --- | --- |" + " --- |" * len(DIAGNOSTICS)]
    for loss, group in by_loss(runs).items():
        label, color, style = loss_style(loss, runs)
        cells = defaultdict(dict)
        for ax, (key, scale, title) in zip(axes.flat, DIAGNOSTICS):
            points = []
            for d in delays:
                values = [last_fraction(r["rows"], key) for r in group if r["delay"] == d]
                if values and None not in values:
                    points.append((delays.index(d), mean(values) * scale))
                    cells[d][key] = f"{mean(values) * scale:.3g}"
            if points:
                ax.plot(*zip(*points), linestyle=style, marker="o", color=color, label=label)
            ax.set_title(title, fontsize=10)
            ax.set_xticks(range(len(delays)), [str(d) for d in delays])
        table += [f"| {label} | {d} | " + " | ".join(cells[d].get(k, "") for k, _, _ in DIAGNOSTICS)
                  + " |" for d in delays if cells[d]]
    for ax in axes[1]:
        ax.set_xlabel("synchronization delay N")
    finish(fig, axes.flat, out, f"Diagnostics over the last 10% of updates against N "
                                f"({seeds_note(runs)}, mean)", table, runs)


def fig4(root: str, out: str, **_) -> None:
    """Offline training on one fixed pool: mean@k against updates, mean over seeds, min-max."""
    runs = load_runs(root)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    key = eval_key(runs[0]["rows"], "mean@")
    xs0 = series(runs[0]["rows"], key)[0]
    table = ["| objective | " + " | ".join(f"update {x}" for x in xs0) + " |",
             "| --- |" + " --- |" * len(xs0)]
    for loss, group in by_loss(runs).items():
        label, color, style = loss_style(loss, runs)
        _, per_x = curve(axes[0], group, key, 100, band=True, color=color, linestyle=style,
                         marker=".", label=label)
        curve(axes[1], group, "k3", 1e3, window=20, color=color, linestyle=style, label=label)
        table.append(f"| {label} | " + " | ".join(fmt(v) for v in per_x) + " |")
    axes[0].set(title=f"{key[5:]} (%)", xlabel="optimizer updates")
    axes[1].set(title="K3 to the pool's policy (x1e-3)", xlabel="optimizer updates")
    pool = runs[0]["cfg"]["offline_pool"]
    finish(fig, axes, out, f"Offline: one pool of {pool['batches']} batches from the base model "
                           f"({seeds_note(runs)}, min-max)", table, runs)


def ggpo_label(run: dict) -> str:
    refresh = run["cfg"]["ref_refresh_every"]
    return (f"β={run['cfg']['loss_args']['beta']}, "
            + (f"T_ref={refresh}" if refresh else "fixed reference"))


def _ggpo_grid(root: str, out: str, panels: list, title: str, window: int) -> None:
    """Figs. 8 and 9: one line per (beta, T_ref), colour by T_ref, line style by beta."""
    runs = [r for r in load_runs(root) if r["loss"] == "ggpo"]
    refreshes = sorted({r["cfg"]["ref_refresh_every"] for r in runs})
    betas = sorted({r["cfg"]["loss_args"]["beta"] for r in runs})
    fig, axes = plt.subplots(1, len(panels), figsize=(max(8, 5 * len(panels)), 3.8))
    axes = list(axes) if len(panels) > 1 else [axes]
    table = ["| setting | " + " | ".join(("final " if not smoothed else "") + t
                                          + (" (last 10%)" if smoothed else "")
                                          for _, _, t, smoothed in panels) + " |",
             "| --- |" + " --- |" * len(panels)]
    for label, group in sorted(by(runs, ggpo_label).items()):
        cfg = group[0]["cfg"]
        style = dict(color=plt.cm.tab10(refreshes.index(cfg["ref_refresh_every"])),
                     linestyle=["-", "--", ":"][betas.index(cfg["loss_args"]["beta"]) % 3], label=label)
        cells = []
        for ax, (key, scale, panel_title, smoothed) in zip(axes, panels):
            key = eval_key(group[0]["rows"], key) if key.endswith("@") else key
            _, per_x = curve(ax, group, key, scale, window if smoothed else 0, **style)
            ax.set(title=panel_title, xlabel="optimizer updates")
            cells.append(fmt([last_fraction(r["rows"], key) for r in group], scale) if smoothed
                         else fmt(per_x[-1], scale))
        table.append(f"| {label} | " + " | ".join(cells) + " |")
    finish(fig, axes, out, f"{title} at N = {delays_note(runs)} ({seeds_note(runs)})", table, runs)


def fig8(root: str, out: str, window: int = 20, **_) -> None:
    """GGPO with beta x reference refresh: accuracy, training reward, K3."""
    _ggpo_grid(root, out, [("mean@", 100, "mean@k (%)", False),
                           ("reward_mean", 1, "training reward", True),
                           ("k3", 1e3, "K3 x1e-3", True)],
               "GGPO: beta and reference refresh", window)


def fig9(root: str, out: str, window: int = 20, **_) -> None:
    """Normalized ESS of GGPO's weights restricted to the successes of each group."""
    _ggpo_grid(root, out, [("ggpo_ess_success", 1, "normalized ESS on successes", True)],
               "GGPO weight concentration on successful responses", window)


def fig10(root: str, out: str, window: int = 20, **_) -> None:
    """GGPO's original update (gradient through the group softmax) vs the detached coefficient
    with token clipping: training reward, accuracy, and the fraction of tokens clipped."""
    runs = [r for r in load_runs(root) if r["loss"] == "ggpo"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 3.8))
    key = eval_key(runs[0]["rows"], "mean@")
    table = ["| GGPO update | training reward (all updates) | training reward (last 10%) | "
             "final mean@k (%) | tokens clipped (%) |", "| --- | --- | --- | --- | --- |"]
    for i, (variant, group) in enumerate(by(runs, lambda r: r["cfg"]["loss_args"]["ggpo_variant"]).items()):
        style = dict(color=["tab:red", "tab:blue"][i % 2], label=variant)
        curve(axes[0], group, "reward_mean", 1, window, band=True, **style)
        _, per_x = curve(axes[1], group, key, 100, band=True, marker=".", **style)
        clipped = [last_fraction(r["rows"], "clip_frac") for r in group]
        if None not in clipped:  # the original update has no token clip: not logged
            curve(axes[2], group, "clip_frac", 100, window, **style)
        table.append(f"| {variant} | {fmt([mean(series(r['rows'], 'reward_mean')[1]) for r in group], 1)} | "
                     f"{fmt([last_fraction(r['rows'], 'reward_mean') for r in group], 1)} | "
                     f"{fmt(per_x[-1])} | {fmt(clipped) if None not in clipped else 'no clip'} |")
    for ax, title in zip(axes, ["training reward", f"{key[5:]} (%)", "tokens clipped (%)"]):
        ax.set(title=title, xlabel="optimizer updates")
    finish(fig, axes, out, f"GGPO update: original vs detached with token clipping, "
                           f"N = {delays_note(runs)} ({seeds_note(runs)}, min-max)", table, runs)


# Named rows: a row's key -> its label, where an objective at those settings has a name of its own.
NAMED_ROWS = {"grpo_grpo_anchor-behavior": "PPO vs sampler (GRPO, behavior anchor)",
              # frameworks' defaults that are an objective at other settings (lab/docs/frameworks.yaml)
              "grpo_adv_eps-1e-08_adv_std-population_grpo_anchor-behavior": "TRL AsyncGRPO default (PPO vs sampler)",
              "grpo_grpo_agg-seq_mean": "slime / ROLL default (GRPO, sequence-mean)",
              "grpo_mis_seq_adv_eps-0.0001": "TRL GRPOTrainer + vLLM default (seq-MIS 3)",
              "k3_rs_k3_rs_threshold-1e+30": "verl fully-async default (PPO vs sampler, dual clip 3)",
              "cispo_cispo_eps_low-0.5": "OpenRLHF IS correction (clip 0.5-5)"}
# Config keys that leave the trained weights untouched: runs of one table may differ in them.
NOT_TRAINING = {"out_dir", "resume", "eval_every", "eval_from", "engine_mismatch_every", "log_to",
                "wandb", "ckpt_every", "keep_checkpoints", "grade_workers"}
# Keys that place a run in a table: its row (loss, loss_args), its N and its seed.
RUN_PLACE = {"loss", "loss_args", "delay", "seed"}


def objective_settings(run: dict) -> dict:
    """{key: value} of every setting the run's objective registers in losses.py, as the run
    resolved it (the default where its config lacks the key), by key; {} for an objective that is
    not registered (its name alone says what it is)."""
    registered = losses.LOSSES.get(run["loss"])
    args = run["cfg"].get("loss_args") or {}
    return {k: args.get(k, v) for k, v in sorted(registered.hparams.items())} if registered else {}


def row_settings(run: dict) -> dict:
    """The run's objective settings (objective_settings) that differ from the registered defaults."""
    defaults = losses.LOSSES[run["loss"]].hparams if run["loss"] in losses.LOSSES else {}
    return {k: v for k, v in objective_settings(run).items() if v != defaults[k]}


def method(run: dict) -> str:
    """The run's leaderboard row: its objective with its settings, the objective's name followed
    by _<key>-<value> for each setting that differs from its default (sweep.py's folder suffix):
    grpo_tis with tis_cap 5 is the row grpo_tis_tis_cap-5.0, never the row grpo_tis."""
    number = lambda v: float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v  # 5 and 5.0: one row
    return run["loss"] + "".join(f"_{k}-{number(v)}" for k, v in row_settings(run).items())


def row_label(key: str) -> str:
    """A row's name in tables, from its key (method): NAMED_ROWS, else the objective's label with
    the settings that differ, e.g. grpo_tis_tis_cap-5.0 -> "GRPO+TIS (tis_cap 5)"; a key that
    names no registered objective is its own label."""
    if key in NAMED_ROWS:
        return NAMED_ROWS[key]
    for loss in sorted(losses.LOSSES, key=len, reverse=True):  # the longest name that fits
        if key == loss:
            return losses.LOSSES[loss].label
        names = "|".join(map(re.escape, sorted(losses.LOSSES[loss].hparams, key=len, reverse=True)))
        if names and key.startswith(loss + "_"):
            found = re.findall(rf"_({names})-(.+?)(?=_(?:{names})-|$)", key[len(loss):])
            if found and "".join(f"_{k}-{v}" for k, v in found) == key[len(loss):]:
                return losses.LOSSES[loss].label + " (" + ", ".join(f"{k} {_short(v)}" for k, v in found) + ")"
    return key


def _short(value: str) -> str:
    """A setting's value as a label shows it: 5.0 -> 5, 1e-05 -> 1e-05, words as they are."""
    try:
        return f"{float(value):g}"
    except ValueError:
        return value


def row_order(runs: list) -> list:
    """The rows of runs: by objective in loss_order, each objective's default settings first,
    then its variants by key."""
    keys = {method(r): r["loss"] for r in runs}
    rank = {loss: i for i, loss in enumerate(loss_order(runs))}
    return sorted(keys, key=lambda k: (rank[keys[k]], k != keys[k], k))


def check_one_table(runs: list, root: str) -> None:
    """ValueError naming the key and two runs where runs of one table differ in a setting that
    changes what is trained (anything but their row, N, seed and NOT_TRAINING): a table pools
    runs of one design, and a row's settings are in its key (method)."""
    first = {}
    for r in runs:
        for key in set(r["cfg"]) - RUN_PLACE - NOT_TRAINING:
            value = json.dumps(r["cfg"][key], sort_keys=True)
            seen = first.setdefault(key, (value, r["name"]))
            if seen[0] != value:
                raise ValueError(f"{root}: runs {seen[1]} and {r['name']} differ in {key} ({seen[0]} "
                                 f"vs {value}): one table pools one design; keep them in separate folders")


def method_style(name: str, names: list) -> tuple:
    """(label, color, line style) of a row key: the study's styles for its four, spare colors
    for the rest."""
    label = row_label(name)
    if name in STUDY_STYLE:
        return (label, *STUDY_STYLE[name])
    i = [n for n in names if n not in STUDY_STYLE].index(name)
    return label, SPARE_COLORS[i % len(SPARE_COLORS)], ["-.", ":"][i % 2]


LEADERBOARD_AT = [("k3", 1e3, "K3 x1e-3"), ("is_chi2_token", 1, "is_chi2_token"),
                  ("is_masked_frac", 100, "is_masked_frac (%)")]
LATE_EVALS = 3  # the late-evaluation measure: the mean of a run's last LATE_EVALS evaluations
LATE_SPAN = 0.15  # ... when they all lie in the last LATE_SPAN of its updates (e.g. 260-300 of 300)
POWER_DELTAS = (2, 3, 5, 8, 10)  # differences (points) the power table prints seeds for
LADDER_SEEDS = 10  # rows whose tier more seeds can settle get this many (the seed ladder)
ANCHORS = ("m2po", "vespo", "vcpo", "gepo")  # published with a staleness claim (lab/docs/leaderboard.md)


def seed_scores(cells: dict) -> dict:
    """{seed: mean over stats.STALE_DELAYS of that seed's final accuracy} for the seeds that
    have every one of those N; cells: {delay: {seed: final}}."""
    seeds = set.intersection(*(set(cells.get(d, {})) for d in stats.STALE_DELAYS))
    return {k: mean([cells[d][k] for d in stats.STALE_DELAYS]) for k in sorted(seeds)}


def partial_score(cells: dict):
    """The mean final accuracy over the stats.STALE_DELAYS cells a method has, any seed (None
    if none): a method without a score ranks and is drawn by this."""
    have = [v for d in stats.STALE_DELAYS for v in cells.get(d, {}).values()]
    return mean(have) if have else None


def pm(m: float, half, scale: float = 100) -> str:
    return f"{round(scale * m, 1) + 0.0:.1f}" + (f" ± {scale * half:.1f}" if half is not None else "")  # no "-0.0"


def signed(x: float) -> str:
    """x to one decimal with its sign, "+0.0" for what rounds to zero (no "-0.0" from a rounding-
    level negative)."""
    return f"{round(x, 1) + 0.0:+.1f}"


def rounding_path(run: dict) -> str:
    """The processor kind(s) a run ran on (' + ' between kinds when it was resumed on another),
    with its thread count and matmul backend: what sets its rounding."""
    sessions = run["sessions"]
    if not sessions:
        return "unknown machine"
    kinds = " + ".join(sorted({processor_kind(s) for s in sessions}))
    return kinds + "".join(sorted({f"; {s.get('torch_threads')} thread(s), {s['matmul']}" for s in sessions}))


def late_evaluations(run: dict):
    """(the final evaluation, the mean of the last LATE_EVALS) of a run whose last LATE_EVALS
    evaluations lie in the last LATE_SPAN of its updates, else None."""
    updates, accuracy = series(run["rows"], eval_key(run["rows"], "mean@", average=True))
    last = run["cfg"]["updates"]
    if len(updates) < LATE_EVALS or updates[-LATE_EVALS] < (1 - LATE_SPAN) * last:
        return None
    return accuracy[-1], mean(accuracy[-LATE_EVALS:])


def late_measure_lines(runs: list) -> list:
    """The late-evaluation measure against the final evaluation on the same runs: per N and over
    all, the pooled within-cell SD (cells: method x N x rounding path with >= 2 such runs)."""
    frame = pd.DataFrame([{"method": method(r), "N": r["delay"], "path": rounding_path(r), "all": "all",
                           "final": both[0], "late": both[1]} for r in runs if (both := late_evaluations(r))])
    if frame.empty:
        return []
    cell = ["method", "N", "path"]
    frame = frame[frame.groupby(cell)["final"].transform("count") > 1]
    if frame.empty:
        return []
    sd = {m: {**stats.within_cell_sd(frame.assign(y=frame[m]), cell),
              **stats.within_cell_sd(frame.assign(y=frame[m]), cell, by="all")} for m in ("final", "late")}
    lines = ["", f"**A lower-noise final measure?** The final evaluation against the mean of the last "
             f"{LATE_EVALS} evaluations, on the same runs (those evaluated at least {LATE_EVALS} times in "
             f"their last {LATE_SPAN:.0%} of updates): pooled within-cell SD over seeds (cells: method x "
             f"N x rounding path with two or more runs).", "",
             "| N | cells | runs | SD of the final evaluation | SD of the late mean | ratio |",
             "| --- | --- | --- | --- | --- | --- |"]
    for n in sorted(frame["N"].unique()) + ["all"]:
        runs_n = frame if n == "all" else frame[frame["N"] == n]
        final_sd, late_sd = sd["final"][n], sd["late"][n]
        lines.append(f"| {n} | {runs_n.groupby(cell).ngroups} | {len(runs_n)} | {100 * final_sd:.2f} | "
                     f"{100 * late_sd:.2f} | {late_sd / final_sd:.2f} |")
    ratio = (sd["late"]["all"] / sd["final"]["all"]) ** 2
    lines += ["", f"Over all cells the late mean's variance is {ratio:.2f} of the final evaluation's: a run "
              f"measured by it is worth {1 / ratio:.2f} measured by the final evaluation."]
    return lines


def seed_lines(seed: dict) -> list:
    """The seed's paragraph under the leaderboard: its test, effects, blocks and how far it moves
    the scores (stats' result["seed"])."""
    lines = []
    if seed["F"] is not None:
        kept = ("kept as the design's block whatever its test says" if seed["fitted"]
                else "left out: not estimable apart from the rounding path")
        lines += ["", f"**The seed** ({kept}): the model with a fixed seed term against "
                  f"the model without it, F = {seed['F']:.2f}, p = {seed['p']:.2g}; variance component "
                  f"(moments) SD {seed['tau']:.2f} points."]
        if seed["effects"]:
            lines[-1] += " Effects (points, 95% t" + (", means over N" if (seed["per_n"] or {}).get("fitted") else "") \
                + "): " + ", ".join(f"seed {lvl} {signed(e)} ± {h:.1f}" for lvl, (e, h) in seed["effects"].items()) + "."
        if seed["per_n"] and seed["per_n"]["fitted"]:
            lines[-1] += (" One shift per seed and N (the sweep's block), kept too, against one per seed: "
                          f"F = {seed['per_n']['F']:.2f}, p = {seed['per_n']['p']:.2g}.")
        elif seed["per_n"]:
            lines[-1] += (" One shift per seed and N (the sweep's block) is not estimable apart from "
                          "the path (a seed lacks an N, or a block ran alone on its kind): one per seed.")
        if seed["moves"]:
            lines[-1] += (f" Against the model without the seed, the scores move by {round(seed['moves']['mean'], 2) + 0.0:+.2f} "
                          f"points on average and, apart from that common shift, by {seed['moves']['mean_apart']:.2f} "
                          f"on average, at most {seed['moves']['max_apart']:.2f}.")
    return lines


def path_design_lines(path: dict, data: pd.DataFrame, order: list, name) -> list:
    """The rounding paths' effects (stats' result["path"]) and the design: runs per method and
    path (from `data`, the model's runs)."""
    lines = []
    counts = data["path"].value_counts()
    if path["effects"]:
        lines += ["", f"**Rounding path effects** (sum-to-zero, points, 95% t): F = {path['F']:.2f}, "
                  f"p = {path['p']:.2g}; variance component (moments) SD {path['tau']:.2f} points.", "",
                  "| path | runs | effect |", "| --- | --- | --- |"]
        lines += [f"| P{i + 1}: {lvl} | {counts[lvl]} | {pm(e / 100, h / 100)} |"
                  for i, (lvl, (e, h)) in enumerate(path["effects"].items())]
    if len(counts) > 1:
        design = pd.crosstab(data["method"], data["path"])
        lines += ["", "**The design**: runs per method and rounding path (P1..P%d as above)." % len(counts), "",
                  "| method | " + " | ".join(f"P{i + 1}" for i in range(len(counts))) + " |",
                  "| --- |" + " --- |" * len(counts)]
        lines += [f"| {name(m)} | " + " | ".join(map(str, design.loc[m])) + " |" for m in order if m in design.index]
        lines += confounding_lines(data, name)
    return lines


def confounding_lines(data: pd.DataFrame, name) -> list:
    """What the rounding paths still confound: how many runs of the other rows share their seed,
    N and path with a run of every reference (compared with them inside one block), and the
    rows that share none (compared with the references only through the path term, which
    assumes a path moves every row alike)."""
    refs = [r for r in stats.REFERENCES if r in set(data["method"])]
    if not refs:
        return []
    block = lambda d: set(zip(d["seed"], d["N"], d["path"]))
    with_all = set.intersection(*(block(data[data["method"] == r]) for r in refs))
    others = data[~data["method"].isin(refs)]
    inside = [(s, n, p) in with_all for s, n, p in zip(others["seed"], others["N"], others["path"])]
    shares = others.assign(inside=inside).groupby("method")["inside"].mean()
    none = [m for m, v in shares.items() if v == 0]
    return ["", f"**What the paths confound**: {sum(inside)} of the other rows' {len(others)} runs share their "
            f"seed, N and rounding path with a run of every reference (compared with them inside one "
            f"block); the other {len(others) - sum(inside)} meet the references only through the path "
            f"term, which assumes a path moves every row alike"
            + (f". Rows with no run inside such a block: {', '.join(name(m) for m in none)}." if none else ".")]


def model_lines(result: dict, data: pd.DataFrame, order: list, delays: list) -> list:
    """The generated summary under the leaderboard's table: the model, its variance, the
    rounding-path and seed effects, the design (method x path, from `data`, the model's runs),
    the anchors' cells and the seeds comparisons need."""
    fit, sigma = result["fit"], result["sigma"]
    name = lambda m: method_style(m, order)[0]
    lines = ["", "**The model** (`lab/stats.py`; statsmodels WLS, feasible GLS): final mean@k (%) = cell mean "
             "(method x N) + rounding path" + (" + seed" if result["seed"].get("fitted") else "")
             + (" + seed x N" if (result["seed"].get("per_n") or {}).get("fitted") else "")
             + " + error, the path" + (" and the seed" if result["seed"].get("fitted") else "")
             + " fixed with sum-to-zero coding"
             + (" (each seed's block ran on one rounding path: its shift holds the path's, so the path "
                "has no term of its own)" if result["seed"].get("fitted") and not result["path"]["effects"]
                and data["path"].nunique() > 1 else "") + ", "
             "error SD per N: " + ", ".join(f"N = {n}: {s:.2f}" for n, s in sigma.items())
             + f"; {result['n_runs']} runs, {len(fit.params)} parameters, {result['df']:.0f} residual "
             f"degrees of freedom."]
    spread = {m: result["spread"][m] for m in result["methods"]}
    if math.isfinite(result["prior_df"]):
        lines[-1] += (" At N > 0 each method's error SD is the N's times its spread (the SD per N is "
                      "that of a method of spread 1), moderated by empirical Bayes (a scaled inverse "
                      f"chi-square prior fitted to the methods' variances: prior df {result['prior_df']:.1f}): "
                      + ", ".join(f"{name(m)} {v:.2f}" for m, v in sorted(spread.items(), key=lambda t: (-t[1], t[0])))
                      + ". The intervals and tests never take a method's variance below its own "
                      "unmoderated one (moderation pulls a truly wide row toward the typical one); "
                      + ("the own SD is the larger, by the factor given, for " + ", ".join(
                          f"{name(m)} x{v:.2f}" for m, v in sorted(result["floored"].items(), key=lambda t: (-t[1], t[0])))
                         + ", whose variances then rest on their own degrees of freedom"
                         if result["floored"] else "no method's own SD is the larger")
                      + ". Every t interval and test takes Satterthwaite's degrees of freedom from "
                      "the variances it rests on.")
    else:
        lines[-1] += (" A spread per method at N > 0 was fitted and none found (the methods' variances "
                      "spread no more than their own degrees of freedom give: prior df infinite); t "
                      "intervals and tests take Satterthwaite's degrees of freedom from the SDs per N.")
    lev = result["levene_n"]
    if lev is not None:
        lines.append(f"Levene across N: W = {lev.statistic:.2f}, p = {lev.pvalue:.2g}; across methods "
                     "within each N: " + ", ".join(f"N = {n}: p = {t.pvalue:.2g}"
                                                   for n, t in result["levene_methods"].items()) + ".")
    checks = stats.model_checks(result)
    inter = checks["path_by_method"]
    lines.append("The model's form: " + (
        f"a shift per method and rounding path on top of the one per path, F = {inter['F']:.2f} on "
        f"{inter['df']} df, p = {inter['p']:.2g} (a small p: the kinds move the rows "
        f"unlike, against the model's one shift per kind); "
        if inter else "") + "standardized residuals per N (Normal: skew 0, excess kurtosis 0, 4.6% "
        "beyond 2 SD): " + "; ".join(
            f"N = {n}: {v['runs']} runs, skew {v['skew']:+.2f}, excess kurtosis {v['excess_kurtosis']:+.2f}, "
            f"{100 * v['beyond_2']:.1f}% beyond 2, Shapiro-Wilk p {v['shapiro_p']:.2g}"
            for n, v in checks["residuals"].items()) + ".")
    on_policy = data[data["N"] == 0]
    distinct = on_policy.groupby(["seed", "path", "y", "trajectory"]).ngroups
    if distinct < len(on_policy):
        lines.append(f"At N = 0 the {len(on_policy)} runs hold {distinct} distinct ones: methods that "
                     "are the same computation on-policy give the same run at a seed and path, and the "
                     "model counts each copy (every cell is right; sigma at N = 0 rests on fewer "
                     "independent runs than its degrees of freedom say).")
    if not result["methods"]:
        return lines + ["", "No method has runs at every N of the staleness score yet (N = "
                        + ", ".join(map(str, stats.STALE_DELAYS)) + "): scores, tiers, the "
                        "comparisons and the seeds they need come when one does. Cells are mean "
                        "(min-max) over seeds of the runs themselves, in %."]
    (df_lo, df_hi), (crit_hi, crit_lo) = result.get("vs_df", (math.nan,) * 2), result.get("vs_critical", (math.nan,) * 2)
    lines.append("Staleness score: the model's mean over N = " + ", ".join(map(str, stats.STALE_DELAYS))
                 + " at the average seed and path, 95% t interval (for these seeds: a shift that another set "
                 "of seeds would give every row alike is not in it; the seed's SD is below); drop: score minus the method's "
                 "own N = 0 cell; vs a reference: simultaneous 95% intervals over the "
                 f"{result.get('vs_family', 0)} differences to {', '.join(name(r) for r in result['vs'])}"
                 f" (max-|t|, each difference on its own degrees of freedom, {df_lo:.0f}-{df_hi:.0f}: "
                 f"critical values {crit_hi:.2f}-{crit_lo:.2f}), * where "
                 "the interval excludes 0; tier: methods sharing a letter cannot be told apart "
                 f"(Holm over all {len(result['pairs'])} pairs, family-wise 5%); rank: from 1 + the methods "
                 "the tiers put above to the count less those they put below (simultaneous 95%: every "
                 "true rank inside at once unless a pair is split wrongly). Cells are mean (min-max) over "
                 "seeds of the runs themselves, in %.")
    lines += seed_lines(result["seed"]) + path_design_lines(result["path"], data, order, name)
    anchors = [m for m in ANCHORS if all((m, n) in result["cell"] for n in delays)]
    if anchors:
        lines += ["", "**The anchors' cells** (the four corrections published with a staleness claim; "
                  "the model's cell means, 95% t, and the drop from N = 0 to the largest N):", "",
                  "| method | " + " | ".join(f"N={n}" for n in delays) + f" | N=0 - N={delays[-1]} |",
                  "| --- |" + " --- |" * (len(delays) + 1)]
        for m in anchors:
            drop = stats.estimate(result["fit"], {(m, 0): 1, (m, delays[-1]): -1})
            lines.append(f"| {name(m)} | " + " | ".join(pm(*(v / 100 for v in result["cell"][(m, n)]))
                                                          for n in delays) + f" | {pm(*(v / 100 for v in drop))} |")
    sd, pairs = result["sd_score"], max(1, len(result["pairs"]))
    vs = max(1, result.get("vs_family", 1))
    lines += ["", f"**Seeds a comparison needs** (per row, {stats.POWER:.0%} power, two-sided, "
              f"Bonferroni over the family; per-seed SD of a score {sd:.2f} points for a pair of "
              "spread 1: a pair's scales with the root mean square of its two spreads):", "",
              "| difference (points) | " + " | ".join(map(str, POWER_DELTAS)) + " |",
              "| --- |" + " --- |" * len(POWER_DELTAS),
              f"| tiers ({pairs} pairs) | " + " | ".join(str(stats.seeds_needed(d, sd, pairs))
                                                         for d in POWER_DELTAS) + " |",
              f"| vs the references ({vs} differences) | " + " | ".join(
                  str(stats.seeds_needed(d, sd, vs)) for d in POWER_DELTAS) + " |"]
    touching = stats.touching_rows(result, LADDER_SEEDS)
    lines += ["", f"Rows in a pair the tiers leave open that {LADDER_SEEDS} seeds per row would settle "
              f"at its observed difference and the pair's spreads (the fewest seeds that would): "
              + (", ".join(f"{name(m)} {n}" for m, n in touching.items()) or "none") + "."]
    return lines


# the per-update diagnostics a tidy table averages over each run's updates
TIDY_DIAGNOSTICS = ("k3", "entropy", "grad_norm", "reward_mean", "response_len_mean", "clip_frac",
                    "is_weight_mean", "is_masked_frac", "is_chi2_token", "is_chi2_seq",
                    "is_seq_log_ratio_max", "is_seq_log_ratio_q90", "is_seq_ess")


def tidy(root: str, out: str, **_) -> None:
    """One row per kept run, as CSV (pandas.read_csv reads it in one line): its row (method), the
    objective and its settings off the defaults (JSON), N, seed, lr, processor kind and rounding
    path, the final evaluation and the mean of the late ones (empty where a run has too few), and
    each diagnostic's mean over the run's updates (empty where it logs none)."""
    runs = load_runs(root)
    check_one_table(runs, root)
    rows = []
    for r in sorted(runs, key=lambda r: r["name"]):
        late = late_evaluations(r)
        logged = lambda k: [row[k] for row in r["rows"] if row.get(k) is not None and row.get("update", 0) > 0]
        rows.append({"run": r["name"], "row": method(r), "objective": r["loss"],
                     "settings": json.dumps(row_settings(r), sort_keys=True), "N": r["delay"], "seed": r["seed"],
                     "lr": r["cfg"]["lr"], "processor": " + ".join(dict.fromkeys(processor_kind(s) for s in r["sessions"])),
                     "rounding_path": rounding_path(r), "final": 100 * final_mean(r),
                     "late_mean": 100 * late[1] if late else None,
                     **{k: mean(v) if (v := logged(k)) else None for k in TIDY_DIAGNOSTICS}})
    frame = pd.DataFrame(rows)
    frame.to_csv(out, index=False, float_format="%.6g")
    print(f"wrote {out}: {len(frame)} runs")


def leaderboard_data(runs: list) -> pd.DataFrame:
    """The leaderboard model's data (stats.fit_leaderboard): one row per run, its method, N, seed,
    rounding path and final accuracy in %; and `trajectory`, its training rewards per update
    (two runs with the same are the same computation; the run's name where it logs none)."""
    def trajectory(r):
        rewards = [row["reward_mean"] for row in r["rows"] if row.get("reward_mean") is not None]
        return json.dumps(rewards) if rewards else r["name"]
    return pd.DataFrame([{"method": method(r), "N": r["delay"], "seed": r["seed"], "path": rounding_path(r),
                          "y": 100 * final_mean(r), "trajectory": trajectory(r),
                          "settings": json.dumps(objective_settings(r), sort_keys=True)} for r in runs])


def within_tier_lines(result: dict, name) -> list:
    """The pairs that share a tier letter yet differ at the unadjusted 5% (each pair's own t test,
    not family-wise: the tiers are the family-wise statement), the higher first, with the score
    difference and the unadjusted p."""
    same = [(a, b) for (a, b) in result.get("pairs_raw", {})
            if set(result["tiers"].get(a, "")) & set(result["tiers"].get(b, ""))]
    if not same:
        return []
    apart = []
    for a, b in same:
        p = result["pairs_raw"][(a, b)]
        if p < stats.ALPHA:
            hi, lo = (a, b) if result["score"][a][0] > result["score"][b][0] else (b, a)
            apart.append((p, f"{name(hi)} above {name(lo)} ({signed(result['score'][hi][0] - result['score'][lo][0])}, "
                             f"p {p:.2g})"))
    return ["", f"**Within a tier** (unadjusted: each pair's own t test at 5%, not family-wise): of the "
            f"{len(same)} pairs that share a letter, {len(apart)} differ individually"
            + (": " + "; ".join(text for _, text in sorted(apart)) if apart else "") + "."]


def paired_lines(result: dict, ranked: list, name) -> list:
    """The reference differences by the second analysis (stats.seed_paired) beside the pooled
    model's: how many agree (apart from 0 in both with one sign, or in neither), those that hold
    in one only (model-dependent, both numbers), and every paired difference."""
    paired, pooled = result.get("paired", {}), result["vs"]
    both = [(r, m) for r in paired for m in paired[r] if m in pooled.get(r, {})]
    if not both:
        return []
    verdict = lambda d, p: 0 if p >= stats.ALPHA else (1 if d > 0 else -1)
    apart, level, split = 0, 0, []
    for r, m in both:
        a = verdict(pooled[r][m][0], pooled[r][m][2])
        b = verdict(paired[r][m][0], paired[r][m][2])
        if a == b:
            apart, level = apart + (a != 0), level + (a == 0)
        else:
            split.append(f"{name(m)} vs {name(r)}: pooled {signed(pooled[r][m][0])} ± {pooled[r][m][1]:.1f}"
                         f"{' *' if a else ''}, paired {signed(paired[r][m][0])} ± {paired[r][m][1]:.1f} "
                         f"(Holm p {paired[r][m][2]:.2g})")
    refs = list(paired)
    lines = ["", f"**A second analysis** (seed-paired: per method and reference, the differences of the "
             f"score seed by seed over the seeds both ran, a t test on them, Holm over the {len(both)}; no "
             f"path, variance or shrinkage model): of the {len(both)} reference differences, {apart} are apart "
             f"from 0 in both analyses with one sign, {level} in neither, and {len(split)} in one only "
             f"(model-dependent)" + (": " + "; ".join(split) if split else "") + ".", "",
             "| method | " + " | ".join(f"vs {name(r)} (paired, 95% t; Holm p)" for r in refs) + " | seeds |",
             "| --- |" + " --- |" * (len(refs) + 1)]
    for m in ranked:
        cells = [paired[r].get(m) for r in refs]
        if not any(cells):
            continue
        seeds = max(c[3] for c in cells if c)
        lines.append(f"| {name(m)} | " + " | ".join(
            f"{signed(c[0])} ± {c[1]:.1f} ({c[2]:.2g})" if c else "" for c in cells) + f" | {seeds} |")
    return lines


def row_key(loss: str, settings: list) -> str:
    """The key `method` gives the runs of objective `loss` at `settings` (["key=value", ...], read
    and checked as `make row` reads them: sweep.row_sweep)."""
    import sweep  # the loop's runner: read here only, for the settings' one reader
    grid = sweep.row_sweep(loss, settings)["grid"]
    args = {k.removeprefix("loss_args."): v[0] for k, v in grid.items() if k.startswith("loss_args.")}
    return method({"loss": loss, "cfg": {"loss_args": args}})


def row_summary(table: str, key: str) -> list:
    """The lines of a generated leaderboard table (its .md) about one row (key as `method`
    makes it): every column of its line, its seed-paired differences, and the same-tier pairs it
    is in that differ unadjusted; what `make row` prints at its end."""
    label = row_label(key)
    with open(table) as f:
        text = f.read()
    header, _, *body = text.split("\n\n")[1].splitlines()
    split = lambda line: line[2:-2].split(" | ")  # "| a |  | b |" -> a, "", b
    columns = split(header)
    mine = [l for l in body if split(l)[1] == label]
    if not mine:
        return [f"{label} ({key}) has no line in {table} yet: its runs have not landed there"]
    cells = split(mine[0])
    out = [f"{label} ({key}), from {table}:"] + [f"  {c}: {v}" for c, v in zip(columns, cells) if c != "method"]
    paired = text.split("**A second analysis**")
    if len(paired) > 1:
        section = paired[1].split("\n\n")[1].splitlines()
        out += [f"  seed-paired: {l}" for l in section[2:] if l.startswith(f"| {label} |")]
    within = re.search(r"\*\*Within a tier\*\*.*", text)
    if within:
        out += [f"  within its tier (unadjusted): {p}" for p in within.group(0).split(": ", 1)[-1].split("; ")
                if f"{label} above" in p or f"above {label} (" in p]
    return out


def short_table(result: dict, ranked: list, cells: dict, delays: list, name) -> list:
    """The leaderboard on one screen: per row its tier, rank interval, staleness score with its
    95% interval, drop from N = 0, and its mean final accuracy per N (over seeds, %)."""
    lines = ["| row | tier | rank (95%) | score (95%) | drop from N=0 | " + " / ".join(f"N={d}" for d in delays)
             + " |", "| --- | --- | --- | --- | --- | --- |"]
    for m in ranked:
        score, rank, drop = result["score"].get(m), result["rank"].get(m), result["drop"].get(m)
        means = " / ".join(f"{100 * mean(list(cells[m][d].values())):.1f}" if cells[m][d] else "-" for d in delays)
        lines.append(f"| {name(m)} | {result['tiers'].get(m, '')} | {f'{rank[0]}-{rank[1]}' if rank else ''} | "
                     f"{pm(score[0] / 100, score[1] / 100) if score else ''} | "
                     f"{pm(drop[0] / 100, drop[1] / 100) if drop else ''} | {means} |")
    return ["The leaderboard on one screen (generated by `make tables`; every column, the model and both "
            "analyses: the full table beside it). Score: mean over N = 8, 32, 128; tiers: Holm, family-wise "
            "5%; the last column: mean final accuracy per N over seeds (%).", ""] + lines


def ladder_n(bound, delays: list):
    """The smallest stale N of the ladder at or above `bound` (the first stale N for an unbounded
    or zero lag), None past the ladder's largest."""
    if bound == 0:
        return 0 if 0 in delays else None
    stale = [d for d in delays if d > 0]
    return next((d for d in stale if d >= (bound or 1)), None)


def lag_map_lines(frameworks: list, result: dict, cells: dict, delays: list) -> list:
    """The lag map: per framework and row (lab/docs/frameworks.yaml) its staleness knob, the lag a
    batch has under it, the nearest way to hold it exactly, its row, and the leaderboard at the
    ladder's N for its lag bound and at four times that N: the row's tier and staleness score
    (the pooled model's, as the leaderboard table prints them) and its final accuracy per N
    (mean (min-max) over seeds, as there)."""
    lines = ["| framework | staleness knob (default) | lag a batch has | held exactly by | row | tier | "
             "staleness score (95%) | at its lag's N | at 4x that N |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for fw in frameworks:
        first = ladder_n(fw["bound"], delays)
        later = ladder_n(4 * first, delays) if first else None  # a lag of 0 has no "four times"
        for key, what in fw["rows"].items():
            head = f"| {fw['name']} | {fw['knob']} | {fw['lag']} | {fw['exact']} | {row_label(key)}: {what} | "
            if key not in cells or not any(cells[key].values()):
                lines.append(head + "not on the ladder yet | | | |")
                continue
            score = result["score"].get(key)
            cell = lambda d: (f"N={d}: {fmt(list(cells[key][d].values()))}" if d is not None and cells[key].get(d)
                              else "")
            lines.append(head + f"{result['tiers'].get(key, '')} | "
                         f"{pm(score[0] / 100, score[1] / 100) if score else ''} | {cell(first)} | {cell(later)} |")
    return lines


def leaderboard(root: str, out: str, at_delay: int = 32, frameworks: str = None, lag_map: str = None,
                **_) -> None:
    """Every objective against N, in tiers, from one pooled model of every run's final accuracy
    (stats.fit_leaderboard). Per method: tier letters, the staleness score with its interval, its
    rank interval, its drop from N = 0, its differences to the references with simultaneous
    intervals, seeds per N, final mean@k per N as mean (min-max) over seeds, and at N = at_delay
    K3, is_chi2_token and is_masked_frac over the last 10% of updates (blank where an objective
    does not log one). Rows by score; methods without a run at every scored N last, by their
    mean over the N they have. Under the table, generated: the model, the effects of the
    rounding path and the seed, the design, the seeds comparisons need and the late-evaluation
    measure. The figure (ranking_view): scores with intervals, tiers and each seed's score, and
    every cell's mean; a second figure (<out>_k3.png): every run's final accuracy against its
    mean K3 between learner and sampler over its updates, one color per N. With `frameworks` (a
    file as lab/docs/frameworks.yaml) and `lag_map` (a path), the lag map too (lag_map_lines)."""
    runs = load_runs(root)
    groups = defaultdict(list)
    for r in runs:
        groups[(method(r), r["delay"])].append(r | {"final": final_mean(r)})
    delays = sorted({d for _, d in groups})
    check_one_table(runs, root)
    order = row_order(runs)
    cells = {n: {d: {r["seed"]: r["final"] for r in groups.get((n, d), [])} for d in delays}
             for n in order}
    data = leaderboard_data([r for rs in groups.values() for r in rs])
    if data.groupby(["method", "N"]).size().max() < 2:  # no replicate: the model has nothing to fit
        cells_only(cells, order, delays, out, runs)
        return
    result = stats.fit_leaderboard(data)
    score = result["score"]
    ranked = sorted(order, key=lambda n: (0, -score[n][0]) if n in score
                    else (1, -(partial_score(cells[n]) or 0.0)))
    refs = list(result["vs"])
    at = f"N={at_delay}"
    lines = ["| tier | method | staleness score (95%) | rank (95%) | drop from N=0 (95%) | "
             + "".join(f"vs {method_style(r, order)[0]} (simultaneous 95%) | " for r in refs)
             + "seeds per N | " + " | ".join(f"N={d}" for d in delays) + " | "
             + " | ".join(f"{title} at {at}" for _, _, title in LEADERBOARD_AT) + " |",
             "| --- |" + " --- |" * (5 + len(refs) + len(delays) + len(LEADERBOARD_AT))]
    for name in ranked:
        label = method_style(name, order)[0]
        scored = name in score
        rank = result["rank"].get(name)
        drop = result["drop"].get(name)
        vs = []
        for r in refs:
            d = result["vs"][r].get(name)
            vs.append(f"{signed(d[0])} ± {d[1]:.1f}{' *' if d[2] < stats.ALPHA else ''}" if d else "")
        diag = []
        for key, scale, _ in LEADERBOARD_AT:
            values = [last_fraction(r["rows"], key) for r in groups.get((name, at_delay), [])]
            diag.append(fmt(values, scale) if values and None not in values else "")
        lines.append(f"| {result['tiers'].get(name, '')} | {label} | "
                     f"{pm(score[name][0] / 100, score[name][1] / 100) if scored else ''} | "
                     f"{f'{rank[0]}-{rank[1]}' if rank else ''} | "
                     f"{pm(drop[0] / 100, drop[1] / 100) if drop else ''} | " + "".join(v + " | " for v in vs)
                     + "/".join(str(len(cells[name][d])) for d in delays) + " | "
                     + " | ".join(fmt(list(cells[name][d].values())) if cells[name][d] else ""
                                  for d in delays) + " | " + " | ".join(diag) + " |")
    letters = sorted({c for t in result["tiers"].values() for c in t}, key=stats.LETTERS.index)
    lines += [] if not letters else ["", "Tiers (methods that share a letter cannot be told apart; a method with several letters "
              "sits between tiers): " + "; ".join(
                  f"{c}: " + ", ".join(method_style(m, order)[0] for m in ranked if c in result["tiers"].get(m, ""))
                  for c in letters) + "."]
    label_of = lambda m: method_style(m, order)[0]
    lines += within_tier_lines(result, label_of) + paired_lines(result, ranked, label_of)
    base = base_accuracy(runs)
    if base:
        lines += ["", f"The base model (toy_base/ before any update: its evaluation at update 0, mean over "
                  f"the {len(base)} seeds' samples): {100 * mean(list(base.values())):.1f} "
                  f"({100 * min(base.values()):.1f}-{100 * max(base.values()):.1f})."]
    lines += model_lines(result, data, order, delays) + late_measure_lines(runs)
    fig = ranking_view(ranked, cells, result, delays, order, runs)
    per_cell = sorted({len(v) for c in cells.values() for v in c.values() if v})
    seeds = seeds_note(runs) + (f", {per_cell[0]}-{per_cell[-1]} per cell" if len(per_cell) > 1 else "")
    finish(fig, fig.axes[:1], out, f"Leaderboard: tiers, staleness score and final mean accuracy (%) "
                                   f"per N ({seeds}); diagnostics over the last 10% of updates",
           lines, runs)
    k3_view(groups, order, os.path.splitext(out)[0] + "_k3.png")
    short = os.path.splitext(out)[0] + "_short.md"
    with open(short, "w") as f:
        f.write("\n".join(short_table(result, ranked, cells, delays, label_of)) + "\n")
    if frameworks and lag_map:
        with open(frameworks) as f:
            listed = yaml.safe_load(f)["frameworks"]
        table = lag_map_lines(listed, result, cells, delays)
        with open(lag_map, "w") as f:
            f.write(LAG_MAP_HEAD + "\n\n" + "\n".join(table) + "\n")
        print(f"wrote {lag_map}")


LAG_MAP_HEAD = ("# What each trainer's default does at a lag\n\nGenerated by `make tables` from "
                "lab/docs/frameworks.yaml (each trainer's knob, lag and default objective, read from its "
                "source: DESIGN.md, \"The frameworks' defaults\") and the leaderboard's runs (the tier, "
                "score and cells are those of lab/figures/leaderboard_v3_toy.md). No trainer holds the lag "
                "exactly at N > 0; \"at its lag's N\" is the smallest ladder N at or above the most its "
                "default allows (N = 0 for none; the first stale N, 8, for an unbounded lag), and the "
                "next column the ladder N at or above four times that.")


def cells_only(cells: dict, order: list, delays: list, out: str, runs: list) -> None:
    """The leaderboard's cells while every cell has one run (the model needs a replicate): final
    mean@k per method and N, and the figure of final accuracy against N."""
    lines = ["| method | " + " | ".join(f"N={d}" for d in delays) + " |", "| --- |" + " --- |" * len(delays)]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in order:
        label, color, style = method_style(name, order)
        lines.append(f"| {label} | " + " | ".join(fmt(list(cells[name][d].values())) if cells[name][d] else ""
                                                  for d in delays) + " |")
        xs = [i for i, d in enumerate(delays) if cells[name][d]]
        ax.plot(xs, [100 * mean(list(cells[name][delays[i]].values())) for i in xs], style, marker="o",
                color=color, label=label)
    lines += ["", "One run per cell so far: the model (tiers, scores, intervals) needs a second seed in "
              "some cell. Cells: final mean@k, %."]
    ax.set_xticks(range(len(delays)), [str(d) for d in delays])
    ax.set_xlabel("synchronization delay N")
    ax.set_ylabel("final mean accuracy (%)")
    finish(fig, [ax], out, f"Leaderboard cells, final mean accuracy (%) per N ({seeds_note(runs)})", lines, runs)


def base_accuracy(runs: list) -> dict:
    """{seed: the base model's accuracy}: the evaluation at update 0 (the same weights at every
    seed; the evaluation's samples differ by seed)."""
    base = {}
    for r in runs:
        updates, accuracy = series(r["rows"], eval_key(r["rows"], "mean@", average=True))
        if updates and updates[0] == 0:
            base[r["seed"]] = accuracy[0]
    return dict(sorted(base.items()))


def ranking_view(ranked: list, cells: dict, result: dict, delays: list, order: list, runs: list):
    """The leaderboard's figure, rows in rank order. Left: each method's staleness score with
    its 95% interval from the model, each seed's own score as a dot, its tier letters at the
    right; the base model's accuracy and GRPO+TIS's score as lines; a row without a score shows
    the mean of the cells it has, hollow. Right: the mean final accuracy of every cell (method x
    N), number in the cell."""
    height = 1.5 + 0.32 * len(ranked)
    fig, (ax, heat) = plt.subplots(1, 2, figsize=(13, height), sharey=True,
                                   gridspec_kw={"width_ratios": [3, 2]})
    ys = range(len(ranked))
    score = result["score"]
    for y, name in zip(ys, ranked):
        color = method_style(name, order)[1]
        if name in score:
            m, half = score[name]
            ax.errorbar(m, y, xerr=half, fmt="o", color=color, capsize=3)
            seeds = seed_scores(cells[name])
            ax.scatter([100 * v for v in seeds.values()], [y] * len(seeds), s=8, color="black",
                       zorder=3, alpha=0.6)
            ax.annotate(f"{result['tiers'][name]}  (rank {result['rank'][name][0]}-{result['rank'][name][1]})",
                        (1.0, y), xycoords=("axes fraction", "data"), xytext=(-4, 0),
                        textcoords="offset points", ha="right", va="center", fontsize=7)
        elif partial_score(cells[name]) is not None:
            ax.scatter([100 * partial_score(cells[name])], [y], facecolors="none", edgecolors=color)
    base = base_accuracy(runs)
    if base:
        ax.axvline(100 * mean(list(base.values())), color="gray", linestyle=":",
                   label="base model (update 0)")
    if "grpo_tis" in score:
        ax.axvline(score["grpo_tis"][0], color="tab:purple", linestyle="--", label="GRPO+TIS's score")
    ax.scatter([], [], s=8, color="black", label="one seed's score")
    ax.set_yticks(list(ys), [method_style(n, order)[0] for n in ranked], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(-5, 85)
    ax.set_xlabel(f"staleness score (%): mean over N = {', '.join(map(str, stats.STALE_DELAYS))}, "
                  f"95% interval (pooled model); tiers, rank interval")
    grid = [[100 * mean(list(cells[n][d].values())) if cells[n][d] else float("nan") for d in delays]
            for n in ranked]
    image = heat.imshow(grid, aspect="auto", cmap="viridis", vmin=0, vmax=70)
    for y, row in enumerate(grid):
        for x, v in enumerate(row):
            if v == v:  # not NaN
                heat.text(x, y, f"{v:.0f}", ha="center", va="center", fontsize=7,
                          color="white" if v < 40 else "black")
    heat.set_xticks(range(len(delays)), [f"N={d}" for d in delays])
    heat.set_xlabel("final accuracy (%), mean over seeds")
    fig.colorbar(image, ax=heat, fraction=0.05)
    return fig


def k3_view(groups: dict, order: list, out: str) -> None:
    """Final accuracy against the run's mean K3 (learner vs sampler on the trained batch, over
    all its updates), every run with N > 0; one color per N, each method's name at its N = 32
    runs' mean."""
    fig, ax = plt.subplots(figsize=(10, 6))
    colors = {8: "tab:blue", 32: "tab:orange", 128: "tab:red"}
    labelled = set()  # the N already in the legend
    for (name, delay), runs in sorted(groups.items(), key=lambda kv: kv[0][1]):
        if delay == 0:
            continue
        k3 = [mean([row["k3"] for row in r["rows"] if row.get("k3") is not None]) for r in runs]
        acc = [100 * r["final"] for r in runs]
        ax.scatter(k3, acc, s=14, color=colors.get(delay, "tab:gray"),
                   label=None if delay in labelled else f"N = {delay}")
        labelled.add(delay)
        if delay == 32:
            ax.annotate(method_style(name, order)[0], (mean(k3), mean(acc)), fontsize=5)
    ax.set_xscale("log")
    ax.set_xlabel("mean K3 between learner and sampler over the run's updates (log)")
    ax.set_ylabel("final mean accuracy (%)")
    finish(fig, [ax], out, "Leaderboard runs: final accuracy against the learner-sampler K3 (one "
                           "point per run)")


def direction_arm(run: dict) -> tuple:
    """((mis_low, mis_high), direction) of a run of the direction ablation
    (lab/sweeps/direction_toy.yaml)."""
    hp = run["cfg"]["loss_args"]
    return (hp["mis_low"], hp["mis_high"]), hp.get("mis_direction", "both")


def direction(root: str, out: str, **_) -> None:
    """The direction ablation: token MIS with its band (wide [0, 5], narrow [0.8, 1.2]) x
    mis_direction (both, harmful). Table: final mean@k per N, mean (min-max) over seeds, and per
    band and N the difference harmful - both from one pooled model of every run (stats.fit_cells)
    with its 95% t interval and Holm-adjusted p over the differences; the figure: one panel per
    band, final accuracy against N."""
    runs = load_runs(root)
    final = defaultdict(dict)  # (band, direction, delay) -> {seed: final}
    for r in runs:
        final[(*direction_arm(r), r["delay"])][r["seed"]] = final_mean(r)
    bands = sorted({b for b, _, _ in final}, key=lambda band: band[0] - band[1])  # wide first
    delays = sorted({d for _, _, d in final})
    fig, axes = plt.subplots(1, len(bands), figsize=(5.5 * len(bands), 4), squeeze=False)
    lines = ["| band | mis_direction | " + " | ".join(f"N={d}" for d in delays) + " |",
             "| --- | --- |" + " --- |" * len(delays)]
    diffs = []
    for ax, band in zip(axes[0], bands):
        label = f"[{band[0]:g}, {band[1]:g}]"
        for direction_, style in (("both", "--"), ("harmful", "-")):
            points = [(i, list(final[(band, direction_, d)].values())) for i, d in enumerate(delays)
                      if final.get((band, direction_, d))]
            if not points:
                continue
            xs = [x for x, _ in points]
            ax.fill_between(xs, [100 * min(v) for _, v in points], [100 * max(v) for _, v in points],
                            alpha=0.12)
            ax.plot(xs, [100 * mean(v) for _, v in points], style, marker="o", label=direction_)
            lines.append(f"| {label} | {direction_} | " + " | ".join(
                fmt(list(final[(band, direction_, d)].values())) if final.get((band, direction_, d))
                else "" for d in delays) + " |")
        ax.set_title(f"token MIS, band {label}")
        ax.set_xticks(range(len(delays)), [str(d) for d in delays])
        ax.set_xlabel("synchronization delay N")
        ax.set_ylabel("final mean accuracy (%)")
    arm = lambda band, direction_: f"[{band[0]:g}, {band[1]:g}] {direction_}"
    data = pd.DataFrame([{"method": arm(*direction_arm(r)), "N": r["delay"], "seed": r["seed"],
                          "path": rounding_path(r), "y": 100 * final_mean(r)} for r in runs])
    fit, sigma = stats.fit_cells(data)
    family = {(band, d): {(arm(band, "harmful"), d): 1, (arm(band, "both"), d): -1} for band in bands
              for d in delays if final.get((band, "both", d)) and final.get((band, "harmful", d))}
    tested = stats.holm_contrasts(fit, family)
    for band in bands:
        diffs.append(f"| [{band[0]:g}, {band[1]:g}] | harmful - both (95% t; Holm p) | " + " | ".join(
            f"{pm(tested[(band, d)][0] / 100, tested[(band, d)][1] / 100)}; p = {tested[(band, d)][3]:.2g}"
            if (band, d) in tested else "" for d in delays) + " |")
    terms = " ".join(fit.params.index)
    blocks = (", a shift per seed and one per seed and N (the design's blocks)" if stats.SEED_BY_N in terms
              else ", a shift per seed (the design's block)" if "C(seed" in terms else "")
    diffs += ["", f"The differences come from one model of the {len(data)} runs (`stats.fit_cells`, statsmodels "
              "WLS: a mean per arm x N" + blocks + ", an error SD per N: " + ", ".join(f"N = {n}: {v:.2f}" for n, v in sigma.items())
              + f"; {fit.df_resid:.0f} residual degrees of freedom, each difference's t on Satterthwaite's "
              "from its N's SD"
              + ("; each N ran on one processor kind, so the cells absorb it" if
                 data.groupby("N")["path"].nunique().max() == 1 else "; the rounding path a fixed factor")
              + f"), Holm's adjustment over the {len(tested)} differences (family-wise 5%)."]
    finish(fig, axes[0], out, f"Direction ablation: token MIS masking both sides or only the "
                              f"harmful side ({seeds_note(runs)}, min-max)", lines + diffs, runs)


def numerics(root: str, out: str, window: int = 20, **_) -> None:
    """Engine-vs-learner precision (lab/sweeps/numerics_toy.yaml): per run, K3 on the trained
    batch over updates 1-10 and 31-60 (x1e-3), and the engine-vs-learner mismatch of each fresh
    batch, engine_k3 (x1e-3) and engine_logp_diff_max, each averaged over all updates; the figure
    is K3 against updates, one panel per N."""
    runs = sorted(load_runs(root), key=lambda r: (r["delay"], r["cfg"]["sampler_dtype"] or "",
                                                  r["cfg"]["autocast"] or "", r["cfg"]["behavior_logp"]))
    delays = sorted({r["delay"] for r in runs})
    fig, axes = plt.subplots(1, len(delays), figsize=(5.5 * len(delays), 4), squeeze=False)
    lines = ["| N | vLLM | learner | behavior_logp | k3 x1e-3, updates 1-10 | k3 x1e-3, 31-60 | "
             "engine_k3 x1e-3 | engine_logp_diff_max |", "| --- |" + " --- |" * 7]

    def average(run, key, first=1, last=None):
        return mean([row[key] for row in run["rows"] if key in row
                     and first <= row["update"] <= (last or row["update"])])

    for r in runs:
        cfg = r["cfg"]
        engine = cfg["sampler_dtype"] or cfg["dtype"]
        learner_dtype = f"{cfg['autocast']} autocast" if cfg["autocast"] else cfg["dtype"]
        lines.append(f"| {r['delay']} | {engine} | {learner_dtype} | {cfg['behavior_logp']} | "
                     f"{1e3 * average(r, 'k3', 1, 10):.3g} | {1e3 * average(r, 'k3', 31, 60):.3g} | "
                     f"{1e3 * average(r, 'engine_k3'):.3g} | {average(r, 'engine_logp_diff_max'):.3g} |")
        xs, ys = series(r["rows"], "k3")
        axes[0][delays.index(r["delay"])].plot(
            xs, [1e3 * y for y in smooth(ys, window)], linestyle="--" if cfg["behavior_logp"] == "learner" else "-",
            label=f"vLLM {engine}, learner {learner_dtype}, behavior {cfg['behavior_logp']}")
    for ax, delay in zip(axes[0], delays):
        ax.set_title(f"N = {delay}")
        ax.set_xlabel("update")
        ax.set_ylabel("K3 on the trained batch (x1e-3)")
    finish(fig, axes[0], out, "Engine and learner numerics: K3 and the engine-vs-learner mismatch "
                              f"({seeds_note(runs)})", lines, runs)


def same_rewards_through(a: dict, b: dict) -> int:
    """The last update through which runs a and b logged the same training reward at every
    update: up to there they drew the same rewards (in practice the same tokens), after it their
    trajectories part."""
    ra, rb = ({row["update"]: row["reward_mean"] for row in run["rows"] if "reward_mean" in row}
              for run in (a, b))
    common = sorted(set(ra) & set(rb))
    return next((u - 1 for u in common if ra[u] != rb[u]), common[-1] if common else 0)


def processors(root: str, out: str, against: str = None, **_) -> None:
    """The same runs on two processors (lab/sweeps/processor_toy.yaml): each run in root
    against the run of the same name in `against` (e.g. the leaderboard's kept results, made on
    another machine), whose configs must agree but for out_dir. Table, one row per pair: the two
    processor kinds, each run's final mean@k and the difference, and the last update through
    which both drew the same training rewards; a last row: mean and max |difference|. The
    figure: final accuracy of one against the other, with the diagonal."""
    if not against:
        raise ValueError("lab/plot.py processors needs --against: the folder of the same runs made "
                         "on the other machine")
    reference = {r["name"]: r for r in load_runs(against)}
    pairs = [(reference[r["name"]], r) for r in load_runs(root) if r["name"] in reference]
    if not pairs:
        raise ValueError(f"no run in {root} has a run of the same name in {against}")
    for ref, rerun in pairs:  # each through defaults.yaml, as train.py reads it: a key that later
        # code added takes its default in both, so a config kept before that key existed compares
        resolved = [config.load_config(os.path.join(folder, run["name"], "config.yaml"))
                    for folder, run in ((against, ref), (root, rerun))]
        differ = sorted(k for k in resolved[0] if k != "out_dir" and resolved[0][k] != resolved[1][k])
        if differ:
            raise ValueError(f"{rerun['name']}: its config differs from {against}'s in {differ}: "
                             f"not the same run")
    kind = lambda run: (" + ".join(sorted({processor_kind(s) for s in run["sessions"]}))
                        or "unknown machine")
    ref_name, rerun_name = (os.path.basename(os.path.normpath(folder)) for folder in (against, root))
    lines = [f"| run | processor ({ref_name}) | processor ({rerun_name}) "
             f"| final mean@k ({ref_name}) | final ({rerun_name}) | {rerun_name} - {ref_name} "
             f"| same training rewards through update |",
             "| --- |" + " --- |" * 6]
    finals = [(final_mean(ref), final_mean(rerun)) for ref, rerun in pairs]
    for (ref, rerun), (x, y) in zip(pairs, finals):
        lines.append(f"| {rerun['name']} | {kind(ref)} | {kind(rerun)} | {100 * x:.1f} | {100 * y:.1f} "
                     f"| {signed(100 * (y - x))} | {same_rewards_through(ref, rerun)} of "
                     f"{rerun['cfg']['updates']} |")
    size = [abs(y - x) for x, y in finals]
    lines.append(f"| mean (max) abs difference, {len(pairs)} runs | | | | | "
                 f"{100 * mean(size):.1f} ({100 * max(size):.1f}) | |")
    fig, axes = plt.subplots(1, 1, figsize=(5, 5), squeeze=False)
    ax = axes[0][0]
    xs, ys = [100 * x for x, _ in finals], [100 * y for _, y in finals]
    ax.plot([0, 100], [0, 100], ":", color="gray", label="the same number")
    ax.scatter(xs, ys, label="one run on each processor")
    for (_, rerun), x, y in zip(pairs, xs, ys):
        ax.annotate(rerun["name"], (x, y), fontsize=7)
    ax.set_xlabel(f"final mean accuracy (%), {kind(pairs[0][0])}")
    ax.set_ylabel(f"final mean accuracy (%), {kind(pairs[0][1])}")
    finish(fig, axes[0], out, f"The same runs on two processors ({len(pairs)} runs)", lines,
           [r for pair in pairs for r in pair])


def run_drift(run: dict) -> float:
    """The drift a run's batches carry: its mean K3 between learner and sampler over its updates."""
    return mean([row["k3"] for row in run["rows"] if row.get("k3") is not None])


def drift_data(runs: list) -> pd.DataFrame:
    """stats.drift_prediction's data: one row per run, its method, N, seed, lr, final accuracy
    (%) and drift (run_drift)."""
    return pd.DataFrame([{"method": method(r), "N": r["delay"], "seed": r["seed"], "lr": r["cfg"]["lr"],
                          "y": 100 * final_mean(r), "drift": run_drift(r)} for r in runs])


def drift_lines(pred: dict, lr_fit: float, lr_test: float, name) -> list:
    """stats.drift_prediction's result `pred`, fitted at lr_fit and predicting lr_test: per method
    and per cell, with the joint test."""
    head = f"**Fitted at lr {lr_fit:g}, predicting lr {lr_test:g}**"
    inside = sum(c["inside"] for c in pred["cells"])
    if not pred["methods"]:
        return ["", head + ": no method has N = 0 and stale runs at both step sizes (and stale runs at "
                "two N or more where it is fitted) yet."]
    noise = lambda sd: ", ".join(f"N = {n}: {v:.2f}" for n, v in sorted(sd.items()))
    lines = ["", head + f" (`stats.drift_prediction`): each step size's noise, its runs' SD about their "
             f"method x N means (points), at lr {lr_fit:g} {noise(pred['fit_sd'])} (the fit's weights; "
             f"its residual scale against them {pred['scale']:.2f}, 1 where the lines fit the cells), "
             f"at lr {lr_test:g} {noise(pred['test_sd'])} (the errors' noise); "
             f"RMS of the cells' errors {pred['rmse']:.2f} points "
             + (f"({pred['rmse_inside']:.2f} over the {inside} cells whose drift lies inside the fitted "
                f"runs' range, of {len(pred['cells'])}); " if inside else
                f"(each of the {len(pred['cells'])} cells' drift lies outside the fitted runs' range: "
                "every prediction is an extrapolation); ")
             + f"joint test sum z^2 = {pred['chi2']:.1f} on {pred['chi2_df']} methods, p = {pred['chi2_p']:.2g}. "
             + ("Inside the fitted range only (the stale cells whose drift the fit has seen, no "
                f"extrapolation): sum z^2 = {pred['inside']['chi2']:.1f} on {pred['inside']['chi2_df']} "
                f"methods, p = {pred['inside']['chi2_p']:.2g}." if pred["inside"]["methods"] else
                "No method has a stale cell inside its fitted range: no test without extrapolation yet."),
             "", "| method | stale runs | error of the mean drop (points, ± 2 SE) | z | Holm p | the hypothesis "
             "| inside only: runs | error (± 2 SE) | Holm p | the hypothesis |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    verdict = lambda v: "refuted" if v["refuted"] else "holds"
    for m, v in sorted(pred["methods"].items(), key=lambda kv: -abs(kv[1]["z"])):
        w = pred["inside"]["methods"].get(m)
        lines.append(f"| {name(m)} | {v['runs']} | {signed(v['error'])} ± {2 * v['se']:.1f} | {signed(v['z'])} "
                     f"| {v['p_holm']:.2g} | {verdict(v)} | "
                     + (f"{w['runs']} | {signed(w['error'])} ± {2 * w['se']:.1f} | {w['p_holm']:.2g} | {verdict(w)} |"
                        if w else " | | | |"))
    lines += ["", "| method | N | runs | K3 x1e-3 | inside the fitted drift | drop from its N = 0, observed "
              "| predicted | error |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {name(c['method'])} | {c['N']} | {c['runs']} | {1e3 * c['drift']:.3g} "
              f"| {'yes' if c['inside'] else 'no (extrapolated)'} | {signed(c['observed'])} "
              f"| {signed(c['predicted'])} | {signed(c['error'])} |" for c in pred["cells"]]
    return lines


# published drift statistics the toy's cells can be set against: (the entry whose runs log the same
# statistic, the metric, the published value, what it measured)
ANCHOR_DRIFT = [("grpo_grpo_anchor-behavior", "clip_frac", 0.0122,
                 "M2PO (arXiv 2510.01161, abstract): the share of tokens PPO's clip (0.2, against the "
                 "sampler) cuts at staleness 256 (Qwen2.5 7B-32B, lr 1e-6), before M2PO's own mask"),
                ("m2po", "is_masked_frac", 0.0006,
                 "M2PO (the same abstract): the share of tokens M2PO's own mask drops there (its "
                 "project page says 0.006%)")]


def verdict_lines(one_way: dict, other_way: dict, lrs: tuple, name) -> list:
    """stats.drift_verdict of the two directions (fitted at lrs[0] predicting lrs[1], and back)."""
    v = stats.drift_verdict(one_way, other_way)
    word = {None: "not yet (a direction has no stale cell inside its fitted range)", True: "refuted",
            False: "not refuted"}[v["refuted"]]
    parts = []
    for (fit_lr, test_lr), s in zip((lrs, lrs[::-1]), v["sides"]):
        head = f"{'F' if not parts else 'f'}itted at lr {fit_lr:g}, predicting lr {test_lr:g}: "
        if not s["methods"]:
            parts.append(head + "no test yet")
            continue
        beyond = ", ".join(f"{name(m)} {signed(e)} (z {signed(z)})" for m, e, z in s["beyond_2se"])
        parts.append(head + f"joint p = {s['p']:.2g} on {s['methods']} methods; refuted after Holm: "
                     + (", ".join(name(m) for m in s["refuted"]) or "none")
                     + "; beyond 2 SE unadjusted: " + (beyond or "none"))
    return ["", f"**The verdict** (the inside-only tests of both directions, each at 2.5%, Bonferroni "
            f"over the two: family-wise 5%): {word}. " + "; ".join(parts) + "."]


def anchor_lines(runs: list, name) -> list:
    """Where each published drift statistic (ANCHOR_DRIFT) falls among the toy's cells: per cell
    (lr x N) of the entry that logs it, the statistic's mean over its runs' updates, and the two
    cells that bracket the published value."""
    lines = []
    for entry, key, value, claim in ANCHOR_DRIFT:
        cells = defaultdict(list)
        for r in runs:
            if method(r) == entry and r["delay"] > 0:
                cells[(r["cfg"]["lr"], r["delay"])].append(mean([row[key] for row in r["rows"]
                                                                  if row.get(key) is not None]))
        if not cells:
            continue
        got = sorted(((mean(v), lr, n, len(v)) for (lr, n), v in cells.items()))
        below = [c for c in got if c[0] <= value]
        above = [c for c in got if c[0] > value]
        where = lambda c: f"lr {c[1]:g}, N = {c[2]} ({100 * c[0]:.2f}%)"
        between = (f"between {where(below[-1])} and {where(above[0])}" if below and above
                   else f"beyond every cell ({where(got[-1])})" if below else f"below every cell ({where(got[0])})")
        lines += ["", f"**An anchor placed**: {claim}: {100 * value:.2f}%. Among the toy's cells of "
                  f"{name(entry)} ({key} over every update, mean over runs) it lies {between}.", "",
                  "| lr | N | runs | " + key + " (%) |", "| --- | --- | --- | --- |"]
        lines += [f"| {lr:g} | {n} | {k} | {100 * v:.2f} |" for v, lr, n, k in sorted(got, key=lambda c: (-c[1], c[2]))]
    return lines


def tier_lines(runs: dict, order: list, name) -> list:
    """Does a row's tier belong to the method or to the step size? Each step size's leaderboard
    model (stats.fit_leaderboard) fitted to the runs of the rows both step sizes ran (`order`),
    so that both tiers are drawn among the same rows: per row and lr the tier letters, the rank
    interval, the staleness score and the difference to GRPO+TIS (simultaneous 95%); a row
    changes when its top-tier membership or its standing against GRPO+TIS differs."""
    results = {}
    for folder, rs in runs.items():  # the N of each step size's leaderboard: its score's and N = 0
        data = leaderboard_data([r for r in rs if method(r) in order
                                 and r["delay"] in (0, *stats.STALE_DELAYS)])
        lr = rs[0]["cfg"]["lr"]
        if len(data) and data.groupby(["method", "N"]).size().max() >= 2:
            results[lr] = stats.fit_leaderboard(data)
    scored = [m for m in order if all(m in res["score"] for res in results.values())]
    head = ("**Tiers at both step sizes** (each step size's leaderboard model fitted to the runs of "
            "the rows both ran, so both tiers are drawn among the same rows; top: shares a letter "
            "with the best row; vs GRPO+TIS: simultaneous 95% over that model's reference family)")
    if len(results) < 2 or not scored:
        return ["", head + ": not yet, a step size has no row with replicated runs at every "
                f"scored N ({', '.join(map(str, stats.STALE_DELAYS))})."]
    lrs = list(results)
    lines = ["", head + ":", "", "| method | " + " | ".join(
        f"lr {lr:g}: tier | rank | score | vs GRPO+TIS" for lr in lrs) + " | changes |",
        "| --- |" + " --- | --- | --- | --- |" * len(lrs) + " --- |"]
    # the top tier: the letters of each step size's best-scoring row
    top = {lr: set(res["tiers"][max(res["score"], key=lambda x: res["score"][x][0])])
           for lr, res in results.items()}
    changed = []
    for m in sorted(scored, key=lambda x: -results[lrs[0]]["score"][x][0]):
        cells, places = [], []  # places: (in the top tier, above / below / level with GRPO+TIS)
        for lr in lrs:
            res = results[lr]
            rank, (sc, half) = res["rank"][m], res["score"][m]
            d = res["vs"].get("grpo_tis", {}).get(m)
            vs = "" if d is None else "level" if d[2] >= stats.ALPHA else "above" if d[0] > 0 else "below"
            places.append((bool(set(res["tiers"].get(m, "")) & top[lr]), vs))
            cells.append(f"{res['tiers'][m]} | {rank[0]}-{rank[1]} | {sc:.1f} ± {half:.1f} | "
                         + (f"{signed(d[0])} ± {d[1]:.1f} ({vs})" if d else ""))
        what = []
        if places[0][0] != places[1][0]:
            what.append("joins the top tier" if places[1][0] else "leaves the top tier")
        if places[0][1] != places[1][1] and "" not in (places[0][1], places[1][1]):
            what.append(f"{places[0][1]} -> {places[1][1]} GRPO+TIS")
        if what:
            changed.append(f"{name(m)} ({', '.join(what)})")
        lines.append(f"| {name(m)} | " + " | ".join(cells) + f" | {'; '.join(what)} |")
    lines += ["", f"Going from lr {lrs[0]:g} to lr {lrs[1]:g}, of the {len(scored)} rows scored at both: "
              + (f"{len(changed)} change: " + "; ".join(changed) + "." if changed else "none changes.")]
    return lines


REGIME_ROWS = ("grpo", "grpo_tis", "agro", "ggpo", "grpo_grpo_anchor-behavior")  # the study's four, PPO vs sampler
MILD_DROP = 5.0  # points: "near its on-policy accuracy" at N = 8 (about one seed SD of a cell there)


def regime_lines(frames: list, name) -> list:
    """The regime at N = 8 per step size: for the study's four and PPO against the sampler, the
    final accuracy at N = 8 minus N = 0 from the cell-means model of that step size's runs
    (stats.fit_cells), 95% t; mild where every one of the study's four loses less than MILD_DROP."""
    shown = [m for m in REGIME_ROWS if any((d["method"] == m).any() for d in frames)]
    lines = ["", f"**The regime at N = 8** (final accuracy at N = 8 minus N = 0, points, the cell-means "
             f"model of each step size's runs, 95% t; mild: each of the study's four loses less than "
             f"{MILD_DROP:g}):", "", "| lr | " + " | ".join(name(m) for m in shown) + " | mild |",
             "| --- |" + " --- |" * (len(shown) + 1)]
    for d in frames:
        own = d[d["method"].isin(REGIME_ROWS) & d["N"].isin([0, 8])].assign(path="one")
        have = [m for m in REGIME_ROWS if {0, 8} <= set(own.loc[own["method"] == m, "N"])]
        own = own[own["method"].isin(have)]
        try:
            fit, _ = stats.fit_cells(own)
            drops = {m: stats.estimate(fit, {(m, 8): 1, (m, 0): -1}) for m in have}
            cell = lambda m: pm(drops[m][0] / 100, drops[m][1] / 100) if m in drops else ""
        except ValueError:  # one run per cell: no residual degrees of freedom yet
            means = own.groupby(["method", "N"])["y"].mean()
            drops = {m: (means[(m, 8)] - means[(m, 0)], None) for m in have}
            cell = lambda m: f"{signed(drops[m][0])} (one seed)" if m in drops else ""
        study = [m for m in REGIME_ROWS[:4] if m in drops]
        mild = ("" if len(study) < 4 else "yes" if all(drops[m][0] > -MILD_DROP for m in study) else "no")
        lines.append(f"| {d['lr'].iloc[0]:g} | " + " | ".join(cell(m) for m in shown) + f" | {mild} |")
    return lines


def drift(root: str, out: str, against: str = None, **_) -> None:
    """Is a cell's drop from its method's own on-policy accuracy a function of the drift its
    batches carry, whatever N and the step size that made it? The leaderboard at one lr (root)
    and at another (`against`), the methods both have. Table: per method, lr and N, the final
    accuracy (mean over seeds) and the mean K3 the batches carried; then both step sizes' tiers
    side by side (tier_lines), the regime at N = 8 (regime_lines), stats.drift_prediction
    fitted at each lr, predicting the other's cells (out of sample), and the anchors placed. Figure: one panel per
    method, each stale run's drop from its lr's mean N = 0 accuracy against its K3 (log), one
    color per lr, one marker per N, the line fitted at root's lr. root and `against` may each be
    several folders, comma-separated (one step size's runs kept in more than one folder; one
    after the first that does not exist yet is left out)."""
    if not against:
        raise ValueError("lab/plot.py drift needs --against: the folder of the runs at the other step size")
    # a side may be several folders, comma-separated: runs at one step size kept apart; a folder
    # after the first that does not exist yet (its sweep has not run here) is left out, saying so
    runs = {}
    for side in (root, against):
        runs[side] = []
        for i, folder in enumerate(side.split(",")):
            if i and not os.path.isdir(folder):
                print(f"lab/plot.py drift: {folder} does not exist yet: left out", file=sys.stderr)
                continue
            runs[side] += load_runs(folder)
    data = {folder: drift_data(rs) for folder, rs in runs.items()}
    for folder, d in data.items():
        if d["lr"].nunique() != 1:
            raise ValueError(f"{folder} mixes step sizes {sorted(d['lr'].unique())}: one lr per folder")
    a, b = data[root], data[against]
    shared = [m for m in dict.fromkeys(a["method"]) if m in set(b["method"])]
    a, b = a[a["method"].isin(shared)], b[b["method"].isin(shared)]
    order = [m for m in row_order(runs[root]) if m in shared]
    name = lambda m: method_style(m, order)[0]
    delays = sorted(set(a["N"]) | set(b["N"]))
    lines = ["| method | lr | " + " | ".join(f"N={n}: final % (K3 x1e-3)" for n in delays) + " |",
             "| --- | --- |" + " --- |" * len(delays)]
    for m in order:
        for d in (a, b):
            own = d[d["method"] == m]
            cell = lambda g: (f"{g['y'].mean():.1f} ({1e3 * g['drift'].mean():.3g})" if len(g) else "")
            lines.append(f"| {name(m)} | {d['lr'].iloc[0]:g} | "
                         + " | ".join(cell(own[own["N"] == n]) for n in delays) + " |")
    lr_a, lr_b = float(a["lr"].iloc[0]), float(b["lr"].iloc[0])
    a_to_b, b_to_a = stats.drift_prediction(a, b), stats.drift_prediction(b, a)
    lines += (tier_lines(runs, order, name) + regime_lines([data[root], data[against]], name)
              + verdict_lines(a_to_b, b_to_a, (lr_a, lr_b), name)
              + drift_lines(a_to_b, lr_a, lr_b, name) + drift_lines(b_to_a, lr_b, lr_a, name)
              + anchor_lines([r for r in runs[root] + runs[against] if method(r) in shared], name))
    cols = min(5, len(order))
    rows = -(-len(order) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.8 * rows), squeeze=False, sharey=True)
    markers = {2: "v", 8: "o", 32: "s", 128: "^"}
    fitted = a_to_b["lines"]  # the fit depends on root's runs alone
    stale = pd.concat([a, b]).query("N > 0")["drift"]  # the line spans the stale runs' drift
    xs = np.logspace(math.log10(stale.min()), math.log10(stale.max()), 50)
    for ax, m in zip(axes.flat, order):
        for d, color in ((a, "tab:blue"), (b, "tab:red")):
            own = d[d["method"] == m]
            base = own.loc[own["N"] == 0, "y"].mean()
            for n, g in own[own["N"] > 0].groupby("N"):
                ax.scatter(g["drift"], g["y"] - base, s=12, color=color, marker=markers.get(n, "x"),
                           label=f"lr {d['lr'].iloc[0]:g}, N = {n}")
            if not own[own["N"] > 0].empty and math.isnan(base):
                ax.text(0.02, 0.02 + 0.08 * (color == "tab:red"), f"lr {d['lr'].iloc[0]:g}: no N = 0 run yet",
                        transform=ax.transAxes, fontsize=6, color=color)
        if m in fitted:
            ax.plot(xs, fitted[m][0] + fitted[m][1] * np.log10(xs), color="tab:blue", lw=0.8,
                    label=f"fit at lr {a['lr'].iloc[0]:g}")
        ax.set_xscale("log")
        ax.set_title(name(m), fontsize=7)
        ax.axhline(0, color="gray", lw=0.5)
    for ax in axes.flat[len(order):]:
        ax.axis("off")
    axes[0][0].set_ylabel("drop from its lr's N = 0 (points)")
    axes[-1][0].set_xlabel("mean K3 learner vs sampler (log)")
    finish(fig, [axes[0][0]], out, f"Final accuracy against the drift its batches carried, at two step "
                                   f"sizes ({seeds_note(runs[root] + runs[against])})",
           lines, runs[root] + runs[against])


FIGURES = {"fig1": fig1, "fig2": fig2, "fig3": fig3, "fig4": fig4, "fig5": fig5, "fig7": fig7,
           "fig8": fig8, "fig9": fig9, "fig10": fig10, "leaderboard": leaderboard,
           "numerics": numerics, "direction": direction, "processors": processors, "drift": drift,
           "tidy": tidy}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("figure", choices=list(FIGURES) + ["row"])
    parser.add_argument("root", help="folder of run folders")
    parser.add_argument("--out", help="PNG path (default: lab/figures/<figure>.png); the table goes "
                                      "next to it as .md")
    parser.add_argument("--delay", type=int, default=None,
                        help="figs. 1 and 5: the N to show (default 8); leaderboard: the N of its "
                             "diagnostics columns (default 32)")
    parser.add_argument("--window", type=int, default=20, help="moving average of per-update metrics")
    parser.add_argument("--against", help="processors: the folder of the same runs made on another "
                                          "machine (the runs of root are matched to them by name); "
                                          "drift: the folder of the runs at the other step size")
    parser.add_argument("--frameworks", help="leaderboard: a file as lab/docs/frameworks.yaml, for the lag map")
    parser.add_argument("--row", help="row: the row's objective (with --set: its settings)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="row: a setting of the row's objective")
    parser.add_argument("--lag-map", help="leaderboard: where to write the lag map (Markdown)")
    args = parser.parse_args(argv)
    if args.figure == "row":  # root: a generated leaderboard table (.md)
        print("\n".join(row_summary(args.root, row_key(args.row, args.set))))
        return
    args.out = args.out or os.path.join(FIGURES_DIR, f"{args.figure}.png")
    if args.figure == "leaderboard":
        leaderboard(args.root, args.out, at_delay=32 if args.delay is None else args.delay,
                    frameworks=args.frameworks, lag_map=args.lag_map)
        return
    FIGURES[args.figure](args.root, args.out, delay=8 if args.delay is None else args.delay,
                         window=args.window, against=args.against)


if __name__ == "__main__":
    main()
