"""Figures from run folders: Fig. 1 (dynamics at one N) and Fig. 3 (final accuracy against N).

    python plot.py fig1 runs/fig1_toy --out fig1_toy.png
    python plot.py fig3 runs/fig3_toy --out fig3_toy.png      # also writes fig3_toy.md (table)

A run folder is <loss>_N<delay>_s<seed> holding metrics.jsonl (sweep.py lays them out so).
Fig. 1 averages seeds; per-update metrics are smoothed with a moving average. Fig. 3 takes each
run's last evaluation, averages over benchmarks weighted by problem count when several are
evaluated (key eval/avg/...), and shows the mean over seeds with the min-max spread.
"""
import argparse
import glob
import json
import os
import re
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

LOSS_STYLE = {"grpo": ("GRPO", "tab:orange", "-"), "grpo_tis": ("GRPO+TIS", "tab:purple", "--"),
              "agro": ("AGRO", "tab:green", "-"), "ggpo": ("GGPO", "tab:blue", "-")}
RUN_NAME = re.compile(r"(?P<loss>[a-z_]+)_N(?P<delay>\d+)_s(?P<seed>\d+)$")


def load_runs(root: str) -> list:
    """[{loss, delay, seed, rows}] for every run folder under root."""
    runs = []
    for path in sorted(glob.glob(os.path.join(root, "*", "metrics.jsonl"))):
        match = RUN_NAME.match(os.path.basename(os.path.dirname(path)))
        if not match:
            continue
        with open(path) as f:
            rows = [json.loads(line) for line in f]
        runs.append({"loss": match["loss"], "delay": int(match["delay"]),
                     "seed": int(match["seed"]), "rows": rows})
    if not runs:
        raise FileNotFoundError(f"no run folders <loss>_N<delay>_s<seed>/metrics.jsonl in {root}")
    return runs


def eval_key(rows: list, stat: str) -> str:
    """The evaluation key to plot: the problem-weighted average if logged, else the benchmark."""
    keys = sorted({k for r in rows for k in r if k.startswith("eval/") and f"/{stat}@" in k})
    if not keys:
        raise ValueError(f"no eval/*/{stat}@k metric in the run: was eval_every 0?")
    avg = [k for k in keys if k.startswith("eval/avg/")]
    math500 = [k for k in keys if k.startswith("eval/math500/")]
    single = [k for k in keys if k not in avg] if len(keys) - len(avg) == 1 else []
    return (math500 or single or avg or keys)[0]


def series(rows: list, key: str):
    xs = [r["update"] for r in rows if r.get(key) is not None]
    return xs, [r[key] for r in rows if r.get(key) is not None]


def smooth(ys: list, window: int) -> list:
    out, acc = [], 0.0
    for i, y in enumerate(ys):
        acc += y - (ys[i - window] if i >= window else 0.0)
        out.append(acc / min(i + 1, window))
    return out


def mean_over_seeds(runs: list, key: str):
    """Element-wise mean of one key over runs (truncated to the shortest)."""
    all_xs, all_ys = zip(*(series(r["rows"], key) for r in runs))
    n = min(map(len, all_ys))
    return all_xs[0][:n], [sum(ys[i] for ys in all_ys) / len(all_ys) for i in range(n)]


def fig1(root: str, out: str, window: int = 20) -> None:
    runs = load_runs(root)
    mean_key, best_key = eval_key(runs[0]["rows"], "mean"), eval_key(runs[0]["rows"], "best")
    panels = [("k3", 1e3, "token-mean K3 (x1e-3)", True), ("entropy", 1, "policy entropy", True),
              (best_key, 100, best_key.replace("eval/", "") + " (%)", False),
              (mean_key, 100, mean_key.replace("eval/", "") + " (%)", False)]
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.6))
    for loss, (label, color, style) in LOSS_STYLE.items():
        group = [r for r in runs if r["loss"] == loss]
        if not group:
            continue
        for ax, (key, scale, title, smoothed) in zip(axes, panels):
            xs, ys = mean_over_seeds(group, key)
            ys = smooth(ys, window) if smoothed else ys
            ax.plot(xs, [y * scale for y in ys], style, color=color, label=label)
            ax.set_title(title, fontsize=10)
            ax.set_xlabel("optimizer updates")
    delays = sorted({r["delay"] for r in runs})
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Training dynamics at N = {', '.join(map(str, delays))} "
                 f"({len({r['seed'] for r in runs})} seeds)", fontsize=11)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    print(f"wrote {out}")


def final_accuracy(runs: list) -> dict:
    """{(loss, delay): [final mean@k of each seed]}."""
    table = defaultdict(list)
    for r in runs:
        key = eval_key(r["rows"], "mean")
        if key.startswith("eval/math500/"):  # Fig. 3 is the five-benchmark average when present
            key = next((k for k in {k for row in r["rows"] for k in row}
                        if k.startswith("eval/avg/mean@")), key)
        values = series(r["rows"], key)[1]
        table[(r["loss"], r["delay"])].append(values[-1])
    return table


def fig3(root: str, out: str) -> None:
    runs = load_runs(root)
    table = final_accuracy(runs)
    delays = sorted({d for _, d in table})
    fig, ax = plt.subplots(figsize=(6, 4))
    lines = ["| objective | " + " | ".join(f"N={d}" for d in delays) + " |",
             "| --- |" + " --- |" * len(delays)]
    for loss, (label, color, style) in LOSS_STYLE.items():
        points = [(delays.index(d), v) for (l, d), v in sorted(table.items()) if l == loss]
        if not points:
            continue
        xs = [x for x, _ in points]
        mean = [100 * sum(v) / len(v) for _, v in points]
        ax.fill_between(xs, [100 * min(v) for _, v in points], [100 * max(v) for _, v in points],
                        color=color, alpha=0.15)
        ax.plot(xs, mean, style, marker="o", color=color, label=label)
        cells = {delays[x]: f"{m:.1f} ({100 * min(v):.1f}-{100 * max(v):.1f})"
                 for x, m, (_, v) in zip(xs, mean, points)}
        lines.append(f"| {label} | " + " | ".join(cells.get(d, "") for d in delays) + " |")
    ax.set_xticks(range(len(delays)), [str(d) for d in delays])
    ax.set_xlabel("synchronization delay N")
    ax.set_ylabel("final mean accuracy (%)")
    ax.legend(fontsize=8)
    ax.set_title(f"Final accuracy against N ({len({r['seed'] for r in runs})} seeds, min-max)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    md = os.path.splitext(out)[0] + ".md"
    with open(md, "w") as f:
        f.write("Final mean accuracy (%), mean over seeds (min-max)\n\n" + "\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {out} and {md}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("figure", choices=["fig1", "fig3"])
    parser.add_argument("root", help="folder of run folders")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    {"fig1": fig1, "fig3": fig3}[args.figure](args.root, args.out)


if __name__ == "__main__":
    main()
