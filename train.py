"""RL fine-tuning under controlled policy staleness: sample -> queue -> learn -> sync -> log.

    python train.py configs/toy.yaml [key=value ...]      (dotted keys for nested values)

One process alternates sampling (rollout.py: the vLLM engine, or transformers where vLLM is
absent) and plain PyTorch updates (learner.py, losses.py). A FIFO queue of rollout batches,
N = `delay` deep, makes the batch trained at update t the one sampled by the policy of N updates
earlier. Policy version v = optimizer updates applied so far (base model: v = 0); the update
v -> v+1 trains on a batch sampled by version max(0, v - N).
Offline (offline_pool.path set, N = 0): no sampling during training; update t trains on one batch
of a fixed pool that the base model sampled once (rollout.make_pool), so its staleness is t - 1.
DESIGN.md states the schedule, the objectives and the diagnostics in full.

This file is the checks before any long work (preflight), the loop (train), one update (learn:
pre-passes, backward over micro-batches, step, metrics; learn_or_skip skips it on a non-finite
forward pass or out of memory) and what a checkpoint carries (RunState). How a run stops keeping its last checkpoint (signals, out of memory
outside learn(), divergence) is in checkpoint.py.

What is simplified: one process and one device; the sampler and the learner take turns (no
overlap of generation and training); micro-batches hold whole groups.

Runs survive: a checkpoint (out_dir/ckpt-XXXXXX) is written every `ckpt_every` updates, at the
end, and on SIGINT/SIGTERM/SIGUSR2 (the update finishes first; exit code 128 + signal).
The same command with resume=true continues from the last checkpoint exactly as if never stopped.
"""
import contextlib
import math
import os
import signal
import sys
import time
from collections import deque
from dataclasses import dataclass, field

import torch
from tqdm import tqdm

import checkpoint
import config
import cpu
import evaluate
import learner
import loggers
import losses
import rollout
import run_info
import tasks


@dataclass
class RunState:
    """Where the loop stands: everything a checkpoint carries besides the weights and AdamW."""
    update: int = 0               # optimizer updates applied = the learner's policy version
    next_batch: int = 0           # index of the next rollout batch to sample
    responses_total: int = 0      # responses generated so far (warm-up, offline pool included)
    skipped_updates: int = 0      # updates skipped for a non-finite loss/gradient or OOM
    oom_updates: int = 0          # of which: out of memory in learn()
    skips_in_a_row: int = 0
    queue: deque = field(default_factory=deque)  # the delay queue: RolloutBatch, oldest first
    rng: dict = None              # RNG states at the checkpoint, restored when the loop starts

    def to_dict(self, seed: int) -> dict:
        """state.pt of a checkpoint: plain values, the current RNG states, and the sampler's seed
        for the next batch (sampling is a pure function of (seed, batch index): recorded to
        check that a resumed run draws the same samples)."""
        return {"update": self.update, "next_batch": self.next_batch,
                "responses_total": self.responses_total, "skipped_updates": self.skipped_updates,
                "oom_updates": self.oom_updates, "skips_in_a_row": self.skips_in_a_row,
                "queue": [b.to_dict() for b in self.queue], "rng": checkpoint.rng_state(),
                "seed": seed, "next_batch_seed": rollout.batch_seed(seed, self.next_batch)}

    @classmethod
    def from_dict(cls, d: dict, seed: int, path: str) -> "RunState":
        if rollout.batch_seed(seed, d["next_batch"]) != d["next_batch_seed"]:
            raise RuntimeError(f"rollout.batch_seed changed since {path} was written: a resumed "
                               f"run would not draw the samples of the original one")
        return cls(d["update"], d["next_batch"], d["responses_total"], d["skipped_updates"],
                   d.get("oom_updates", 0), d["skips_in_a_row"],
                   deque(rollout.RolloutBatch.from_dict(b) for b in d["queue"]), d["rng"])


def preflight(cfg: dict, sampler=None):
    """Checks on files, run before any long work (model build, engine start).

    Refuses an unusable GPU or sampler, a missing model, a benchmark or training set that cannot
    be loaded, a prompt that with its max tokens does not fit vllm.max_model_len (or the model,
    or a shared `sampler`), an offline pool of another recipe, an out_dir that holds another
    run (or this run, without resume=true), and an out_dir whose disk cannot hold the checkpoints.
    Returns the checkpoint to resume from, or None.
    """
    learner.pick_device(cfg)  # a GPU that is expected but unusable: say so now, not after hours
    rollout.sampler_kind(cfg)  # sampler=vllm without vLLM: say so now
    loggers.check(cfg)
    if cfg["task"] == "math":
        tasks.train_problems(cfg)  # raises BenchmarkUnavailable, naming the two ways to supply it
    if not (cfg["task"] == "toy" and cfg["build_toy_model"]) and not os.path.isdir(cfg["model"]):
        raise FileNotFoundError(
            f"model path {cfg['model']!r} does not exist; give a Hugging Face model folder "
            f"(e.g. `hf download Qwen/Qwen3-1.7B-Base --local-dir DIR`), or for the "
            f"toy set build_toy_model=true to build it there (the shipped toy_base and "
            f"toy_long_base: `git checkout -- {cfg['model']}`)")
    if os.path.isdir(cfg["model"]):
        tasks.check_model_hash(cfg["model"])
    if cfg["eval_every"] > 0:
        tasks.load_config_benchmarks(cfg)  # raises BenchmarkUnavailable, naming the fix
    tasks.check_toy_budget(cfg)  # worked answers: the longest correct one fits max_tokens, or refuse
    tasks.max_model_len(cfg)  # every prompt and its max tokens fit the engine's context, or refuse
    need = tasks.context_need(cfg)
    if sampler is not None and sampler.max_model_len < need["need"]:
        raise ValueError(f"the shared engine's max_model_len {sampler.max_model_len}"
                         f" is too small for this run: {need['where']} prompt {need['id']} has "
                         f"{need['length']} tokens and needs {need['need']}")
    pool = cfg["offline_pool"]["path"]
    if pool and os.path.exists(os.path.join(pool, "recipe.json")):
        rollout.check_pool_recipe(cfg)
    ckpt = checkpoint.check_out_dir(cfg)
    checkpoint.check_disk(cfg)  # keep_checkpoints + 1 checkpoints must fit out_dir's disk
    return ckpt


def train(cfg: dict, sampler=None) -> list:
    """Run the loop; returns the rows logged by this call (also in metrics.jsonl).

    `sampler`: an existing rollout.Sampler to reuse (tests and sweeps share one engine); the
    learner's weights are pushed into it first, so it starts from this run's base model or
    checkpoint. resume=true continues from the last checkpoint in out_dir (none yet: from update
    0) after dropping the rows logged past it, so metrics.jsonl never holds an update twice.
    """
    # ------------------------------------------------------------------ setup
    ckpt = preflight(cfg, sampler)  # refuses bad input and a clashing out_dir before any long work
    cfg, matmul_note = cpu.resolve_cpu_matmul(cfg)  # auto -> the backend, kept on resume
    torch.manual_seed(cfg["seed"])
    out_dir, N, updates = cfg["out_dir"], cfg["delay"], cfg["updates"]
    offline = bool(cfg["offline_pool"]["path"])
    # N = 0: each batch is trained right after it is sampled, with the weights that sampled it,
    # so learn() takes the learner's view of it from its own forward pass, not a second one
    on_policy = not offline and N == 0
    checkpoint.write_config(out_dir, cfg, notes={"cpu_matmul": matmul_note})
    tasks.prepare_model(cfg)
    model, ref_model, optimizer = learner.build_learner(cfg)
    device = next(model.parameters()).device
    if ckpt:  # the newest checkpoint torch can read (a damaged one is set aside, with a message)
        ckpt, saved = checkpoint.load_usable(out_dir, model, optimizer, ref_model)
        state = RunState.from_dict(saved, cfg["seed"], ckpt)
    else:  # offline, every response of the pool was generated before the first update
        state = RunState(responses_total=cfg["offline_pool"]["batches"] * cfg["prompts_per_update"]
                         * cfg["group_size"] if offline else 0)
    start = state.update
    checkpoint.drop_logged_after(out_dir, start if ckpt else -1)  # a new run: only an interrupted update 0
    if cfg["resume"]:
        print(f"resuming {out_dir} from {ckpt}" if ckpt else
              f"resume=true: no checkpoint in {out_dir} yet, starting at update 0", file=sys.stderr)
    if sampler is None:
        sampler = rollout.make_sampler(cfg)
    sampler.sync(model, start)  # a shared engine or a resumed run holds other weights
    run_info.record_session(out_dir, start, cpu.matmul_backend(model),  # run_info.json
                              getattr(sampler, "backend", type(sampler).__name__))
    pad_id = sampler.tokenizer.pad_token_id
    if pad_id is None:
        pad_id = sampler.tokenizer.eos_token_id
    if offline and start == 0:  # the engine holds the base model: make what the pool lacks
        with checkpoint.stop_on_oom(cfg, "the offline pool's generation"):
            rollout.make_pool(cfg, sampler,
                              lambda batch: learner.fresh_behavior(cfg, model, batch, pad_id))

    def save(t):
        t0 = time.perf_counter()
        path = checkpoint.save_checkpoint(out_dir, t, model, optimizer,
                                          ref_model if cfg["ref_refresh_every"] > 0 else None,
                                          state.to_dict(cfg["seed"]), cfg["keep_checkpoints"])
        size = sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path))
        tqdm.write(f"checkpoint {path}: {size / 1e6:.1f} MB in {time.perf_counter() - t0:.2f} s",
                   file=sys.stderr)

    rows, live = [], loggers.open_loggers(cfg, out_dir, start if ckpt else None)
    with open(os.path.join(out_dir, "metrics.jsonl"), "a") as log_file, checkpoint.stop_on_signals(), \
            contextlib.ExitStack() as closing:
        for logger in live:
            closing.callback(logger.close)

        def log(row):
            rows.append(row)
            logged = checkpoint.append_row(log_file, row)
            for logger in live:
                logger.log(logged)

        if start == 0 and evaluated_at(cfg, 0):
            with checkpoint.stop_on_oom(cfg, "evaluation"):
                log({"update": 0, "responses_total": state.responses_total,
                     **evaluate.run_eval(cfg, sampler, 0, out_dir)})

        # ------------------------------------------------------------------ warm-up
        # The first N batches come from the base policy. A resumed run's queue is already this
        # full, unless `updates` was raised past the end of the original run.
        if ckpt and len(state.queue) < min(N, updates - start):
            print(f"updates raised past the end of the original run: refilling the delay queue "
                  f"with version {start}, so the next {min(N, updates - start) - len(state.queue)} "
                  f"updates train on fresher batches than a run planned this long would",
                  file=sys.stderr)
        while len(state.queue) < min(N, updates - start):
            sample_into_queue(cfg, sampler, state, model, pad_id, on_policy)
        if state.rng:
            checkpoint.set_rng_state(state.rng)  # after loading and engine start, which draw from them

        bar = tqdm(range(start + 1, updates + 1), initial=start, total=updates, desc=f"{cfg['loss']} N={N}",
                   dynamic_ncols=True)
        log_seconds = 0.0  # writing the previous row: a row cannot time its own write
        for t in bar:
            update_start = time.perf_counter()
            # ---------------------------------------------------------- sample
            times, sample_reward = {}, math.nan
            if offline:
                batch = rollout.pool_batch(cfg, t)
            else:
                if state.next_batch < updates:  # sample with version t-1 only if some update trains on it
                    new, times = sample_into_queue(cfg, sampler, state, model, pad_id, on_policy)
                    sample_reward = sum(new.rewards) / len(new.rewards)
                batch = state.queue.popleft()

            # ---------------------------------------------------------- learn
            metrics = learn_or_skip(cfg, model, ref_model, optimizer, batch, pad_id, t, on_policy)
            # A non-finite loss or gradient skips the step (weights untouched), but the batch is
            # consumed and the update counted, so data order and delay stay those of the schedule:
            # one overflowing batch should not cost a restart. A streak of max_consecutive_skips
            # means divergence: stop, keeping the last checkpoint (resuming would replay it).
            state.update = t
            state.skipped_updates += int(metrics["skipped"])
            state.oom_updates += int(metrics.get("oom", 0))
            state.skips_in_a_row = state.skips_in_a_row + 1 if metrics["skipped"] else 0

            # ---------------------------------------------------------- sync
            with learner.timed(times, "time/sync", device), checkpoint.stop_on_oom(cfg, "the weight push"):
                if metrics["skipped"]:  # no step was taken: the engine already holds these weights
                    sampler.version = t
                else:
                    sampler.sync(model, version=t)
                if ref_model is not None and cfg["ref_refresh_every"] > 0 \
                        and t % cfg["ref_refresh_every"] == 0:
                    ref_model.load_state_dict(model.state_dict())

            # ---------------------------------------------------------- evaluate and log
            versions = [r.policy_version for r in batch.rollouts]
            row = {"update": t,
                   "reward_mean": sum(batch.rewards) / len(batch.rewards),
                   "sample_reward_mean": sample_reward,
                   "staleness": (t - 1) - sum(versions) / len(versions),  # learner - sampler version
                   "sampler_version": min(versions),
                   "responses_total": state.responses_total,
                   "response_len_mean": sum(len(r.response_ids) for r in batch.rollouts) / len(versions),
                   "lr": cfg["lr"],
                   "skipped_updates": state.skipped_updates, "oom_updates": state.oom_updates,
                   **metrics, **times}
            with learner.timed(row, "time/eval"), checkpoint.stop_on_oom(cfg, "evaluation"):
                if evaluated_at(cfg, t):
                    row.update(evaluate.run_eval(cfg, sampler, t, out_dir))
            row["time/log"] = log_seconds
            # wall seconds of the whole update, the previous row's write included (steady state:
            # the rows' time/update add up to the loop's wall time, checkpoints aside)
            row["time/update"] = time.perf_counter() - update_start + log_seconds
            t0 = time.perf_counter()
            log(row)
            bar.set_postfix(reward=f"{row['reward_mean']:.3f}", k3=f"{row['k3']:.4f}")
            log_seconds = time.perf_counter() - t0
            if state.skips_in_a_row >= cfg["max_consecutive_skips"]:
                raise checkpoint.diverged(cfg, state, bool(metrics.get("oom")), out_dir)

            # ---------------------------------------------------------- checkpoint
            if t == updates or (cfg["ckpt_every"] > 0 and t % cfg["ckpt_every"] == 0) or checkpoint.STOP["signal"]:
                save(t)
            if checkpoint.STOP["signal"]:
                tqdm.write(f"stopped by {signal.Signals(checkpoint.STOP['signal']).name} after update {t}; "
                           f"continue with resume=true", file=sys.stderr)
                break
    return rows


def evaluated_at(cfg: dict, t: int) -> bool:
    """Whether the loop evaluates after update t (t = 0: the base model): every eval_every
    updates from eval_from on, and at the last; never with eval_every 0."""
    return cfg["eval_every"] > 0 and (t == 0 or t == cfg["updates"]
                                      or (t % cfg["eval_every"] == 0 and t >= cfg["eval_from"]))


def sample_into_queue(cfg: dict, sampler, state: RunState, model, pad_id: int,
                      on_policy: bool) -> tuple:
    """Sample the next rollout batch with the engine's current weights onto the delay queue;
    returns it and its metrics (phase times, engine-vs-learner mismatch). on_policy: the batch is
    trained next, with these weights, and learn(on_policy=True) takes the learner's view of it."""
    with checkpoint.stop_on_oom(cfg, "generation"):
        batch, times = rollout.sample_batch(cfg, sampler, state.next_batch)
    if not on_policy and learner.needs_fresh_behavior(cfg, state.next_batch):
        with learner.timed(times, "time/behavior", next(model.parameters()).device), \
                checkpoint.stop_on_oom(cfg, "the behavior pass"):
            times.update(learner.fresh_behavior(cfg, model, batch, pad_id))
    state.queue.append(batch)
    state.next_batch += 1
    state.responses_total += len(batch.rollouts)
    return batch, times


def learn_or_skip(cfg, model, ref_model, optimizer, batch: rollout.RolloutBatch, pad_id: int,
                  update: int, on_policy: bool = False) -> dict:
    """learn(); an out-of-memory error or a non-finite forward pass in it skips the update like a
    non-finite loss does: the batch is consumed, the weights and AdamW state stay as they were
    (both come before optimizer.step()), the memory is released, and the run goes on; a streak
    of them stops it (see train). An objective with a per-batch `prepare` (a setting read from the batch) gets
    this batch's staleness: learner version update - 1 minus the sampler's mean (the same on
    resume: both are restored)."""
    prepare = losses.objective(cfg["loss"]).prepare
    if prepare is not None:
        staleness = (update - 1) - sum(r.policy_version for r in batch.rollouts) / len(batch.rollouts)
        cfg = {**cfg, "loss_args": prepare(cfg["loss_args"], staleness)}
    try:
        metrics = learn(cfg, model, ref_model, optimizer, batch, pad_id, on_policy)
        optimizer.zero_grad(set_to_none=True)  # the gradients' memory is free while the engine samples
        return metrics
    except learner.NonFiniteForward as e:
        error, oom = str(e), False
    except torch.OutOfMemoryError as e:
        error, oom = str(e).split("\n")[0], True
    optimizer.zero_grad(set_to_none=True)  # outside the except: its traceback held the tensors
    if not oom:
        tqdm.write(f"update {update}: {error}; skipped: batch consumed, weights and optimizer "
                   f"untouched", file=sys.stderr)
        return {"skipped": 1.0, "surrogate": math.nan, "k3": math.nan, "entropy": math.nan,
                "grad_norm": math.nan}
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    lengths = [len(r.response_ids) for r in batch.rollouts]
    tqdm.write(f"update {update}: out of memory in learn() ({error[:200]}) on {len(lengths)} "
               f"responses of {min(lengths)}-{max(lengths)} tokens (mean {sum(lengths) / len(lengths):.0f}, "
               f"{sum(lengths)} in all); skipped: batch consumed, weights and optimizer untouched",
               file=sys.stderr)
    return {"skipped": 1.0, "oom": 1.0, "surrogate": math.nan, "k3": math.nan, "entropy": math.nan,
            "grad_norm": math.nan}


def old_logp_of(rollouts: list, width: int, device):
    """The rollouts' old_logp (the learner's log-probs at sampling time) as [B, width], for the
    objectives that read them (reads_old_logp); an error naming the fix where a batch was
    sampled or saved without them."""
    if any(r.old_logp is None for r in rollouts):
        raise ValueError("this objective reads old_logp (the learner's log-probs of each token with "
                         "the weights that sampled it), and this batch has none: it was sampled, or "
                         "saved (a checkpoint's queue, an offline pool), by a run whose objective "
                         "does not keep them; start a new run, or make a new offline pool with it")
    return learner.padded([r.old_logp for r in rollouts], width, device)


@dataclass
class Pass:
    """What the micro-batches of one update leave for the step and the metrics."""
    loss: torch.Tensor            # the full batch's loss (detached): micro-batch losses by token share
    n_tokens: int                 # response tokens of the batch (the shares' denominator)
    entropy_sum: float = 0.0      # summed over response tokens
    parts: list = field(default_factory=list)  # per micro-batch: (logp, behavior_logp, mask), detached
    ref_parts: list = field(default_factory=list)  # per micro-batch: reference log-probs (or None)
    old_parts: list = field(default_factory=list)  # per micro-batch: old_logp (or None)
    learner_view: list = field(default_factory=list)  # on_policy: the learner's log-probs, per rollout


def learn(cfg, model, ref_model, optimizer, batch: rollout.RolloutBatch, pad_id: int,
          on_policy: bool = False) -> dict:
    """One optimizer update on one rollout batch; returns the update's metrics.

    on_policy: the batch was sampled with the learner's current weights and has not been through
    learner.fresh_behavior; its forward pass here is the learner's view of the behavior policy.

    Micro-batches hold whole groups. Every objective is a sum over groups divided by the
    batch's response-token count, so the micro-batch losses, each rescaled by its share of the
    tokens, add up to the full-batch loss exactly. Metrics are then computed once on the whole
    batch from the detached log-probs, so they are exact too.
    """
    device = next(model.parameters()).device
    obj = losses.objective(cfg["loss"])
    times = {"time/ref": 0.0, "time/learn": 0.0}
    engine_logp = [r.behavior_logp for r in batch.rollouts]  # before on_policy adopts the learner's
    stats, grad_sq = pre_passes(cfg, obj, model, batch, pad_id, on_policy, times, device)
    optimizer.zero_grad(set_to_none=True)
    done = backward(cfg, obj, model, ref_model, batch, pad_id, on_policy, stats, grad_sq, times, device)
    grad_norm, finite = step(cfg, obj, model, optimizer, done, times, device)
    with learner.timed(times, "time/metrics"):
        metrics = batch_metrics(cfg, obj, batch, done, grad_sq, engine_logp if on_policy else None,
                                device)
    metrics.update(times)
    metrics["entropy"] = float(done.entropy_sum) / done.n_tokens
    metrics["grad_norm"] = grad_norm
    metrics["skipped"] = 0.0 if finite else 1.0
    return metrics


def pre_passes(cfg, obj, model, batch, pad_id, on_policy, times, device) -> tuple:
    """What an objective reads of the whole batch before its micro-batches: its batch statistics
    (obj.batch_stats, from a no-grad pass when they read log-probs) and each
    response's squared gradient norm (obj.needs_grad_sq). (stats or None,
    grad_sq [B] or None)."""
    stats = None  # one micro-batch holds the whole batch: compute_loss computes them itself
    if obj.batch_stats is not None and len(batch.rollouts) > cfg["micro_batch_size"]:
        with learner.timed(times, "time/batch_stats", device):
            logp_view = behavior_view = None  # statistics of the mask alone need no forward pass
            if obj.stats_read_logp:
                logp_view = learner.rollout_logp(cfg, model, batch.rollouts, pad_id)  # no gradient
                own = on_policy and cfg["behavior_logp"] == "learner"  # adopted below: behavior = view
                behavior_view = logp_view if own else [r.behavior_logp for r in batch.rollouts]
            width = max(len(r.response_ids) for r in batch.rollouts)
            pad = lambda rows: None if rows is None else learner.padded(rows, width, device)
            stats = losses.batch_stats(
                cfg["loss"], logp=pad(logp_view), behavior_logp=pad(behavior_view),
                mask=pad([[1.0] * len(r.response_ids) for r in batch.rollouts]),
                rewards=torch.tensor(batch.rewards, dtype=torch.float32, device=device),
                group_size=cfg["group_size"], **cfg["loss_args"])
    grad_sq = None
    if obj.needs_grad_sq:
        with learner.timed(times, "time/grad_sq", device):
            grad_sq = learner.response_grad_sq(cfg, model, batch.rollouts, pad_id)
    return stats, grad_sq


def backward(cfg, obj, model, ref_model, batch, pad_id, on_policy, stats, grad_sq, times, device) -> Pass:
    """The loss's gradient, micro-batch by micro-batch (each loss times its share of the
    batch's response tokens), accumulated in the parameters' .grad."""
    mb = cfg["micro_batch_size"]
    chunk = learner.chunk_tokens(cfg, model)
    # every log-prob (policy, reference, entropy) of the distribution sampled from: logits / T
    temperature = cfg["temperature"]
    done = Pass(loss=torch.zeros((), device=device),
                n_tokens=sum(len(r.response_ids) for r in batch.rollouts))
    for start in range(0, len(batch.rollouts), mb):
        part = batch.rollouts[start:start + mb]
        with learner.timed(times, "time/learn"):
            inputs = learner.model_inputs(model, part, pad_id)
        ref_logp = None
        with learner.timed(times, "time/ref", device):
            if obj.needs_ref:  # the reference's forward pass only, no graph
                with torch.no_grad(), learner.autocast(cfg):
                    ref_logp, _, _ = learner.response_logp(ref_model, inputs, chunk_tokens=chunk,
                                                           temperature=temperature)
        with learner.timed(times, "time/learn", device):
            with learner.autocast(cfg):
                logp, mask, ent = learner.response_logp(model, inputs, True, chunk, temperature)
            learner.check_finite_forward(logp, ref_logp)
            if on_policy:
                view = learner.ragged(logp.detach(), part)
                learner.adopt_learner_view(cfg, part, view)
                done.learner_view += view
            behavior = learner.padded([r.behavior_logp for r in part], logp.size(1), device)
            old = old_logp_of(part, logp.size(1), device) if obj.reads_old_logp else None
            rewards = torch.tensor(batch.rewards[start:start + mb], dtype=torch.float32, device=device)
            loss, _ = losses.compute_loss(cfg["loss"], logp=logp, behavior_logp=behavior,
                                          ref_logp=ref_logp, mask=mask, rewards=rewards,
                                          group_size=cfg["group_size"], batch_stats=stats,
                                          old_logp=old, **cfg["loss_args"],
                                          response_grad_sq=None if grad_sq is None else grad_sq[start:start + mb])
            share = mask.sum() / done.n_tokens
            (loss * share).backward()
        done.loss += loss.detach() * share
        done.entropy_sum += ent
        done.parts.append((logp.detach(), behavior, mask))
        done.ref_parts.append(ref_logp)
        done.old_parts.append(old)
    return done


def step(cfg, obj, model, optimizer, done: Pass, times, device) -> tuple:
    """Clip the gradient and step, at lr times the objective's lr_scale of this batch (1 for an
    objective without one); never on a non-finite loss or gradient (the loop counts the update
    as skipped). (grad_norm before clipping, finite)."""
    with learner.timed(times, "time/optim", device):
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["grad_clip"]))
        finite = math.isfinite(grad_norm) and math.isfinite(float(done.loss))
        if finite:
            scale = 1.0 if obj.lr_scale is None else obj.lr_scale(
                torch.cat([((lp - b) * m).sum(1) for lp, b, m in done.parts]))
            for group in optimizer.param_groups:
                group["lr"] = cfg["lr"] * scale
            optimizer.step()
            for group in optimizer.param_groups:  # a checkpoint keeps the configured lr
                group["lr"] = cfg["lr"]
        else:
            optimizer.zero_grad(set_to_none=True)
    return grad_norm, finite


def batch_metrics(cfg, obj, batch, done: Pass, grad_sq, engine_logp, device) -> dict:
    """The objective's metrics on the whole batch from the detached log-probs (exact, whatever
    the micro-batches), the largest |logp - behavior_logp|, and for an on-policy batch (its
    engine log-probs given, else None) the engine-vs-learner mismatch."""
    width = max(x[0].size(1) for x in done.parts)
    cat = lambda xs: torch.cat([torch.nn.functional.pad(x, (0, width - x.size(1))) for x in xs])
    logp, behavior, mask = (cat([x[i] for x in done.parts]) for i in range(3))
    _, metrics = losses.compute_loss(
        cfg["loss"], logp=logp, behavior_logp=behavior, mask=mask,
        ref_logp=cat(done.ref_parts) if obj.needs_ref else None,
        old_logp=cat(done.old_parts) if obj.reads_old_logp else None,
        rewards=torch.tensor(batch.rewards, dtype=torch.float32, device=device),
        group_size=cfg["group_size"], response_grad_sq=grad_sq, **cfg["loss_args"])
    metrics["logp_diff_max"] = float(((logp - behavior).abs() * mask).max())
    if engine_logp is not None:
        metrics.update(learner.engine_mismatch(engine_logp, done.learner_view))
    return metrics


def main(argv: list) -> None:
    if not argv or argv[0].startswith("-"):
        print(__doc__)
        sys.exit(2)
    try:
        cfg = config.load_config(argv[0], argv[1:])
        preflight(cfg)
    except (ValueError, TypeError, FileNotFoundError, NotImplementedError, ImportError,
            PermissionError, tasks.BenchmarkUnavailable, learner.DeviceUnavailable) as e:
        sys.exit(f"error: {e}")  # bad input: the message says what is wrong and how to fix it
    try:
        train(cfg)
    except (torch.OutOfMemoryError, FloatingPointError) as e:  # a stop that keeps a checkpoint
        sys.exit(f"error: {e}")
    if checkpoint.STOP["signal"]:  # stopped early by a signal, its checkpoint written
        sys.exit(128 + checkpoint.STOP["signal"])


if __name__ == "__main__":
    main(sys.argv[1:])
