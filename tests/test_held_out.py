"""The evaluation is held out: no toy training batch holds an evaluation sum (one-digit sums
apart), the two random streams are keyed apart, and math training drops evaluation problems."""
import json

import pytest

import config
import tasks


def test_toy_training_stream_never_draws_an_evaluation_sum():
    eval_set = tasks.toy_benchmark(200, tasks.TOY_DIGITS)
    held_out = {tasks.toy_key(p) for p in eval_set if p["digits"] > 1}
    assert len(eval_set) == len({p["prompt"] for p in eval_set}) == 200  # distinct problems
    assert len(held_out) > 140  # every multi-digit evaluation sum, a+b and b+a alike
    for seed in (0, 1, 7):
        cfg = config.load_config(None, [f"seed={seed}"])
        seen_one_digit = 0
        for index in range(2000):
            for p in tasks.prompts_for_batch(cfg, index):
                if p["digits"] > 1:
                    assert tasks.toy_key(p) not in held_out, (seed, index, p)
                else:
                    seen_one_digit += tasks.toy_key(p) in {tasks.toy_key(q) for q in eval_set}
        assert seen_one_digit > 0  # the exception is real: one-digit sums are shared
    # the digit mix of training is still toy_digits' (the held-out pairs are a sliver of each)
    digits = [p["digits"] for i in range(500) for p in tasks.prompts_for_batch(cfg, i)]
    assert digits.count(2) / len(digits) == pytest.approx(0.4, abs=0.02)


def test_the_two_streams_are_keyed_apart():
    """The keys are strings of different forms, so no (seed, batch index) gives the evaluation's
    stream; with integer seeds, seed 0's training batch 1234 was the evaluation set's start."""
    keys = {tasks.toy_train_key(seed, index) for seed in range(-3, 50) for index in range(3000)}
    assert tasks.TOY_EVAL_KEY not in keys and len(keys) == 53 * 3000
    assert all(k.startswith("toy-train:") for k in keys) and not tasks.TOY_EVAL_KEY.startswith("toy-train:")
    eval_prompts = [p["prompt"] for p in tasks.toy_benchmark(200, tasks.TOY_DIGITS)]
    cfg = config.load_config(None, ["seed=0"])
    assert [p["prompt"] for p in tasks.prompts_for_batch(cfg, 1234)] != eval_prompts[:16]


def _jsonl(path, problems):
    path.write_text("".join(json.dumps(p) + "\n" for p in problems))
    return str(path)


def test_math_training_drops_evaluation_problems(tmp_path, capsys):
    train = _jsonl(tmp_path / "train.jsonl", [
        {"problem": "What is $1+1$?", "answer": "2"},
        {"problem": "Find  $x$ if $2x = 4$.", "answer": "2"},
        {"problem": "what is $1 + 1$ ?\n", "answer": "2"}])  # the evaluation's, case and spaces aside
    held = _jsonl(tmp_path / "held.jsonl", [{"problem": "What is $1+1$?", "answer": "2"}])
    cfg = config.load_config(None, ["task=math", f"train_data.file={train}",
                                    f"eval_benchmarks=[held={held}]", "prompts_per_update=2"])
    kept = tasks.train_problems(cfg)
    assert [p["problem"] for p in kept] == ["Find  $x$ if $2x = 4$."]
    assert "dropped 2 of 3 problems" in capsys.readouterr().err
    assert {p["problem"] for p in tasks.prompts_for_batch(cfg, 0)} == {"Find  $x$ if $2x = 4$."}
    no_eval = config.load_config(None, ["task=math", f"train_data.file={train}", "eval_every=0"])
    assert len(tasks.train_problems(no_eval)) == 3
    only = config.load_config(None, ["task=math", f"train_data.file={held}",
                                     f"eval_benchmarks=[held={held}]"])
    with pytest.raises(ValueError, match="every training problem"):
        tasks.train_problems(only)
