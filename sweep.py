"""Run a grid of training runs (objectives x N x seeds) here, send it to SLURM, or print it.

    python sweep.py configs/sweep_fig3_toy.yaml            # run every unfinished run here
    python sweep.py configs/sweep_fig3_qwen.yaml --slurm --slurm-partition gpu --slurm-time-min 2880
    python sweep.py configs/sweep_fig3_toy.yaml --print    # one command per run, for a scheduler

A sweep file names a base config, a grid and an output root:

    config: configs/toy.yaml
    out_root: runs/fig3_toy
    grid: {loss: [grpo, agro], delay: [0, 8], seed: [0, 1]}
    overrides: {updates: 300}              # applied to every run
    # grid may add any other config key, dotted for nested ones, e.g. loss_args.beta: [0.01, 0.1]
    per_loss: {grpo_tis: {lr: 1.0e-4}}     # applied to runs of one objective (optional)
    only: {grpo_tis: {delay: [128]}}       # extra grid values for one objective (optional);
    # any other key adds runs of that objective with it set, e.g.
    # only: {grpo: {loss_args.grpo_anchor: [behavior]}}  -> grpo_N8_s0_grpo_anchor-behavior, ...

Each run goes to <out_root>/<loss>_N<delay>_s<seed>, followed by _<name>-<value> for every other
grid key (name: the last part of a dotted key), e.g. ggpo_N8_s0_beta-0.1_ref_refresh_every-25.
A run whose metrics.jsonl already reaches `updates` is skipped, an unfinished one resumes from
its last checkpoint. Runs here share one sampler (vLLM engine) while its settings (model,
`sampler`, sampler dtype, `vllm`) stay the same.

--slurm submits one job per unfinished run through submitit (a job array; logs in
<out_root>/slurm/), each with the resources of SLURM below, the sweep file's `slurm:` mapping
(e.g. slurm: {partition: gpu, time_min: 2880, account: mylab}) or --slurm-<key> flags. A job
near its time limit checkpoints and requeues itself (TrainJob); rerunning the same command
later submits only what is still unfinished.
"""
import argparse
import gc
import itertools
import json
import os
import shlex
import shutil
import signal
import sys

import yaml

import checkpoint
import config
import rollout
import tasks
import train

HERE = os.path.dirname(os.path.abspath(__file__))


def expand(sweep: dict) -> list:
    """[(out_dir, overrides list)] for every run of the grid, in a fixed order."""
    grid = sweep["grid"]
    missing = {"loss", "delay", "seed"} - set(grid)
    if missing:
        raise ValueError(f"sweep grid must list loss, delay and seed; {sorted(missing)} missing")
    others = [k for k in grid if k not in ("loss", "delay", "seed")]
    runs = []
    for loss in grid["loss"]:
        only = sweep.get("only", {}).get(loss, {})
        # (key values fixed for these runs, delays): the grid, then one variant per `only` value
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
                runs.append((out_dir, overrides))
    return runs


def engine_key(cfg: dict) -> str:
    """What a sampler is made with: runs that agree on it share one."""
    return json.dumps([cfg["model"], cfg["sampler"], cfg["sampler_dtype"] or cfg["dtype"],
                       {**cfg["vllm"], "max_model_len": tasks.max_model_len(cfg)}])


def finished(out_dir: str, updates: int) -> bool:
    path = os.path.join(out_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return False
    last = 0
    with open(path) as f:
        for line in f:
            last = max(last, json.loads(line).get("update", 0))
    return last >= updates


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

def unfinished(sweep: dict) -> list:
    """[(cfg, out_dir, overrides)] of the grid's runs that have not reached `updates`."""
    runs = expand(sweep)
    configs = [config.load_config(sweep["config"], overrides) for _, overrides in runs]
    todo = [(cfg, d, o) for cfg, (d, o) in zip(configs, runs) if not finished(d, cfg["updates"])]
    print(f"{len(runs)} runs, {len(runs) - len(todo)} already finished, {len(todo)} to run",
          file=sys.stderr)
    return todo


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep", help="sweep YAML file")
    parser.add_argument("--print", action="store_true", help="print one command per run")
    parser.add_argument("--slurm", action="store_true", help="submit one SLURM job per "
                                                             "unfinished run (submitit)")
    for key, default in SLURM.items():
        parser.add_argument(f"--slurm-{key.replace('_', '-')}", dest=f"slurm_{key}",
                            type=type(default) if isinstance(default, int) else str,
                            help=f"default {default}, or the sweep file's slurm.{key}")
    args = parser.parse_args(argv)
    with open(args.sweep) as f:
        sweep = yaml.safe_load(f)
    if args.print:
        for _, overrides in expand(sweep):
            config.load_config(sweep["config"], overrides)  # a bad run fails here, not on a node
            print(" ".join(["python", "train.py", sweep["config"], *map(shlex.quote, overrides)]))
        return
    if args.slurm:
        flags = {k: getattr(args, f"slurm_{k}") for k in SLURM}
        try:
            executor = make_executor(sweep, flags)
        except (ImportError, ValueError, FileNotFoundError) as e:
            sys.exit(f"error: {e}")
        submit(sweep, executor)
        return
    todo = [(cfg, d) for cfg, d, _ in unfinished(sweep)]
    sampler, engine = None, None
    for i, (cfg, out_dir) in enumerate(todo):
        print(f"[{i + 1}/{len(todo)}] {out_dir}", file=sys.stderr)
        if engine_key(cfg) != engine:  # a grid over the engine's own settings needs a new one
            del sampler
            gc.collect()
            sampler, engine = rollout.make_sampler(cfg), engine_key(cfg)
        train.train({**cfg, "resume": True}, sampler=sampler)  # an unfinished run continues
        if checkpoint.STOP["signal"]:  # SIGINT/SIGTERM: this run checkpointed; rerun to continue
            sys.exit(128 + checkpoint.STOP["signal"])


if __name__ == "__main__":
    main()
