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
    python lab/plot.py leaderboard results/leaderboard_toy --out lab/figures/leaderboard_toy.png  # every objective vs N, in tiers
    python lab/plot.py numerics runs/numerics_toy --out lab/figures/numerics_toy.png  # engine vs learner precision
    python lab/plot.py direction results/direction_toy --out lab/figures/direction_toy.png  # the direction ablation
    python lab/plot.py processors results/processor_toy --against results/leaderboard_toy \
        --out lab/figures/processor_toy.png  # the same runs on two processors
    python lab/plot.py drift results/leaderboard_toy --against results/leaderboard_toy_lr5e-5 \
        --out lab/figures/drift_toy.png  # accuracy against the drift its batches carry, two step sizes
    python lab/plot.py tidy results/leaderboard_toy --out lab/figures/runs_leaderboard_toy.csv  # one row per run
    python lab/plot.py row lab/figures/leaderboard_toy.md --row grpo_tis --set tis_cap=5  # one row's line

The run folders and kept results are read by lab/reader.py, the text under each table is written
by lab/report.py; this module draws, and is the command line. Runs that differ only in seed are averaged;
per-update metrics are smoothed with a moving average of --window updates. Accuracy is the
problem-weighted average over benchmarks (eval/avg/...) when several are evaluated, else the
one benchmark's (MATH-500 first). Without --out a figure goes to lab/figures/<figure>.png.
"""

import argparse
import math
import os
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
from lab.reader import (base_accuracy, by, by_loss, check_one_table, direction_arm, drift_data,  # noqa: E402
                        eval_key, final_accuracy, final_mean, last_fraction, leaderboard_data, load_runs,
                        loss_order, mean, method, processor_kind, row_label, row_order, row_settings,
                        run_mean, same_rewards_through, series, tidy)
from lab.report import (LAG_MAP_HEAD, ablation_lines, anchor_lines, both_step_fits, delays_note, direction_lines, drift_lines, fmt,  # noqa: E402
                        framework_hypothesis_lines, lag_map_lines, leaderboard_lines, machines, partial_score, preregistered_drift_lines, regime_lines, row_key,
                        row_summary, seed_scores, seeds_note, seq_tail_lines, seq_tail_pairs, short_table,
                        signed, step_size_lines, tier_lines, verdict_lines, SEQ_TAIL_DELAYS, SEQ_TAIL_ESS_RATIO,
                        SEQ_TAIL_Q90_RATIO, SEQ_TAIL_ROWS, SEQ_TAIL_UPDATES)

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


def fig3(root: str, out: str, **_) -> None:
    """Final mean@k against N on equally spaced positions, mean over seeds with min-max band."""
    runs = load_runs(root)
    table = final_accuracy(runs)
    delays = sorted({d for _, d in table})
    fig, ax = plt.subplots(figsize=(6, 4))
    lines = ["| objective | " + " | ".join(f"N={d}" for d in delays) + " |",
             "| --- |" + " --- |" * len(delays)]
    drift = []
    for loss, group in by_loss(runs).items():
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
        drift.append(f"| {label} | " + " | ".join(
            fmt(k3, 1e3) if (k3 := [last_fraction(r["rows"], "k3") for r in group if r["delay"] == d])
            and None not in k3 else ""
            for d in delays) + " |")
    lines += ["", "K3 x1e-3 between learner and sampler over the last 10% of updates (mean, min-max over seeds):",
              "", lines[0], lines[1], *drift]
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
    table = [f"| objective | final partial mean (%, of {sizes[0]} problems) | final unsolved solved (%, of "
             f"{sizes[1]}) |", "| --- | --- | --- |"]
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
    table = ["| objective | " + " | ".join(f"update {x}" for x in xs0) + " | K3 x1e-3, last 10% |",
             "| --- |" + " --- |" * (len(xs0) + 1)]
    for loss, group in by_loss(runs).items():
        label, color, style = loss_style(loss, runs)
        _, per_x = curve(axes[0], group, key, 100, band=True, color=color, linestyle=style,
                         marker=".", label=label)
        curve(axes[1], group, "k3", 1e3, window=20, color=color, linestyle=style, label=label)
        k3 = [last_fraction(r["rows"], "k3") for r in group]
        table.append(f"| {label} | " + " | ".join(fmt(v) for v in per_x)
                     + f" | {fmt(k3, 1e3) if None not in k3 else ''} |")
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


def method_style(name: str, names: list) -> tuple:
    """(label, color, line style) of a row key: the study's styles for its four, spare colors
    for the rest."""
    label = row_label(name)
    if name in STUDY_STYLE:
        return (label, *STUDY_STYLE[name])
    i = [n for n in names if n not in STUDY_STYLE].index(name)
    return label, SPARE_COLORS[i % len(SPARE_COLORS)], ["-.", ":"][i % 2]


def leaderboard(root: str, out: str, at_delay: int = 32, frameworks: str = None, lag_map: str = None,
                **_) -> None:
    """Every objective against N, in tiers, from one pooled model of every run's final accuracy
    (stats.fit_leaderboard). Per method: tier letters, the stale accuracy with its interval, its
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
    lines = leaderboard_lines(result, ranked, cells, groups, delays, at_delay, runs, data)
    fig = ranking_view(ranked, cells, result, delays, order, runs)
    per_cell = sorted({len(v) for c in cells.values() for v in c.values() if v})
    seeds = seeds_note(runs) + (f", {per_cell[0]}-{per_cell[-1]} per cell" if len(per_cell) > 1 else "")
    finish(fig, fig.axes[:1], out, f"Leaderboard: tiers, stale accuracy and final mean accuracy (%) "
                                   f"per N ({seeds}); diagnostics over the last 10% of updates",
           lines, runs)
    k3_view(groups, order, os.path.splitext(out)[0] + "_k3.png")
    short = os.path.splitext(out)[0] + "_short.md"
    with open(short, "w") as f:
        f.write("\n".join(short_table(result, ranked, cells, delays, row_label)) + "\n")
    if frameworks and lag_map:
        with open(frameworks) as f:
            listed = yaml.safe_load(f)["frameworks"]
        table = lag_map_lines(listed, result, cells, delays) + framework_hypothesis_lines(result, cells)
        with open(lag_map, "w") as f:
            f.write(LAG_MAP_HEAD + "\n\n" + "\n".join(table) + "\n")
        print(f"wrote {lag_map}")


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


def ranking_view(ranked: list, cells: dict, result: dict, delays: list, order: list, runs: list):
    """The leaderboard's figure, rows in rank order. Left: each method's stale accuracy with
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
    ax.set_xlabel(f"stale accuracy (%): mean over N = {', '.join(map(str, stats.STALE_DELAYS))}, "
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
    finish(fig, axes[0], out, f"Direction ablation: token MIS masking both sides or only the "
                              f"harmful side ({seeds_note(runs)}, min-max)",
           lines + direction_lines(runs, final, bands, delays) + direction_drift_lines(runs, bands, delays), runs)


def direction_drift_lines(runs: list, bands: list, delays: list) -> list:
    """The direction ablation's masks and drift: per arm and N, the share of tokens the mask
    drops and the K3 between learner and sampler, each a run's mean over its updates, as the
    range (min-max) over seeds."""
    per = defaultdict(lambda: defaultdict(list))  # (band, direction, delay) -> key -> run means
    for r in runs:
        for key in ("is_masked_frac", "k3"):
            value = run_mean(r, key)
            per[(*direction_arm(r), r["delay"])][key].append(math.nan if value is None else value)
    span = lambda v, scale, f: f"{scale * min(v):{f}}-{scale * max(v):{f}}"
    lines = ["", "Masks and drift per arm (each run's mean over its updates; min-max over seeds):", "",
             "| band | mis_direction | " + " | ".join(f"N={d}: masked (%) | N={d}: K3 x1e-3" for d in delays) + " |",
             "| --- | --- |" + " --- | --- |" * len(delays)]
    for band in bands:
        for direction_ in ("both", "harmful"):
            cells = [per.get((band, direction_, d)) for d in delays]
            lines.append(f"| [{band[0]:g}, {band[1]:g}] | {direction_} | " + " | ".join(
                f"{span(c['is_masked_frac'], 100, '.2g')} | {span(c['k3'], 1e3, '.3g')}" if c else " | "
                for c in cells) + " |")
    return lines


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
    floor = stats.at_the_floor(a, b)
    kept_a, kept_b = a[~a["method"].isin(floor)], b[~b["method"].isin(floor)]
    fits = both_step_fits(runs, order)
    lines += (tier_lines(fits, order, name) + step_size_lines(fits, order, name) + regime_lines([data[root], data[against]], name)
              + verdict_lines(a_to_b, b_to_a, (lr_a, lr_b), name)
              + preregistered_drift_lines(stats.drift_bootstrap(kept_a, kept_b), stats.drift_bootstrap(kept_b, kept_a),
                                          (lr_a, lr_b), floor, name)
              + preregistered_drift_lines(
                  *(stats.drift_bootstrap(x, y, draws=stats.DRIFT_DRAWS_ADDED) for x, y in ((kept_a, kept_b), (kept_b, kept_a))),
                  (lr_a, lr_b), floor, name, stats.DRIFT_DRAWS_ADDED,
                  "*Added analysis (not preregistered): the same test at more draws*, so that Holm can reach 2.5%")
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
        placed = False  # a stale run placed against its lr's N = 0 on this panel
        for d, color in ((a, "tab:blue"), (b, "tab:red")):
            own = d[d["method"] == m]
            base = own.loc[own["N"] == 0, "y"].mean()
            placed = placed or (not math.isnan(base) and (own["N"] > 0).any())
            for n, g in own[own["N"] > 0].groupby("N"):
                ax.scatter(g["drift"], g["y"] - base, s=12, color=color, marker=markers.get(n, "x"),
                           label=f"lr {d['lr'].iloc[0]:g}, N = {n}")
            if not own[own["N"] > 0].empty and math.isnan(base):
                ax.text(0.02, 0.02 + 0.08 * (color == "tab:red"), f"lr {d['lr'].iloc[0]:g}: no N = 0 run yet",
                        transform=ax.transAxes, fontsize=6, color=color)
        if m in fitted:
            ax.plot(xs, fitted[m][0] + fitted[m][1] * np.log10(xs), color="tab:blue", lw=0.8,
                    label=f"fit at lr {a['lr'].iloc[0]:g}")
        if not placed:
            ax.set_xlim(xs[0], xs[-1])  # nothing to place yet (no N = 0 at either lr): the axis still logs
        ax.set_xscale("log")
        ax.set_title(name(m), fontsize=7)
        ax.axhline(0, color="gray", lw=0.5)
    for ax in axes.flat[len(order):]:
        ax.axis("off")
    axes[0][0].set_ylabel("drop from its lr's N = 0 (points)")
    axes[-1][0].set_xlabel("mean K3 learner vs sampler (log)")
    finish(fig, [axes[0][0]], out, f"Final accuracy against the drift its batches carried, at two step "
                                   f"sizes (lr {lr_a:g}: {seeds_note(runs[root])}; lr {lr_b:g}: "
                                   f"{seeds_note(runs[against])})",
           lines, runs[root] + runs[against])


def ablation(root: str, out: str, against: str = None, **_) -> None:
    """An ablation (root: its runs, an objective at other settings) beside the same objective at
    its default settings (--against: a folder holding it, as results/leaderboard_toy) at the same
    N and seeds: the table of report.ablation_lines and the final accuracy per N, each seed a dot."""
    runs = load_runs(root)
    made = {(r["loss"], r["delay"], r["seed"]) for r in runs}
    base = [r for r in (load_runs(against) if against else [])
            if (r["loss"], r["delay"], r["seed"]) in made and not row_settings(r)]
    groups = defaultdict(list)
    for r in base + runs:
        groups[(method(r), r["delay"])].append(r)
    delays = sorted({n for _, n in groups})
    fig, ax = plt.subplots(figsize=(6, 4))
    for i, m in enumerate(dict.fromkeys(m for m, _ in groups)):
        for x, n in enumerate(delays):
            finals = [100 * final_mean(r) for r in groups.get((m, n), [])]
            ax.scatter([x + 0.1 * i] * len(finals), finals, s=14, color=f"C{i}",
                       label=row_label(m) if x == 0 else None)
    ax.axhline(stats.DRIFT_FLOOR, color="gray", lw=0.5, ls="--", label="the floor")
    ax.set_xticks(range(len(delays)), [str(d) for d in delays])
    ax.set(xlabel="synchronization delay N", ylabel="final mean accuracy (%)")
    finish(fig, [ax], out, f"Ablation beside the objective at its defaults ({seeds_note(runs)}, min-max)",
           ablation_lines(groups), base + runs)


def seq_tail(root: str, out: str, against: str = None, **_) -> None:
    """H3 of the long-answer study: each preregistered run of the long task (root) against the
    same row, N and seed on the short one (--against): the sequence log-ratio's 90th percentile
    and the sequence ESS, long against short, with the thresholds' lines; the table and the
    verdict (report.seq_tail_lines) beside it."""
    if not against:
        raise SystemExit("seq-tail needs --against FOLDER: the short task's runs of the same rows")
    long_runs, short_runs = load_runs(root), load_runs(against)
    pairs = seq_tail_pairs(long_runs, short_runs)
    fig, axes = plt.subplots(1, 2, figsize=(9, 4))
    for ax, key, ratio, title in ((axes[0], "q90", SEQ_TAIL_Q90_RATIO, "90th pct of |sum_t ell|"),
                                  (axes[1], "ess", SEQ_TAIL_ESS_RATIO, "sequence ESS")):
        done = [p for p in pairs if p["heavier"] is not None]
        for i, row in enumerate(SEQ_TAIL_ROWS):
            for n, marker in zip(SEQ_TAIL_DELAYS, "o^"):
                mine = [p for p in done if p["row"] == row and p["N"] == n]
                ax.scatter([p["short"][key] for p in mine], [p["long"][key] for p in mine], s=18,
                           marker=marker, color=f"C{i}", label=f"{row_label(row)}, N = {n}")
        if key == "q90":  # a tail spans decades; an ESS lies in (0, 1]
            values = [p[side][key] for p in done for side in ("long", "short")] or [0.1, 1]
            xs = np.geomspace(min(values) / 2, max(values) * 2, 20)
            ax.set_xscale("log")
            ax.set_yscale("log")
        else:
            xs = np.linspace(0, 1, 20)
            ax.set_xlim(0, 1)
            ax.set_ylim(0, 1)
        ax.plot(xs, xs, color="gray", lw=0.5, label="long = short")
        ax.plot(xs, ratio * xs, color="tab:red", lw=0.8, ls="--", label=f"long = {ratio:g} x short")
        ax.set_xlabel(f"short task: {title}")
        ax.set_ylabel(f"long task: {title}")
    finish(fig, axes, out, f"H3, the sequence tail on long answers against short ones (N = "
                           f"{', '.join(map(str, SEQ_TAIL_DELAYS))}; means over updates 1-{SEQ_TAIL_UPDATES})",
           seq_tail_lines(pairs), long_runs + short_runs)


FIGURES = {"fig1": fig1, "fig2": fig2, "fig3": fig3, "fig4": fig4, "fig5": fig5, "fig7": fig7,
           "fig8": fig8, "fig9": fig9, "fig10": fig10, "leaderboard": leaderboard,
           "numerics": numerics, "direction": direction, "processors": processors, "drift": drift,
           "tidy": tidy, "seq-tail": seq_tail, "ablation": ablation}


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
