"""Evaluation: mean@k and best@k of sampled answers, with per-problem records.

mean@k: mean correctness of k samples per problem, averaged over problems.
best@k: the unbiased pass@k estimator of Chen et al. (2021) from n >= k samples, averaged over
problems. The same functions run inside train.py on the engine's current weights.
"""
import math

import tasks


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct: 1 - C(n-c, k) / C(n, k)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def toy_benchmark(size: int = 200, seed: int = 1234, digit_weights: dict = None) -> list:
    """The toy eval set: fixed problems, disjoint in seed from the training stream."""
    problems = tasks.toy_dataset(size, seed, digit_weights or tasks.TOY_DIGITS)
    return [{**p, "id": f"toy-{i}"} for i, p in enumerate(problems)]


def evaluate(sampler, name: str, problems: list, n: int, max_tokens: int,
             temperature: float = 1.0, k: int = None, seed: int = 0):
    """Sample n responses per problem, grade them; return (metrics, per-problem records)."""
    k = k or n
    rollouts = sampler.sample([p["prompt"] for p in problems], n, max_tokens, temperature, seed)
    records = []
    for i, p in enumerate(problems):
        group = rollouts[i * n:(i + 1) * n]
        correct = sum(tasks.grade(r.text, p["answer"]) for r in group)
        records.append({"benchmark": name, "id": p["id"], "n": n, "correct": correct,
                        "response_len_mean": sum(len(r.response_ids) for r in group) / n})
    metrics = {
        f"eval/{name}/mean@{n}": sum(r["correct"] for r in records) / (n * len(records)),
        f"eval/{name}/best@{k}": sum(pass_at_k(n, r["correct"], k) for r in records) / len(records),
    }
    return metrics, records
