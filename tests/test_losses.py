"""Tests of losses.py against hand-derived values (not re-implementations of the formulas).

Convention in the derivations: n = number of response tokens in the batch (mask.sum()); every
objective is a token-mean, so a per-token gradient of "coefficient * logp" is -coef / n.
"""
import math
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import losses  # noqa: E402

D = torch.float64
S2 = math.sqrt(0.5)  # unbiased std of rewards {1, 0}


def t(x):
    return torch.tensor(x, dtype=D)


def run(name, logp, blogp=None, rlogp=None, mask=None, rewards=None, m=2, **hp):
    """compute_loss + backward; returns (grad of logp, metrics)."""
    logp = t(logp).requires_grad_(True)
    blogp = logp.detach().clone() if blogp is None else t(blogp)
    rlogp = None if rlogp is None else t(rlogp)
    mask = torch.ones_like(logp) if mask is None else t(mask)
    loss, met = losses.compute_loss(name, logp=logp, behavior_logp=blogp, ref_logp=rlogp,
                                    mask=mask, rewards=t(rewards), group_size=m, **hp)
    loss.backward()
    assert all(isinstance(v, float) for v in met.values())
    return logp.grad, met


def close(a, b, tol=1e-6):
    torch.testing.assert_close(a, t(b) if not torch.is_tensor(b) else b, atol=tol, rtol=tol)


# three groups of m = 2: mixed [1, 0], all-correct [1, 1], all-wrong [0, 0]; T = 3 with padding
MASK3 = [[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 0], [1, 1, 1], [1, 0, 0]]  # n = 12
R3 = [1, 0, 1, 1, 0, 0]
LOGP3 = [[-0.5, -1.0, -2.0], [-0.3, -0.7, 5.0], [-1.0, 9.0, 9.0],
         [-0.2, -0.4, 0.0], [-0.9, -0.1, -0.6], [-1.5, 0.0, 0.0]]


def test_grpo_proximal_gradient_with_padding_and_uniform_groups():
    """Group 1, r = [1, 0]: mean 1/2, unbiased std sqrt(1/2), so A = +-(1/2)/(sqrt(1/2)+1e-6).
    Proximal rho = 1 (inside the interval), so the gradient on each response token of response i
    is -A_i / n with n = 12; padding gets 0. Groups [1, 1] and [0, 0]: A = 0/(0+1e-6) = 0, zero
    gradient. A stale behavior log-prob changes nothing under the proximal anchor."""
    a = 0.5 / (S2 + 1e-6)
    mk = t(MASK3)
    exp = torch.cat([t([[-a] * 3, [a] * 3]), torch.zeros(4, 3, dtype=D)]) / 12 * mk
    g, met = run("grpo", LOGP3, blogp=(t(LOGP3) - 0.7).tolist(), mask=MASK3, rewards=R3)
    close(g, exp)
    assert "clip_frac" not in met  # the proximal ratio is 1: its clip cannot act
    close(t(met["coef_correct_sum"]), t(a))  # one mixed group, one correct response with A = a
    close(t(met["coef_abs_mean"]), t(2 * a / 6))


def test_grpo_m3_advantages():
    """r = [1, 0, 0]: mean 1/3, unbiased var ((2/3)^2 + 2 (1/3)^2) / 2 = 1/3, so
    A = [2/sqrt3, -1/sqrt3, -1/sqrt3] (up to the 1e-6); T = 2 all valid, n = 6."""
    s = math.sqrt(1 / 3) + 1e-6
    A = [(2 / 3) / s, -(1 / 3) / s, -(1 / 3) / s]
    g, _ = run("grpo", [[-1.0, -2.0]] * 3, rewards=[1, 0, 0], m=3)
    close(g, t([[-x / 6, -x / 6] for x in A]))


def test_grpo_behavior_anchor_clipping():
    """r = [1, 0], A = [+a, -a], eps = 0.2, rho = exp(logp - blogp) per token (n = 5):
    response 1 (A > 0): rho 1.5 -> min picks 1.2 a (constant): grad 0, counted as clipped;
      rho 0.5 -> min(0.5a, 0.8a) = 0.5a unclipped: grad -a*0.5/n; rho 1.1 inside: -a*1.1/n.
    response 2 (A < 0): rho 0.5 -> min(-0.5a, -0.8a) = -0.8a constant: grad 0, clipped;
      rho 1.5 -> min(-1.5a, -1.2a) = -1.5a unclipped: grad +a*1.5/n; third token is padding.
    clip_frac = 2 / 5."""
    a = 0.5 / (S2 + 1e-6)
    blogp = [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    logp = [[math.log(1.5), math.log(0.5), math.log(1.1)], [math.log(0.5), math.log(1.5), 3.0]]
    g, met = run("grpo", logp, blogp, mask=[[1, 1, 1], [1, 1, 0]], rewards=[1, 0],
                 grpo_anchor="behavior")
    close(g, t([[0, -a * 0.5 / 5, -a * 1.1 / 5], [0, a * 1.5 / 5, 0]]))
    close(t(met["clip_frac"]), t(0.4))
    # k3 = mean of (rho - 1 - log rho) over the 5 tokens
    k3 = [r - 1 - math.log(r) for r in (1.5, 0.5, 1.1, 0.5, 1.5)]
    close(t(met["k3"]), t(sum(k3) / 5))


def test_grpo_tis_truncation_and_no_grad_through_weights():
    """r = [1, 0], A = [+a, -a]. behavior log-probs give w = exp(logp - blogp) per token:
    response 1: [3 -> capped 2, 0.5, 1]; response 2: [1, 2.5 -> 2, padding]. n = 5.
    Gradient per token = -w A_i / n (w detached: no extra term from d w / d logp).
    tis_weight_mean = (2 + 0.5 + 1 + 1 + 2) / 5 = 1.3; tis_clip_frac = 2 / 5."""
    a = 0.5 / (S2 + 1e-6)
    logp = [[-1.0, -1.0, -1.0], [-1.0, -1.0, 0.0]]
    blogp = [[-1 - math.log(3), -1 + math.log(2), -1.0], [-1.0, -1 - math.log(2.5), 0.0]]
    g, met = run("grpo_tis", logp, blogp, mask=[[1, 1, 1], [1, 1, 0]], rewards=[1, 0])
    close(g, t([[-2 * a / 5, -0.5 * a / 5, -a / 5], [a / 5, 2 * a / 5, 0]]))
    close(t(met["tis_weight_mean"]), t(1.3))
    close(t(met["tis_clip_frac"]), t(0.4))
    assert "clip_frac" not in met


def test_grpo_tis_equals_grpo_on_policy():
    g1, m1 = run("grpo_tis", LOGP3, mask=MASK3, rewards=R3)
    g2, m2 = run("grpo", LOGP3, mask=MASK3, rewards=R3)
    close(g1, g2)
    assert m1["loss"] == pytest.approx(m2["loss"], abs=1e-12)
    assert m1["tis_weight_mean"] == pytest.approx(1.0) and m1["tis_clip_frac"] == 0


def test_agro_beta0_is_rloo_and_ignores_behavior():
    """beta = 0, r = [1, 0, 0]: a_i = r_i - mean_{j != i} r_j = [1 - 0, 0 - 1/2, 0 - 1/2].
    Group 2 r = [1, 1, 1]: a = 0. Gradient per token -a_i / n, n = 2+1+2 + 2+2+2 = 11.
    Behavior log-probs (stale) do not enter: no importance weights."""
    mask = [[1, 1], [1, 0], [1, 1], [1, 1], [1, 1], [1, 1]]
    logp = [[-1.0, -2.0], [-0.5, 4.0], [-0.1, -0.2], [-1.0, -1.0], [-2.0, -3.0], [-0.4, -0.4]]
    ref = [[-3.0, -1.0]] * 6
    a = [1, -0.5, -0.5, 0, 0, 0]
    g, met = run("agro", logp, blogp=[[-9.0, -9.0]] * 6, rlogp=ref, mask=mask,
                 rewards=[1, 0, 0, 1, 1, 1], m=3, beta=0.0)
    close(g, t([[-x / 11] * 2 for x in a]) * t(mask))
    close(t(met["coef_correct_sum"]), t(1.0))
    close(t(met["coef_abs_mean"]), t(2 / 6))


def test_agro_beta_positive_coefficient_detached():
    """beta = 0.5, r = [1, 0], L - R = [0.4, 0] (L = R + 0.4 on response 1):
    G = [1 - 0.2, 0] = [0.8, 0], b = [0, 0.8], a = [0.8, -0.8]; grad -a_i / n, n = 4.
    A non-detached a would add beta-terms to the gradient."""
    ref = [[-1.0, -1.0], [-2.0, -2.0]]
    logp = [[-0.8, -0.8], [-2.0, -2.0]]
    g, _ = run("agro", logp, rlogp=ref, rewards=[1, 0], beta=0.5)
    close(g, t([[-0.2, -0.2], [0.2, 0.2]]))


def test_agro_uniform_groups_zero_grad():
    g, _ = run("agro", LOGP3, rlogp=(t(LOGP3) + 0.3).tolist(), mask=MASK3,
               rewards=[1, 1, 0, 0, 1, 1], beta=0.0)
    close(g, torch.zeros(6, 3, dtype=D))


BETA3 = 1 / math.log(3)  # r_i / beta = r_i ln 3, so q = softmax([ln 3, 0]) = [3/4, 1/4] for r = [1, 0]


@pytest.mark.parametrize("variant", ["detached", "original"])
def test_ggpo_gradient_hand(variant):
    """m = 2, r = [1, 0], R = B, beta = 1/ln 3: q = [3/4, 1/4].
    Learner: L_1 - B_1 = 0, L_2 - B_2 = ln 3 (spread over 2 tokens, ratios sqrt3 > 1):
    p = softmax([0, ln 3]) = [1/4, 3/4], c = q - p = [1/2, -1/2]. No token is dropped
    (response 1 ratios 1; response 2 has c < 0 and ratios > 1), so both variants give
    grad -c_i / n per token, n = 2 + 2 (the third token of each response is padding)."""
    h = math.log(3) / 2
    blogp = [[-1.0, -1.0, 0.0], [-2.0, -2.0, -1.0]]
    logp = [[-1.0, -1.0, 7.0], [-2.0 + h, -2.0 + h, -1.0]]
    mask = [[1, 1, 0], [1, 1, 0]]
    g, met = run("ggpo", logp, blogp, rlogp=blogp, mask=mask, rewards=[1, 0], beta=BETA3,
                 ggpo_variant=variant)
    close(g, t([[-0.5 / 4, -0.5 / 4, 0], [0.5 / 4, 0.5 / 4, 0]]))
    close(t(met["coef_correct_sum"]), t(0.5))
    assert met.get("clip_frac", 0) == 0 and ("clip_frac" in met) == (variant == "detached")


def test_ggpo_token_clipping_drops_exactly():
    """m = 2, r = [1, 0], R = B = 0, beta = 1/ln 3 -> q = [3/4, 1/4]; eps = 0.2 each side.
    Ratios: response 1 [1.5, 0.5, 1.1], response 2 [0.5, 1.5, padding].
    L_1 - B_1 = ln(1.5*0.5*1.1) = ln 0.825, L_2 - B_2 = ln 0.75, so
    p_1 = 0.825 / 1.575 = 11/21, c = [3/4 - 11/21, -(3/4 - 11/21)] = [19/84, -19/84].
    c_1 > 0 drops ratios > 1.2: token (1,1) only (0.5 and 1.1 kept);
    c_2 < 0 drops ratios < 0.8: token (2,1) only (1.5 kept). n = 5, clip_frac = 2/5.
    Detached grad: -c_i/n on kept tokens, 0 on dropped. Original: -c_i/n on every token."""
    c = 19 / 84
    L = math.log
    logp = [[L(1.5), L(0.5), L(1.1)], [L(0.5), L(1.5), -3.0]]
    zeros = [[0.0] * 3] * 2
    mask = [[1, 1, 1], [1, 1, 0]]
    g, met = run("ggpo", logp, zeros, rlogp=zeros, mask=mask, rewards=[1, 0], beta=BETA3)
    close(g, t([[0, -c / 5, -c / 5], [0, c / 5, 0]]))
    close(t(met["clip_frac"]), t(0.4))
    g, met = run("ggpo", logp, zeros, rlogp=zeros, mask=mask, rewards=[1, 0], beta=BETA3,
                 ggpo_variant="original")
    close(g, t([[-c / 5] * 3, [c / 5, c / 5, 0]]))
    assert "clip_frac" not in met  # the original update has no token clip


def test_ggpo_uniform_groups_zero_grad():
    """L = B = R: p_i = 1/m. All-correct or all-wrong: r_i / beta is the same for all i and
    cancels in the softmax, q_i = 1/m, so c = q - p = 0 and the gradient is zero."""
    for variant in ("detached", "original"):
        g, met = run("ggpo", LOGP3, rlogp=LOGP3, mask=MASK3, rewards=[1, 1, 0, 0, 1, 1],
                     ggpo_variant=variant)
        close(g, torch.zeros(6, 3, dtype=D))
        assert math.isnan(met["coef_correct_sum"])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ggpo_variants_agree_without_clipping(seed):
    """Random groups (m = 4, T = 3, padding), |logp - blogp| < 0.15 per token so every ratio is
    in (0.86, 1.17), inside [0.8, 1.2]: nothing is dropped and the two gradients coincide."""
    g = torch.Generator().manual_seed(seed)
    B, T = 8, 3
    blogp = -torch.rand(B, T, generator=g, dtype=D) * 3
    logp = blogp + (torch.rand(B, T, generator=g, dtype=D) - 0.5) * 0.3
    ref = blogp + torch.randn(B, T, generator=g, dtype=D) * 0.5
    mask = (torch.rand(B, T, generator=g) > 0.3).to(D)
    mask[:, 0] = 1
    r = (torch.rand(B, generator=g) > 0.5).to(D)
    out = [run("ggpo", logp.tolist(), blogp.tolist(), ref.tolist(), mask.tolist(), r.tolist(),
               m=4, beta=0.5, ggpo_variant=v) for v in ("detached", "original")]
    assert out[0][1]["clip_frac"] == 0
    close(out[0][0], out[1][0], tol=1e-10)
    assert out[0][0].abs().sum() > 0


def test_ggpo_ess_success():
    """Group 1, r = [1, 1, 1, 0], R = B: q equal on the 3 successes -> ESS 1.
    Group 2, r = [1, 1, 0, 0], R_1 - B_1 = 0, R_2 - B_2 = ln 3: q on the successes ∝ [1, 3],
    renormalized [1/4, 3/4]: ESS = 1 / (2 (1/16 + 9/16)) = 0.8. Mean over the 2 groups: 0.9.
    Group 3, r = [1, 0, 0, 0]: one success, excluded. One dominating success: ESS -> 1/k."""
    blogp = torch.zeros(12, 2, dtype=D)
    ref = blogp.clone()
    ref[5, 0] = math.log(3)
    _, met = run("ggpo", blogp.tolist(), blogp.tolist(), ref.tolist(),
                 rewards=[1, 1, 1, 0, 1, 1, 0, 0, 1, 0, 0, 0], m=4, beta=1.0)
    close(t(met["ggpo_ess_success"]), t(0.9))
    ref = torch.zeros(4, 2, dtype=D)
    ref[0, 0] = 60.0  # q_1 / q_j = e^60 on the successes: ESS = 1/3 up to ~e^-60
    _, met = run("ggpo", blogp[:4].tolist(), blogp[:4].tolist(), ref.tolist(),
                 rewards=[1, 1, 1, 0], m=4, beta=1.0)
    close(t(met["ggpo_ess_success"]), t(1 / 3))
    _, met = run("ggpo", blogp[:4].tolist(), rlogp=blogp[:4].tolist(), rewards=[1, 0, 0, 0], m=4)
    assert math.isnan(met["ggpo_ess_success"])


def _wcorrect(name, k, m=8, **hp):
    logp = [[-1.0, -2.0]] * m
    _, met = run(name, logp, rlogp=logp, rewards=[1] * k + [0] * (m - k), m=m, **hp)
    return met["coef_correct_sum"]


@pytest.mark.parametrize("name,hp,expected", [
    ("grpo", {}, lambda k, m: math.sqrt(k * (m - k))),
    ("agro", {"beta": 0.01}, lambda k, m: k * (m - k) / (m - 1)),
    ("ggpo", {"beta": 0.1}, None), ("ggpo", {"beta": 0.01}, None)])
def test_fig6_coefficient_sum(name, hp, expected):
    """Fig. 6: m = 8, k correct, learner = behavior = reference; W(k) = sum_{r_i=1} c_i, over W(7).
    GRPO: mean k/m, unbiased std s = sqrt(k(m-k)/(m(m-1))), A_correct = (1 - k/m)/s, so
    W = k(m-k)/m / s = sqrt(k(m-k)) sqrt((m-1)/m) ∝ sqrt(k(m-k)).
    AGRO: L = R so G = r; a_correct = 1 - (k-1)/(m-1) = (m-k)/(m-1), W = k(m-k)/(m-1).
    GGPO: L = B = R, so p_i = 1/m and q_i = e^{1/beta} / (k e^{1/beta} + m - k) on correct ones:
    W(k) = k e^{1/beta} / (k e^{1/beta} + m - k) - k/m, -> (m-k)/m as beta -> 0."""
    m = 8
    if expected is None:
        E = math.exp(1 / hp["beta"])
        expected = lambda k, m: k * E / (k * E + m - k) - k / m  # noqa: E731
    W = [_wcorrect(name, k, **hp) for k in range(1, 8)]
    got = [w / W[-1] for w in W]
    want = [expected(k, m) / expected(7, m) for k in range(1, 8)]
    assert got == pytest.approx(want, rel=1e-4)
    if name == "ggpo" and hp["beta"] == 0.01:
        assert got == pytest.approx([m - k for k in range(1, 8)], rel=1e-4)


def test_k3_and_entropy_helpers():
    """k3: rho = 2 on one token and 1 on the other (padding ignored): ((1 - ln 2) + 0) / 2.
    Entropy: logits [0, ln 3] -> p = [1/4, 3/4], H = -(1/4 ln 1/4 + 3/4 ln 3/4);
    logits [1000, 0, -inf] -> H = 0 (stable, no NaN); padding position with huge logits ignored."""
    v = losses.k3(t([[math.log(2), 0.0, 5.0]]), t([[0.0, 0.0, -math.inf]]), t([[1, 1, 0]]))
    close(v, t((1 - math.log(2)) / 2))
    logits = t([[[0.0, math.log(3), -math.inf], [1000.0, 0.0, -math.inf], [1e30, -1e30, 0.0]]])
    h = losses.entropy_from_logits(logits, t([[1, 1, 0]]))
    close(h, t(-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)) / 2))
    close(losses.entropy_from_logits(torch.zeros(2, 3, 5), torch.ones(2, 3)),
          torch.tensor(math.log(5), dtype=torch.float32))


def test_padding_may_hold_garbage_and_registry():
    """Non-finite values at padding positions (mask 0) are accepted and give zero grad there."""
    logp = t([[-1.0, 1e4], [-1.0, -2.0]]).requires_grad_(True)
    blogp = t([[-1.0, -math.inf], [-1.0, float("nan")]])
    mask = t([[1, 0], [1, 0]])
    for name in losses.LOSSES:
        loss, met = losses.compute_loss(name, logp=logp, behavior_logp=blogp, ref_logp=blogp,
                                        mask=mask, rewards=t([1, 0]), group_size=2, old_logp=blogp,
                                        a3po_alpha=0.5, response_grad_sq=t([1, 1]))
        g, = torch.autograd.grad(loss, logp)
        assert torch.isfinite(g).all() and (g[:, 1] == 0).all() and math.isfinite(met["loss"])
    assert {name: o.needs_ref for name, o in losses.LOSSES.items()} == \
        {"grpo": False, "grpo_tis": False, "agro": True, "ggpo": True, "grpo_mis": False,
         "icepop": False, "icepop_primerl": False, "grpo_tis_seq": False, "grpo_mis_seq": False,
         "gspo": False, "m2po": False, "ds_mask": False, "ds_v32": True, "cispo": False, "sapo": False,
         "gmpo": False, "topr": False, "kimi": False, "vespo": False, "gepo": False, "a3po": False,
         "dppo_tv": False, "geo_rs": False, "k3_rs": False, "snis": False, "vcpo": False,
         "trm": False, "seq_outlier_rs": False, "dppo_kl": False, "rec_oneside": False,
         "rec_ring": False, "asymre": False, "bapo": False}
    assert losses.objective("ggpo").needs_ref and not losses.objective("grpo").needs_ref


def _bad(**over):
    kw = dict(logp=torch.zeros(4, 3), behavior_logp=torch.zeros(4, 3), ref_logp=torch.zeros(4, 3),
              mask=torch.ones(4, 3), rewards=torch.tensor([1.0, 0, 1, 0]), group_size=2)
    name = over.pop("name", "ggpo")
    kw.update(over)
    return name, kw


NAN_ON_TOKEN = torch.zeros(4, 3).index_put_((torch.tensor([1]), torch.tensor([1])), torch.tensor(math.nan))
INF_ON_TOKEN = torch.zeros(4, 3).index_put_((torch.tensor([0]), torch.tensor([2])), torch.tensor(-math.inf))


@pytest.mark.parametrize("case,match", [
    (_bad(behavior_logp=torch.zeros(4, 2)), "behavior_logp has shape"),
    (_bad(mask=torch.ones(3, 3)), "mask has shape"),
    (_bad(ref_logp=torch.zeros(4, 2)), "ref_logp has shape"),
    (_bad(rewards=torch.zeros(3)), "rewards must have shape"),
    (_bad(logp=torch.zeros(12)), r"logp must be \[B, T\]"),
    (_bad(group_size=3), "not a multiple of group_size"),
    (_bad(group_size=1), "group_size must be an int >= 2"),
    (_bad(logp=NAN_ON_TOKEN), "logp holds NaN/inf"),
    (_bad(behavior_logp=INF_ON_TOKEN), "behavior_logp holds NaN/inf"),
    (_bad(ref_logp=NAN_ON_TOKEN), "ref_logp holds NaN/inf"),
    (_bad(rewards=torch.tensor([1.0, math.nan, 0, 0])), "rewards hold NaN/inf"),
    (_bad(mask=torch.full((4, 3), 0.5)), "mask must hold only 0 and 1"),
    (_bad(mask=torch.zeros(4, 3)), "mask is all zero"),
    (_bad(ref_logp=None), "needs ref_logp"),
    (_bad(name="ppo"), "unknown loss name"),
    (_bad(lr=1e-3), "unknown hyperparameter"),
    (_bad(ggpo_variant="both"), "unknown ggpo_variant"),
    (_bad(name="grpo", grpo_anchor="old"), "unknown grpo_anchor"),
    (_bad(name="grpo_tis", grpo_anchor="behavior"), "proximal anchor"),
    (_bad(beta=0.0), "beta must be"),
    (_bad(beta="0.01"), "beta must be a finite number"),
])
def test_bad_input_raises(case, match):
    name, kw = case
    with pytest.raises(ValueError, match=match):
        losses.compute_loss(name, **kw)
