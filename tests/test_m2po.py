"""M2PO's Algorithm 1: the tokens it drops, by hand against the paper's loop read literally
(over the trust region; m2_tokens=all is AReaL's rule over every token), and losses.m2po_cutoff.

ell = l - b, A_i = GRPO's group advantage; threshold m2_threshold on the mean ell^2 of the
tokens left.
"""
import math

import pytest
import torch

import losses
from oracles import D, advantages, grad_of, paper_m2po_kept, paper_m2po_kept_tokens


def test_m2po_keeps_algorithm_1_over_the_trust_region_and_an_all_token_rule_fails():
    """Two groups of two, threshold 0.04. Group 1 (r = 1, 0; A = +-0.707): response 0 has ell^2
    0.3 and 0.15 with ell > 0 (trust region: A > 0, rho > 1) and 0.5 with ell < 0 (pulls back to
    the sampler: not in it); response 1 has 0.01 with ell < 0 (in it), 0.5 with ell > 0 (not),
    and 0. Group 2 (r = 1, 1; A = 0: never in it) has 0.6 twice.
    Algorithm 1 over T = {0.3, 0.15, 0.01}: 0.46/3 > 0.04, drop 0.3 -> 0.16/2 = 0.08 > 0.04, drop
    0.15 -> 0.01: two dropped, the 0.5 tokens kept. The all-token rule (AReaL's) over the 12
    tokens drops 0.6, 0.6, 0.5, 0.5, 0.3 (then 0.16/7 <= 0.04) and keeps 0.15: it fails the check
    below, and m2_tokens=all is that rule."""
    s = math.sqrt
    ell = torch.tensor([[s(0.3), s(0.15), -s(0.5)], [-s(0.01), s(0.5), 0.0],
                        [s(0.6), 0.0, 0.0], [s(0.6), 0.0, 0.0]], dtype=D)
    b = torch.full((4, 3), -1.0, dtype=D)
    mask, r = torch.ones(4, 3, dtype=D), torch.tensor([1.0, 0.0, 1.0, 1.0], dtype=D)
    A = advantages(r, 2)
    tokens = [(i, t) for i in range(4) for t in range(3)]
    want = paper_m2po_kept_tokens({k: float(ell[k]) for k in tokens}, {(i, t): A[i] for i, t in tokens}, 0.04)

    def check(kept):  # Algorithm 1 over the trust region, on the tokens that carry a gradient
        assert {k for k in kept if A[k[0]] != 0} == {k for k in want if A[k[0]] != 0}

    assert want == set(tokens) - {(0, 0), (0, 1)}
    g, met = grad_of("m2po", b + ell, b, mask, r, 2)
    check({k for k in tokens if g[k] != 0})
    assert met["is_masked_frac"] == pytest.approx(2 / 12)
    assert met["m2po_m2"] == pytest.approx(0.46 / 3) and met["m2po_region_frac"] == pytest.approx(3 / 12)
    # the all-token rule, written out by hand, keeps another set: the check fails for it
    sq = [float(ell[k]) ** 2 for k in tokens]
    all_token = {tokens[j] for j in paper_m2po_kept(sq, 0.04)}
    assert all_token == set(tokens) - {(0, 0), (0, 2), (1, 1), (2, 0), (3, 0)}
    with pytest.raises(AssertionError):
        check(all_token)
    g_all, met_all = grad_of("m2po", b + ell, b, mask, r, 2, m2_tokens="all")
    assert {k for k in tokens if g_all[k] != 0} == {k for k in all_token if A[k[0]] != 0}
    with pytest.raises(AssertionError):
        check({k for k in tokens if g_all[k] != 0})
    assert met_all["is_masked_frac"] == pytest.approx(5 / 12) and met_all["m2po_region_frac"] == 1
    # the cutoff helper: ties at the cutoff go together; nothing to drop (or no token) -> +inf
    sq_t = torch.tensor([[0.5, 0.5, 0.0, 0.0]], dtype=D)
    assert losses.m2po_cutoff(sq_t, torch.ones_like(sq_t), 0.2) == 0.5  # both 0.5 dropped
    assert losses.m2po_cutoff(sq_t * 0, torch.ones_like(sq_t), 0.04) == math.inf
    assert losses.m2po_cutoff(sq_t, torch.zeros_like(sq_t), 0.04) == math.inf


def test_m2po_all_token_rule_keeps_the_mean_of_the_tokens_left():
    """m2_tokens=all, ell^2 = [0.3, 0.15, 0, 0] on one response pair, threshold 0.04. The rule
    (mean over the tokens LEFT): 0.45/4 > 0.04, drop 0.3 -> 0.15/3 = 0.05 > 0.04, drop 0.15 -> 0:
    two dropped. A wrong rule (sum left over ALL n tokens): 0.15/4 = 0.0375 <= 0.04 after one
    drop, so it would keep the 0.15 token."""
    ell = torch.tensor([[math.sqrt(0.3), math.sqrt(0.15)], [0.0, 0.0]], dtype=D)
    b = torch.full((2, 2), -1.0, dtype=D)
    r = torch.tensor([1.0, 0.0], dtype=D)
    g, met = grad_of("m2po", b + ell, b, torch.ones(2, 2, dtype=D), r, 2, m2_tokens="all")
    kept = {(i, t) for i in range(2) for t in range(2) if g[i, t] != 0}
    assert kept == {(1, 0), (1, 1)}
    sq = (ell ** 2).view(-1).tolist()
    assert paper_m2po_kept(sq, 0.04) == {2, 3}
    order = sorted(range(4), key=lambda j: -sq[j])
    wrong = list(order)
    while sum(sq[j] for j in wrong) / 4 > 0.04:
        wrong.pop(0)
    assert set(wrong) == {1, 2, 3} != paper_m2po_kept(sq, 0.04)
    assert met["is_masked_frac"] == 0.5 and met["m2po_m2"] == pytest.approx(0.45 / 4)
