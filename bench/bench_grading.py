"""How long grading takes: ms per response for toy responses and MATH-style answers.

    python bench/bench_grading.py [--workers 0] [--samples 32]

- toy: well-formed toy responses (correct, wrong, no box), all settled by the cheap path.
- math, as evaluated: the fixture benchmark's answers (tests/fixtures/mini_math.jsonl), `samples`
  responses per problem drawn from a few forms (the reference itself, an equivalent form, a wrong
  one), so many (prediction, answer) pairs repeat, as they do among 32 samples of one problem.
- math, all distinct: every response a different string (x -> x+j-j), so each one goes through
  Math-Verify: the worst case for the pool.
- in-process: Math-Verify in this process's main thread, one response at a time (the baseline).
"""
import argparse
import json
import os
import random
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root
sys.path.insert(0, ROOT)  # the loop's modules

import grading  # noqa: E402
import tasks  # noqa: E402


def toy_case(n: int, rng: random.Random) -> tuple:
    problems = tasks.toy_dataset(n, 0, tasks.TOY_DIGITS)
    responses = [rng.choice([tasks.toy_response(p), "\\boxed{" + str(int(p["answer"]) + 1) + "}",
                             p["answer"]]) for p in problems]
    return responses, [p["answer"] for p in problems]


def math_case(samples: int, rng: random.Random, distinct: bool) -> tuple:
    with open(os.path.join(ROOT, "tests", "fixtures", "mini_math.jsonl")) as f:
        answers = [json.loads(line)["answer"] for line in f]
    responses, golds = [], []
    for gold in answers:
        forms = [gold, "{" + gold + "}", gold + "+1"]  # same, equivalent (extra braces), wrong
        for j in range(samples):
            pred = rng.choice(forms)
            if distinct:
                pred = f"{pred}+{j}-{j}" if not pred.startswith("\\begin") else pred + " " * j
            responses.append(f"Step by step ... so the answer is \\boxed{{{pred}}}.")
            golds.append(gold)
    return responses, golds


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=0, help="grader processes (0: min(8, cpus))")
    p.add_argument("--samples", type=int, default=32, help="responses per MATH-style problem")
    args = p.parse_args()
    rng = random.Random(0)
    grade = lambda r, g: grading.grade_many(r, g, workers=args.workers)

    r, g = toy_case(10_000, rng)
    t = timed(lambda: grade(r, g))
    print(f"toy, {len(r)} responses: {1000 * t / len(r):.4f} ms/response "
          f"(pool items: {grading.GRADE_STATS['verified']})")
    for label, distinct in [("math, as evaluated", False), ("math, all distinct", True)]:
        r, g = math_case(args.samples, rng, distinct)
        before = grading.GRADE_STATS["verified"]
        cold = timed(lambda: grade(r, g))
        warm = timed(lambda: grade(r, g))
        print(f"{label}, {len(r)} responses, {grading.GRADE_STATS['verified'] - before} through "
              f"Math-Verify: {1000 * warm / len(r):.3f} ms/response warm, "
              f"{1000 * cold / len(r):.3f} cold ({'pool start included' if not distinct else 'new pairs'})")
    r, g = math_case(2, rng, True)
    grading._math_verify("1", "1", 5)  # import and warm up Math-Verify here first
    t = timed(lambda: [grading._math_verify(grading.last_boxed(x), y, 5) for x, y in zip(r, g)])
    print(f"in-process Math-Verify, main thread, {len(r)} responses: {1000 * t / len(r):.3f} ms/response")
    print(f"grader stats: {grading.GRADE_STATS}")


if __name__ == "__main__":
    main()
