"""The run's configuration: defaults <- experiment file <- key=value overrides, checked early.

    cfg = load_config("configs/toy.yaml", ["delay=32", "loss_args.beta=0.1"])

configs/defaults.yaml lists every key with its default and a comment. A key that is not there,
a value of the wrong type or an impossible value is refused with a message that says what is
wrong, before any long work. `config_differences` tells a resumed run from another one.
"""
import difflib
import math
import os

import yaml

import losses
import tasks

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULTS_PATH = os.path.join(HERE, "configs", "defaults.yaml")
# libyaml's parser where PyYAML has it: the same objects as yaml.safe_load, faster (a sweep loads
# every run's config, a table every kept run's; docs/speed.md)
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


# Mappings that a config replaces whole (their keys are values: digit and term counts)
WEIGHT_MAPS = ("toy_digits", "toy_terms")


def _merge(base: dict, override: dict, where: str) -> dict:
    out = dict(base)
    for key, value in override.items():
        if key not in base:
            near = difflib.get_close_matches(key, list(base), n=3, cutoff=0.7)
            raise ValueError(f"unknown config key '{where}{key}'"
                           + (f" (did you mean {', '.join(near)}?)" if near else "")
                           + f"; every key is listed in {DEFAULTS_PATH}")
        if isinstance(base[key], dict) and key not in WEIGHT_MAPS:
            if not isinstance(value, dict):
                raise TypeError(f"config key {where}{key} must be a mapping, got {value!r}")
            out[key] = _merge(base[key], value, f"{where}{key}.")
        elif where + key == "vllm.max_model_len":  # the one key that is a number or a word
            if value != "auto" and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise TypeError(f"config key vllm.max_model_len must be auto or a positive "
                                f"integer, got {value!r}")
            out[key] = value
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
        cfg = yaml.load(f, Loader=YAML_LOADER)
    if path:
        if not os.path.exists(path):
            raise FileNotFoundError(f"config file {path!r} does not exist")
        with open(path) as f:
            cfg = _merge(cfg, yaml.load(f, Loader=YAML_LOADER) or {}, "")
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"override {item!r} is not of the form key=value")
        key, raw = item.split("=", 1)
        nested = yaml.load(raw, Loader=YAML_LOADER)
        for part in reversed(key.split(".")):
            nested = {part: nested}
        cfg = _merge(cfg, nested, "")
    validate(cfg)
    return cfg


def validate(cfg: dict) -> None:
    """Impossible values, from the config alone (types were checked while merging)."""
    betas, digits, terms = cfg["adam_betas"], cfg["toy_digits"], cfg["toy_terms"]
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
        (cfg["sampler"] in ("auto", "vllm", "transformers"),
         f"sampler must be auto, vllm or transformers, got {cfg['sampler']!r}"),
        (cfg["sampler_dtype"] in (None, "float32", "bfloat16", "float16"),
         f"sampler_dtype must be null, float32, bfloat16 or float16, got {cfg['sampler_dtype']!r}"),
        (cfg["autocast"] in (None, "bfloat16", "float16"),
         f"autocast must be null, bfloat16 or float16, got {cfg['autocast']!r}"),
        (cfg["task"] in ("toy", "math"), "task must be toy or math"),
        (all(name in ("tensorboard", "wandb") for name in cfg["log_to"]),
         f"log_to must list tensorboard and/or wandb, got {cfg['log_to']!r}"),
        (cfg["device"] in ("auto", "cuda", "cpu"), f"device must be auto, cuda or cpu, got {cfg['device']!r}"),
        (cfg["cpu_matmul"] in ("auto", "onednn", "torch"),
         f"cpu_matmul must be auto, onednn or torch, got {cfg['cpu_matmul']!r}"),
        (cfg["logits_chunk_mib"] >= 0, "logits_chunk_mib must be >= 0 (0: no chunks)"),
        (isinstance(cfg["engine_mismatch_every"], int) and cfg["engine_mismatch_every"] >= 0,
         f"engine_mismatch_every must be an integer >= 0 (0: never), got {cfg['engine_mismatch_every']!r}"),
        (cfg["behavior_logp"] in ("engine", "learner"),
         f"behavior_logp must be engine or learner, got {cfg['behavior_logp']!r}"),
        (cfg["loss"] not in losses.LOSSES or not losses.objective(cfg["loss"]).reads_old_logp
         or cfg["behavior_logp"] == "engine",
         f"{cfg['loss']} reads the engine's log-probs and the learner's (old_logp) of each token: "
         f"behavior_logp=learner replaces the engine's, so their mismatch would read 1; use "
         f"behavior_logp=engine"),
        (all(isinstance(s, str) and s for s in cfg["stop_strings"]),
         f"stop_strings must be a list of non-empty strings, got {cfg['stop_strings']!r}"),
        (len(digits) > 0 and all(isinstance(d, int) and d >= 1 for d in digits)
         and all(isinstance(w, (int, float)) and w >= 0 for w in digits.values())
         and sum(digits.values()) > 0,
         f"toy_digits must map digit counts >= 1 to weights >= 0 with a positive sum, got {digits!r}"),
        (len(terms) > 0 and all(isinstance(t, int) and t >= 2 for t in terms)
         and all(isinstance(w, (int, float)) and w >= 0 for w in terms.values())
         and sum(terms.values()) > 0,
         f"toy_terms must map term counts >= 2 to weights >= 0 with a positive sum, got {terms!r}"),
        (cfg["max_tokens"] >= 1 and cfg["eval_max_tokens"] >= 1,
         "max_tokens and eval_max_tokens must be >= 1"),
        (cfg["temperature"] > 0, "temperature must be > 0 (behavior log-probs need a sampling "
                                 "distribution; greedy decoding has none)"),
        (cfg["eval_every"] >= 0, "eval_every must be >= 0 (0: never evaluate)"),
        (isinstance(cfg["eval_from"], int) and cfg["eval_from"] >= 0,
         f"eval_from must be an integer >= 0, got {cfg['eval_from']!r}"),
        (cfg["eval_n"] >= 1, "eval_n must be >= 1"),
        (cfg["eval_toy_size"] >= 1, "eval_toy_size must be >= 1"),
        (all(isinstance(b, str) for b in cfg["eval_benchmarks"]),
         f"eval_benchmarks must be a list of names, got {cfg['eval_benchmarks']!r}"),
        (cfg["ckpt_every"] >= 0, "ckpt_every must be >= 0 (0: checkpoint only at the end)"),
        (cfg["keep_checkpoints"] >= 1, "keep_checkpoints must be >= 1"),
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
        losses.check_hparams(cfg["loss"], cfg["loss_args"])  # the same check compute_loss runs
    except ValueError as e:
        raise ValueError(f"bad config: loss_args: {e}") from None
    check_eval_config(cfg)


# Keys that may change when a run is resumed: they do not change what the run computes
# (engine_mismatch_every and eval_from: a diagnostic's and the evaluations' schedule only;
# micro_batch_size, logits_chunk_mib, gradient_checkpointing, cpu_matmul and the engine's memory
# share and CUDA graphs only up to float rounding; they are here so that a run that ran out of
# memory can continue with smaller pieces, and one made on a CPU can continue on another; out_dir,
# so that a run folder can be moved or renamed and resumed there).
# vllm.max_model_len is not among them: it bounds what a response can be.
RESUMABLE_CHANGES = ("out_dir", "updates", "resume", "ckpt_every", "keep_checkpoints",
                     "max_consecutive_skips", "build_toy_model", "vllm.gpu_memory_utilization",
                     "vllm.enforce_eager", "micro_batch_size", "logits_chunk_mib",
                     "gradient_checkpointing", "cpu_matmul", "log_to", "wandb", "engine_mismatch_every",
                     "eval_from")


def config_differences(old: dict, new: dict) -> list:
    """'key: old -> new' for every key that differs, nested keys dotted, RESUMABLE_CHANGES (top
    level or dotted) left out. A key the old config lacks reads as its default in defaults.yaml:
    a knob added since the run started, at its default, is the run's old behaviour."""
    def flat(d, where=""):
        out = {}
        for k, v in d.items():
            if f"{where}{k}" in RESUMABLE_CHANGES:
                continue
            if isinstance(v, dict) and k not in WEIGHT_MAPS:
                out.update(flat(v, f"{where}{k}."))
            else:
                out[f"{where}{k}"] = v
        return out
    with open(DEFAULTS_PATH) as f:
        defaults = flat(yaml.load(f, Loader=YAML_LOADER))
    a, b = flat(old), flat(new)
    a.update({k: defaults[k] for k in set(b) - set(a) if k in defaults})
    return [f"{k}: {a.get(k, '(absent)')!r} -> {b.get(k, '(absent)')!r}"
            for k in sorted(set(a) | set(b)) if a.get(k, "(absent)") != b.get(k, "(absent)")]


def eval_k(cfg: dict) -> int:
    """The k of mean@k / best@k: eval_k, or eval_n when it is null."""
    return cfg["eval_k"] or cfg["eval_n"]


def check_eval_config(cfg: dict) -> None:
    """Early checks of the evaluation keys (nothing is loaded): bad values fail at startup."""
    if not 1 <= eval_k(cfg) <= cfg["eval_n"]:
        raise ValueError(f"bad config: eval_k must be in 1..eval_n={cfg['eval_n']}, "
                         f"got {cfg['eval_k']}")
    tasks.math_prompt("", cfg["prompt_template"])
    for entry in cfg["eval_benchmarks"]:
        tasks.resolve(entry, cfg["benchmarks"])
    if cfg["grade_timeout_s"] < 1 or cfg["grade_workers"] < 0:
        raise ValueError("bad config: grade_timeout_s must be >= 1 and grade_workers >= 0")
