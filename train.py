"""RL fine-tuning under controlled policy staleness: sample -> queue -> learn -> sync -> log.

    python train.py configs/toy.yaml [key=value ...]      (dotted keys for nested values)

One process alternates vLLM sampling (rollout.py) and plain PyTorch updates. A FIFO queue of
rollout batches, N = `delay` deep, makes the batch trained at update t the one sampled by the
policy of N updates earlier. Policy version v = optimizer updates applied so far (base model:
v = 0); the update v -> v+1 trains on a batch sampled by version max(0, v - N).
"""
import json
import math
import os
import sys
import time
from collections import deque
from dataclasses import dataclass

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULTS_PATH = os.path.join(HERE, "configs", "defaults.yaml")


# ----------------------------------------------------------------------------- config

def _merge(base: dict, override: dict, where: str) -> dict:
    out = dict(base)
    for key, value in override.items():
        if key not in base:
            near = [k for k in base if k.split("_")[0] == key.split("_")[0] or key in k]
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
    import losses
    checks = [
        (cfg["loss"] in losses.LOSSES, f"loss must be one of {sorted(losses.LOSSES)}"),
        (cfg["delay"] >= 0, "delay (N) must be >= 0"),
        (cfg["group_size"] >= 2, "group_size must be >= 2 (group baselines need two responses)"),
        (cfg["prompts_per_update"] >= 1, "prompts_per_update must be >= 1"),
        (cfg["updates"] >= 0, "updates must be >= 0"),
        (cfg["micro_batch_size"] % cfg["group_size"] == 0,
         "micro_batch_size must be a multiple of group_size (groups are never split)"),
        (cfg["lr"] > 0, "lr must be > 0"),
        (cfg["task"] in ("toy", "math"), "task must be toy or math"),
        (cfg["eval_n"] >= 1, "eval_n must be >= 1"),
    ]
    for ok, message in checks:
        if not ok:
            raise ValueError(f"bad config: {message}")
    import evaluate
    evaluate.check_config(cfg)


# ----------------------------------------------------------------------------- data

@dataclass
class RolloutBatch:
    """One rollout batch: prompts_per_update groups of group_size responses, graded."""
    index: int            # position in the stream of sampled batches
    rollouts: list        # rollout.Rollout, grouped by prompt
    rewards: list         # float per rollout


def prompts_for_batch(cfg: dict, index: int) -> list:
    """The problems of rollout batch `index`: a pure function of (seed, index)."""
    import tasks
    seed = cfg["seed"] * 1_000_003 + index
    return tasks.toy_dataset(cfg["prompts_per_update"], seed, cfg["toy_digits"])


# ----------------------------------------------------------------------------- learner

def response_logp(model, batch: RolloutBatch, pad_id: int, with_entropy: bool = False):
    """Token log-probs of the responses under `model`: ([B, T] logp, [B, T] mask, entropy sum).

    Sequences are prompt + response, right-padded; position p predicts token p + 1, so response
    token j of a sequence whose prompt has length P is predicted at position P - 1 + j.
    """
    import torch
    import losses

    device = next(model.parameters()).device
    seqs = [r.prompt_ids + r.response_ids for r in batch.rollouts]
    width = max(map(len, seqs))
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
        attn[i, :len(s)] = 1
    resp_len = torch.tensor([len(r.response_ids) for r in batch.rollouts])
    prompt_len = torch.tensor([len(r.prompt_ids) for r in batch.rollouts])
    T = int(resp_len.max())
    j = torch.arange(T)
    mask = (j[None] < resp_len[:, None]).float()
    pos = (prompt_len[:, None] - 1 + j[None]).clamp(max=width - 2)
    targets = ids.gather(1, pos + 1)
    ids, attn = ids.to(device), attn.to(device)
    logits = model(input_ids=ids, attention_mask=attn).logits.float()
    logits = logits.gather(1, pos.to(device)[..., None].expand(-1, -1, logits.size(-1)))
    logp = torch.log_softmax(logits, -1).gather(-1, targets.to(device)[..., None])[..., 0]
    entropy_sum = None
    if with_entropy:
        with torch.no_grad():
            entropy_sum = losses.entropy_from_logits(logits, mask.to(device)) * mask.sum()
    return logp, mask.to(device), entropy_sum


def padded(rows: list, T: int, device):
    import torch
    out = torch.zeros((len(rows), T), dtype=torch.float32)
    for i, row in enumerate(rows):
        out[i, :len(row)] = torch.tensor(row, dtype=torch.float32)
    return out.to(device)


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
    logp_all, ref_all, mask_all, entropy_sum = [], [], [], 0.0
    optimizer.zero_grad(set_to_none=True)
    times["time/ref"] = times["time/learn"] = 0.0
    for start in range(0, len(batch.rollouts), mb):
        part = RolloutBatch(batch.index, batch.rollouts[start:start + mb],
                            batch.rewards[start:start + mb])
        t0 = time.perf_counter()
        ref_logp = None
        if need_ref:
            with torch.no_grad():
                ref_logp, _, _ = response_logp(ref_model, part, pad_id)
        t1 = time.perf_counter()
        logp, mask, ent = response_logp(model, part, pad_id, with_entropy=True)
        T = logp.size(1)
        behavior = padded([r.behavior_logp for r in part.rollouts], T, device)
        rewards = torch.tensor(part.rewards, dtype=torch.float32, device=device)
        loss, _ = losses.compute_loss(cfg["loss"], logp=logp, behavior_logp=behavior,
                                      ref_logp=ref_logp, mask=mask, rewards=rewards,
                                      group_size=cfg["group_size"], **cfg["loss_args"])
        (loss * (mask.sum() / n_tokens_total)).backward()
        times["time/ref"] += t1 - t0
        times["time/learn"] += time.perf_counter() - t1
        entropy_sum += float(ent)
        logp_all.append((logp.detach(), behavior, mask))
        ref_all.append(ref_logp)
    t0 = time.perf_counter()
    grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["grad_clip"]))
    finite = math.isfinite(grad_norm)
    if finite:
        optimizer.step()
    else:
        optimizer.zero_grad(set_to_none=True)
    times["time/optim"] = time.perf_counter() - t0

    T = max(x[0].size(1) for x in logp_all)
    cat = lambda xs: torch.cat([torch.nn.functional.pad(x, (0, T - x.size(1))) for x in xs])
    logp, behavior, mask = (cat([x[i] for x in logp_all]) for i in range(3))
    _, metrics = losses.compute_loss(
        cfg["loss"], logp=logp, behavior_logp=behavior, mask=mask,
        ref_logp=cat(ref_all) if need_ref else None,
        rewards=torch.tensor(batch.rewards, dtype=torch.float32, device=device),
        group_size=cfg["group_size"], **cfg["loss_args"])
    metrics["logp_diff_max"] = float(((logp - behavior).abs() * mask).max())
    metrics.update(times)
    metrics["entropy"] = entropy_sum / n_tokens_total
    metrics["grad_norm"] = grad_norm
    metrics["skipped"] = 0.0 if finite else 1.0
    return metrics


# ----------------------------------------------------------------------------- the loop

def load_learner(cfg: dict):
    import torch
    from transformers import AutoModelForCausalLM

    dtype = getattr(torch, cfg["dtype"])
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(cfg["model"], dtype=dtype).to(device)
    if cfg["gradient_checkpointing"]:
        model.gradient_checkpointing_enable()
    return model


def prepare_model(cfg: dict) -> None:
    """Build the toy base model if the config asks for it; refuse a model path that is missing."""
    import tasks
    if cfg["task"] == "toy" and cfg["build_toy_model"]:
        tasks.build_base_model(cfg["model"])
    if not os.path.isdir(cfg["model"]):
        raise FileNotFoundError(f"model path {cfg['model']!r} does not exist: give a Hugging Face "
                                f"model folder, or set build_toy_model=true for the toy")


def make_sampler(cfg: dict):
    """The vLLM engine for a run's base model (one per process; sweeps share it)."""
    import rollout
    prepare_model(cfg)
    return rollout.Sampler(cfg["model"], dtype=cfg["dtype"], seed=cfg["seed"], **cfg["vllm"])


def sample_batch(cfg, sampler, index: int) -> tuple:
    """Sample and grade rollout batch `index` with the engine's current weights."""
    import rollout
    import tasks

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


def train(cfg: dict, sampler=None) -> list:
    """Run the loop of DESIGN.md; returns the list of logged rows (also in metrics.jsonl).

    `sampler`: an existing rollout.Sampler to reuse (tests share one engine); the learner's
    weights are pushed into it first, so it starts from this run's base model.
    """
    import torch
    from tqdm import tqdm

    torch.manual_seed(cfg["seed"])
    out_dir = cfg["out_dir"]
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.yaml"), "w") as f:
        yaml.safe_dump(cfg, f, sort_keys=False)
    prepare_model(cfg)
    model = load_learner(cfg)
    ref_model = load_learner(cfg).eval().requires_grad_(False)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], betas=tuple(cfg["adam_betas"]),
                                  weight_decay=cfg["weight_decay"])
    if sampler is None:
        sampler = make_sampler(cfg)
    else:
        sampler.sync(model, 0)
    sampler.version = 0
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
    responses_total = 0
    queue = deque()
    next_batch = 0
    if cfg["eval_every"] > 0:
        log({"update": 0, **run_eval(cfg, sampler, 0, out_dir)})
    for _ in range(min(N, T)):  # warm-up: the first N batches come from the base policy
        batch, _ = sample_batch(cfg, sampler, next_batch)
        queue.append(batch)
        next_batch += 1
        responses_total += len(batch.rollouts)

    bar = tqdm(range(1, T + 1), desc=f"{cfg['loss']} N={N}", dynamic_ncols=True)
    for t in bar:
        times = {}
        # sample with the current weights (version t-1) only if some update will train on it
        if next_batch < T:
            batch_new, times = sample_batch(cfg, sampler, next_batch)
            queue.append(batch_new)
            next_batch += 1
            responses_total += len(batch_new.rollouts)
            sample_reward = sum(batch_new.rewards) / len(batch_new.rewards)
        else:
            sample_reward = float("nan")
        batch = queue.popleft()
        learner_version = t - 1
        metrics = learn(cfg, model, ref_model, optimizer, batch, pad_id)

        t0 = time.perf_counter()
        sampler.sync(model, version=t)
        times["time/sync"] = time.perf_counter() - t0
        if cfg["ref_refresh_every"] > 0 and t % cfg["ref_refresh_every"] == 0:
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
            **metrics, **times,
        }
        if not math.isfinite(row["loss"]):
            raise FloatingPointError(f"non-finite loss at update {t}: {row}")
        t0 = time.perf_counter()
        if cfg["eval_every"] > 0 and (t % cfg["eval_every"] == 0 or t == T):
            row.update(run_eval(cfg, sampler, t, out_dir))
        row["time/eval"] = time.perf_counter() - t0
        log(row)
        bar.set_postfix(reward=f"{row['reward_mean']:.3f}", k3=f"{row['k3']:.4f}")
    log_file.close()
    return rows


def main(argv: list) -> None:
    if not argv or argv[0].startswith("-"):
        print(__doc__)
        sys.exit(2)
    cfg = load_config(argv[0], argv[1:])
    train(cfg)


if __name__ == "__main__":
    main(sys.argv[1:])
