"""Evaluation: pass@k, mean@k / best@k with a problem-weighted average, the difficulty split,
benchmark loading and its errors, and train.py's evaluations on the shared engine."""
import json
import os
import subprocess
import sys
import time

import pytest

import config
import evaluate
import rollout
import tasks
import train
from conftest import ROOT, toy_config

FIXTURES = os.path.join(ROOT, "tests", "fixtures")
MINI_MATH = os.path.join(FIXTURES, "mini_math.jsonl")
MINI_AIME = os.path.join(FIXTURES, "mini_aime.jsonl")


# ----------------------------------------------------------------------------- pass@k

def test_pass_at_k_hand_computed():
    assert evaluate.pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)     # 1 - C(3,2)/C(5,2)
    assert evaluate.pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)      # 1 - C(3,2)/C(4,2)
    assert evaluate.pass_at_k(10, 3, 4) == pytest.approx(1 - 35 / 210)  # 1 - C(7,4)/C(10,4)
    assert evaluate.pass_at_k(32, 5, 1) == pytest.approx(5 / 32)        # k = 1: c / n


def test_pass_at_k_edge_cases():
    assert evaluate.pass_at_k(32, 0, 32) == 0.0 and evaluate.pass_at_k(32, 0, 1) == 0.0  # c = 0
    assert evaluate.pass_at_k(32, 32, 1) == 1.0 and evaluate.pass_at_k(32, 32, 32) == 1.0  # c = n
    assert evaluate.pass_at_k(8, 1, 8) == 1.0 and evaluate.pass_at_k(8, 0, 8) == 0.0  # n = k
    assert evaluate.pass_at_k(8, 4, 5) == 1.0          # n - c < k: some correct one is drawn
    for n, c, k in [(4, 5, 2), (4, -1, 2), (4, 2, 5), (4, 2, 0)]:
        with pytest.raises(ValueError, match="pass_at_k needs"):
            evaluate.pass_at_k(n, c, k)


# ----------------------------------------------------------------------------- metrics, exactly

class FakeSampler:
    """Answers a prompt correctly (an equivalent LaTeX form, so Math-Verify decides) in its first
    plan[prompt] samples and wrongly in the others; responses are 3 tokens long, the last one
    of each group cut at max_tokens."""

    def __init__(self, plan: dict, max_model_len: int = 64):
        self.plan = plan
        self.tokenizer = lambda prompts: {"input_ids": [[0] * len(p) for p in prompts]}
        self.max_model_len = max_model_len
        self.seeds = []

    def sample(self, prompts, m, max_tokens, temperature=1.0, seed=None, stop=()):
        self.seeds.append(seed)
        return [rollout.Rollout(i, [], [1, 2, 3], r"so \boxed{0.5}" if j < self.plan[p]
                                else r"so \boxed{0.4}", [], 0, j < m - 1)
                for i, p in enumerate(prompts) for j in range(m)]


def _problems(name, prompts):
    return [{"id": f"{name}-{i}", "prompt": p, "answer": r"\frac{1}{2}"} for i, p in enumerate(prompts)]


def test_mean_best_and_problem_weighted_average():
    """A: one problem, 4 of 4 correct; B: three problems, 0, 1 and 2 of 4 correct; k = 2."""
    sampler = FakeSampler({"a0": 4, "b0": 0, "b1": 1, "b2": 2})
    benchmarks = {"A": _problems("A", ["a0"]), "B": _problems("B", ["b0", "b1", "b2"])}
    m, records = evaluate.evaluate_benchmarks(sampler, benchmarks, n=4, max_tokens=8, k=2)
    assert [r["correct"] for r in records] == [4, 0, 1, 2]
    assert records[1] == {"benchmark": "B", "id": "B-0", "n": 4, "correct": 0,
                          "response_len_mean": 3.0, "truncated": 1}
    assert m["eval/A/mean@2"] == 1.0 and m["eval/A/best@2"] == 1.0
    assert m["eval/B/mean@2"] == pytest.approx((0 + 1 / 4 + 2 / 4) / 3)
    assert m["eval/B/best@2"] == pytest.approx((0 + (1 - 3 / 6) + (1 - 1 / 6)) / 3)
    # problem-weighted: (1 + 0 + 1/4 + 2/4) / 4 = 0.4375, not the benchmark mean 0.625
    assert m["eval/avg/mean@2"] == pytest.approx(0.4375)
    assert m["eval/avg/best@2"] == pytest.approx((1 + 0 + 0.5 + 5 / 6) / 4)
    assert m["eval/B/truncated_frac"] == 0.25 and m["eval/B/response_len_mean"] == 3.0
    assert m["time/eval_generate"] >= 0 and m["time/eval_grade"] > 0
    # each benchmark has its own seed, the same whatever else is evaluated alongside
    assert sampler.seeds == [evaluate.benchmark_seed(0, "A"), evaluate.benchmark_seed(0, "B")]
    assert len(set(sampler.seeds)) == 2


def test_prompt_too_long_for_the_engine_is_an_early_error():
    sampler = FakeSampler({"x" * 60: 1}, max_model_len=64)
    with pytest.raises(ValueError, match=r"L-0 has a prompt of 60 tokens.*max_model_len >= 68"):
        evaluate.evaluate(sampler, "L", _problems("L", ["x" * 60]), n=2, max_tokens=8)
    assert sampler.seeds == []  # nothing was sampled


def test_difficulty_metrics_hand_computed():
    base = [{"benchmark": "B", "id": i, "n": n, "correct": c}
            for i, n, c in [("a", 4, 0), ("b", 4, 1), ("c", 4, 3), ("d", 4, 4), ("e", 4, 0),
                            ("f", 5, 4)]]
    now = [{"benchmark": "B", "id": i, "n": 4, "correct": c}
           for i, c in [("a", 1), ("b", 2), ("c", 4), ("d", 4), ("e", 0), ("f", 0), ("new", 4)]]
    m = evaluate.difficulty_metrics(base, now, k=4)
    # partial: b (p0 = 0.25) and c (p0 = 0.75, the boundary is in); not d (1.0), not f (0.8)
    assert m["eval/B/partial_count"] == 2
    assert m["eval/B/partial_mean@4"] == pytest.approx((2 / 4 + 4 / 4) / 2)
    # unsolved: a (now solved once) and e (still never)
    assert m["eval/B/unsolved_count"] == 2 and m["eval/B/unsolved_solved_frac"] == 0.5


def test_read_records_keeps_the_last_evaluation_of_an_update(tmp_path):
    path = tmp_path / "records.jsonl"
    rows = [{"update": 0, "benchmark": "B", "id": "a", "n": 4, "correct": 1},
            {"update": 5, "benchmark": "B", "id": "a", "n": 4, "correct": 3},
            {"update": 0, "benchmark": "B", "id": "a", "n": 4, "correct": 2}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert len(evaluate.read_records(str(path))) == 3
    assert evaluate.read_records(str(path), update=0) == [rows[2]]


# ----------------------------------------------------------------------------- loading

def test_fixture_benchmarks_load_with_the_prompt_template():
    problems = tasks.load_benchmark("mini_math", {"file": MINI_MATH}, template="math")
    assert len(problems) == 34 and problems[0]["id"] == "mini_math-0"
    assert problems[0]["answer"] == r"\frac{3}{4}"
    assert problems[0]["prompt"].startswith("Question: Compute $\\frac{1}{2}")
    assert "\\boxed{}" in problems[0]["prompt"]
    aime = tasks.load_benchmark("mini_aime", {"file": MINI_AIME}, template="plain")
    # no ids in the file: numbered by row; integer answers become strings
    assert [p["id"] for p in aime[:2]] == ["mini_aime-0", "mini_aime-1"]
    assert aime[0]["answer"] == "56" and aime[0]["prompt"] == aime[0]["problem"]


def test_resolve_benchmark_entries():
    table = config.load_config(None)["benchmarks"]
    assert tasks.resolve("toy", table) == ("toy", {"toy": True})
    assert tasks.resolve("math500", table)[1]["hub"] == "HuggingFaceH4/MATH-500"
    assert tasks.resolve("mine=/data/x.jsonl", table) == ("mine", {"file": "/data/x.jsonl"})
    assert tasks.resolve(MINI_AIME, table) == ("mini_aime", {"file": MINI_AIME})
    with pytest.raises(ValueError, match="unknown benchmark 'math50'.*NAME=PATH"):
        tasks.resolve("math50", table)
    assert tasks.answer_text(27.0) == "27" and tasks.answer_text(["5"]) == "5"


def _assert_names_both_ways(message, name):
    assert f"benchmark {name!r} is not available" in message
    assert "HF_HUB_OFFLINE=1" in message                       # way 1: the hub (or its cache)
    assert f"benchmarks.{name}.file=PATH" in message and f"{name}=PATH" in message  # way 2


def test_missing_file_names_the_benchmark_and_both_ways(tmp_path):
    spec = {**config.load_config(None)["benchmarks"]["aime25"], "file": str(tmp_path / "no.jsonl")}
    with pytest.raises(tasks.BenchmarkUnavailable) as err:
        tasks.load_benchmark("aime25", spec)
    _assert_names_both_ways(str(err.value), "aime25")
    assert "no.jsonl' does not exist" in str(err.value) and "math-ai/aime25" in str(err.value)


def test_unreachable_hub_fails_fast_with_both_ways(monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    spec = config.load_config(None)["benchmarks"]["math500"]
    t0 = time.perf_counter()
    with pytest.raises(tasks.BenchmarkUnavailable) as err:
        tasks.load_benchmark("math500", spec)
    assert time.perf_counter() - t0 < 5
    _assert_names_both_ways(str(err.value), "math500")
    assert "cannot be reached" in str(err.value) and "HuggingFaceH4/MATH-500" in str(err.value)


def test_offline_hub_without_cache_fails_fast_through_datasets(tmp_path):
    """HF_HUB_OFFLINE=1 and an empty cache: datasets itself refuses, and the error says how to fix."""
    spec = config.load_config(None)["benchmarks"]["amc23"]
    code = ("import tasks\n"
            "try:\n"
            f"    tasks.load_benchmark('amc23', {spec!r})\n"
            "except tasks.BenchmarkUnavailable as e:\n"
            "    print(e)\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path), "PYTHONPATH": ROOT}
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60, cwd=ROOT).stdout
    assert time.perf_counter() - t0 < 20
    _assert_names_both_ways(out, "amc23")
    assert "datasets.load_dataset('math-ai/amc23'" in out


def test_bad_jsonl_and_config_errors(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"problem": "1+1", "answer": "2"}\n{"problem": "2+2"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl line 2 lacks the field\(s\) \['answer'\]"):
        tasks.read_jsonl("bad", str(bad))
    with pytest.raises(ValueError, match="eval_k must be in 1..eval_n=4"):
        config.load_config(None, ["eval_k=8"])
    with pytest.raises(ValueError, match="unknown benchmark 'amc"):
        config.load_config(None, ["eval_benchmarks=[toy, amc]"])
    with pytest.raises(ValueError, match="containing {problem}"):
        config.load_config(None, ["prompt_template=Solve it."])
    cfg = config.load_config(None, ["benchmarks.amc23.file=/data/amc23.jsonl", "eval_n=32"])
    assert cfg["benchmarks"]["amc23"]["file"] == "/data/amc23.jsonl"
    assert cfg["benchmarks"]["amc23"]["hub"] == "math-ai/amc23"  # the rest of the entry stays


# ----------------------------------------------------------------------------- in train.py

def test_train_evaluates_current_weights_and_writes_records(tmp_path, sampler):
    """Evaluations at updates 0 and 1 on toy + the two fixture benchmarks (plain prompts fit the
    toy's 64-token context); records per problem and update; metrics match the records."""
    cfg = toy_config(tmp_path, updates=1, delay=0, eval_every=1, eval_n=2, eval_toy_size=12,
                     eval_benchmarks=["toy", MINI_MATH, "aime_like=" + MINI_AIME],
                     prompt_template="plain")
    rows = train.train(cfg, sampler=sampler)
    evals = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
    assert [r["update"] for r in evals] == [0, 1]
    records = evaluate.read_records(str(tmp_path / "eval_records.jsonl"))
    assert len(records) == 2 * (12 + 34 + 8)
    for update, row in zip([0, 1], evals):
        mine = [r for r in records if r["update"] == update]
        assert {r["benchmark"] for r in mine} == {"toy", "mini_math", "aime_like"}
        assert all(r["n"] == 2 and 0 <= r["correct"] <= 2 for r in mine)
        assert row["eval/avg/mean@2"] == pytest.approx(sum(r["correct"] for r in mine) / (2 * 54))
        toy = [r for r in mine if r["benchmark"] == "toy"]
        assert row["eval/toy/mean@2"] == pytest.approx(sum(r["correct"] for r in toy) / 24)
        assert row["eval/toy/partial_count"] + row["eval/toy/unsolved_count"] \
            == sum(r["correct"] < 2 for r in records if r["update"] == 0 and r["benchmark"] == "toy")
    assert 0 < evals[0]["eval/toy/mean@2"] < 1        # the base model solves some sums, not all
    assert evals[0].get("eval/toy/unsolved_solved_frac", 0.0) == 0.0  # against itself
    assert rows[-1]["time/eval"] >= rows[-1]["time/eval_generate"] + rows[-1]["time/eval_grade"]
    # the study's template does not fit the toy's context: an early, clear error
    math_prompts = tasks.load_benchmark("mini_math", {"file": MINI_MATH}, template="math")
    with pytest.raises(ValueError, match="raise vllm.max_model_len"):
        evaluate.check_prompt_lengths(sampler, "mini_math", math_prompts, 16)
