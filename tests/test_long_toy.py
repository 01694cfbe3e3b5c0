"""The long-answer toy (configs/toy_long.yaml): worked answers, the held-out set, the budget and
base-model checks, and the short toy's streams unchanged by the knob that makes it."""
import hashlib
import json
import os
import random

import pytest

import config
import evaluate
import grading
import tasks
import train
from conftest import ROOT, altered_copy

LONG = os.path.join(ROOT, "configs", "toy_long.yaml")


def long_config(tmp_path, **overrides):
    cfg = config.load_config(LONG)
    cfg.update({"out_dir": str(tmp_path / "run"), "model": tasks.TOY_LONG_BASE, **overrides})
    config.validate(cfg)
    return cfg


def digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def test_the_short_toy_streams_are_what_they_were():
    """toy_terms' default draws nothing: the short toy's training batches, evaluation set and
    held-out pairs are the ones every kept run trained and was evaluated on (digests taken
    before the knob existed)."""
    cfg = config.load_config(os.path.join(ROOT, "configs", "toy.yaml"))
    assert cfg["toy_terms"] == {2: 1}
    batches = [tasks.prompts_for_batch({**cfg, "seed": 3}, i) for i in range(40)]
    assert digest(batches) == "1459f9ade87fc534"
    bench = tasks.toy_benchmark(200, cfg["toy_digits"], cfg["toy_terms"])
    assert digest(bench) == "1ba1ca4edbb0c6c3"
    assert digest(sorted(tasks.toy_held_out(200, tuple(cfg["toy_digits"].items())))) == "6092f4435b337692"
    assert all("terms" not in p for p in bench) and tasks.toy_response(bench[0]) == \
        "\\boxed{" + bench[0]["answer"] + "}"


def test_a_worked_answer_writes_every_partial_sum_then_boxes_the_last():
    problem = {"prompt": "12+34+56+9=", "answer": "111", "digits": 2, "terms": 4}
    assert tasks.partial_sums(problem) == ["12+34=46", "46+56=102", "102+9=111"]
    response = tasks.toy_response(problem)
    assert response == "12+34=46\n46+56=102\n102+9=111\n\\boxed{111}"
    assert grading.grade_many([response, response.replace("{111}", "{112}")], ["111"] * 2,
                              5, 0, integer_only=True) == [True, False]


def test_a_slip_is_carried_into_every_later_line():
    """slip=1: every line's result is one digit off the true sum of its own line, and the next
    line starts from that wrong result."""
    problem = {"prompt": "11+22+33+44=", "answer": "110", "digits": 2, "terms": 4}
    lines = tasks.partial_sums(problem, slip=1.0, rng=random.Random(0))
    total = 11
    for line, a in zip(lines, (22, 33, 44)):
        left, result = line.split("=")
        assert left == f"{total}+{a}"
        right = str(total + a)
        assert result != right and len(result) == len(right)
        assert sum(x != y for x, y in zip(result, right)) == 1
        total = int(result)


def test_the_long_config_draws_6_to_9_two_digit_terms_held_out_of_training(tmp_path):
    cfg = long_config(tmp_path)
    bench = tasks.load_config_benchmarks(cfg)["toy"]
    assert {p["terms"] for p in bench} == {6, 7, 8, 9} and {p["digits"] for p in bench} == {2}
    held_out = {tasks.toy_key(p) for p in bench}
    assert held_out == tasks.toy_held_out(200, ((2, 1),), tuple(cfg["toy_terms"].items()))
    for seed in (0, 1):
        for index in range(25):
            for p in tasks.prompts_for_batch({**cfg, "seed": seed}, index):
                assert tasks.toy_key(p) not in held_out and 6 <= p["terms"] <= 9
    # a training sum and an evaluation sum with the same terms in another order are one problem
    assert tasks.toy_key({"prompt": "12+34+56="}) == tasks.toy_key({"prompt": "56+12+34="})


def test_the_longest_answer_sets_the_budget_and_a_short_budget_is_refused(tmp_path):
    cfg = long_config(tmp_path)
    longest = tasks.toy_longest(cfg["toy_digits"], cfg["toy_terms"])
    assert longest["prompt"] == "+".join(["99"] * 9) + "=" and longest["answer"] == "891"
    assert len(tasks.toy_response(longest)) + 1 == 99  # 9 x 99 with its end token
    tasks.check_toy_budget({**cfg, "max_tokens": 99, "eval_max_tokens": 99})
    for key in ("max_tokens", "eval_max_tokens"):
        with pytest.raises(ValueError, match=f"{key}=98 cannot hold the longest correct answer.*99"):
            tasks.check_toy_budget({**cfg, key: 98})
        with pytest.raises(ValueError, match=f"{key}=98 cannot hold"):
            train.preflight({**cfg, key: 98})
    tasks.check_toy_budget({**cfg, "eval_every": 0, "eval_max_tokens": 16})  # no evaluation
    # the short toy's answers are one box: its budget is its own affair
    tasks.check_toy_budget(config.load_config(os.path.join(ROOT, "configs", "toy.yaml")))


def test_a_missing_or_altered_long_base_model_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist.*git checkout"):
        train.preflight(long_config(tmp_path, model=str(tmp_path / "absent")))
    altered = altered_copy(tasks.TOY_LONG_BASE, tmp_path)
    with pytest.raises(ValueError, match="is not the model its build_info.json names"):
        train.preflight(long_config(tmp_path, model=altered))


def test_the_shipped_long_base_model_is_its_recipe_and_hash():
    info = json.load(open(os.path.join(tasks.TOY_LONG_BASE, "build_info.json")))
    assert tasks.weights_sha256(tasks.TOY_LONG_BASE) == info["sha256"] == tasks.TOY_LONG_BASE_SHA256
    # build_base_model's recipe: its arguments over the toy's defaults (correct_frac unused here)
    recipe = json.loads(json.dumps({"model": {**tasks.TOY_MODEL, **tasks.TOY_LONG_MODEL},
                                    "warmup": {**tasks.TOY_WARMUP, **tasks.TOY_LONG_WARMUP}}))
    assert {"model": info["model"], "warmup": info["warmup"]} == recipe
    assert json.load(open(os.path.join(tasks.TOY_LONG_BASE, "config.json")))[
        "max_position_embeddings"] >= tasks.context_need(config.load_config(LONG))["need"]


def test_the_toy_terms_knob_is_checked():
    with pytest.raises(ValueError, match="toy_terms must map term counts >= 2"):
        config.load_config(LONG, ["toy_terms={1: 1}"])
    assert config.load_config(LONG, ["toy_terms={3: 1}"])["toy_terms"] == {3: 1}  # replaced whole


def test_a_knob_added_at_its_default_does_not_block_a_resume():
    cfg = config.load_config(os.path.join(ROOT, "configs", "toy.yaml"))
    old = {k: v for k, v in cfg.items() if k != "toy_terms"}  # a run started before the knob
    assert config.config_differences(old, cfg) == []
    assert config.config_differences(old, {**cfg, "toy_terms": {6: 1}}) == \
        ["toy_terms: {2: 1} -> {6: 1}"]


class WorkedSampler:
    """Answers each prompt with its correct worked answer in the first `right` samples."""

    def __init__(self, problems, right):
        self.answers = {p["prompt"]: tasks.toy_response(p) for p in problems}
        self.right, self.max_model_len = right, 200
        self.tokenizer = lambda prompts: {"input_ids": [[0] * len(p) for p in prompts]}

    def sample(self, prompts, m, max_tokens, temperature=1.0, seed=None, stop=()):
        import rollout
        return [rollout.Rollout(i, [], [1] * 80, self.answers[p] if j < self.right[p] else "\\boxed{0}",
                                [], 0, True) for i, p in enumerate(prompts) for j in range(m)]


def test_the_evaluation_reports_mean_at_k_by_term_count(tmp_path):
    bench = tasks.load_config_benchmarks(long_config(tmp_path))["toy"][:40]
    right = {p["prompt"]: 4 if p["terms"] == 6 else 1 for p in bench}
    m, _ = evaluate.evaluate(WorkedSampler(bench, right), "toy", bench, n=4, max_tokens=112)
    assert m["eval/toy/t6/mean@4"] == 1.0
    assert m["eval/toy/t7/mean@4"] == m["eval/toy/t8/mean@4"] == m["eval/toy/t9/mean@4"] == 0.25
    share6 = sum(p["terms"] == 6 for p in bench) / len(bench)
    assert m["eval/toy/mean@4"] == pytest.approx(share6 + 0.25 * (1 - share6))
