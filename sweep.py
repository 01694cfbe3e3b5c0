"""Run a grid of training runs (objectives x N x seeds) here, send it to SLURM, or print it.

    python sweep.py lab/sweeps/fig3_toy.yaml            # run every unfinished run here
    python sweep.py lab/sweeps/fig3_toy.yaml --jobs auto   # as many at once as pays here
    python sweep.py lab/sweeps/fig3_qwen.yaml --slurm --slurm-partition gpu --slurm-time-min 2880
    python sweep.py lab/sweeps/fig3_toy.yaml --print    # one command per run, for a scheduler
    python sweep.py lab/sweeps/fig3_toy.yaml --seeds 0,1  # only these seeds' blocks

A sweep file names a base config, a grid and an output root:

    config: configs/toy.yaml
    out_root: runs/fig3_toy
    grid: {loss: [grpo, agro], delay: [0, 8], seed: [0, 1]}   # loss: all = every registered objective
    overrides: {updates: 300}              # applied to every run
    # grid may add any other config key, dotted for nested ones, e.g. loss_args.beta: [0.01, 0.1]
    per_loss: {grpo_tis: {lr: 1.0e-4}}     # applied to runs of one objective (optional)
    only: {grpo_tis: {delay: [128]}}       # extra grid values for one objective (optional);
    # any other key adds runs of that objective with it set, e.g.
    # only: {grpo: {loss_args.grpo_anchor: [behavior]}}  -> grpo_N8_s0_grpo_anchor-behavior, ...
    # or a list of mappings, one variant each with its keys set together:
    # only: {grpo_mis: [{loss_args.mis_low: 0.8, loss_args.mis_high: 1.2}]}

Each run goes to <out_root>/<loss>_N<delay>_s<seed>, followed by _<name>-<value> for every other
grid key (name: the last part of a dotted key), e.g. ggpo_N8_s0_beta-0.1_ref_refresh_every-25.
Runs go in blocks: seed by seed, within a seed N by N, each block (one seed, one N) every
objective of the grid, so a grid stopped part way has whole blocks, and a block made on one
machine shares its rounding path.
A run whose metrics.jsonl already reaches `updates` is skipped, an unfinished one resumes from
its last checkpoint. With `results: results/<name>` in the sweep file, every finished run also
keeps its compact results there (keep_results: config, metrics, the final evaluation's
per-problem records, run_info.json; ~45 kB), written when it finishes or, for a run finished
before, when the sweep next starts; a run whose results are there is skipped even when its run
folder is not, so results committed to the repository let a sweep on any checkout go on where
another left off. Before a run is handed out its results are looked for again, so two sweep
processes with the same `results:` (e.g. one per seed, each pinned to its own cores) do not
run a run twice once the other has kept it. `per_kind: true` makes the grid a reference block
for processor kinds that have none, one seed per kind (one_kind_block): on a machine whose kind
already has kept runs of the grid's rows it runs nothing, on a new kind the first seed no
machine has begun, and on a kind that began a seed of it the rest of that seed. Any other sweep
with `results:` holds back a seed whose kept runs all ran on other processor kinds
(hold_other_kinds), so that a seed's blocks share a rounding path; `--seeds` runs the seeds it
names here whatever kind began them.

Here, runs go to --jobs worker processes (default 1; auto: plan_jobs). Each takes the next
unfinished run of the grid from this process, runs it with train.train (its output to
<out_dir>/train.log) and keeps its sampler (vLLM engine) for its next runs while the engine's
settings (model, `sampler`, sampler dtype, `vllm`) stay the same. With more than one job, each
worker is pinned to its own cores (CPU affinity, torch's threads, vLLM's CPU thread binding;
on a GPU host: its own GPU). This process prints one line per event (a run started, done,
failed) and a status line every minute: runs going with their updates, done, failed, waiting,
and the time left. A failed run does not stop the others; the sweep then ends with exit code 1
naming each failed run and its log. SIGINT/SIGTERM is passed to every worker: each finishes its
update, checkpoints and stops (a second signal aborts at once); the same command continues.

--slurm submits one job per unfinished run through submitit (a job array; logs in
<out_root>/slurm/), each with the resources of SLURM below, the sweep file's `slurm:` mapping
(e.g. slurm: {partition: gpu, time_min: 2880, account: mylab}) or --slurm-<key> flags. A job
near its time limit checkpoints and requeues itself (TrainJob); rerunning the same command
later submits only what is still unfinished.
"""
import argparse
import collections
import gc
import gzip
import itertools
import json
import os
import re
import selectors
import shlex
import shutil
import signal
import subprocess
import sys
import time
import traceback

import yaml

import checkpoint
import config
import evaluate
import losses
import rollout
import run_info
import tasks
import train

HERE = os.path.dirname(os.path.abspath(__file__))


SWEEP_KEYS = {"config", "out_root", "results", "grid", "only", "per_loss", "overrides", "slurm", "per_kind"}


def expand(sweep: dict) -> list:
    """[(out_dir, overrides list)] for every run of the grid, in a fixed order of blocks: seed by
    seed (every run of the grid's first seed, then of its second, ...), and within a seed N by N
    (the grid's order; an objective's extra delays last), each block's runs by objective. A grid
    stopped part way has whole blocks (one seed, one N, every objective), and a block run on one
    machine shares one rounding path, so that the processor kind cannot masquerade as the
    objective."""
    unknown = sorted(set(sweep) - SWEEP_KEYS)
    if unknown:
        raise ValueError(f"unknown sweep file key(s) {unknown}; known: {sorted(SWEEP_KEYS)}")
    missing = sorted({"config", "out_root", "grid"} - set(sweep))
    if missing:
        raise ValueError(f"the sweep file lacks {missing} (see sweep.py's docstring for the format)")
    if sweep.get("per_kind") and not sweep.get("results"):
        raise ValueError("per_kind: true needs `results:` (the kept runs say which processor kinds have the rows)")
    grid = sweep["grid"]
    missing = {"loss", "delay", "seed"} - set(grid)
    if missing:
        raise ValueError(f"sweep grid must list loss, delay and seed; {sorted(missing)} missing")
    if grid["loss"] == "all":  # every registered objective, in the legend's order
        grid = {**grid, "loss": list(losses.LOSSES)}
    others = [k for k in grid if k not in ("loss", "delay", "seed")]
    runs = []
    for loss in grid["loss"]:
        only = sweep.get("only", {}).get(loss, {})
        # (key values fixed for these runs, delays): the grid, then one variant per `only` value
        # (a list of mappings: one variant per mapping, its keys set together)
        if isinstance(only, list):
            variants = [({}, list(grid["delay"]))] + [(dict(v), list(grid["delay"])) for v in only]
        else:
            variants = [({}, list(grid["delay"]) + list(only.get("delay", [])))]
            variants += [({k: v}, list(grid["delay"])) for k, vs in only.items() if k != "delay" for v in vs]
        for fixed, delays in variants:
            for delay, seed, *values in itertools.product(delays, grid["seed"],
                                                          *(grid[k] for k in others)):
                named = list(zip(others, values)) + list(fixed.items())
                name = f"{loss}_N{delay}_s{seed}" + "".join(f"_{k.split('.')[-1]}-{v}" for k, v in named)
                out_dir = os.path.join(sweep["out_root"], name)
                extra = {**sweep.get("overrides", {}), **sweep.get("per_loss", {}).get(loss, {}),
                         **dict(named)}
                overrides = [f"loss={loss}", f"delay={delay}", f"seed={seed}", f"out_dir={out_dir}"]
                overrides += [f"{k}={json.dumps(v)}" for k, v in extra.items()]
                block = (grid["seed"].index(seed),
                         grid["delay"].index(delay) if delay in grid["delay"] else len(grid["delay"]))
                runs.append((block, out_dir, overrides))
    return [(out_dir, overrides) for _, out_dir, overrides in sorted(runs, key=lambda r: r[0])]


def engine_key(cfg: dict) -> str:
    """What a sampler is made with: runs that agree on it share one."""
    return json.dumps([cfg["model"], cfg["sampler"], cfg["sampler_dtype"] or cfg["dtype"],
                       {**cfg["vllm"], "max_model_len": tasks.max_model_len(cfg)}])


def finished(out_dir: str, updates: int) -> bool:
    """Whether out_dir's metrics.jsonl (a run folder) or metrics.jsonl.gz (its kept results)
    reaches `updates`."""
    for path, opener in ((os.path.join(out_dir, "metrics.jsonl"), open),
                         (os.path.join(out_dir, "metrics.jsonl.gz"), gzip.open)):
        if os.path.exists(path):
            with opener(path, "rt") as f:
                return max((json.loads(line).get("update", 0) for line in f), default=0) >= updates
    return False


# ----------------------------------------------------------------------------- results kept

# A run's kept results (results/<sweep>/<run>/, committed to the repository so that a sweep on
# another checkout skips the run and `make tables` remakes every table from them): its resolved
# config, its metrics without the per-phase timings (time/update kept) and with every float to
# 7 significant digits (float32 precision: most metrics are float32 reductions), the final
# evaluation's per-problem records, and run_info.json (where and with what it ran). gzip with
# mtime 0, so that the same run gives the same bytes. About 45 kB for a 300-update toy run.
RESULT_DIGITS = 7


def results_dir(sweep: dict, out_dir: str):
    """Where a run of the sweep keeps its results (None: the sweep file has no `results:`)."""
    return os.path.join(sweep["results"], os.path.basename(out_dir)) if sweep.get("results") else None


def keep_results(out_dir: str, dest: str) -> None:
    """Write the finished run folder out_dir's results to dest (see RESULT_DIGITS above)."""
    def compact(value):
        return float(f"{value:.{RESULT_DIGITS}g}") if isinstance(value, float) else value

    def write_gz(name, rows):
        data = "".join(json.dumps(row) + "\n" for row in rows).encode()
        with open(os.path.join(tmp, name), "wb") as f:
            f.write(gzip.compress(data, compresslevel=9, mtime=0))

    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    records, path = [], os.path.join(out_dir, "eval_records.jsonl")
    if os.path.exists(path):  # the final evaluation's, one per problem (evaluate.read_records)
        last = max((r["update"] for r in evaluate.read_records(path)), default=None)
        records = evaluate.read_records(path, update=last)
    tmp = dest + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    shutil.copy(os.path.join(out_dir, "config.yaml"), tmp)
    if os.path.exists(os.path.join(out_dir, "run_info.json")):
        shutil.copy(os.path.join(out_dir, "run_info.json"), tmp)
    write_gz("metrics.jsonl.gz", [{k: compact(v) for k, v in row.items()
                                   if k == "time/update" or not k.startswith("time/")} for row in rows])
    write_gz("eval_records.jsonl.gz", records)
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)  # a stopped copy leaves only <dest>.tmp, never half a result


# ----------------------------------------------------------------------------- SLURM

# Resources of each job; a sweep file's `slurm:` mapping and the --slurm-* flags override them.
SLURM = {"partition": None, "account": None, "qos": None, "time_min": 1440, "gpus": 1,
         "cpus": 16, "mem_gb": 200, "signal_delay_s": 600, "max_requeues": 100,
         "max_parallel": 64, "cluster": "slurm"}  # cluster local: the jobs run on this machine


class TrainJob:
    """One run of the grid as a submitit job: train.train with resume=true, so a job that starts
    again continues from the run's last checkpoint.

    SLURM sends SIGUSR2 signal_delay_s before the time limit (or on preemption, where the cluster
    is set up so): the update in progress finishes, a checkpoint is written, and the job requeues
    itself with the same arguments (submitit's checkpoint hook), up to max_requeues times.
    SIGTERM (scancel, or preemption on clusters that requeue by themselves) writes a checkpoint
    and ends the job; `sweep.py FILE --slurm` again resubmits every unfinished run.
    """

    def __init__(self, workdir: str):
        self.workdir = workdir  # config paths and out_dirs are relative to where sweep.py ran

    def __call__(self, config_path: str, overrides: list) -> str:
        os.chdir(self.workdir)
        sys.path.insert(0, HERE)
        import checkpoint as checkpoint_lib
        import config as config_lib
        import train as train_lib
        cfg = config_lib.load_config(config_path, list(overrides) + ["resume=true"])
        train_lib.train(cfg)
        if checkpoint_lib.STOP["signal"] == signal.SIGUSR2:  # checkpointed: now let submitit requeue
            requeue = signal.getsignal(signal.SIGUSR2)  # submitit's, restored by train()
            if callable(requeue):
                requeue(signal.SIGUSR2, None)
        elif checkpoint_lib.STOP["signal"]:
            raise RuntimeError(f"{cfg['out_dir']} stopped by {signal.Signals(checkpoint_lib.STOP['signal']).name}"
                               f" after a checkpoint: run sweep.py again to resubmit it")
        return cfg["out_dir"]

    def checkpoint(self, config_path: str, overrides: list):
        """Called by submitit to requeue: the same job (a resumed run continues)."""
        import submitit
        return submitit.helpers.DelayedSubmission(self, config_path, overrides)


def make_executor(sweep: dict, flags: dict):
    """A submitit executor for the sweep's jobs (cluster=local runs them here, for testing)."""
    try:
        import submitit
    except ImportError:
        raise ImportError("--slurm needs submitit: pip install submitit") from None
    s = {**SLURM, **sweep.get("slurm", {}), **{k: v for k, v in flags.items() if v is not None}}
    unknown = sorted(set(s) - set(SLURM))
    if unknown:
        raise ValueError(f"unknown slurm setting(s) {unknown}; known: {sorted(SLURM)}")
    if s["cluster"] == "slurm" and shutil.which("sbatch") is None:
        raise FileNotFoundError("--slurm: sbatch is not on this machine's PATH; run sweep.py on a "
                                "SLURM login node, or use --print for another scheduler")
    executor = submitit.AutoExecutor(folder=os.path.join(sweep["out_root"], "slurm", "%j"),
                                     cluster=s["cluster"], slurm_max_num_timeout=s["max_requeues"])
    executor.update_parameters(
        timeout_min=s["time_min"], gpus_per_node=s["gpus"], cpus_per_task=s["cpus"],
        mem_gb=s["mem_gb"], nodes=1, tasks_per_node=1, slurm_signal_delay_s=s["signal_delay_s"],
        slurm_array_parallelism=s["max_parallel"], name=os.path.basename(sweep["out_root"]),
        **{f"slurm_{k}": s[k] for k in ("partition", "account", "qos") if s[k]})
    return executor


def submit(sweep: dict, executor) -> list:
    """One job per unfinished run of the grid (a job array); returns the submitit jobs."""
    todo = unfinished(sweep)
    with executor.batch():
        jobs = [executor.submit(TrainJob(os.getcwd()), sweep["config"], overrides)
                for _, out_dir, overrides in todo]
    for job, (_, out_dir, _) in zip(jobs, todo):
        print(f"job {job.job_id}: {out_dir}", file=sys.stderr)
    return jobs


# ----------------------------------------------------------------------------- main

def pick_seeds(sweep: dict, seeds: str) -> dict:
    """The sweep with its grid's seeds cut to `seeds` ("0,1,2", kept in the grid's order): a
    machine takes the blocks begun on its rounding path. ValueError for a seed not in the grid."""
    wanted = [int(s) for s in seeds.split(",") if s.strip()]
    unknown = sorted(set(wanted) - set(sweep["grid"]["seed"]))
    if unknown or not wanted:
        raise ValueError(f"--seeds {seeds!r}: pick among the grid's seeds {sweep['grid']['seed']}")
    return {**sweep, "grid": {**sweep["grid"], "seed": [s for s in sweep["grid"]["seed"] if s in wanted]}}


def row_and_seed(name: str):
    """(the row, the seed) of a run's folder name, None for another name:
    grpo_N8_s3_grpo_anchor-behavior -> (grpo_grpo_anchor-behavior, 3)."""
    found = re.search(r"_N\d+_s(\d+)", name)
    return (name[:found.start()] + name[found.end():], int(found.group(1))) if found else None


def kept_kinds(root: str) -> dict:
    """{run folder name: the processor kinds it ran on} of every kept run under `root` that
    has its run_info.json."""
    kinds = {}
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        path = os.path.join(root, name, run_info.RUN_INFO)
        if os.path.exists(path):
            with open(path) as f:
                kinds[name] = {run_info.processor_kind(s) for s in json.load(f)["sessions"]}
    return kinds


def hold_other_kinds(sweep: dict, todo: list, kind: str) -> list:
    """The part of `todo` a machine of processor kind `kind` runs: a seed whose kept runs of the
    grid all ran on other kinds is held (its blocks are finished where they were begun, so that
    a seed's blocks share a rounding path); a seed kept on this kind, or not begun, runs.
    `--seeds` names seeds to run here whatever kind began them."""
    ours, kinds = {os.path.basename(d) for d, _ in expand(sweep)}, collections.defaultdict(set)
    for name, ran_on in kept_kinds(sweep["results"]).items():
        if name in ours:  # {seed: the kinds its kept runs of this grid ran on}
            kinds[row_and_seed(name)[1]] |= ran_on
    held = sorted({cfg["seed"] for cfg, _, _ in todo if kinds.get(cfg["seed"]) and kind not in kinds[cfg["seed"]]})
    if held:
        elsewhere = "; ".join(sorted(set().union(*(kinds[s] for s in held))))
        print(f"seed(s) {held} begun on another processor kind ({elsewhere}): held here, on {kind}; "
              f"run them there, or name them with --seeds to run them here", file=sys.stderr)
    return [t for t in todo if t[0]["seed"] not in held]


def one_kind_block(sweep: dict, todo: list, kind: str) -> list:
    """The part of `todo` that a sweep file with `per_kind: true` runs on a machine of processor
    kind `kind` (run_info.processor_kind): its grid is a reference block for the kinds that have
    none, one seed per kind. A seed of the grid with a run kept on this kind: the rest of that
    seed; else, where a kept run of the grid's rows (any seed, from any sweep file, in
    `results`) ran on this kind: nothing; else the grid's first seed with no run kept at all."""
    ours = {os.path.basename(d) for d, _ in expand(sweep)}
    rows = {row_and_seed(n)[0] for n in ours}
    seeds_here, started, row_here = set(), set(), False
    for name, ran_on in kept_kinds(sweep["results"]).items():
        parsed = row_and_seed(name)
        if parsed is None or parsed[0] not in rows:
            continue
        here = kind in ran_on
        row_here |= here
        if name in ours:
            started.add(parsed[1])
            if here:
                seeds_here.add(parsed[1])
    fresh = [seed for seed in sweep["grid"]["seed"] if seed not in started]
    if seeds_here:
        keep, why = seeds_here, f"seed(s) {sorted(seeds_here)} begun on it"
    elif row_here:
        keep, why = set(), "it has kept runs of these rows"
    elif fresh:
        keep, why = {fresh[0]}, f"none of these rows ran on it: seed {fresh[0]}"
    else:
        keep, why = set(), "every seed begun elsewhere"
    chosen = [t for t in todo if t[0]["seed"] in keep]
    print(f"per_kind: on {kind}, {why}: {len(chosen)} run(s) of {len(todo)}", file=sys.stderr)
    return chosen


# the ladder a new leaderboard row joins (`make row`): its config, settings, results folder, and
# the reference block that gives a processor kind its references first
ROW_LADDER = os.path.join(HERE, "lab", "sweeps", "leaderboard_row_seeds_toy.yaml")
ROW_REFERENCES = os.path.join(HERE, "lab", "sweeps", "leaderboard_references_per_kind_toy.yaml")
ROW_SEEDS = list(range(10))


def row_sweep(loss: str, settings: list) -> dict:
    """The sweep of one leaderboard row: objective `loss` at `settings` (["key=value", ...], keys
    among the settings it registers) on ROW_LADDER's runs (config, overrides, results folder), N
    in {8, 32, 128, 0} x ROW_SEEDS; ValueError naming an unknown objective or setting."""
    registered = losses.objective(loss).hparams
    with open(ROW_LADDER) as f:
        ladder = yaml.load(f, Loader=config.YAML_LOADER)
    grid = {"loss": [loss], "delay": [8, 32, 128, 0], "seed": ROW_SEEDS}
    for item in settings:
        key, sep, value = item.partition("=")
        key = key.removeprefix("loss_args.")
        if not sep or key not in registered:
            raise ValueError(f"{item!r}: a row's setting is key=value with a key {loss} registers "
                             f"({', '.join(sorted(registered)) or 'none'})")
        grid[f"loss_args.{key}"] = [yaml.load(value, Loader=config.YAML_LOADER)]
    return {"config": ladder["config"], "out_root": ladder["out_root"], "results": ladder["results"],
            "grid": grid, "overrides": ladder["overrides"]}


def run_row(sweep: dict, jobs: str, cores_per_job: int = None) -> int:
    """`make row`: the reference block on this processor kind where it has none (ROW_REFERENCES,
    per_kind), then the row's runs (`sweep`, from row_sweep), each kept as it finishes (a run kept
    already is skipped, so the command continues where it stopped); prints the wall time and the
    machine. The sweep it ran is written to runs/rows/<loss>[_<key>-<value>...].yaml."""
    name = sweep["grid"]["loss"][0] + "".join(f"_{k.split('.')[-1]}-{v[0]}" for k, v in sweep["grid"].items()
                          if k not in ("loss", "delay", "seed"))
    path = os.path.join(HERE, "runs", "rows", f"{name}.yaml")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        yaml.safe_dump(sweep, f, sort_keys=False)
    start = time.time()
    with open(ROW_REFERENCES) as f:
        references = yaml.load(f, Loader=config.YAML_LOADER)
    code = run_here(references, ROW_REFERENCES, jobs, cores_per_job)
    code = run_here(sweep, path, jobs, cores_per_job) or code
    say(f"row {name}: its runs and the references' block took {(time.time() - start) / 60:.1f} min on "
        f"this machine ({run_info.this_processor_kind()}, {os.cpu_count()} cores)")
    return code


def unfinished(sweep: dict) -> list:
    """[(cfg, out_dir, overrides)] of the grid's runs that have not reached `updates`, neither
    in their run folder nor in their kept results; a finished run folder whose results are not
    kept yet gets them now."""
    runs = expand(sweep)
    configs = [config.load_config(sweep["config"], overrides) for _, overrides in runs]
    todo, kept, collected = [], 0, 0
    for cfg, (out_dir, overrides) in zip(configs, runs):
        dest = results_dir(sweep, out_dir)
        if dest and finished(dest, cfg["updates"]):
            kept += 1
        elif finished(out_dir, cfg["updates"]):
            if dest:
                keep_results(out_dir, dest)
                collected += 1
        else:
            todo.append((cfg, out_dir, overrides))
    where = ""
    if sweep.get("results"):
        where = f" ({kept} in {sweep['results']}" + (f", {collected} copied there now" if collected else "") + ")"
    print(f"{len(runs)} runs, {len(runs) - len(todo)} already finished{where}, {len(todo)} to run",
          file=sys.stderr)
    return todo


# ----------------------------------------------------------------------------- jobs here

# One core per toy job: a 1 M-parameter job gains little from a second core (docs/speed.md).
CORES_PER_JOB = 1
# Memory of one CPU job besides its model's weights and its engine's KV cache: process, libraries
# and buffers, from a toy job's measured peak RSS less its cache (docs/speed.md)
JOB_MEMORY_GIB = 1.3


def memory_available_gib():
    """MemAvailable of /proc/meminfo in GiB (None where there is none)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 2 ** 20
    except OSError:
        pass
    return None


def plan_jobs(jobs: str, runs: int, cfg: dict, cores_per_job: int = None) -> tuple:
    """([{"cores": [...] or None, "gpu": id or None}] one per worker, why) for --jobs `jobs` (a
    number or auto) and --cores-per-job, `runs` unfinished runs of the grid, `cfg` the first
    run's config.

    On the CPU a run's numbers depend on its thread count (torch's and vLLM's reductions split by
    threads: a 1-thread toy run and a 2-thread one differ in the 7th digit from update ~16 on),
    so auto gives every job the same CORES_PER_JOB cores whatever the grid's size (the last run
    of a sweep, or a failed run rerun alone, rounds as it would have among the others), and
    jobs = cores // CORES_PER_JOB, at most the runs to do and the jobs that fit in the memory
    available (each: its engine's KV cache + JOB_MEMORY_GIB + 8 x the model's files: sampler,
    learner, gradients, AdamW's two moments and a reference in float32); docs/speed.md has a
    toy job's measured footprint and what it plans on common machines.
    On a GPU host (the learner would take a GPU) auto is one job per GPU, each with its own GPU
    and an equal share of the cores (one GPU: one job, not pinned).
    A number N: N jobs (at most the runs to do) of --cores-per-job cores, or of an equal 1/N
    share of the cores, the same share however few runs are left; --jobs 1 without
    --cores-per-job is one job, not pinned: every core, as train.py alone would have.
    """
    gpus = []
    if cfg["device"] != "cpu":
        import torch
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        gpus = visible.split(",") if visible else list(map(str, range(torch.cuda.device_count())))
        gpus = gpus[:torch.cuda.device_count()]
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        list(range(os.cpu_count() or 1))
    if jobs == "auto" and gpus:
        n, why = len(gpus), f"auto: {len(gpus)} GPU(s), one job each"
    elif jobs == "auto":
        cores_per_job = cores_per_job or CORES_PER_JOB
        per_job = job_kv_cache_gib(cfg) + JOB_MEMORY_GIB + 8 * model_files_gib(cfg["model"])
        free = memory_available_gib()
        by_memory = int(free // per_job) if free is not None else len(cores)
        n = max(1, min(len(cores) // cores_per_job, by_memory))
        why = (f"auto: {len(cores)} cores, {cores_per_job} per job"
               + (f"; {free:.0f} GiB free, {per_job:.1f} per job" if free is not None else ""))
    else:
        n, why = int(jobs), f"--jobs {jobs}"
    workers = max(1, min(n, runs))  # no more workers than runs, each with the share of n jobs
    if gpus and workers > len(gpus):
        raise ValueError(f"--jobs {jobs}: {workers} jobs on {len(gpus)} GPU(s); each job needs "
                         f"its own GPU")
    if cores_per_job is None and n == 1:
        return [{"cores": None, "gpu": None}], why + f" -> 1 job, not pinned ({len(cores)} cores)"
    # the share of the jobs asked for, not of the runs left: the last run, or a run resumed
    # alone, keeps the thread count (the rounding path) it had among the others
    cores_per_job = cores_per_job or len(cores) // n
    if not 1 <= n * cores_per_job <= len(cores):
        raise ValueError(f"--jobs {jobs}: {n} job(s) of {cores_per_job or 1} core(s) need more than "
                         f"the {len(cores)} cores here; each job needs cores of its own")
    plan = [{"cores": cores[i * cores_per_job:(i + 1) * cores_per_job],
             "gpu": gpus[i] if gpus else None} for i in range(workers)]
    return plan, why + f" -> {workers} job(s) of {cores_per_job} core(s)" + (", 1 GPU each" if gpus else "")


def job_kv_cache_gib(cfg: dict) -> float:
    """The KV cache of one job's CPU engine in GiB, as rollout.Sampler sizes it for the run's
    model and context (0 for a model folder not there yet)."""
    try:
        return rollout.cpu_kv_cache_bytes(cfg["model"], cfg["sampler_dtype"] or cfg["dtype"],
                                          tasks.max_model_len(cfg)) / 2 ** 30
    except FileNotFoundError:
        return 0.0


def model_files_gib(model: str) -> float:
    """Size of the model folder's weight files in GiB (0 for a folder not there yet)."""
    if not os.path.isdir(model):
        return 0.0
    return sum(os.path.getsize(os.path.join(model, n)) for n in os.listdir(model)
               if n.endswith((".safetensors", ".bin", ".pt"))) / 2 ** 30


def logged_update(out_dir: str) -> int:
    """The last update in out_dir/metrics.jsonl (0: none yet), from its tail; a line being
    written is skipped."""
    try:
        with open(os.path.join(out_dir, "metrics.jsonl"), "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 8192))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return 0
    for line in reversed(lines):
        try:
            return int(json.loads(line).get("update", 0))
        except (ValueError, AttributeError):
            continue
    return 0


class Worker:
    """One worker process (sweep.py --worker): its slot of the plan, the run it holds, and the
    pipes: its stdin takes one run per line, its status pipe gives one event per line."""

    def __init__(self, slot: int, place: dict, sweep_path: str):
        self.slot, self.place, self.run, self.started_runs, self.buffer = slot, place, None, 0, b""
        self.run_started = False  # whether the run it holds has begun (its "start" event)
        read, write = os.pipe()
        env = {"TQDM_MININTERVAL": "30", **os.environ}  # the log: a progress line per 30 s
        if place["cores"] is not None:
            cores = ",".join(map(str, place["cores"]))
            env.update(OMP_NUM_THREADS=str(len(place["cores"])), VLLM_CPU_OMP_THREADS_BIND=cores)
        if place["gpu"] is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(place["gpu"])
        argv = [sys.executable, os.path.abspath(__file__), sweep_path, "--worker",
                ",".join(map(str, place["cores"] or [])), "--status-fd", str(write)]
        # a session of its own: a Ctrl-C at the terminal reaches this process only, which passes
        # it on once (train.py aborts at once on a second signal)
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, env=env, pass_fds=(write,),
                                     start_new_session=True)
        os.close(write)
        self.status = read

    @property
    def name(self) -> str:
        where = f"cores {','.join(map(str, self.place['cores']))}" if self.place["cores"] else "all cores"
        return f"worker {self.slot} ({where}" + (f", GPU {self.place['gpu']})" if
                                                  self.place["gpu"] is not None else ")")

    def give(self, index: int, config_path: str, overrides: list) -> None:
        self.run, self.run_started = index, False
        self.proc.stdin.write((json.dumps({"run": index, "config": config_path,
                                           "overrides": overrides}) + "\n").encode())
        self.proc.stdin.flush()

    def close(self) -> None:
        """No more runs: the worker exits when it has finished the one it holds."""
        if not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass

    def events(self) -> list:
        """The complete event lines read so far; [None] once the worker's pipe has closed."""
        data = os.read(self.status, 65536)
        if not data:
            return [None]
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        return [json.loads(line) for line in lines if line.strip()]


def say(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def todo_here(sweep: dict, hold: bool) -> list:
    """The unfinished runs this machine takes: a per_kind grid's block for its processor kind,
    else all but the seeds begun on another kind (hold=False: all)."""
    todo, kind = unfinished(sweep), run_info.this_processor_kind()
    if sweep.get("per_kind"):
        return one_kind_block(sweep, todo, kind)
    return hold_other_kinds(sweep, todo, kind) if sweep.get("results") and hold else todo


def run_here(sweep: dict, sweep_path: str, jobs: str, cores_per_job: int = None,
             status_every: float = 60.0, hold: bool = True) -> int:
    """Every unfinished run of the grid in worker processes (see the module's docstring), but
    the seeds begun on another processor kind (hold_other_kinds; hold=False: those too);
    returns the exit code: 0 all finished, 1 some failed, 128 + signal when stopped by one."""
    _lock = lock_out_root(sweep["out_root"])  # held until this process ends
    todo = todo_here(sweep, hold)
    if not todo:
        return 0
    plan, why = plan_jobs(jobs, len(todo), todo[0][0], cores_per_job)
    say(f"{len(plan)} job(s) ({why}); each run's output in <out_dir>/train.log")
    name = lambda i: os.path.basename(todo[i][1])
    log_of = lambda i: os.path.join(todo[i][1], "train.log")
    waiting = collections.deque(range(len(todo)))
    done, failed, stopped, landed = [], {}, {}, []
    # where train.py resumes: the newest undamaged checkpoint, not the last logged row
    first_update = {i: checkpoint.resume_update(todo[i][1]) for i in range(len(todo))}
    started_at, t0 = {}, time.time()
    selector = selectors.DefaultSelector()
    stop = {"signal": None}

    def start_worker(slot: int) -> None:
        worker = Worker(slot, plan[slot], sweep_path)
        selector.register(worker.status, selectors.EVENT_READ, worker)
        hand_out(worker)

    def hand_out(worker: Worker) -> None:
        while waiting and stop["signal"] is None:
            i = waiting.popleft()
            dest = results_dir(sweep, todo[i][1])
            if dest and finished(dest, todo[i][0]["updates"]):  # another sweep process kept it
                landed.append(i)
                say(f"skip {name(i)}: its results landed in {dest} after this sweep started")
                continue
            try:
                worker.give(i, sweep["config"], todo[i][2])
                return
            except BrokenPipeError:  # it died meanwhile: its exit is handled with its pipe
                waiting.appendleft(i)
                worker.run = None
                break
        worker.close()

    def on_signal(signum, frame) -> None:
        first = stop["signal"] is None
        stop["signal"] = stop["signal"] or signum
        for key in list(selector.get_map().values()):
            try:
                key.data.proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
        say(f"{signal.Signals(signum).name}: " + (
            "every worker finishes its update, checkpoints and stops (again: abort at once)"
            if first else "aborting every worker now (the last checkpoints stay)"))

    handlers = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        for slot in range(len(plan)):
            start_worker(slot)
        last_status = time.time()
        while selector.get_map():
            for key, _ in selector.select(timeout=1.0):
                worker = key.data
                for event in worker.events():
                    if event is None:  # the worker has exited
                        selector.unregister(worker.status)
                        os.close(worker.status)
                        code = worker.proc.wait()
                        i = worker.run
                        if i is not None and not worker.run_started:  # never began: back in line
                            waiting.appendleft(i)
                        elif i is not None and i not in failed and i not in stopped:
                            how = (f"killed by {signal.Signals(-code).name}" if code < 0 else
                                   f"exited with code {code}")
                            if stop["signal"] is not None:
                                stopped[i] = f"worker {how} before it checkpointed"
                            else:
                                failed[i] = f"its worker {how}"
                            say(f"{worker.name}: {name(i)} " + ("stopped" if i in stopped else
                                "FAILED") + f": {stopped.get(i) or failed[i]} (log {log_of(i)})")
                        # a fresh worker for what is left, unless this one never got through its
                        # start (it would fail the same way again)
                        if waiting and stop["signal"] is None and worker.started_runs:
                            start_worker(worker.slot)
                        break
                    i = event["run"]
                    if event["event"] == "start":
                        worker.started_runs += 1
                        worker.run_started = True
                        started_at[i] = time.time()
                        say(f"{worker.name}: start {name(i)} ({len(started_at)}/{len(todo)})"
                            + (f", resuming from its checkpoint at update {first_update[i]}"
                               if first_update[i] else ""))
                    elif event["event"] == "done":
                        done.append(i)
                        worker.run = None
                        dest = results_dir(sweep, todo[i][1])
                        if dest:
                            keep_results(todo[i][1], dest)
                        say(f"{worker.name}: done {name(i)} in {time.time() - started_at[i]:.0f} s "
                            f"({len(done)}/{len(todo)} done)")
                        hand_out(worker)
                    elif event["event"] == "failed":
                        failed[i] = event["error"]
                        say(f"{worker.name}: {name(i)} FAILED: {event['error']} (log {log_of(i)})")
                    elif event["event"] == "stopped":
                        stopped[i] = f"stopped by {event['signal']} after a checkpoint"
                        say(f"{worker.name}: {name(i)} {stopped[i]}")
            if time.time() - last_status >= status_every and selector.get_map() and (waiting or any(
                    key.data.run is not None for key in selector.get_map().values())):
                going = [key.data.run for key in selector.get_map().values() if key.data.run is not None]
                say(status_line(todo, going, done, failed, waiting, first_update, time.time() - t0))
                last_status = time.time()
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    return report_end(todo, done, failed, stopped, landed, [i for i in waiting if i not in failed],
                      time.time() - t0, stop["signal"])


def status_line(todo: list, going: list, done: list, failed: dict, waiting, first_update: dict,
                seconds: float) -> str:
    """The minute's status: runs done, failed, going (each at its logged update), waiting, and the
    time left at the pace of the updates made so far (from where each run resumed)."""
    progress = {i: logged_update(todo[i][1]) for i in going}
    made = sum(max(0, u - first_update[i]) for i, u in progress.items()) + sum(
        todo[i][0]["updates"] - first_update[i] for i in done)
    left = sum(todo[i][0]["updates"] - progress.get(i, first_update[i]) for i in list(waiting) + list(progress))
    eta = f"~{left * seconds / made / 60:.0f} min left" if made else "time left: not known yet"
    return (f"status: {len(done)} done, {len(failed)} failed, {len(going)} going"
            + "".join(f", {os.path.basename(todo[i][1])} at {u}/{todo[i][0]['updates']}" for i, u in progress.items())
            + f"; {len(waiting)} waiting; {eta}")


def lock_out_root(out_root: str):
    """An exclusive lock on out_root/.sweep.lock (the open file: held while it is), or
    ValueError where another sweep.py holds it."""
    import fcntl
    os.makedirs(out_root, exist_ok=True)
    lock = open(os.path.join(out_root, ".sweep.lock"), "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise ValueError(f"another sweep.py is running the runs of {out_root}: wait for "
                         f"it, or stop it (Ctrl-C) and run this one") from None
    return lock


def report_end(todo: list, done: list, failed: dict, stopped: dict, landed: list, not_run: list,
               seconds: float, stopped_by) -> int:
    """The sweep's last lines (what ran, failed, stopped, was not run) and its exit code: 0 all
    finished, 1 some failed or not run, 128 + the signal that stopped it."""
    name = lambda i: os.path.basename(todo[i][1])
    say(f"sweep: {len(done)} of {len(todo)} runs done in {seconds:.0f} s"
        + (f", {len(landed)} kept meanwhile by another sweep" if landed else "")
        + (f", {len(failed)} failed" if failed else "") + (f", {len(stopped)} stopped" if stopped else "")
        + (f", {len(not_run)} not run" if not_run else ""))
    for i, why_failed in failed.items():
        print(f"  FAILED {todo[i][1]}: {why_failed}; log {os.path.join(todo[i][1], 'train.log')}", file=sys.stderr)
    for i, why_stopped in stopped.items():
        print(f"  stopped {todo[i][1]}: {why_stopped}", file=sys.stderr)
    if stopped_by is not None:
        print("  run the same command to continue", file=sys.stderr)
        return 128 + stopped_by
    if not_run:
        print(f"  not run ({len(not_run)}): " + ", ".join(name(i) for i in not_run)
              + "; no worker could start: see the messages above", file=sys.stderr)
    return 1 if failed or not_run else 0


def worker_main(cores: str, status_fd: int) -> None:
    """sweep.py --worker: pinned to `cores` (empty: not pinned), run the runs given on stdin one
    after the other, keeping the sampler while the engine's settings stay the same; report on
    the status pipe. Exits after a run that failed or was stopped by a signal (the sweep starts
    a fresh worker for the runs still waiting), and when stdin closes."""
    import torch
    if cores:
        cpus = [int(c) for c in cores.split(",")]
        os.sched_setaffinity(0, cpus)
        torch.set_num_threads(len(cpus))  # before the engine: vLLM's CPU backend then freezes it
    try:  # Linux: SIGTERM (checkpoint, stop) when the sweep process dies
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    status = os.fdopen(status_fd, "w", buffering=1)
    report = lambda **event: status.write(json.dumps(event) + "\n")
    sampler, engine = None, None
    for line in sys.stdin:
        job = json.loads(line)
        cfg = config.load_config(job["config"], job["overrides"])
        os.makedirs(cfg["out_dir"], exist_ok=True)
        report(event="start", run=job["run"])
        error = None
        with open(os.path.join(cfg["out_dir"], "train.log"), "a") as log, redirected(log):
            print(f"==== {time.strftime('%Y-%m-%d %H:%M:%S')} sweep worker pid {os.getpid()}, "
                  f"cores {cores or 'all'}, {torch.get_num_threads()} threads", file=sys.stderr)
            try:
                if engine_key(cfg) != engine:  # a grid over the engine's own settings needs a new one
                    del sampler
                    gc.collect()
                    sampler, engine = None, None
                    sampler, engine = rollout.make_sampler(cfg), engine_key(cfg)
                train.train({**cfg, "resume": True}, sampler=sampler)  # an unfinished run continues
            except Exception as e:
                traceback.print_exc()
                error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
        if error:
            report(event="failed", run=job["run"], error=error)
            sys.exit(1)
        if checkpoint.STOP["signal"]:  # SIGINT/SIGTERM: this run checkpointed; rerun to continue
            report(event="stopped", run=job["run"], signal=signal.Signals(checkpoint.STOP["signal"]).name)
            sys.exit(128 + checkpoint.STOP["signal"])
        report(event="done", run=job["run"])


class redirected:
    """Within the block, file descriptors 1 and 2 (this process's and its libraries' output)
    write to `log`."""

    def __init__(self, log):
        self.log = log

    def __enter__(self):
        sys.stdout.flush()
        sys.stderr.flush()
        self.saved = [os.dup(1), os.dup(2)]
        os.dup2(self.log.fileno(), 1)
        os.dup2(self.log.fileno(), 2)

    def __exit__(self, *exc):
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, saved in zip((1, 2), self.saved):
            os.dup2(saved, fd)
            os.close(saved)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", nargs="?", help="sweep YAML file")
    parser.add_argument("--row", metavar="LOSS", help="run one leaderboard row instead (`make row`): "
                        "the objective LOSS on the ladder's runs, with the settings given after it")
    parser.add_argument("settings", nargs="*", help="--row: the row's settings, key=value")
    parser.add_argument("--print", action="store_true", help="print one command per run")
    parser.add_argument("--seeds", help="only these seeds of the grid (e.g. 0,1,2), run here even where "
                                        "another processor kind began them (without it, such seeds are held)")
    parser.add_argument("--jobs", default="1", help="runs at once here: a number, or auto "
                                                    "(plan_jobs: by cores, memory and GPUs)")
    parser.add_argument("--cores-per-job", type=int, help="cores (threads) of each job (default: "
                        "auto 1 on a CPU host; N: an equal share)")
    parser.add_argument("--slurm", action="store_true", help="submit one SLURM job per "
                                                             "unfinished run (submitit)")
    for key, default in SLURM.items():
        parser.add_argument(f"--slurm-{key.replace('_', '-')}", dest=f"slurm_{key}",
                            type=type(default) if isinstance(default, int) else str,
                            help=f"default {default}, or the sweep file's slurm.{key}")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # internal: one worker process
    parser.add_argument("--status-fd", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker is not None:
        return worker_main(args.worker, args.status_fd)
    if args.jobs != "auto" and not (args.jobs.isdigit() and int(args.jobs) >= 1):
        parser.error(f"--jobs must be a number >= 1 or auto, got {args.jobs!r}")
    if args.cores_per_job is not None and args.cores_per_job < 1:
        parser.error(f"--cores-per-job must be >= 1, got {args.cores_per_job}")
    if args.row:  # --print lists the row's runs (its reference block is per machine)
        try:
            sweep = row_sweep(args.row, [args.sweep, *args.settings] if args.sweep else args.settings)
        except ValueError as e:
            sys.exit(f"error: {e}")
    elif not args.sweep:
        parser.error("name a sweep file (or --row LOSS)")
    else:
        with open(args.sweep) as f:
            sweep = yaml.load(f, Loader=config.YAML_LOADER)
    if args.seeds:
        try:
            sweep = pick_seeds(sweep, args.seeds)
        except ValueError as e:
            sys.exit(f"error: {e}")
    if args.print:
        for _, overrides in expand(sweep):
            config.load_config(sweep["config"], overrides)  # a bad run fails here, not on a node
            print(" ".join(["python", "train.py", sweep["config"], *map(shlex.quote, overrides)]))
        return
    if args.row:
        try:
            sys.exit(run_row(sweep, args.jobs, args.cores_per_job))
        except ValueError as e:
            sys.exit(f"error: {e}")
    if args.slurm:
        if sweep.get("per_kind"):
            sys.exit("error: per_kind: true picks the runs by the processor they run on: run it there, not through SLURM")
        flags = {k: getattr(args, f"slurm_{k}") for k in SLURM}
        try:
            executor = make_executor(sweep, flags)
        except (ImportError, ValueError, FileNotFoundError) as e:
            sys.exit(f"error: {e}")
        submit(sweep, executor)
        return
    try:
        code = run_here(sweep, args.sweep, args.jobs, args.cores_per_job, hold=not args.seeds)
    except ValueError as e:
        sys.exit(f"error: {e}")
    if code:
        sys.exit(code)


if __name__ == "__main__":
    main()
