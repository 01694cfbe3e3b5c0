"""Evaluation: mean@k and best@k on benchmarks, per-problem records, standalone CLI.

    python evaluate.py --model PATH --benchmarks math500,aime24,aime25,amc23,minerva --n 32
                       [--max-tokens 3072] [--out records.jsonl] [--config CONFIG.yaml] [key=value ...]
    python evaluate.py --model toy_base --benchmarks toy,tests/fixtures/mini_math.jsonl \\
                       --n 4 --template plain

For each problem, n responses are sampled (the config's `sampler`: vLLM's rollout.Sampler, or
rollout.TransformersSampler) and graded (grading.grade_many);
c of them are correct.
- mean@k = mean over problems of c / n: the expected accuracy of one sample, i.e. the mean
  correctness of k samples (c / n is its unbiased estimate for any k <= n).
- best@k = mean over problems of pass@k = 1 - C(n-c, k) / C(n, k), the unbiased estimator of
  the probability that at least one of k samples is correct (Chen et al., 2021).
- eval/avg/...: problem-weighted average over the benchmarks evaluated together.
The same functions run inside train.py on the engine's current weights (no reload from disk):
`run_eval` is the train-time evaluation.

Benchmarks: `toy` (synthetic sums), a name in the config's `benchmarks` table (hub data set via
`datasets`, or the entry's local `file`), or a JSONL file (one problem per line, fields
`problem`, `answer`, optional `id`), given as a path or as NAME=PATH. The toy benchmark also
reports mean@k by digit count (eval/toy/d1/mean@k ... d4), and the long toy's by term count
(eval/toy/t6/mean@k ... t9): its sums of two digits or more are held out of the training stream,
its one-digit sums are not (tasks.toy_held_out says why). Every evaluation yields
per-problem records {benchmark, id, n, correct, response_len_mean, truncated}; from the records
of the base model (p0 = correct / n) `difficulty_metrics` computes the study's split: problems
solved part of the time (0 < p0 <= 0.75) and problems never solved in n samples.
CLI flags default to the config's values (configs/defaults.yaml unless --config is given).
"""
import argparse
import json
import math
import os
import random
import sys
import time

import config
import grading
import rollout
import tasks

PARTIAL_MAX_P0 = 0.75      # "solved part of the time": 0 < p0 <= 0.75 (the study's Fig. 5 split)
EVAL_SEED_OFFSET = 7_777_777  # eval sampling seeds are disjoint from the training stream's


# ----------------------------------------------------------------------------- metrics

def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct: 1 - C(n-c, k) / C(n, k)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def summarize(name: str, records: list, k: int) -> dict:
    """mean@k, best@k and response statistics of one benchmark's records."""
    P = len(records)
    samples = sum(r["n"] for r in records)
    return {
        f"eval/{name}/mean@{k}": sum(r["correct"] / r["n"] for r in records) / P,
        f"eval/{name}/best@{k}": sum(pass_at_k(r["n"], r["correct"], k) for r in records) / P,
        f"eval/{name}/response_len_mean": sum(r["response_len_mean"] * r["n"]
                                              for r in records) / samples,
        f"eval/{name}/truncated_frac": sum(r["truncated"] for r in records) / samples,
        f"eval/{name}/problems": P,
    }


def difficulty_metrics(base_records: list, records: list, k: int) -> dict:
    """The study's difficulty split, per benchmark, from the base model's records.

    p0 = correct / n of a problem under the base model. Partial problems: 0 < p0 <= 0.75;
    unsolved problems: p0 = 0 (no correct response in the base model's n samples).
    - eval/<b>/partial_mean@k: mean@k restricted to the partial problems;
    - eval/<b>/unsolved_solved_frac: fraction of the unsolved problems now solved at least once;
    - eval/<b>/partial_count, unsolved_count: the sizes of the two sets.
    A key is left out when its set is empty; problems absent from the base records are ignored.
    """
    p0 = {(r["benchmark"], str(r["id"])): r["correct"] / r["n"] for r in base_records}
    out = {}
    for name in dict.fromkeys(r["benchmark"] for r in records):
        rows = [(p0[(name, str(r["id"]))], r) for r in records
                if r["benchmark"] == name and (name, str(r["id"])) in p0]
        partial = [r["correct"] / r["n"] for p, r in rows if 0 < p <= PARTIAL_MAX_P0]
        unsolved = [r["correct"] > 0 for p, r in rows if p == 0]
        out[f"eval/{name}/partial_count"] = len(partial)
        out[f"eval/{name}/unsolved_count"] = len(unsolved)
        if partial:
            out[f"eval/{name}/partial_mean@{k}"] = sum(partial) / len(partial)
        if unsolved:
            out[f"eval/{name}/unsolved_solved_frac"] = sum(unsolved) / len(unsolved)
    return out


def read_records(path: str, update=None) -> list:
    """Per-problem records from a JSONL file (train's eval_records.jsonl or evaluate --out);
    with `update`, only those of that update, the last record kept per (benchmark, id)."""
    with open(path) as f:
        records = [json.loads(line) for line in f if line.strip()]
    if update is None:
        return records
    latest = {(r["benchmark"], str(r["id"])): r for r in records if r.get("update") == update}
    return list(latest.values())



# ----------------------------------------------------------------------------- evaluation

def check_prompt_lengths(sampler, name: str, problems: list, max_tokens: int) -> None:
    """Prompt + max_tokens must fit the engine, or long problems' answers would be cut short."""
    limit = sampler.max_model_len
    lengths = [len(ids) for ids in sampler.tokenizer([p["prompt"] for p in problems])["input_ids"]]
    i = max(range(len(problems)), key=lengths.__getitem__)
    if lengths[i] + max_tokens > limit:
        raise ValueError(f"benchmark {name!r}: problem {problems[i]['id']} has a prompt of "
                         f"{lengths[i]} tokens, which with max_tokens {max_tokens} needs "
                         f"max_model_len >= {lengths[i] + max_tokens}, but the engine has {limit}: "
                         f"raise vllm.max_model_len (--max-model-len), lower the max tokens, or "
                         f"use a shorter prompt_template")


def benchmark_seed(seed: int, name: str) -> int:
    """Sampling seed of one benchmark: the same at every evaluation of a run (common random
    numbers make checkpoint-to-checkpoint differences less noisy) and independent of which
    other benchmarks are evaluated alongside."""
    return random.Random(f"{seed}:{name}").getrandbits(30)


def evaluate(sampler, name: str, problems: list, n: int, max_tokens: int,
             temperature: float = 1.0, k: int = None, seed: int = 0,
             grade_timeout_s: int = grading.GRADE_TIMEOUT_S, grade_workers: int = 0,
             stop: list = ()):
    """Sample n responses per problem, grade them; return (metrics, per-problem records)."""
    k = k or n
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got k={k} n={n}")
    check_prompt_lengths(sampler, name, problems, max_tokens)
    t0 = time.perf_counter()
    rollouts = sampler.sample([p["prompt"] for p in problems], n, max_tokens, temperature,
                              benchmark_seed(seed, name), stop)
    t1 = time.perf_counter()
    correct = grading.grade_many([r.text for r in rollouts],
                               [problems[r.prompt_index]["answer"] for r in rollouts],
                               grade_timeout_s, grade_workers, integer_only=name == "toy")
    t2 = time.perf_counter()
    records = []
    for i, p in enumerate(problems):
        group = rollouts[i * n:(i + 1) * n]
        records.append({"benchmark": name, "id": p["id"], "n": n,
                        "correct": sum(correct[i * n:(i + 1) * n]),
                        "response_len_mean": sum(len(r.response_ids) for r in group) / n,
                        "truncated": sum(not r.finished for r in group)})
    metrics = summarize(name, records, k)
    for field, tag in (("digits", "d"), ("terms", "t")):  # the toy's difficulty, the long toy's length
        for value in sorted({p[field] for p in problems if field in p}):
            part = [r for p, r in zip(problems, records) if p.get(field) == value]
            metrics[f"eval/{name}/{tag}{value}/mean@{k}"] = summarize(name, part, k)[f"eval/{name}/mean@{k}"]
    metrics.update({f"time/eval/{name}/generate": t1 - t0, f"time/eval/{name}/grade": t2 - t1})
    return metrics, records


def evaluate_benchmarks(sampler, benchmarks: dict, n: int, max_tokens: int,
                        temperature: float = 1.0, k: int = None, seed: int = 0,
                        grade_timeout_s: int = grading.GRADE_TIMEOUT_S, grade_workers: int = 0,
                        stop: list = ()):
    """`evaluate` on each of {name: problems}; adds the problem-weighted eval/avg/mean@k and
    best@k and the total seconds spent sampling and grading. Returns (metrics, records)."""
    k = k or n
    metrics, records = {}, []
    for name, problems in benchmarks.items():
        m, r = evaluate(sampler, name, problems, n, max_tokens, temperature, k, seed,
                        grade_timeout_s, grade_workers, stop)
        metrics.update(m)
        records += r
    avg = summarize("avg", records, k)
    metrics.update({key: avg[key] for key in (f"eval/avg/mean@{k}", f"eval/avg/best@{k}")})
    metrics["time/eval_generate"] = sum(v for key, v in metrics.items()
                                        if key.startswith("time/eval/") and key.endswith("/generate"))
    metrics["time/eval_grade"] = sum(v for key, v in metrics.items()
                                     if key.startswith("time/eval/") and key.endswith("/grade"))
    return metrics, records



# ----------------------------------------------------------------------------- train-time evaluation

def evaluate_config(cfg: dict, sampler):
    """evaluate_benchmarks with the config's evaluation keys: what train.py runs every eval_every."""
    temperature = cfg["eval_temperature"] if cfg["eval_temperature"] is not None \
        else cfg["temperature"]
    return evaluate_benchmarks(sampler, tasks.load_config_benchmarks(cfg), cfg["eval_n"],
                               cfg["eval_max_tokens"], temperature, config.eval_k(cfg),
                               cfg["seed"] + EVAL_SEED_OFFSET, cfg["grade_timeout_s"],
                               cfg["grade_workers"], cfg["stop_strings"])


def run_eval(cfg, sampler, update: int, out_dir: str) -> dict:
    """The train-time evaluation: evaluate the engine's current weights (evaluate_config); append
    the per-problem records, tagged with `update`, to <out_dir>/eval_records.jsonl; add the
    difficulty-split metrics against the update-0 (base model) records found there."""
    path = os.path.join(out_dir, "eval_records.jsonl")
    metrics, records = evaluate_config(cfg, sampler)
    with open(path, "a") as f:
        for r in records:
            f.write(json.dumps({"update": update, **r}) + "\n")
    base = read_records(path, update=0)
    if base:
        metrics.update(difficulty_metrics(base, records, config.eval_k(cfg)))
    return metrics


# ----------------------------------------------------------------------------- CLI

def _needed_model_len(model: str, benchmarks: dict, max_tokens: int) -> int:
    """Longest prompt (in the model's tokens) plus max_tokens."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model)
    return max_tokens + max(len(ids) for problems in benchmarks.values()
                            for ids in tok([p["prompt"] for p in problems])["input_ids"])


def print_table(metrics: dict, benchmarks: dict, n: int, k: int) -> None:
    print(f"{'benchmark':<14}{'problems':>9}{f'mean@{k}':>10}{f'best@{k}':>10}{'trunc':>7}"
          f"{'len':>7}{'sample s':>10}{'grade s':>9}{'grade ms/resp':>15}")
    for name, problems in benchmarks.items():
        e = lambda key: metrics[f"eval/{name}/{key}"]
        t = lambda phase: metrics[f"time/eval/{name}/{phase}"]
        responses = e("problems") * n
        print(f"{name:<14}{e('problems'):>9}{e(f'mean@{k}'):>10.4f}{e(f'best@{k}'):>10.4f}"
              f"{e('truncated_frac'):>7.2f}{e('response_len_mean'):>7.1f}"
              f"{t('generate'):>10.2f}{t('grade'):>9.2f}"
              f"{1000 * t('grade') / responses:>15.3f}")
    total = sum(len(p) for p in benchmarks.values())
    print(f"{'avg':<14}{total:>9}{metrics[f'eval/avg/mean@{k}']:>10.4f}"
          f"{metrics[f'eval/avg/best@{k}']:>10.4f}  (problem-weighted)")
    gen, grade = metrics["time/eval_generate"], metrics["time/eval_grade"]
    print(f"time: sampling {gen:.2f} s, grading {grade:.2f} s "
          f"({100 * grade / max(gen + grade, 1e-9):.1f}% of the two); grader: {grading.GRADE_STATS}")


def main(argv: list) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="Hugging Face model folder")
    p.add_argument("--config", help="YAML config whose evaluation keys give the defaults "
                                    "(default: configs/defaults.yaml)")
    p.add_argument("--benchmarks", help="comma-separated: toy, names in the config's "
                                        "`benchmarks`, JSONL paths, NAME=PATH")
    p.add_argument("--n", type=int, help="samples per problem (eval_n)")
    p.add_argument("--k", type=int, help="mean@k / best@k (eval_k; default n)")
    p.add_argument("--max-tokens", type=int, help="response length limit (eval_max_tokens)")
    p.add_argument("--temperature", type=float, help="sampling temperature")
    p.add_argument("--template", help="math prompt template: math, plain or a {problem} string")
    p.add_argument("--seed", type=int, help="base sampling seed (seed)")
    p.add_argument("--toy-size", type=int, help="problems of the toy benchmark")
    p.add_argument("--dtype", help="the engine's float32 | bfloat16 | float16 (sampler_dtype, "
                                   "else dtype)")
    p.add_argument("--max-model-len", type=int,
                   help="engine context; default: longest prompt + max tokens")
    p.add_argument("--gpu-memory-utilization", type=float)
    p.add_argument("--grade-workers", type=int, help="grader processes (0: min(8, cpus))")
    p.add_argument("--out", help="write the per-problem records here (JSONL)")
    p.add_argument("overrides", nargs="*", help="config overrides key=value, as for train.py "
                                                "(e.g. benchmarks.math500.file=math500.jsonl)")
    args = p.parse_args(argv)

    cfg = config.load_config(args.config, args.overrides)
    for key, value in [("eval_benchmarks", args.benchmarks and args.benchmarks.split(",")),
                       ("eval_n", args.n), ("eval_k", args.k), ("eval_max_tokens", args.max_tokens),
                       ("eval_temperature", args.temperature), ("prompt_template", args.template),
                       ("seed", args.seed), ("eval_toy_size", args.toy_size), ("sampler_dtype", args.dtype),
                       ("grade_workers", args.grade_workers)]:
        if value is not None:
            cfg[key] = value
    if args.gpu_memory_utilization is not None:
        cfg["vllm"]["gpu_memory_utilization"] = args.gpu_memory_utilization
    if args.n is not None and args.k is None:
        cfg["eval_k"] = None  # k follows the n given here, not the config's k
    config.validate(cfg)

    benchmarks = tasks.load_config_benchmarks(cfg)  # before the engine starts: data errors come first
    max_len = args.max_model_len or _needed_model_len(args.model, benchmarks,
                                                      cfg["eval_max_tokens"])
    print(f"evaluating {args.model} on {', '.join(f'{b} ({len(v)})' for b, v in benchmarks.items())}"
          f": n={cfg['eval_n']} k={config.eval_k(cfg)} max_tokens={cfg['eval_max_tokens']} "
          f"max_model_len={max_len} template={cfg['prompt_template']!r}", flush=True)
    grading.start_graders(cfg["grade_workers"])  # they import Math-Verify while the engine starts
    t0 = time.perf_counter()
    sampler = rollout.make_sampler({**cfg, "model": args.model, "build_toy_model": False,
                                    "vllm": {**cfg["vllm"], "max_model_len": max_len}})
    print(f"engine started in {time.perf_counter() - t0:.1f} s", flush=True)
    metrics, records = evaluate_config(cfg, sampler)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
        print(f"{len(records)} per-problem records -> {args.out}")
    print_table(metrics, benchmarks, cfg["eval_n"], config.eval_k(cfg))
    print(json.dumps({key: round(v, 6) if isinstance(v, float) else v
                      for key, v in metrics.items()}))
    return metrics


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except tasks.BenchmarkUnavailable as e:
        sys.exit(f"error: {e}")
