"""RL fine-tuning under controlled policy staleness: sample -> queue -> learn -> sync -> log.

    python train.py configs/toy.yaml [key=value ...]      (dotted keys for nested values)

One process alternates vLLM sampling (rollout.py) and plain PyTorch updates. A FIFO queue of
rollout batches, N = `delay` deep, makes the batch trained at update t the one sampled by the
policy of N updates earlier. Policy version v = optimizer updates applied so far (base model:
v = 0); the update v -> v+1 trains on a batch sampled by version max(0, v - N).
Offline (offline_pool.path set, N = 0): no sampling during training; update t trains on one batch
of a fixed pool that the base model sampled once (make_pool), so its staleness is t - 1.

Runs survive: a checkpoint (out_dir/ckpt-XXXXXX) is written every `ckpt_every` updates, at the
end, and on SIGINT/SIGTERM (the update finishes first; exit code 128 + signal: 130 or 143).
The same command with resume=true continues from the last checkpoint exactly as if never stopped.
"""
import dataclasses
import difflib
import functools
import itertools
import json
import math
import os
import random
import re
import shutil
import signal
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass

import yaml

import rollout
import tasks

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULTS_PATH = os.path.join(HERE, "configs", "defaults.yaml")


# ----------------------------------------------------------------------------- config

def _merge(base: dict, override: dict, where: str) -> dict:
    out = dict(base)
    for key, value in override.items():
        if key not in base:
            near = difflib.get_close_matches(key, list(base), n=3, cutoff=0.7)
            raise ValueError(f"unknown config key '{where}{key}'"
                           + (f" (did you mean {', '.join(near)}?)" if near else "")
                           + f"; every key is listed in {DEFAULTS_PATH}")
        if isinstance(base[key], dict) and key not in ("toy_digits",):
            if not isinstance(value, dict):
                raise TypeError(f"config key {where}{key} must be a mapping, got {value!r}")
            out[key] = _merge(base[key], value, f"{where}{key}.")
        else:
            out[key] = _check_type(where + key, base[key], value)
    return out


def _check_type(key: str, default, value):
    if default is None or value is None:
        return value
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise TypeError(f"config key {key} must be true or false, got {value!r}")
        return value
    if isinstance(default, (int, float)):
        try:
            number = float(value) if isinstance(default, float) else int(value)
        except (TypeError, ValueError):
            raise TypeError(f"config key {key} must be a number, got {value!r}") from None
        if isinstance(value, bool) or (isinstance(default, int) and number != float(value)):
            raise TypeError(f"config key {key} must be an integer, got {value!r}")
        if not math.isfinite(number):
            raise ValueError(f"config key {key} must be a finite number, got {value!r}")
        return number
    if not isinstance(value, type(default)):
        raise TypeError(f"config key {key} must be a {type(default).__name__}, got {value!r}")
    return value


def load_config(path: str = None, overrides: list = ()) -> dict:
    """defaults.yaml <- experiment config <- key=value overrides; unknown keys are errors."""
    with open(DEFAULTS_PATH) as f:
        cfg = yaml.safe_load(f)
    if path:
        if not os.path.exists(path):
            raise FileNotFoundError(f"config file {path!r} does not exist")
        with open(path) as f:
            cfg = _merge(cfg, yaml.safe_load(f) or {}, "")
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"override {item!r} is not of the form key=value")
        key, raw = item.split("=", 1)
        nested = yaml.safe_load(raw)
        for part in reversed(key.split(".")):
            nested = {part: nested}
        cfg = _merge(cfg, nested, "")
    _validate(cfg)
    return cfg


def _validate(cfg: dict) -> None:
    """Impossible values, from the config alone (types were checked while merging)."""
    import losses
    betas, digits = cfg["adam_betas"], cfg["toy_digits"]
    checks = [
        (cfg["loss"] in losses.LOSSES, f"loss must be one of {sorted(losses.LOSSES)}"),
        (cfg["delay"] >= 0, "delay (N) must be >= 0"),
        (cfg["group_size"] >= 2, "group_size must be >= 2 (group baselines need two responses)"),
        (cfg["prompts_per_update"] >= 1, "prompts_per_update must be >= 1"),
        (cfg["updates"] >= 0, "updates must be >= 0"),
        (cfg["micro_batch_size"] >= 1 and cfg["micro_batch_size"] % cfg["group_size"] == 0,
         "micro_batch_size must be a positive multiple of group_size (groups are never split)"),
        (cfg["lr"] > 0, "lr must be > 0"),
        (cfg["weight_decay"] >= 0, "weight_decay must be >= 0"),
        (cfg["grad_clip"] > 0, "grad_clip must be > 0"),
        (len(betas) == 2 and all(isinstance(b, (int, float)) and not isinstance(b, bool)
                                 and 0 <= b < 1 for b in betas),
         f"adam_betas must be two numbers in [0, 1), got {betas!r}"),
        (cfg["dtype"] in ("float32", "bfloat16", "float16"),
         f"dtype must be float32, bfloat16 or float16, got {cfg['dtype']!r}"),
        (cfg["sampler_dtype"] in (None, "float32", "bfloat16", "float16"),
         f"sampler_dtype must be null, float32, bfloat16 or float16, got {cfg['sampler_dtype']!r}"),
        (cfg["autocast"] in (None, "bfloat16", "float16"),
         f"autocast must be null, bfloat16 or float16, got {cfg['autocast']!r}"),
        (cfg["task"] in ("toy", "math"), "task must be toy or math"),
        (len(digits) > 0 and all(isinstance(d, int) and d >= 1 for d in digits)
         and all(isinstance(w, (int, float)) and w >= 0 for w in digits.values())
         and sum(digits.values()) > 0,
         f"toy_digits must map digit counts >= 1 to weights >= 0 with a positive sum, got {digits!r}"),
        (cfg["max_tokens"] >= 1 and cfg["eval_max_tokens"] >= 1,
         "max_tokens and eval_max_tokens must be >= 1"),
        (cfg["temperature"] > 0, "temperature must be > 0 (behavior log-probs need a sampling "
                                 "distribution; greedy decoding has none)"),
        (cfg["eval_every"] >= 0, "eval_every must be >= 0 (0: never evaluate)"),
        (cfg["eval_n"] >= 1, "eval_n must be >= 1"),
        (cfg["eval_toy_size"] >= 1, "eval_toy_size must be >= 1"),
        (all(isinstance(b, str) for b in cfg["eval_benchmarks"]),
         f"eval_benchmarks must be a list of names, got {cfg['eval_benchmarks']!r}"),
        (cfg["ckpt_every"] >= 0, "ckpt_every must be >= 0 (0: checkpoint only at the end)"),
        (cfg["max_consecutive_skips"] >= 1, "max_consecutive_skips must be >= 1"),
        (bool(cfg["out_dir"]), "out_dir must be a folder name"),
        (cfg["offline_pool"]["path"] is None or isinstance(cfg["offline_pool"]["path"], str),
         "offline_pool.path must be a folder name or null"),
        (cfg["offline_pool"]["batches"] >= 1, "offline_pool.batches must be >= 1"),
        (cfg["offline_pool"]["path"] is None or cfg["delay"] == 0,
         "offline_pool.path is set: delay must be 0 (pool batches are never queued; their "
         "staleness grows with every update by itself)"),
    ]
    for ok, message in checks:
        if not ok:
            raise ValueError(f"bad config: {message}")
    try:
        losses._check_hparams(cfg["loss"], cfg["loss_args"])  # the same check compute_loss runs
    except ValueError as e:
        raise ValueError(f"bad config: loss_args: {e}") from None
    import evaluate
    evaluate.check_config(cfg)


# Keys that may change when a run is resumed: they do not change what the run computes.
RESUMABLE_CHANGES = ("updates", "resume", "ckpt_every", "max_consecutive_skips", "build_toy_model",
                     "vllm")


def config_differences(old: dict, new: dict) -> list:
    """'key: old -> new' for every key that differs, nested keys dotted, RESUMABLE_CHANGES left out."""
    def flat(d, where=""):
        out = {}
        for k, v in d.items():
            if where == "" and k in RESUMABLE_CHANGES:
                continue
            if isinstance(v, dict) and k != "toy_digits":
                out.update(flat(v, f"{where}{k}."))
            else:
                out[f"{where}{k}"] = v
        return out
    a, b = flat(old), flat(new)
    return [f"{k}: {a.get(k, '(absent)')!r} -> {b.get(k, '(absent)')!r}"
            for k in sorted(set(a) | set(b)) if a.get(k, "(absent)") != b.get(k, "(absent)")]


def preflight(cfg: dict):
    """Checks on files, run before any long work (model build, engine start).

    Refuses a missing model, a benchmark that cannot be loaded, and an out_dir that holds another
    run (or this run, without resume=true). Returns the checkpoint to resume from, or None.
    """
    if cfg["task"] == "math":
        train_problems(cfg)  # raises BenchmarkUnavailable, naming the two ways to supply it
    if not (cfg["task"] == "toy" and cfg["build_toy_model"]) and not os.path.isdir(cfg["model"]):
        raise FileNotFoundError(
            f"model path {cfg['model']!r} does not exist; give a Hugging Face model folder "
            f"(e.g. `huggingface-cli download Qwen/Qwen3-1.7B-Base --local-dir DIR`), or for the "
            f"toy set build_toy_model=true to build it there")
    check_benchmarks(cfg)
    if cfg["offline_pool"]["path"] and os.path.exists(os.path.join(cfg["offline_pool"]["path"],
                                                                   "recipe.json")):
        check_pool_recipe(cfg)
    out_dir = cfg["out_dir"]
    saved = os.path.join(out_dir, "config.yaml")
    if os.path.exists(saved):
        with open(saved) as f:
            diff = config_differences(yaml.safe_load(f) or {}, cfg)
        if diff:
            raise ValueError(
                f"out_dir {out_dir!r} holds a different run ({'; '.join(diff)}). Pick another "
                f"out_dir; resume=true continues a run only with its own config (these may change: "
                f"{', '.join(RESUMABLE_CHANGES)})")
    ckpt = latest_checkpoint(out_dir)
    if not cfg["resume"]:
        metrics_path = os.path.join(out_dir, "metrics.jsonl")
        logged = os.path.exists(metrics_path) and os.path.getsize(metrics_path) > 0
        if ckpt or logged:
            raise ValueError(
                f"out_dir {out_dir!r} already holds this run ("
                + (f"checkpoint at update {_ckpt_update(ckpt)}): pass resume=true to continue it"
                   if ckpt else "metrics but no checkpoint): pass resume=true to start it again there")
                + ", or pick another out_dir (or delete this one)")
        return None
    if ckpt and _ckpt_update(ckpt) > cfg["updates"]:
        raise ValueError(f"the checkpoint {ckpt} is past updates={cfg['updates']}; pass "
                         f"updates={_ckpt_update(ckpt)} or more to resume it")
    return ckpt


# ----------------------------------------------------------------------------- data

@dataclass
class RolloutBatch:
    """One rollout batch: prompts_per_update groups of group_size responses, graded."""
    index: int            # position in the stream of sampled batches
    rollouts: list        # rollout.Rollout, grouped by prompt
    rewards: list         # float per rollout

    def to_dict(self) -> dict:
        """Plain lists and numbers, for checkpoints and offline pool files."""
        return {"index": self.index, "rewards": self.rewards,
                "rollouts": [dataclasses.asdict(r) for r in self.rollouts]}

    @classmethod
    def from_dict(cls, b: dict) -> "RolloutBatch":
        return cls(b["index"], [rollout.Rollout(**r) for r in b["rollouts"]], b["rewards"])


def train_problems(cfg: dict) -> list:
    """task=math: the training problems {id, prompt, answer} (loaded once per process)."""
    import evaluate
    return evaluate.load_benchmark("train_data", cfg["train_data"], cfg["prompt_template"])


@functools.lru_cache(maxsize=4)
def _epoch_order(seed: int, epoch: int, size: int) -> list:
    order = list(range(size))
    random.Random(f"{seed}:epoch{epoch}").shuffle(order)
    return order


def prompts_for_batch(cfg: dict, index: int) -> list:
    """The problems of rollout batch `index`: a pure function of (seed, index), so a resumed run
    sees the same prompts. Toy: fresh sums. Math: the training set in a new random order each
    epoch; batch `index` takes items index*P .. index*P+P-1 of that stream."""
    P = cfg["prompts_per_update"]
    if cfg["task"] == "toy":
        return tasks.toy_dataset(P, cfg["seed"] * 1_000_003 + index, cfg["toy_digits"])
    problems = train_problems(cfg)
    stream = (divmod(j, len(problems)) for j in range(index * P, (index + 1) * P))
    return [problems[_epoch_order(cfg["seed"], epoch, len(problems))[pos]] for epoch, pos in stream]


def pool_recipe(cfg: dict) -> dict:
    """What an offline pool's responses depend on; a run refuses a pool made with another."""
    keys = ["model", "task", "prompt_template", "group_size", "prompts_per_update", "max_tokens",
            "temperature", "grade_timeout_s"]
    keys += ["toy_digits"] if cfg["task"] == "toy" else ["train_data"]
    recipe = {k: cfg[k] for k in keys}
    recipe.update(sampler_dtype=cfg["sampler_dtype"] or cfg["dtype"],
                  batches=cfg["offline_pool"]["batches"], seed=cfg["offline_pool"]["seed"])
    return json.loads(json.dumps(recipe))  # as read back from the file (int keys become str)


def check_pool_recipe(cfg: dict) -> None:
    """Refuse a pool folder whose recipe.json differs from this run's recipe."""
    path = os.path.join(cfg["offline_pool"]["path"], "recipe.json")
    with open(path) as f:
        made_with = json.load(f)
    recipe = pool_recipe(cfg)
    if made_with != recipe:
        raise ValueError(f"offline pool {cfg['offline_pool']['path']} was made with another recipe "
                         f"({'; '.join(config_differences(made_with, recipe))}): delete "
                         f"it to make a new pool, or set offline_pool.path elsewhere")


def _pool_batch_file(cfg: dict, index: int) -> str:
    return os.path.join(cfg["offline_pool"]["path"], f"batch-{index:06d}.json")


def make_pool(cfg: dict, sampler) -> None:
    """Offline training: sample the batches of the pool folder offline_pool.path that are not
    there yet, with the engine's current weights (the caller's base model). Batch i holds the
    prompts of batch i of a run seeded offline_pool.seed; each batch file is written atomically,
    so a stopped generation continues where it stopped. A complete pool is left untouched."""
    path = cfg["offline_pool"]["path"]
    os.makedirs(path, exist_ok=True)
    if not os.path.exists(os.path.join(path, "recipe.json")):
        _write_atomic(os.path.join(path, "recipe.json"), json.dumps(pool_recipe(cfg), indent=1))
    check_pool_recipe(cfg)
    missing = [i for i in range(cfg["offline_pool"]["batches"])
               if not os.path.exists(_pool_batch_file(cfg, i))]
    from tqdm import tqdm
    for i in tqdm(missing, desc=f"offline pool {path}", dynamic_ncols=True, disable=not missing):
        batch, _ = sample_batch({**cfg, "seed": cfg["offline_pool"]["seed"]}, sampler, i)
        _write_atomic(_pool_batch_file(cfg, i), json.dumps(batch.to_dict()))


def pool_batch(cfg: dict, update: int) -> RolloutBatch:
    """The pool batch that `update` (1-based) trains on, read from its file: the run's seed
    orders the pool, each pass over it in a new order. Read one at a time, so a pool of any
    size costs the memory of one batch."""
    size = cfg["offline_pool"]["batches"]
    epoch, pos = divmod(update - 1, size)
    file = _pool_batch_file(cfg, _epoch_order(cfg["seed"], epoch, size)[pos])
    if not os.path.exists(file):
        raise FileNotFoundError(f"offline pool batch {file} is missing: the pool was made when this "
                                f"run started and cannot be made again from trained weights; "
                                f"restore it, or start a new run with a new offline_pool.path")
    with open(file) as f:
        return RolloutBatch.from_dict(json.load(f))


# ----------------------------------------------------------------------------- learner

def pack(lengths: list, width: int) -> tuple:
    """First-fit decreasing: the (row, offset) of each sequence in rows of `width` tokens, and
    the number of rows."""
    place, free = [None] * len(lengths), []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        row = next((r for r, f in enumerate(free) if f >= lengths[i]), len(free))
        if row == len(free):
            free.append(width)
        place[i] = (row, width - free[row])
        free[row] -= lengths[i]
    return place, len(free)


def batch_inputs(rollouts: list, pad_id: int, hidden_size: int, may_pack: bool = True) -> dict:
    """The tensors response_logp needs for these rollouts: the sequences (prompt + response),
    one per row right-padded, or (may_pack) packed several to a row where that costs less.

    ids [rows, width]: the tokens. position_ids: None for one sequence per row (plain causal
    attention; a pad is never attended to by the real tokens before it); for packed rows the
    positions restart at 0 with each sequence, which makes transformers attend within each
    sequence only (pads, position 0 each, attend to themselves alone). mask [B, T]: response
    tokens, T the longest response; rows, cols: their places in mask (row-major); at: the flat
    index in ids of the position that predicts each of them (response token j of a sequence
    whose prompt has length P is predicted at position P - 1 + j of the sequence); targets:
    the tokens themselves.

    Cost of a layout, in token slots: rows x width x (1 + width / (7.5 d)), d = hidden_size,
    because attention spans a whole row (per token and layer about 4 width d flops against
    about 30 d^2 for the matrix products), and x 1.05 for packed rows, whose attention needs an
    explicit mask (at equal shapes about 5-8% slower than plain causal on the toy).
    """
    import torch

    lengths = [len(r.prompt_ids) + len(r.response_ids) for r in rollouts]
    longest = max(lengths)
    cost = lambda n_rows, width: n_rows * width * (1 + width / (7.5 * hidden_size))
    layouts = [(cost(len(lengths), longest), longest, [(i, 0) for i in range(len(lengths))],
                len(lengths))]
    for width in (2 * longest, 4 * longest) if may_pack else ():
        place, n_rows = pack(lengths, width)
        layouts.append((1.05 * cost(n_rows, width), width, place, n_rows))
    _, width, place, n_rows = min(layouts, key=lambda layout: layout[0])
    length = torch.tensor(lengths)
    start = torch.tensor([row * width + offset for row, offset in place])  # in the flat rows
    seq = torch.repeat_interleave(torch.arange(len(lengths)), length)   # sequence of each token
    offset = torch.arange(int(length.sum())) - (torch.cumsum(length, 0) - length)[seq]
    ids = torch.full((n_rows * width,), pad_id, dtype=torch.long)
    ids[start[seq] + offset] = torch.tensor(
        list(itertools.chain.from_iterable(r.prompt_ids + r.response_ids for r in rollouts)))
    position_ids = None
    if n_rows < len(lengths):
        position_ids = torch.zeros(n_rows * width, dtype=torch.long)
        position_ids[start[seq] + offset] = offset
        position_ids = position_ids.view(n_rows, width)
    prompt_len = torch.tensor([len(r.prompt_ids) for r in rollouts])
    resp_len = length - prompt_len
    mask = torch.arange(int(resp_len.max())) < resp_len[:, None]
    rows, cols = mask.nonzero(as_tuple=True)
    at = start[rows] + prompt_len[rows] - 1 + cols
    return {"ids": ids.view(n_rows, width), "position_ids": position_ids, "mask": mask,
            "rows": rows, "cols": cols, "at": at, "targets": ids[at + 1]}


def response_logp(model, inputs: dict, with_entropy: bool = False):
    """Token log-probs of the responses under `model`: ([B, T] logp, [B, T] float mask, entropy
    sum or None); `inputs` from batch_inputs, on the model's device.

    The output layer and the softmax run on the response tokens only, not on prompts and
    padding (with a 150k vocabulary those would dominate time and memory); check_output_layer
    makes sure that is what the model's own forward computes.
    """
    import torch
    import losses

    hidden = model.get_decoder()(input_ids=inputs["ids"], position_ids=inputs["position_ids"],
                                 use_cache=False).last_hidden_state
    logits = model.get_output_embeddings()(hidden.flatten(0, 1)[inputs["at"]]).float()
    flat = torch.log_softmax(logits, -1).gather(-1, inputs["targets"][:, None])[:, 0]
    mask = inputs["mask"]
    logp = torch.zeros(mask.shape, dtype=flat.dtype, device=flat.device).index_put(
        (inputs["rows"], inputs["cols"]), flat)
    entropy_sum = None
    if with_entropy:
        with torch.no_grad():
            entropy_sum = losses.entropy_from_logits(logits, torch.ones_like(flat)) * flat.numel()
    return logp, mask.to(flat.dtype), entropy_sum


def check_output_layer(model) -> None:
    """Refuse a model whose logits are not its output layer applied to its decoder's last hidden
    state (e.g. soft-capped or scaled logits): response_logp computes them that way."""
    import torch

    device = next(model.parameters()).device
    ids = torch.arange(2, 10, device=device)[None] % model.config.vocab_size
    with torch.no_grad():
        full = model(input_ids=ids, use_cache=False).logits
        ours = model.get_output_embeddings()(model.get_decoder()(input_ids=ids, use_cache=False)
                                             .last_hidden_state)
    if not torch.allclose(full.float(), ours.float(), rtol=1e-3, atol=1e-3):
        raise ValueError(f"{type(model).__name__}: logits are not the output layer applied to the "
                         f"decoder's last hidden state; train.response_logp needs them to be")


def padded(rows: list, T: int, device):
    """Ragged rows of floats as a [len(rows), T] float32 tensor, right-padded with zeros."""
    import torch

    lengths = torch.tensor([len(row) for row in rows])
    out = torch.zeros((len(rows), T), dtype=torch.float32)
    out[torch.arange(T) < lengths[:, None]] = torch.tensor(
        list(itertools.chain.from_iterable(rows)), dtype=torch.float32)
    return out.to(device)


def _clock(device) -> float:
    """perf_counter once the device has done its queued work: CUDA kernels run asynchronously,
    so a phase's time is only its own with a synchronize at its end."""
    import torch
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def learn(cfg, model, ref_model, optimizer, batch: RolloutBatch, pad_id: int) -> dict:
    """One optimizer update on one rollout batch; returns the update's metrics.

    Micro-batches hold whole groups. Every objective is a sum over groups divided by the
    batch's response-token count, so the micro-batch losses, each rescaled by its share of the
    tokens, add up to the full-batch loss exactly. Metrics are then computed once on the whole
    batch from the detached log-probs, so they are exact too.
    """
    import torch
    import losses

    device = next(model.parameters()).device
    times = {}
    mb = cfg["micro_batch_size"]
    n_tokens_total = sum(len(r.response_ids) for r in batch.rollouts)
    need_ref = losses.needs_ref(cfg["loss"])
    logp_all, ref_all, entropy_sum = [], [], 0.0
    loss_total = torch.zeros((), device=device)
    optimizer.zero_grad(set_to_none=True)
    times["time/ref"] = times["time/learn"] = 0.0
    for start in range(0, len(batch.rollouts), mb):
        part = batch.rollouts[start:start + mb]
        t_inputs = time.perf_counter()
        # sdpa and eager attention keep packed sequences apart (a mask built from the position
        # ids); flash-attention does so only for a batch of one row
        inputs = batch_inputs(part, pad_id, model.config.hidden_size,
                              may_pack=model.config._attn_implementation in ("sdpa", "eager"))
        inputs = {k: v if v is None else v.to(device) for k, v in inputs.items()}
        t0 = _clock(device)
        ref_logp = None
        if need_ref:  # the reference's forward pass only, no graph
            with torch.no_grad(), autocast(cfg):
                ref_logp, _, _ = response_logp(ref_model, inputs)
        t1 = _clock(device)
        with autocast(cfg):
            logp, mask, ent = response_logp(model, inputs, with_entropy=True)
        behavior = padded([r.behavior_logp for r in part], logp.size(1), device)
        rewards = torch.tensor(batch.rewards[start:start + mb], dtype=torch.float32, device=device)
        loss, _ = losses.compute_loss(cfg["loss"], logp=logp, behavior_logp=behavior,
                                      ref_logp=ref_logp, mask=mask, rewards=rewards,
                                      group_size=cfg["group_size"], **cfg["loss_args"])
        share = mask.sum() / n_tokens_total
        (loss * share).backward()
        loss_total += loss.detach() * share
        entropy_sum += ent
        logp_all.append((logp.detach(), behavior, mask))
        ref_all.append(ref_logp)
        times["time/ref"] += t1 - t0
        times["time/learn"] += (t0 - t_inputs) + (_clock(device) - t1)
    t0 = _clock(device)
    grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["grad_clip"]))
    # never step on a non-finite loss or gradient: the update is skipped (counted by the loop)
    finite = math.isfinite(grad_norm) and math.isfinite(float(loss_total))
    if finite:
        optimizer.step()
    else:
        optimizer.zero_grad(set_to_none=True)
    times["time/optim"] = _clock(device) - t0

    t0 = time.perf_counter()
    T = max(x[0].size(1) for x in logp_all)
    cat = lambda xs: torch.cat([torch.nn.functional.pad(x, (0, T - x.size(1))) for x in xs])
    logp, behavior, mask = (cat([x[i] for x in logp_all]) for i in range(3))
    _, metrics = losses.compute_loss(
        cfg["loss"], logp=logp, behavior_logp=behavior, mask=mask,
        ref_logp=cat(ref_all) if need_ref else None,
        rewards=torch.tensor(batch.rewards, dtype=torch.float32, device=device),
        group_size=cfg["group_size"], **cfg["loss_args"])
    metrics["logp_diff_max"] = float(((logp - behavior).abs() * mask).max())
    times["time/metrics"] = time.perf_counter() - t0
    metrics.update(times)
    metrics["entropy"] = float(entropy_sum) / n_tokens_total
    metrics["grad_norm"] = grad_norm
    metrics["skipped"] = 0.0 if finite else 1.0
    return metrics


# ----------------------------------------------------------------------------- checkpoints
#
# out_dir/ckpt-000040/ holds all a resumed run needs to continue exactly as if never stopped:
#   learner.pt     learner weights
#   optimizer.pt   AdamW state
#   reference.pt   reference weights, only when ref_refresh_every > 0 (else the base model is it)
#   state.pt       update counter, next batch index, responses_total, skip counters, the delay
#                  queue (rollouts, rewards, policy versions), RNG states, the sampler seed stream
# A checkpoint is written as ckpt-XXXXXX.tmp, fsynced, then renamed, so a folder named
# ckpt-XXXXXX is always complete; the previous one is deleted only after the rename.

_CKPT_NAME = re.compile(r"ckpt-(\d+)")


def _ckpt_update(path: str) -> int:
    return int(_CKPT_NAME.fullmatch(os.path.basename(path)).group(1))


def latest_checkpoint(out_dir: str):
    """The complete checkpoint folder with the highest update in out_dir, or None."""
    if not os.path.isdir(out_dir):
        return None
    found = [os.path.join(out_dir, n) for n in os.listdir(out_dir) if _CKPT_NAME.fullmatch(n)]
    return max(found, key=_ckpt_update) if found else None


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic(path: str, text: str) -> None:
    with open(path + ".tmp", "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)


def save_checkpoint(out_dir: str, update: int, model, optimizer, ref_model, state: dict) -> str:
    """Write checkpoint `update` atomically, then delete older ones; returns its folder.
    `ref_model` None: the reference is the base model and is not saved."""
    import torch

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
    _fsync_dir(tmp)
    os.replace(tmp, final)
    _fsync_dir(out_dir)
    for name in os.listdir(out_dir):  # older checkpoints, and temp folders of interrupted writes
        if name.startswith("ckpt-") and name != os.path.basename(final):
            shutil.rmtree(os.path.join(out_dir, name), ignore_errors=True)
    return final


def load_checkpoint(path: str, model, optimizer, ref_model) -> dict:
    """Load a checkpoint into the learner, the optimizer and (when saved) the reference; return
    its state.pt with the delay queue rebuilt as RolloutBatch objects."""
    import torch

    def load(name):  # weights_only: a checkpoint holds tensors and plain Python values only
        return torch.load(os.path.join(path, name), map_location="cpu", weights_only=True)

    model.load_state_dict(load("learner.pt"))
    optimizer.load_state_dict(load("optimizer.pt"))
    if ref_model is not None and os.path.exists(os.path.join(path, "reference.pt")):
        ref_model.load_state_dict(load("reference.pt"))
    state = load("state.pt")
    state["queue"] = deque(RolloutBatch.from_dict(b) for b in state["queue"])
    return state


def rng_state() -> dict:
    """Every RNG the run may draw from (numpy's is not used by this code, so not saved)."""
    import torch
    return {"torch": torch.get_rng_state(), "python": random.getstate(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}


def set_rng_state(state: dict) -> None:
    import torch
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
        _write_atomic(path, "".join(kept))


# ----------------------------------------------------------------------------- the loop

def autocast(cfg: dict):
    """The learner's forward precision: `autocast` (e.g. bfloat16 on GPU) over `dtype` weights.

    Weights, gradients and AdamW states stay in `dtype` (float32): a 1e-6 step is below bf16's
    resolution for weights of size ~1e-2, so pure-bf16 weights would silently not train.
    """
    import contextlib
    import torch
    if not cfg["autocast"]:
        return contextlib.nullcontext()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.autocast(device, dtype=getattr(torch, cfg["autocast"]))


def load_learner(cfg: dict):
    import torch
    from transformers import AutoModelForCausalLM

    dtype = getattr(torch, cfg["dtype"])
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(cfg["model"], dtype=dtype).to(device)
    check_output_layer(model)
    if cfg["gradient_checkpointing"]:
        model.gradient_checkpointing_enable()
    return model


def prepare_model(cfg: dict) -> None:
    """Build the toy base model if the config asks for it (preflight refuses a missing path)."""
    if cfg["task"] == "toy" and cfg["build_toy_model"]:
        tasks.build_base_model(cfg["model"])


def make_sampler(cfg: dict):
    """The vLLM engine for a run's base model (one per process; sweeps share it)."""
    prepare_model(cfg)
    return rollout.Sampler(cfg["model"], dtype=cfg["sampler_dtype"] or cfg["dtype"],
                           seed=cfg["seed"], **cfg["vllm"])


def sample_batch(cfg, sampler, index: int) -> tuple:
    """Sample and grade rollout batch `index` with the engine's current weights."""

    problems = prompts_for_batch(cfg, index)
    t0 = time.perf_counter()
    rollouts = sampler.sample([p["prompt"] for p in problems], cfg["group_size"],
                              cfg["max_tokens"], cfg["temperature"],
                              seed=rollout.batch_seed(cfg["seed"], index))
    t1 = time.perf_counter()
    correct = tasks.grade_many([r.text for r in rollouts],
                               [problems[r.prompt_index]["answer"] for r in rollouts],
                               cfg["grade_timeout_s"], cfg["grade_workers"],
                               integer_only=cfg["task"] == "toy")
    rewards = [float(c) for c in correct]
    t2 = time.perf_counter()
    return RolloutBatch(index, rollouts, rewards), {"time/generate": t1 - t0, "time/grade": t2 - t1}


def check_benchmarks(cfg: dict) -> None:
    """Refuse, before any long work, an eval benchmark that run_eval could not load."""
    if cfg["eval_every"] > 0:
        import evaluate
        evaluate.load_config_benchmarks(cfg)  # raises BenchmarkUnavailable, naming the fix


def run_eval(cfg, sampler, update: int, out_dir: str) -> dict:
    """Evaluate the engine's current weights (evaluate.evaluate_config); append the per-problem
    records, tagged with `update`, to <out_dir>/eval_records.jsonl; add the difficulty-split
    metrics against the update-0 (base model) records found there."""
    import evaluate

    path = os.path.join(out_dir, "eval_records.jsonl")
    metrics, records = evaluate.evaluate_config(cfg, sampler)
    with open(path, "a") as f:
        for r in records:
            f.write(json.dumps({"update": update, **r}) + "\n")
    base = evaluate.read_records(path, update=0)
    if base:
        metrics.update(evaluate.difficulty_metrics(base, records, evaluate.eval_k(cfg)))
    return metrics


def _jsonable(metrics: dict) -> dict:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in metrics.items()}


# The first SIGINT/SIGTERM sets STOP["signal"]: the run finishes its update, writes a checkpoint
# and train() returns; main() then exits with 128 + signal (130 SIGINT, 143 SIGTERM).
STOP = {"signal": None}


def _on_signal(signum, frame) -> None:
    if STOP["signal"] is not None:  # a second signal aborts now; the last checkpoint stays valid
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    STOP["signal"] = signum
    print(f"\n{signal.Signals(signum).name}: finishing this update, then checkpoint and exit "
          f"(send it again to abort at once)", file=sys.stderr, flush=True)


def train(cfg: dict, sampler=None) -> list:
    """Run the loop of DESIGN.md; returns the rows logged by this call (also in metrics.jsonl).

    `sampler`: an existing rollout.Sampler to reuse (tests share one engine); the learner's
    weights are pushed into it first, so it starts from this run's base model or checkpoint.
    resume=true continues from the last checkpoint in out_dir (none yet: from update 0) after
    dropping the rows logged past it, so metrics.jsonl never holds an update twice.
    """
    import torch
    from tqdm import tqdm
    import losses

    ckpt = preflight(cfg)  # refuses bad paths and a clashing out_dir before any long work
    torch.manual_seed(cfg["seed"])
    out_dir = cfg["out_dir"]
    os.makedirs(out_dir, exist_ok=True)
    _write_atomic(os.path.join(out_dir, "config.yaml"), yaml.safe_dump(cfg, sort_keys=False))
    prepare_model(cfg)
    model = load_learner(cfg)
    # GRPO and GRPO+TIS never read the reference: no second copy of the model for them
    ref_model = (load_learner(cfg).eval().requires_grad_(False)
                 if losses.needs_ref(cfg["loss"]) else None)
    device = next(model.parameters()).device
    model.train()
    # fused: one kernel for all parameters, 2-3x faster than the default per-tensor loop on CPU
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], betas=tuple(cfg["adam_betas"]),
                                  weight_decay=cfg["weight_decay"], fused=True)
    state = load_checkpoint(ckpt, model, optimizer, ref_model) if ckpt else {}
    start = state.get("update", 0)
    drop_logged_after(out_dir, start if ckpt else -1)  # fresh runs: only an interrupted update 0
    if cfg["resume"]:
        print(f"resuming {out_dir} from {ckpt}" if ckpt else
              f"resume=true: no checkpoint in {out_dir} yet, starting at update 0", file=sys.stderr)
    if ckpt and rollout.batch_seed(cfg["seed"], state["next_batch"]) != state["next_batch_seed"]:
        raise RuntimeError(f"rollout.batch_seed changed since {ckpt} was written: a resumed run "
                           f"would not draw the samples of the original one")
    if sampler is None:
        sampler = make_sampler(cfg)
    sampler.sync(model, start)  # a shared engine or a resumed run holds other weights
    pad_id = sampler.tokenizer.pad_token_id
    if pad_id is None:
        pad_id = sampler.tokenizer.eos_token_id

    log_path = os.path.join(out_dir, "metrics.jsonl")
    log_file = open(log_path, "a")
    rows = []

    def log(row):
        rows.append(row)
        log_file.write(json.dumps(_jsonable(row)) + "\n")
        log_file.flush()

    N, T = cfg["delay"], cfg["updates"]
    offline = bool(cfg["offline_pool"]["path"])
    if offline and start == 0:  # the engine holds the base model: make what the pool lacks
        make_pool(cfg, sampler)
    queue = state.get("queue", deque())
    next_batch = state.get("next_batch", 0)
    # offline, every response of the pool was generated before the first update
    responses_total = state.get("responses_total", cfg["offline_pool"]["batches"] *
                                cfg["prompts_per_update"] * cfg["group_size"] if offline else 0)
    skipped_updates = state.get("skipped_updates", 0)
    skips_in_a_row = state.get("skips_in_a_row", 0)

    def checkpoint(t):
        t0 = time.perf_counter()
        path = save_checkpoint(out_dir, t, model, optimizer,
                               ref_model if cfg["ref_refresh_every"] > 0 else None, {
            "update": t, "next_batch": next_batch, "responses_total": responses_total,
            "skipped_updates": skipped_updates, "skips_in_a_row": skips_in_a_row,
            "queue": [b.to_dict() for b in queue],
            "rng": rng_state(),
            # sampling is a pure function of (seed, batch index): recorded to check it on resume
            "seed": cfg["seed"], "next_batch_seed": rollout.batch_seed(cfg["seed"], next_batch)})
        size = sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path))
        tqdm.write(f"checkpoint {path}: {size / 1e6:.1f} MB in {time.perf_counter() - t0:.2f} s",
                   file=sys.stderr)

    STOP["signal"] = None
    handlers = {}
    if threading.current_thread() is threading.main_thread():  # Python's signals need it
        handlers = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if cfg["eval_every"] > 0 and start == 0:
            log({"update": 0, "responses_total": responses_total, **run_eval(cfg, sampler, 0, out_dir)})
        # warm-up: the first N batches come from the base policy. A resumed run's queue is
        # already this full, unless `updates` was raised past the end of the original run.
        if state and len(queue) < min(N, T - start):
            print(f"updates raised past the end of the original run: refilling the delay queue "
                  f"with version {start}, so the next {min(N, T - start) - len(queue)} updates "
                  f"train on fresher batches than a run planned this long would", file=sys.stderr)
        while len(queue) < min(N, T - start):
            batch, _ = sample_batch(cfg, sampler, next_batch)
            queue.append(batch)
            next_batch += 1
            responses_total += len(batch.rollouts)
        if state:
            set_rng_state(state["rng"])  # after loading and engine start, which may draw from them

        bar = tqdm(range(start + 1, T + 1), initial=start, total=T, desc=f"{cfg['loss']} N={N}",
                   dynamic_ncols=True)
        log_seconds = 0.0  # writing the previous row: a row cannot time its own write
        for t in bar:
            update_start = time.perf_counter()
            times = {}
            sample_reward = float("nan")
            if offline:
                batch = pool_batch(cfg, t)
            else:
                # sample with the current weights (version t-1) only if some update trains on it
                if next_batch < T:
                    batch_new, times = sample_batch(cfg, sampler, next_batch)
                    queue.append(batch_new)
                    next_batch += 1
                    responses_total += len(batch_new.rollouts)
                    sample_reward = sum(batch_new.rewards) / len(batch_new.rewards)
                batch = queue.popleft()
            learner_version = t - 1
            metrics = learn(cfg, model, ref_model, optimizer, batch, pad_id)
            # A non-finite loss or gradient skips the optimizer step (learn never steps on NaN);
            # the batch is still consumed and the update counted, so the data order and the delay
            # stay those of the schedule. Skip rather than stop: one overflowing batch (an extreme
            # ratio, a bf16 overflow) should not cost a restart, and the weights are untouched.
            # A streak of max_consecutive_skips means the run has diverged: stop, keeping the last
            # checkpoint (resuming would replay the same updates).
            skipped_updates += int(metrics["skipped"])
            skips_in_a_row = skips_in_a_row + 1 if metrics["skipped"] else 0

            t0 = time.perf_counter()
            if metrics["skipped"]:  # no step was taken: the engine already holds these weights
                sampler.version = t
            else:
                sampler.sync(model, version=t)
            times["time/sync"] = _clock(device) - t0
            if ref_model is not None and cfg["ref_refresh_every"] > 0 \
                    and t % cfg["ref_refresh_every"] == 0:
                ref_model.load_state_dict(model.state_dict())

            versions = [r.policy_version for r in batch.rollouts]
            row = {
                "update": t,
                "reward_mean": sum(batch.rewards) / len(batch.rewards),
                "sample_reward_mean": sample_reward,
                "staleness": learner_version - sum(versions) / len(versions),
                "sampler_version": min(versions),
                "responses_total": responses_total,
                "response_len_mean": sum(len(r.response_ids) for r in batch.rollouts) / len(versions),
                "lr": cfg["lr"],
                "skipped_updates": skipped_updates,
                **metrics, **times,
            }
            t0 = time.perf_counter()
            if cfg["eval_every"] > 0 and (t % cfg["eval_every"] == 0 or t == T):
                row.update(run_eval(cfg, sampler, t, out_dir))
            row["time/eval"] = time.perf_counter() - t0
            row["time/log"] = log_seconds
            # wall seconds of the whole update, the previous row's write included (steady state:
            # the rows' time/update add up to the loop's wall time, checkpoints aside)
            row["time/update"] = time.perf_counter() - update_start + log_seconds
            t0 = time.perf_counter()
            log(row)
            bar.set_postfix(reward=f"{row['reward_mean']:.3f}", k3=f"{row['k3']:.4f}")
            log_seconds = time.perf_counter() - t0
            if skips_in_a_row >= cfg["max_consecutive_skips"]:
                raise FloatingPointError(
                    f"updates {t - skips_in_a_row + 1}..{t} all had a non-finite loss or gradient "
                    f"(max_consecutive_skips={cfg['max_consecutive_skips']}): the run has diverged. "
                    f"No optimizer step used them; the last checkpoint, "
                    f"{latest_checkpoint(out_dir) or 'none'}, is kept. Lower lr (or check "
                    f"loss_args) and start a new run")
            if t == T or (cfg["ckpt_every"] > 0 and t % cfg["ckpt_every"] == 0) or STOP["signal"]:
                checkpoint(t)
            if STOP["signal"]:
                tqdm.write(f"stopped by {signal.Signals(STOP['signal']).name} after update {t}; "
                           f"continue with resume=true", file=sys.stderr)
                break
    finally:
        log_file.close()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    return rows


def main(argv: list) -> None:
    if not argv or argv[0].startswith("-"):
        print(__doc__)
        sys.exit(2)
    try:
        cfg = load_config(argv[0], argv[1:])
        preflight(cfg)
    except (ValueError, TypeError, FileNotFoundError, NotImplementedError) as e:
        sys.exit(f"error: {e}")  # bad input: the message says what is wrong and how to fix it
    train(cfg)
    if STOP["signal"]:  # stopped early by a signal, its checkpoint written
        sys.exit(128 + STOP["signal"])


if __name__ == "__main__":
    main(sys.argv[1:])
