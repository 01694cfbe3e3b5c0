"""Run folders and kept results -> runs and tidy tables; importing it loads neither torch nor
matplotlib (the loop's modules that import torch, config, losses and run_info, are imported where
a function first needs them).

A run folder holds config.yaml and metrics.jsonl (train.py writes them; sweep.py lays folders out
as <loss>_N<delay>_s<seed>[_<key>-<value>...]); a folder of kept results (results/<sweep>/<run>,
metrics.jsonl.gz) reads the same, so `make tables` remakes the committed tables from results/.
load_runs reads every run of a folder; a run's row (method) is its objective with the settings
that differ from the registered defaults; tidy writes one row per run, for pandas:

    python lab/plot.py tidy results/leaderboard_toy --out lab/figures/runs_leaderboard_toy.csv
    pandas.read_csv("lab/figures/runs_leaderboard_toy.csv")
"""
import glob
import gzip
import json
import os
import re
import sys
from collections import Counter, defaultdict

import pandas as pd
import yaml


# ----------------------------------------------------------------------------- run folders

def load_runs(root: str) -> list:
    """[{name, cfg, loss, delay, seed, rows}] for every run folder under root."""
    import config  # the loop's, for its YAML loader (as train.py reads a config)
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
        print(f"lab/reader.py: {len(unfinished)} of {len(runs)} runs in {root} are unfinished, so their "
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
    import losses
    return list(losses.LOSSES) + sorted({r["loss"] for r in runs} - set(losses.LOSSES))


def by_loss(runs: list) -> dict:
    """{objective: its runs} for the objectives that have runs, in loss_order."""
    return {loss: [r for r in runs if r["loss"] == loss] for loss in loss_order(runs)
            if any(r["loss"] == loss for r in runs)}


def last_fraction(rows: list, key: str, fraction: float = 0.1):
    """Mean of a per-update metric over the last `fraction` of the run's updates (None: absent)."""
    last = max(r["update"] for r in rows)
    values = [r[key] for r in rows if r["update"] > (1 - fraction) * last and r.get(key) is not None]
    return mean(values) if values else None


def final_mean(run: dict) -> float:
    """A run's last evaluated mean@k (eval_key's choice of benchmark, averaged over several)."""
    return series(run["rows"], eval_key(run["rows"], "mean@", average=True))[1][-1]


def final_accuracy(runs: list) -> dict:
    """{(loss, delay): [final mean@k of each seed]}."""
    table = defaultdict(list)
    for r in runs:
        table[(r["loss"], r["delay"])].append(final_mean(r))
    return table


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
    import losses
    registered = losses.LOSSES.get(run["loss"])
    args = run["cfg"].get("loss_args") or {}
    return {k: args.get(k, v) for k, v in sorted(registered.hparams.items())} if registered else {}


def row_settings(run: dict) -> dict:
    """The run's objective settings (objective_settings) that differ from the registered defaults."""
    import losses
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
    import losses
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
LATE_EVALS = 3  # the late-evaluation measure: the mean of a run's last LATE_EVALS evaluations
LATE_SPAN = 0.15  # ... when they all lie in the last LATE_SPAN of its updates (e.g. 260-300 of 300)


def processor_kind(session: dict) -> str:
    """run_info.processor_kind: a session's processor as the tables name it (run_info is imported
    here, where it is first needed: it imports torch)."""
    from run_info import processor_kind as kind
    return kind(session)


def recorded_path(run: dict) -> str:
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


# the per-update diagnostics a tidy table averages over each run's updates
TIDY_DIAGNOSTICS = ("k3", "entropy", "grad_norm", "reward_mean", "response_len_mean", "clip_frac",
                    "is_weight_mean", "is_masked_frac", "is_chi2_token", "is_chi2_seq",
                    "is_seq_log_ratio_max", "is_seq_log_ratio_q90", "is_seq_ess")


def run_mean(run: dict, key: str):
    """The mean of a per-update metric over the run's updates (update 0 logs none), or None
    where the run logged none."""
    values = [row[key] for row in run["rows"] if row.get(key) is not None and row.get("update", 0) > 0]
    return mean(values) if values else None


def tidy(root: str, out: str, **_) -> None:
    """One row per kept run, as CSV (pandas.read_csv reads it in one line): its row (method), the
    objective and its settings off the defaults (JSON), N, seed, lr, processor kind, rounding
    path as recorded (`recorded_path`) and as measured (`rounding_path`: measured_paths), the
    final evaluation and the mean of the late ones (empty where a run has too few), and each
    diagnostic's mean over the run's updates (empty where it logs none)."""
    runs = load_runs(root)
    check_one_table(runs, root)
    paths, rows = measured_paths(runs)[0], []
    for r in sorted(runs, key=lambda r: r["name"]):
        late = late_evaluations(r)
        rows.append({"run": r["name"], "row": method(r), "objective": r["loss"],
                     "settings": json.dumps(row_settings(r), sort_keys=True), "N": r["delay"], "seed": r["seed"],
                     "lr": r["cfg"]["lr"], "processor": " + ".join(dict.fromkeys(processor_kind(s) for s in r["sessions"])),
                     "recorded_path": recorded_path(r), "rounding_path": paths[recorded_path(r)],
                     "final": 100 * final_mean(r),
                     "late_mean": 100 * late[1] if late else None,
                     **{k: run_mean(r, k) for k in TIDY_DIAGNOSTICS}})
    frame = pd.DataFrame(rows)
    frame.to_csv(out, index=False, float_format="%.6g")
    print(f"wrote {out}: {len(frame)} runs")


def trajectory(run: dict) -> str:
    """A run's training reward at every update (JSON): two runs with the same are the same
    computation on the same rounding path; the run's name where it logs fewer than two."""
    rewards = [row["reward_mean"] for row in run["rows"] if row.get("reward_mean") is not None]
    return json.dumps(rewards) if len(rewards) > 1 else run["name"]


def connected(items, links) -> dict:
    """{item: the sorted tuple of the items that `links` ((a, b) pairs) join it to, itself
    included}: the groups of `items` that the links connect."""
    parent = {i: i for i in items}
    def root(i):
        while parent[i] != i:
            i = parent[i]
        return i
    for a, b in links:
        parent[root(b)] = root(a)
    members = defaultdict(list)
    for i in sorted(parent):
        members[root(i)].append(i)
    return {i: tuple(members[root(i)]) for i in parent}


def measured_paths(runs: list) -> tuple:
    """({recorded_path: the rounding path as measured}, {measured path: its evidence}). Two
    recorded paths (processor kind, threads, matmul) whose runs of one seed and N log the same
    training reward at every update and the same final accuracy (methods that are the same
    computation on-policy, each run on its own machine) round alike: they are one path, named by
    its members joined by " = ". Evidence: how many (seed, N, trajectory, final) groups join its
    members (0 for a path of one)."""
    groups = defaultdict(set)
    for r in runs:
        groups[(r["seed"], r["delay"], trajectory(r), final_mean(r))].add(recorded_path(r))
    together = [sorted(g) for g in groups.values()]
    named = {p: " = ".join(group) for p, group in
             connected({p for g in together for p in g}, [(g[0], p) for g in together for p in g[1:]]).items()}
    evidence = Counter(named[g[0]] for g in together if len(g) > 1)
    return named, {path: evidence[path] for path in sorted(set(named.values()))}


def leaderboard_data(runs: list) -> pd.DataFrame:
    """The leaderboard model's data (stats.fit_leaderboard): one row per run, its method, N, seed,
    rounding path as measured (measured_paths) and as recorded (`recorded_path`), final accuracy in
    %, its `trajectory` and its objective's settings."""
    paths, _ = measured_paths(runs)
    return pd.DataFrame([{"method": method(r), "N": r["delay"], "seed": r["seed"],
                          "rounding_path": paths[recorded_path(r)], "recorded_path": recorded_path(r),
                          "y": 100 * final_mean(r), "trajectory": trajectory(r),
                          "settings": json.dumps(objective_settings(r), sort_keys=True)} for r in runs])


def base_accuracy(runs: list) -> dict:
    """{seed: the base model's accuracy}: the evaluation at update 0 (the same weights at every
    seed; the evaluation's samples differ by seed)."""
    base = {}
    for r in runs:
        updates, accuracy = series(r["rows"], eval_key(r["rows"], "mean@", average=True))
        if updates and updates[0] == 0:
            base[r["seed"]] = accuracy[0]
    return dict(sorted(base.items()))


def direction_arm(run: dict) -> tuple:
    """((mis_low, mis_high), direction) of a run of the direction ablation
    (lab/sweeps/direction_toy.yaml)."""
    hp = run["cfg"]["loss_args"]
    return (hp["mis_low"], hp["mis_high"]), hp.get("mis_direction", "both")


def same_rewards_through(a: dict, b: dict) -> int:
    """The last update through which runs a and b logged the same training reward at every
    update: up to there they drew the same rewards (in practice the same tokens), after it their
    trajectories part."""
    ra, rb = ({row["update"]: row["reward_mean"] for row in run["rows"] if "reward_mean" in row}
              for run in (a, b))
    common = sorted(set(ra) & set(rb))
    return next((u - 1 for u in common if ra[u] != rb[u]), common[-1] if common else 0)


def run_drift(run: dict) -> float:
    """The drift a run's batches carry: its mean K3 between learner and sampler over its updates."""
    drift = run_mean(run, "k3")
    if drift is None:
        raise ValueError(f"{run['name']} logged no k3: the drift its batches carried is unknown")
    return drift


def drift_data(runs: list) -> pd.DataFrame:
    """stats.drift_prediction's data: one row per run, its method, N, seed, lr, final accuracy
    (%) and drift (run_drift)."""
    return pd.DataFrame([{"method": method(r), "N": r["delay"], "seed": r["seed"], "lr": r["cfg"]["lr"],
                          "y": 100 * final_mean(r), "drift": run_drift(r)} for r in runs])
