"""The run folder: checkpoints, atomic writes, RNG state, the metrics log, the out_dir checks.

out_dir/
  config.yaml          the resolved config (a resumed run must match it, see check_out_dir)
  run_info.json        where and with what it ran, one entry per session (run_info.py)
  metrics.jsonl        one JSON object per update (and the update-0 evaluation)
  eval_records.jsonl   per-problem evaluation records, tagged with their update
  ckpt-000040/         all a resumed run needs to continue exactly as if never stopped:
    learner.pt         learner weights
    optimizer.pt       AdamW state
    reference.pt       reference weights, only when ref_refresh_every > 0 (else the base model is it)
    state.pt           train.RunState.to_dict(): update counter, next batch index, responses_total,
                       skip counters, the delay queue (rollouts, rewards, policy versions), RNG
                       states, the sampler seed stream
    manifest.json      the byte size of each file above, written last
A checkpoint is written as ckpt-XXXXXX.tmp, fsynced, then renamed, so a folder named
ckpt-XXXXXX is always complete when written; the last `keep_checkpoints` are kept, older ones
deleted only after the rename, so the disk must hold keep_checkpoints + 1 of them (check_disk
refuses a run whose out_dir cannot, before any model loads). Damage after the write (a full
disk, a copy gone wrong) is found when resuming: a file whose size is not the manifest's, or
that torch cannot read, makes the checkpoint unusable, and the run resumes from the previous one
(usable_checkpoint, load_usable).

How a run stops and keeps its last checkpoint: a signal (stop_on_signals: the update finishes,
a checkpoint is written), out of memory outside learn() (stop_on_oom, naming the knob to lower),
and max_consecutive_skips skipped updates in a row (diverged).
"""
import contextlib
import json
import math
import os
import random
import re
import shutil
import signal
import sys
import threading

import torch
import yaml

import config
import losses
import tasks

CKPT_NAME = re.compile(r"ckpt-(\d+)")
MANIFEST = "manifest.json"


class CheckpointDamaged(RuntimeError):
    """A checkpoint file that torch cannot read (its size was right)."""


def ckpt_update(path: str) -> int:
    """The update number of a checkpoint folder (ckpt-000040 -> 40)."""
    return int(CKPT_NAME.fullmatch(os.path.basename(path)).group(1))

def checkpoints(out_dir: str) -> list:
    """The checkpoint folders of out_dir (ckpt-XXXXXX, renamed complete), newest first."""
    if not os.path.isdir(out_dir):
        return []
    found = [os.path.join(out_dir, n) for n in os.listdir(out_dir) if CKPT_NAME.fullmatch(n)]
    return sorted(found, key=ckpt_update, reverse=True)


def latest_checkpoint(out_dir: str):
    """The checkpoint folder with the highest update in out_dir, or None."""
    found = checkpoints(out_dir)
    return found[0] if found else None


def damage(path: str):
    """Why checkpoint `path` cannot be used (a file missing, or not of its manifest's size), or
    None. A folder without a manifest (written before manifests existed) is checked when loaded."""
    manifest = os.path.join(path, MANIFEST)
    if not os.path.exists(manifest):
        return None
    try:
        with open(manifest) as f:
            sizes = json.load(f)
    except (OSError, ValueError):
        return f"{MANIFEST} cannot be read"
    for name, size in sizes.items():
        file = os.path.join(path, name)
        if not os.path.exists(file):
            return f"{name} is missing"
        if os.path.getsize(file) != size:
            return f"{name} has {os.path.getsize(file)} bytes, its manifest says {size}"
    return None


def set_aside(path: str, why: str, older: str) -> None:
    """Rename a damaged checkpoint out of the way (save_checkpoint deletes it with the next one)."""
    shutil.rmtree(path + ".damaged", ignore_errors=True)  # one of that number set aside before
    os.replace(path, path + ".damaged")
    print(f"checkpoint {path} is damaged ({why}): resuming from {older} instead (the damaged one is "
          f"now {os.path.basename(path)}.damaged, deleted at the next checkpoint)", file=sys.stderr)


def resume_update(out_dir: str) -> int:
    """The update a resume would start from, as far as sizes tell without moving anything: that
    of the newest checkpoint with its manifest's sizes, 0 when none (what `sweep.py` announces;
    train.py also reads the files, and may go back further)."""
    ckpt = next((path for path in checkpoints(out_dir) if damage(path) is None), None)
    return ckpt_update(ckpt) if ckpt else 0


def usable_checkpoint(out_dir: str):
    """The newest checkpoint of out_dir whose files have their manifest's sizes, or None when
    out_dir holds none. Damaged newer ones are set aside, each with a one-line message; when
    every checkpoint is damaged, a one-line ValueError names them (none is moved)."""
    return _newest_usable(out_dir, lambda path: None)[0]


def _newest_usable(out_dir: str, use) -> tuple:
    """(path, use(path)) for the newest checkpoint of out_dir that has its manifest's sizes and
    for which use(path) raises no CheckpointDamaged; the damaged newer ones are set aside.
    (None, None) when out_dir holds none; a ValueError naming them all when none is usable."""
    found, reasons = checkpoints(out_dir), []
    for path in found:
        why = damage(path)
        if why is None:
            try:
                result = use(path)
            except CheckpointDamaged as e:
                why = str(e)
        if why is None:
            for bad, bad_why in reasons:
                set_aside(bad, bad_why, path)
            return path, result
        reasons.append((path, why))
    if found:
        raise no_usable_checkpoint(out_dir, reasons)
    return None, None


def no_usable_checkpoint(out_dir: str, reasons: list) -> ValueError:
    return ValueError(f"no usable checkpoint in {out_dir}: "
                      + "; ".join(f"{os.path.basename(p)}: {why}" for p, why in reasons)
                      + ". Restore one of them from a copy, or start a new run in another out_dir")


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str, text: str) -> None:
    with open(path + ".tmp", "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)


def save_checkpoint(out_dir: str, update: int, model, optimizer, ref_model, state: dict,
                    keep: int = 2) -> str:
    """Write checkpoint `update` atomically, then delete all but the newest `keep`; returns its
    folder. `ref_model` None: the reference is the base model and is not saved."""
    final = os.path.join(out_dir, f"ckpt-{update:06d}")
    tmp = final + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)  # left by a crash during an earlier write
    os.makedirs(tmp)
    files = {"learner.pt": model.state_dict(), "optimizer.pt": optimizer.state_dict(),
             "state.pt": state}
    if ref_model is not None:
        files["reference.pt"] = ref_model.state_dict()
    for name, obj in files.items():
        with open(os.path.join(tmp, name), "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
    write_atomic(os.path.join(tmp, MANIFEST), json.dumps(
        {name: os.path.getsize(os.path.join(tmp, name)) for name in files}))
    _fsync_dir(tmp)
    os.replace(tmp, final)
    _fsync_dir(out_dir)
    kept = {final, *checkpoints(out_dir)[:keep]}
    for name in os.listdir(out_dir):  # older checkpoints, temp folders of interrupted writes,
        path = os.path.join(out_dir, name)  # damaged ones set aside
        if name.startswith("ckpt-") and path not in kept:
            shutil.rmtree(path, ignore_errors=True)
    return final


def load_checkpoint(path: str, model, optimizer, ref_model) -> dict:
    """Load a checkpoint into the learner, the optimizer and (when saved) the reference; return
    its state.pt (plain Python values and tensors: train.RunState.from_dict reads it)."""

    def load(name):  # weights_only: a checkpoint holds tensors and plain Python values only
        try:
            return torch.load(os.path.join(path, name), map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - whatever torch's reader says, the file is damaged
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise CheckpointDamaged(f"{name} cannot be read: {type(e).__name__}: {first}"[:160]) from e

    model.load_state_dict(load("learner.pt"))
    optimizer.load_state_dict(load("optimizer.pt"))
    if ref_model is not None and os.path.exists(os.path.join(path, "reference.pt")):
        ref_model.load_state_dict(load("reference.pt"))
    return load("state.pt")


def load_usable(out_dir: str, model, optimizer, ref_model) -> tuple:
    """(path, state.pt) of the newest usable checkpoint of out_dir, loaded into the models and
    the optimizer: one with a file of the wrong size or that torch cannot read is set aside for
    the one before it (which overwrites every tensor the damaged one loaded). With none usable,
    a one-line ValueError names them all (none is moved)."""
    path, state = _newest_usable(out_dir, lambda p: load_checkpoint(p, model, optimizer, ref_model))
    if path is None:
        raise no_usable_checkpoint(out_dir, [])
    return path, state


def rng_state() -> dict:
    """Every RNG the run may draw from (numpy's is not used by this code, so not saved)."""
    return {"torch": torch.get_rng_state(), "python": random.getstate(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if state["cuda"]:
        torch.cuda.set_rng_state_all(state["cuda"])


def drop_logged_after(out_dir: str, update: int) -> None:
    """Remove the rows of metrics.jsonl and eval_records.jsonl past `update`, which a killed run
    logged after its last checkpoint (the resumed run logs them again), and a line torn by the kill."""
    for name in ("metrics.jsonl", "eval_records.jsonl"):
        path = os.path.join(out_dir, name)
        if not os.path.exists(path):
            continue
        kept = []
        with open(path) as f:
            for line in f:
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if row["update"] <= update:
                    kept.append(line.rstrip("\n") + "\n")
        write_atomic(path, "".join(kept))


def write_config(out_dir: str, cfg: dict, notes: dict = None) -> None:
    """out_dir/config.yaml; notes {top-level key: text} become comments after their keys' values
    (e.g. how cpu_matmul: auto was resolved)."""
    os.makedirs(out_dir, exist_ok=True)
    lines = yaml.safe_dump(cfg, sort_keys=False).splitlines()
    for key, note in (notes or {}).items():
        lines = [f"{line}  # {note}" if line.startswith(f"{key}: ") else line for line in lines]
    write_atomic(os.path.join(out_dir, "config.yaml"), "\n".join(lines) + "\n")


def jsonable(row: dict) -> dict:
    """A metrics row as metrics.jsonl holds it: non-finite floats become null."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}


def append_row(log_file, row: dict) -> dict:
    """One row of metrics.jsonl, flushed at once (a killed run keeps every row it logged);
    returns the row as written (jsonable), for the live loggers."""
    logged = jsonable(row)
    log_file.write(json.dumps(logged) + "\n")
    log_file.flush()
    return logged


def check_out_dir(cfg: dict):
    """Refuse an out_dir that holds another run (or this run, without resume=true), or a
    checkpoint past `updates`. Returns the checkpoint to resume from, or None."""
    out_dir = cfg["out_dir"]
    saved = os.path.join(out_dir, "config.yaml")
    if os.path.exists(saved):
        with open(saved) as f:
            diff = config.config_differences(yaml.load(f, Loader=config.YAML_LOADER) or {}, cfg)
        if diff:
            raise ValueError(
                f"out_dir {out_dir!r} holds a different run ({'; '.join(diff)}). Pick another "
                f"out_dir; resume=true continues a run only with its own config (these may change: "
                f"{', '.join(config.RESUMABLE_CHANGES)})")
    if not cfg["resume"]:
        ckpt = latest_checkpoint(out_dir)
        metrics_path = os.path.join(out_dir, "metrics.jsonl")
        logged = os.path.exists(metrics_path) and os.path.getsize(metrics_path) > 0
        if ckpt or logged:
            raise ValueError(
                f"out_dir {out_dir!r} already holds this run ("
                + (f"checkpoint at update {ckpt_update(ckpt)}): pass resume=true to continue it"
                   if ckpt else "metrics but no checkpoint): pass resume=true to start it again there")
                + ", or pick another out_dir (or delete this one)")
        return None
    ckpt = usable_checkpoint(out_dir)
    if ckpt and ckpt_update(ckpt) > cfg["updates"]:
        raise ValueError(f"the checkpoint {ckpt} is past updates={cfg['updates']}; pass "
                         f"updates={ckpt_update(ckpt)} or more to resume it")
    if ckpt:
        check_log_reaches(out_dir, ckpt_update(ckpt), cfg["eval_every"] > 0)
    return ckpt


def check_log_reaches(out_dir: str, update: int, evaluated_at_0: bool) -> None:
    """Refuse to resume from a checkpoint at `update` whose run lost its log before it: every
    update 1..update must have its row in metrics.jsonl (and update 0 its evaluation, where the
    run evaluates), and run_info.json its first session; a resume would otherwise continue
    exactly but leave a hole in the run's rows and provenance (a folder whose files were
    deleted, its checkpoints left)."""
    logged = set()
    path = os.path.join(out_dir, "metrics.jsonl")
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    logged.add(json.loads(line)["update"])
                except (json.JSONDecodeError, KeyError, TypeError):
                    continue
    missing = sorted(set(range(0 if evaluated_at_0 else 1, update + 1)) - logged)
    info = os.path.join(out_dir, "run_info.json")
    sessions = []
    if os.path.exists(info):
        with open(info) as f:
            sessions = json.load(f).get("sessions", [])
    lost = [] if sessions and sessions[0]["start_update"] == 0 else ["run_info.json's first session"]
    if missing:
        shown = ", ".join(map(str, missing[:5])) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        lost.insert(0, f"metrics.jsonl's rows of update(s) {shown}")
    if lost:
        raise ValueError(f"out_dir {out_dir!r} has a checkpoint at update {update} but lacks "
                         f"{' and '.join(lost)}: resuming would leave that hole in the run's log. "
                         f"Delete the folder to run it again from update 0 (a sweep reruns a run "
                         f"that is not kept), or put the files back")


# What to lower when memory runs out outside learn() (whose errors skip the update instead).
# micro_batch_size, logits_chunk_mib and vllm.gpu_memory_utilization may change on resume.
OOM_ADVICE = {
    "generation": "lower vllm.gpu_memory_utilization (the learner's memory grew after the engine "
                  "took its share) and continue with resume=true, or lower max_tokens in a new run",
    "the behavior pass": "lower micro_batch_size (a multiple of group_size) or logits_chunk_mib "
                         "and continue with resume=true",
    "evaluation": "lower vllm.gpu_memory_utilization and continue with resume=true, or lower "
                  "eval_max_tokens in a new run",
    "the weight push": "lower vllm.gpu_memory_utilization and continue with resume=true",
}
OOM_ADVICE["the offline pool's generation"] = (OOM_ADVICE["generation"] + "; or lower "
                                               "micro_batch_size or logits_chunk_mib")


@contextlib.contextmanager
def stop_on_oom(cfg: dict, phase: str):
    """Out of memory in `phase`, where the run's state is already half-way through an update:
    stop with one line naming the phase, the checkpoint kept and what to lower (the run resumes
    from that checkpoint exactly as if never stopped)."""
    try:
        yield
    except torch.OutOfMemoryError as e:
        error = str(e).split("\n")[0][:200]
        kept = latest_checkpoint(cfg["out_dir"]) or "none yet: resume starts at update 0"
        raise torch.OutOfMemoryError(f"out of memory in {phase} ({error}); the run stops, its last "
                                     f"checkpoint ({kept}) kept: {OOM_ADVICE[phase]}") from None


def diverged(cfg: dict, state: "train.RunState", oom: bool, out_dir: str) -> Exception:
    """The error that stops a run after max_consecutive_skips skipped updates in a row."""
    t, kept = state.update, latest_checkpoint(out_dir) or "none"
    if oom:
        return torch.OutOfMemoryError(
            f"updates {t - state.skips_in_a_row + 1}..{t} were all skipped, the last for running "
            f"out of memory in learn(). The last checkpoint, {kept}, is kept: lower "
            f"micro_batch_size (a multiple of group_size) or logits_chunk_mib, or set "
            f"gradient_checkpointing=true, then continue with resume=true (these keys may change "
            f"on resume); or lower max_tokens in a new run")
    return FloatingPointError(
        f"updates {t - state.skips_in_a_row + 1}..{t} all had a non-finite loss or gradient "
        f"(max_consecutive_skips={cfg['max_consecutive_skips']}): the run has diverged. No "
        f"optimizer step used them; the last checkpoint, {kept}, is kept. Lower lr (or check "
        f"loss_args) and start a new run")


# The first SIGINT/SIGTERM/SIGUSR2 sets STOP["signal"]: the run finishes its update, writes a
# checkpoint and train.train() returns; train.main() then exits with 128 + signal (130 SIGINT,
# 143 SIGTERM).
STOP = {"signal": None}


def on_signal(signum, frame) -> None:
    if STOP["signal"] is not None:  # a second signal aborts now; the last checkpoint stays valid
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    STOP["signal"] = signum
    print(f"\n{signal.Signals(signum).name}: finishing this update, then checkpoint and exit "
          f"(send it again to abort at once)", file=sys.stderr, flush=True)


@contextlib.contextmanager
def stop_on_signals():
    """SIGINT/SIGTERM/SIGUSR2 (SLURM's warning before a time limit) set STOP["signal"] inside the
    block (Python's signals need the main thread)."""
    STOP["signal"] = None
    handlers = {}
    if threading.current_thread() is threading.main_thread():
        handlers = {sig: signal.signal(sig, on_signal)
                    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR2)}
    try:
        yield
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


# ----------------------------------------------------------------------------- disk

def checkpoint_bytes(cfg: dict):
    """{file: estimated bytes} of one checkpoint of this run, as save_checkpoint writes it, or
    None when the model folder is not there yet (the toy, built at the run's start: ~12 MB).

    P = the model's parameters (built on the meta device from its config.json: no weights read;
    tied embeddings counted once, as torch.save stores them), b = bytes per element of `dtype`:
    learner.pt P b; optimizer.pt 2 P b (AdamW's two moments, in the weights' dtype); reference.pt
    P b when the objective reads a reference and ref_refresh_every > 0 (else none is saved);
    state.pt the delay queue, N batches of responses, each at most the longest prompt plus
    max_tokens positions at ~20 bytes (a pickled token id, its log-prob and its text)."""
    if not os.path.exists(os.path.join(cfg["model"], "config.json")):
        return None
    from transformers import AutoConfig, AutoModelForCausalLM
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(cfg["model"]))
    weights = sum(p.numel() for p in model.parameters()) * getattr(torch, cfg["dtype"]).itemsize
    sizes = {"learner.pt": weights, "optimizer.pt": 2 * weights}
    if losses.objective(cfg["loss"]).needs_ref and cfg["ref_refresh_every"] > 0:
        sizes["reference.pt"] = weights
    positions = tasks.context_need(cfg)["length"] + cfg["max_tokens"]
    responses = cfg["prompts_per_update"] * cfg["group_size"]
    sizes["state.pt"] = min(cfg["delay"], cfg["updates"]) * responses * positions * 20 + 10 ** 5
    return sizes


def folder_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(path) for n in names)


def check_disk(cfg: dict) -> None:
    """Refuse, in one line, a run whose out_dir is on a disk that cannot hold its checkpoints:
    keep_checkpoints of them plus the one being written (the oldest is deleted only after it is
    complete), less those already there (a resumed run). Runs before any model loads."""
    sizes = checkpoint_bytes(cfg)
    if sizes is None:
        return
    one, keep, out_dir = sum(sizes.values()), cfg["keep_checkpoints"], cfg["out_dir"]
    there = sum(folder_bytes(p) for p in checkpoints(out_dir))
    need = max(one, (keep + 1) * one - there)
    disk = os.path.abspath(out_dir)
    while not os.path.exists(disk):
        disk = os.path.dirname(disk)
    free = shutil.disk_usage(disk).free
    if free < need:
        gb = lambda n: f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"
        parts = " + ".join(f"{name[:-3]} {gb(n)}" for name, n in sizes.items())
        raise ValueError(
            f"out_dir {out_dir!r} is on a disk with {gb(free)} free, but this run needs {gb(need)} "
            f"for its checkpoints: keep_checkpoints={keep} plus the one written before the oldest "
            f"is deleted, {keep + 1} x {gb(one)} ({parts})"
            + (f", less {gb(there)} already there" if there else "")
            + ". Free space there, lower keep_checkpoints (at least 1), or set out_dir on a "
              "larger disk")
