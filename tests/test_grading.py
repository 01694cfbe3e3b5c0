"""Grading: answer equivalences that must hold and must not, the cheap path, timeouts, threads.

All equivalence cases are graded in one grading.grade_many batch (one trip to the grader pool);
each case is then its own test, so a regression names the exact pair.
"""
import os
import subprocess
import sys
import threading
import time

import pytest

import grading
from conftest import ROOT

# (prediction inside \boxed{}, reference answer): must grade True
HOLD = [
    (r"\frac12", "0.5"), ("0.5", r"\frac{1}{2}"), (r"\dfrac{1}{2}", r"\frac12"), ("1/2", r"\frac{1}{2}"),
    (r"\frac{3}{4}", r"\frac{6}{8}"), (r"-\frac{1}{2}", r"\frac{-1}{2}"), (r"\frac{1}{3}", "0.333333"),
    (r"\sqrt{2}/2", r"\frac{\sqrt2}{2}"), (r"\frac{1}{\sqrt{2}}", r"\frac{\sqrt{2}}{2}"),
    (r"2\sqrt{3}", r"\sqrt{12}"), (r"3\sqrt{2}", r"\sqrt{18}"),
    (r"(1, 2]", r"(1,2]"), (r"[0, \infty)", r"[0,\infty)"), (r"x \in [1,2]", "[1,2]"),
    (r"(-\infty, 3) \cup (4, \infty)", r"(-\infty,3)\cup(4,\infty)"),
    (r"(3, -1)", r"(3,-1)"), (r"( 2 , 1 )", r"(2,1)"),
    (r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", r"\begin{pmatrix}1\\2\end{pmatrix}"),
    (r"\begin{pmatrix} 1 & 3 \\ 2 & 4 \end{pmatrix}", r"\begin{pmatrix}1&3\\2&4\end{pmatrix}"),
    (r"\begin{bmatrix} 1 & 3 \\ 2 & 4 \end{bmatrix}", r"\begin{pmatrix}1&3\\2&4\end{pmatrix}"),
    ("50", r"50\%"), (r"50\%", "50"),
    ("0.5", r"50\%"),  # Math-Verify reads a percentage both as 50 and as 0.5
    ("30", r"30^\circ"), (r"30^{\circ}", "30"), (r"30^\circ", r"30^{\circ}"),
    ("Monday", r"\text{Monday}"), (r"\text{ Monday }", r"\text{Monday}"),
    (r"\mathrm{Monday}", r"\text{Monday}"),
    ("C", r"\text{(C)}"), ("(C)", "C"), (r"\text{(C)}", "C"), (r"\textbf{(C)}", r"\text{(C)}"),
    (r"\text{C}", "C"),
    ("x^2+2x+1", "(x+1)^2"), (r"\frac{x}{2}", "0.5x"), ("y = 2x+3", "2x+3"), ("x=5", "5"),
    ("2,-2", "-2,2"), (r"\pm 2", "-2,2"), (r"\{1,2\}", r"\{2,1\}"),
    ("10.0", "10"), ("1,000", "1000"), ("1{,}000", "1000"), (r"\$12", "12"), ("12", r"\$12"),
    (r"5\text{ cm}", "5"), (r"2\pi", "6.283185"), (r"\infty", r"\infty"),
]
# must hold mathematically, but Math-Verify 0.9 says no: documented, not hidden
HOLD_XFAIL = [
    ("i", r"\sqrt{-1}", "Math-Verify keeps sqrt(-1) unevaluated and does not equate it with i"),
    (r"e^{i\pi}", "-1", "Math-Verify does not simplify Euler's identity"),
    (r"0.\overline{3}", r"\frac13", "Math-Verify does not parse repeating decimals (\\overline)"),
]
# must grade False
NOT = [
    ("3", "4"), ("-2", "2"), ("12", "120"), ("[1,2)", "(1,2]"), ("(1,2)", "[1,2]"),
    ("(2,1)", "(1,2)"), (r"\frac{1}{3}", "0.33"), (r"\sqrt{2}", "1.414"), ("x+1", "x+2"),
    ("x^2", "x^3"), ("1+i", "1-i"), (r"\text{Tuesday}", r"\text{Monday}"),
    (r"\text{composite}", r"\text{prime}"), ("B", r"\text{(C)}"), ("(B)", "C"),
    (r"\begin{pmatrix}1&2\\3&5\end{pmatrix}", r"\begin{pmatrix}1&2\\3&4\end{pmatrix}"),
    (r"\begin{pmatrix}2\\1\end{pmatrix}", r"\begin{pmatrix}1\\2\end{pmatrix}"),
    ("0", r"\emptyset"), ("2", "-2,2"), (r"\frac{\pi}{4}", r"45^\circ"), (r"5\%", "50"),
    (r"31^\circ", "30"), ("", "5"),
]
CASES = [(p, g, True) for p, g in HOLD] + [(p, g, True) for p, g, _ in HOLD_XFAIL] \
    + [(p, g, False) for p, g in NOT]


@pytest.fixture(scope="module")
def verdicts():
    """Every case graded in one batch: {(prediction, answer): bool}."""
    got = grading.grade_many([f"so the answer is \\boxed{{{p}}}." for p, _, _ in CASES],
                           [g for _, g, _ in CASES])
    return {(p, g): v for (p, g, _), v in zip(CASES, got)}


@pytest.mark.parametrize("pred,gold", HOLD)
def test_equivalent_answers_hold(verdicts, pred, gold):
    assert verdicts[(pred, gold)] is True


@pytest.mark.parametrize("pred,gold", [
    pytest.param(p, g, marks=pytest.mark.xfail(strict=True, reason=why)) for p, g, why in HOLD_XFAIL])
def test_equivalences_math_verify_misses(verdicts, pred, gold):
    assert verdicts[(pred, gold)] is True


@pytest.mark.parametrize("pred,gold", NOT)
def test_wrong_answers_fail(verdicts, pred, gold):
    assert verdicts[(pred, gold)] is False


def test_last_boxed_and_missing_box():
    assert grading.last_boxed(r"\boxed{1} then \boxed{\frac{a}{b}}") == r"\frac{a}{b}"
    assert grading.last_boxed(r"no box") is None
    assert grading.last_boxed(r"\boxed{unclosed") is None
    assert grading.grade_many(["the answer is 5", r"\boxed{}", r"\boxed{5"], ["5", "5", "5"]) \
        == [False, False, False]


def test_toy_responses_never_reach_the_grader_pool():
    """Integer and exact-string answers are settled in this process, without IPC."""
    before = dict(grading.GRADE_STATS)
    got = grading.grade_many([r"\boxed{46}", r"\boxed{045}", r"\boxed{47}", "46", r"\boxed{x+1}"],
                           ["46", "45", "46", "46", "x+1"])
    assert got == [True, True, False, False, True]
    assert grading.GRADE_STATS["verified"] == before["verified"]
    assert grading.GRADE_STATS["quick"] == before["quick"] + 5


def test_grade_many_checks_lengths():
    with pytest.raises(ValueError, match="2 responses but 1 answers"):
        grading.grade_many(["a", "b"], ["a"])


TOWER = r"\boxed{2^{2^{2^{2^{2^{2}}}}}}"  # 2^(2^65536): no computer can evaluate it


def test_pathological_answer_is_wrong_within_bounded_time():
    """Math-Verify's own timeout (1 s here) stops it; the sane answer beside it is still graded."""
    t0 = time.perf_counter()
    got = grading.grade_many([TOWER, r"\boxed{\frac{6}{2}}"], ["3", "3"], timeout_s=1)
    assert got == [False, True]
    assert time.perf_counter() - t0 < 8


def test_outer_deadline_kills_a_stuck_worker():
    """With Math-Verify's timeout out of reach (60 s), the hard 1.5 s deadline cuts the item, kills
    its worker and grades the rest; the pool keeps working afterwards."""
    killed = grading.GRADE_STATS["killed"]
    t0 = time.perf_counter()
    got = grading.grade_many([TOWER, r"\boxed{3.0}"], ["3", "3"], timeout_s=60, deadline_s=1.5)
    assert got == [False, True]
    assert 1.5 <= time.perf_counter() - t0 < 6
    assert grading.GRADE_STATS["killed"] == killed + 1
    assert grading.grade_many([r"\boxed{\sqrt{4}}"], ["2"]) == [True]


def test_grading_from_a_non_main_thread():
    """Math-Verify's signal.alarm timeouts fail outside the main thread (in-process they would
    silently grade everything wrong); grading.grade_many still grades correctly there."""
    from math_verify import parse
    out = {}

    def work():
        try:
            parse("$1/2$", parsing_timeout=5)
        except ValueError as e:
            out["in_thread_error"] = str(e)
        out["verdicts"] = grading.grade_many([r"\boxed{0.5}", r"\boxed{(1,2]}", r"\boxed{0.4}"],
                                           [r"\frac12", "(1, 2]", r"\frac12"])

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(60)
    assert "threaded environment" in out["in_thread_error"]
    assert out["verdicts"] == [True, True, False]


def test_batch_deadline_counts_the_rest_wrong(monkeypatch):
    """With no per-item allowance left, the batch ends at the first item deadline: the stuck items
    and those never started count wrong, instead of each waiting its turn (4 x 1.5 s / 2)."""
    monkeypatch.setattr(grading, "GRADE_ITEM_BUDGET_S", 0.0)
    towers = ["\\boxed{" + str(base) + "^{2^{2^{2^{2^{2}}}}}}" for base in (3, 5, 7, 9)]
    assert len(set(towers)) == 4
    before = grading.GRADE_STATS["batch_deadline"]
    t0 = time.perf_counter()
    got = grading.grade_many(towers, ["3"] * 4, timeout_s=60, deadline_s=1.5, workers=2)
    assert got == [False] * 4
    assert time.perf_counter() - t0 < 2.9
    assert grading.GRADE_STATS["batch_deadline"] == before + 4


def test_grader_that_cannot_start_raises_instead_of_grading_all_wrong(tmp_path):
    """A broken Math-Verify install must stop the run, not silently zero every reward."""
    (tmp_path / "math_verify.py").write_text("raise ImportError('math_verify is broken here')\n")
    code = ("import grading\ntry:\n    grading.grade_many([r'\\boxed{0.5}'], ['1/2'])\n"
            "except RuntimeError as e:\n    print('RuntimeError:', e)\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60).stdout
    assert "RuntimeError: a grader process could not start Math-Verify" in out
    assert "math_verify is broken here" in out


def test_toy_grading_refuses_expressions_that_copy_the_prompt():
    """Math-Verify accepts \\boxed{12+34} for 46; the toy (integer_only) must not reward it."""
    responses = ["\\boxed{12+34}", "\\boxed{46}", "\\boxed{046}", "\\boxed{45}"]
    assert grading.grade_many(responses, ["46"] * 4, integer_only=True) == [False, True, True, False]
    assert grading.grade_many(responses[:1], ["46"])[0] is True  # the general grader does
