"""The objectives on cases worked by hand (values derived in each docstring, not
re-implementations of the formulas): the study's four (grpo, grpo_tis, agro, ggpo) and Fig. 6's
coefficient sums, the k3 and entropy helpers, and one small case for each correction whose rule
has a side that a random batch may miss (mis_direction, topr's reward sign, icepop's mask at the
sampling weights, ds_v32's K3 term, sapo's gate, k3_rs's dual clip, a3po's behavior mask,
geo_rs's asymmetric band, trm, seq_outlier_rs, dppo_kl, rec, bapo's search, vcpo's lr scale).

Convention in the derivations: n = number of response tokens in the batch (mask.sum()); every
objective is a token-mean, so a per-token gradient of "coefficient * logp" is -coef / n.
"""
import math

import pytest
import torch

import losses
from oracles import D, advantages, batch_four_spreads, grad_of, grad_of_batch

S2 = math.sqrt(0.5)  # unbiased std of rewards {1, 0}


def t(x):
    return torch.tensor(x, dtype=D)


def run(name, logp, blogp=None, rlogp=None, mask=None, rewards=None, m=2, **hp):
    """compute_loss + backward on lists; returns (grad of logp, metrics)."""
    logp = t(logp)
    blogp = logp.clone() if blogp is None else t(blogp)
    rlogp = None if rlogp is None else t(rlogp)
    mask = torch.ones_like(logp) if mask is None else t(mask)
    g, met = grad_of(name, logp, blogp, mask, t(rewards), m, ref=rlogp, **hp)
    assert all(isinstance(v, float) for v in met.values())
    return g, met


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
    assert m1["surrogate"] == pytest.approx(m2["surrogate"], abs=1e-12)
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


def test_mis_direction_harmful_masks_one_side_and_is_ppo_against_the_sampler():
    """The direction ablation. Two groups of two, A = [+1, -1] each (rewards [1, 0]); rho on the
    two tokens of each response: [3, 0.5], [3, 0.5], [0.1, 0.9], [0.1, 0.9] with band
    [0.8, 1.2]. both: every rho outside the band is masked, so only 0.9 keeps w. harmful: the
    mask acts only where rho left the band in A's direction, (A > 0, rho > 1.2) or (A < 0,
    rho < 0.8): response 0 keeps 0.5, response 1 keeps 3, response 2 keeps 0.1. dL/dl = -w A / n,
    n = 8. With that band, harmful's gradient equals grpo with grpo_anchor behavior (clip 0.2)
    on random ratios to rounding, which is the claim in grpo_mis's docstring."""
    rho = torch.tensor([[3.0, 0.5], [3.0, 0.5], [0.1, 0.9], [0.1, 0.9]], dtype=D)
    logp, b = torch.log(rho), torch.zeros(4, 2, dtype=D)
    mask, r = torch.ones(4, 2, dtype=D), torch.tensor([1.0, 0.0, 1.0, 0.0], dtype=D)
    A = torch.tensor(advantages(r, 2), dtype=D)[:, None]
    band = {"mis_low": 0.8, "mis_high": 1.2}
    w_both = torch.tensor([[0, 0], [0, 0], [0, 0.9], [0, 0.9]], dtype=D)
    w_harm = torch.tensor([[0, 0.5], [3, 0], [0.1, 0.9], [0, 0.9]], dtype=D)
    for direction, w in (("both", w_both), ("harmful", w_harm)):
        g, met = grad_of("grpo_mis", logp, b, mask, r, 2, mis_direction=direction, **band)
        assert torch.allclose(g, -w * A / 8, atol=1e-6), (direction, g)
        assert met["is_masked_frac"] == pytest.approx(float((w == 0).sum()) / 8)
    gen = torch.Generator().manual_seed(0)
    logp = 0.4 * torch.randn(8, 6, generator=gen, dtype=D)
    b, r = 0.4 * torch.randn(8, 6, generator=gen, dtype=D), torch.tensor([1.0, 0, 0, 1, 1, 1, 0, 0], dtype=D)
    mask = (torch.rand(8, 6, generator=gen) > 0.2).to(D)
    g_ablation, _ = grad_of("grpo_mis", logp, b, mask, r, 4, mis_direction="harmful", **band)
    g_ppo, _ = grad_of("grpo", logp, b, mask, r, 4, grpo_anchor="behavior", clip_low=0.2, clip_high=0.2)
    assert (g_ablation == 0).sum() > 3 and torch.allclose(g_ablation, g_ppo, atol=1e-12)
    with pytest.raises(ValueError, match="mis_direction"):
        grad_of("grpo_mis", logp, b, mask, r, 4, mis_direction="good")


def test_topr_splits_on_the_reward_sign_not_the_advantage():
    """Group 1, rewards (0.5, 1): response 0 has r > 0 but A < 0; group 2, rewards (0, -1):
    response 0 has r = 0 but A > 0. Every ratio is 2. TOPR (ROLL, scores > 0) gives response 0
    of group 1 the plain weight 1 and the responses of r <= 0 (group 2) topr_negative_weight
    min(2, 1) = 0.5; a rule on the advantage's sign would give group 1's response 0 0.5 and group
    2's response 0 weight 1: it fails the check."""
    b = torch.zeros(4, 1, dtype=D)
    logp = torch.full((4, 1), math.log(2.0), dtype=D)
    r = torch.tensor([0.5, 1.0, 0.0, -1.0], dtype=D)
    batch = dict(logp=logp, b=b, old=b, ref=b, mask=torch.ones(4, 1, dtype=D), r=r, m=2)
    got, _ = grad_of_batch("topr", batch, topr_negative_weight=0.5)
    A = advantages(r, 2)
    weights = [float(got[i, 0]) / (-A[i] / 4) for i in range(4)]
    assert weights == pytest.approx([1.0, 1.0, 0.5, 0.5])  # r > 0: 1; r <= 0: 0.5 min(2, 1)
    by_advantage = [1.0 if A[i] > 0 else 0.5 * min(2.0, 1.0) for i in range(4)]
    assert by_advantage == pytest.approx([0.5, 1.0, 1.0, 0.5]) and by_advantage != pytest.approx(weights)


def test_icepop_masks_on_the_mismatch_at_the_sampling_weights_not_on_the_staleness():
    """Two tokens of a positive-advantage response. Token 0: learner far ahead of the sampler
    (rho = exp(l - b) = 8, outside [0.5, 5]) but engine and learner agreed when it was sampled
    (k = exp(o - b) = 1): icepop keeps it and PPO's clip (r = exp(l - o) = 8 > 1.2) zeroes its
    gradient; icepop_primerl (the mask on rho) drops it. Token 1: rho = 1.1 but k = 8 (the
    engine's probability was 8x lower than the learner's at the same weights): icepop drops it,
    icepop_primerl keeps it with weight 1.1."""
    b = torch.tensor([[-2.0, -2.0], [-2.0, -2.0]], dtype=D)
    o = torch.tensor([[-2.0, -2.0 + math.log(8.0)], [-2.0, -2.0]], dtype=D)
    logp = torch.tensor([[-2.0 + math.log(8.0), -2.0 + math.log(1.1)], [-2.0, -2.0]], dtype=D)
    batch = dict(logp=logp, b=b, old=o, ref=b, mask=torch.ones(2, 2, dtype=D), r=torch.tensor([1.0, 0.0], dtype=D), m=2)
    g_ice, met = grad_of_batch("icepop", batch)
    g_prime, _ = grad_of_batch("icepop_primerl", batch)
    A0 = advantages(batch["r"], 2)[0]
    assert g_ice[0].tolist() == [0.0, 0.0] and met["is_masked_frac"] == 0.25 and met["clip_frac"] == 0.25
    assert g_prime[0].tolist() == pytest.approx([0.0, -1.1 * A0 / 4])
    with pytest.raises(ValueError, match="needs old_logp"):
        losses.compute_loss("icepop", logp=logp, behavior_logp=b, mask=batch["mask"], rewards=batch["r"],
                            group_size=2)
    import config
    with pytest.raises(ValueError, match="behavior_logp=engine"):
        config.load_config(None, ["loss=icepop", "behavior_logp=learner"])
    assert config.load_config(None, ["loss=icepop_primerl", "behavior_logp=learner"])["loss"] == "icepop_primerl"


def test_ds_v32_kl_term_is_the_importance_weighted_gradient_of_kl_to_the_reference():
    """One token, no advantage (one group of equal rewards): the surrogate is 0 and the loss is
    beta rho k3 with rho = exp(l - b) and k3 = exp(R - l) - (R - l) - 1; its gradient is
    beta rho (l - R). l = -1, b = -1.5, R = -2: rho = e^0.5, k3 = e^-1 - (-1) - 1 = e^-1."""
    logp, b, ref = (torch.tensor([[v], [v]], dtype=D) for v in (-1.0, -1.5, -2.0))
    batch = dict(logp=logp, b=b, old=b, ref=ref, mask=torch.ones(2, 1, dtype=D), r=torch.ones(2, dtype=D), m=2)
    got, met = grad_of_batch("ds_v32", batch, ds_kl_beta=0.2)
    rho = math.exp(0.5)
    assert got[:, 0].tolist() == pytest.approx([0.2 * rho * 1.0 / 2] * 2)
    assert met["ds_kl"] == pytest.approx(rho * math.exp(-1)) and met["surrogate"] == pytest.approx(0.2 * rho * math.exp(-1))
    assert losses.objective("ds_v32").needs_ref and not losses.objective("ds_mask").needs_ref


def test_sapo_gate_by_hand():
    """r = 2, A > 0, tau = 1: s = sigmoid(1) = 0.7311 and the weight is 4 s (1 - s) 2 = 1.5729; for
    A < 0 (tau 1.05) s = sigmoid(1.05) = 0.7408: 4 s (1 - s) 2 = 1.5362 (a smaller weight for the
    negative advantage at the same ratio)."""
    b = torch.zeros(2, 1, dtype=D)
    batch = dict(logp=torch.full((2, 1), math.log(2.0), dtype=D), b=b, old=b, ref=b,
                 mask=torch.ones(2, 1, dtype=D), r=torch.tensor([1.0, 0.0], dtype=D), m=2)
    got, met = grad_of_batch("sapo", batch)
    A = advantages(batch["r"], 2)
    weights = [float(got[i, 0]) / (-A[i] / 2) for i in range(2)]
    s1, s2 = 1 / (1 + math.exp(-1.0)), 1 / (1 + math.exp(-1.05))
    assert weights == pytest.approx([8 * s1 * (1 - s1), 8 * s2 * (1 - s2)])
    assert weights == pytest.approx([1.57290, 1.53622], abs=1e-5)
    assert met["is_weight_mean"] == pytest.approx(sum(weights) / 2)


def test_k3_rs_dual_clip_and_a3po_behavior_mask_by_hand():
    """One group of two one-token responses (A = +-0.7071), ell = ln 4 on both. k3_rs (threshold
    raised to 2 so that both are kept): rho = 4 > 1.2 clips the A > 0 one; for A < 0 the PPO
    loss -rho A = 2.83 exceeds the dual clip's -3 A = 2.12, so it is capped: both gradients 0.
    Under the dual clip c = 5 the A < 0 one trains: -rho A / n = 4 * 0.7071 / 2. a3po at alpha
    0.5: u = 2 <= 5 kept, r = 2 clipped for A > 0, the A < 0 token gets -rho A / n again."""
    b = torch.full((2, 1), -2.0, dtype=D)
    logp, mask, r = b + math.log(4), torch.ones(2, 1, dtype=D), torch.tensor([1.0, 0.0], dtype=D)
    a = 1 / math.sqrt(2) / (1 + 1e-6 * math.sqrt(2))  # (1 - 0.5) / (std + 1e-6), std = 0.7071
    g, met = grad_of("k3_rs", logp, b, mask, r, 2, k3_rs_threshold=2.0)
    assert g.tolist() == [[0.0], [0.0]] and met["clip_frac"] == 1.0 and met["is_masked_frac"] == 0
    g, _ = grad_of("k3_rs", logp, b, mask, r, 2, k3_rs_threshold=2.0, k3_rs_clip_c=5.0)
    assert g[0, 0] == 0 and float(g[1, 0]) == pytest.approx(4 * a / 2)
    g, _ = grad_of("k3_rs", logp, b, mask, r, 2)  # mean K3 = 4 - 1 - ln 4 = 1.61 > 0.01: rejected
    assert (g == 0).all()
    g, met = grad_of("a3po", logp, b, mask, r, 2, a3po_alpha=0.5)
    assert g[0, 0] == 0 and float(g[1, 0]) == pytest.approx(4 * a / 2) and met["a3po_alpha"] == 0.5
    g, met = grad_of("a3po", logp, b, mask, r, 2, a3po_alpha=1.0, mis_high=3.0)  # u = 4 > 3: masked
    assert (g == 0).all() and met["is_masked_frac"] == 1.0


def test_geo_rs_bounds_the_sampler_over_learner_mean_by_hand():
    """The band [log 0.999, log 1.001] = [-1.00050e-3, 0.99950e-3] on mean_t(b - l) is not
    symmetric: ell = +1.0002e-3 (mean b - l = -1.0002e-3) is kept, ell = -1.0002e-3 (+1.0002e-3)
    is rejected; with the sign of k1 flipped it would be the other way round."""
    b = torch.full((2, 3), -1.0, dtype=D)
    logp = b + torch.tensor([[1.0002e-3], [-1.0002e-3]], dtype=D)
    g, met = grad_of("geo_rs", logp, b, torch.ones(2, 3, dtype=D), torch.tensor([1.0, 0.0], dtype=D), 2)
    assert (g[0] != 0).all() and (g[1] == 0).all() and met["is_masked_frac"] == 0.5


def test_vcpo_lr_scale_by_hand():
    """S = [1, 2, 3]: ESS = 36 / 14, scale = sqrt(ESS / 3) = sqrt(6/7); equal weights: 1; one
    dominant sequence (log S 1000 beside 0s, no overflow): ESS -> 1, scale -> sqrt(1/B)."""
    assert losses.vcpo_lr_scale(torch.log(torch.tensor([1.0, 2.0, 3.0]))) == pytest.approx(math.sqrt(6 / 7))
    assert losses.vcpo_lr_scale(torch.full((5,), -3.0)) == pytest.approx(1.0)
    assert losses.vcpo_lr_scale(torch.tensor([1000.0, 0.0, 0.0, 0.0])) == pytest.approx(0.5)


def test_trm_seq_outlier_rs_dppo_kl_and_rec_by_hand():
    """One group of two one-token responses, r = (1, 0): GRPO's A = +-0.7071, the mean baseline
    +-0.5.
    trm, k2: ell = 2.2 gives k2 = 2.42 <= 2.5 (kept; rho = 9.03 > 1.2 clips the A > 0 token, the
    A < 0 one trains at -rho A / 2); ell = 2.3 gives 2.645 > 2.5: both dropped.
    seq_outlier_rs: rho = 99 kept, 101 dropped.
    dppo_kl: q = 0.5 -> p = 0.7 has KL = 0.5 ln(0.5/0.7) + 0.5 ln(0.5/0.3) = 0.0872 > 0.05: the
    A > 0 token (p > q) is dropped, the A < 0 one (p > q: moved against it) is kept.
    rec_ring at rho = 0.5: A > 0 drops it (0.5 is neither in [0.8, 1.2] nor <= 0.4), A < 0 drops it
    too (not >= 3); rec_oneside keeps the A > 0 one (0.5 <= 1.2) and drops the A < 0 one (< 0.8)."""
    mask, r = torch.ones(2, 1, dtype=D), torch.tensor([1.0, 0.0], dtype=D)
    a = 1 / math.sqrt(2) / (1 + 1e-6 * math.sqrt(2))
    b = torch.full((2, 1), -3.0, dtype=D)
    g, met = grad_of("trm", b + 2.2, b, mask, r, 2)
    assert g[0, 0] == 0 and float(g[1, 0]) == pytest.approx(math.exp(2.2) * a / 2) and met["is_masked_frac"] == 0
    g, met = grad_of("trm", b + 2.3, b, mask, r, 2)
    assert (g == 0).all() and met["is_masked_frac"] == 1
    b = torch.full((2, 1), -6.0, dtype=D)
    for rho, kept in ((99.0, True), (101.0, False)):
        g, met = grad_of("seq_outlier_rs", b + math.log(rho), b, mask, r, 2)
        assert (met["is_masked_frac"] == 0) == kept
    b = torch.full((2, 1), math.log(0.5), dtype=D)
    logp = torch.full((2, 1), math.log(0.7), dtype=D)
    g, met = grad_of("dppo_kl", logp, b, mask, r, 2)
    assert g[0, 0] == 0 and float(g[1, 0]) == pytest.approx(a * 1.4 / 2) and met["is_masked_frac"] == 0.5
    g, _ = grad_of("dppo_kl", logp, b, mask, r, 2, dppo_kl_delta=0.1)  # 0.0872 <= 0.1: kept
    assert float(g[0, 0]) == pytest.approx(-a * 1.4 / 2)
    logp = b + math.log(0.5)
    g, met = grad_of("rec_ring", logp, b, mask, r, 2)
    assert (g == 0).all() and met["clip_frac"] == 1
    g, met = grad_of("rec_oneside", logp, b, mask, r, 2)
    assert float(g[0, 0]) == pytest.approx(-0.5 / 2) and g[1, 0] == 0 and met["clip_frac"] == 0.5


def test_bapo_search_by_hand_and_micro_batches_add_up():
    """One group of two one-token responses, A = +-a: rho = 1.5 (A > 0) and 1.4 (A < 0). At
    [0.6, 1.2] the balance is 1.2 a / 1.4 a = 0.857 < 1; raising the lower bound changes nothing
    (max(1.4, lo) = 1.4), so it goes to 0.8, then the upper one by 0.05: at hi = 1.4 the balance
    is 1.4 a / (1.4 a + 1e-8) < 1 (the recipe's guard tips the tie), so hi = 1.45. The A > 0
    token (1.5 > 1.45) is clipped, the A < 0 one trains at -1.4 (-a) / 2.
    Two micro-batches with the whole batch's statistics give the full batch's gradient."""
    b = torch.full((2, 1), -2.0, dtype=D)
    logp = b + torch.log(torch.tensor([[1.5], [1.4]], dtype=D))
    mask, r = torch.ones(2, 1, dtype=D), torch.tensor([1.0, 0.0], dtype=D)
    a = 1 / math.sqrt(2) / (1 + 1e-6 * math.sqrt(2))
    g, met = grad_of("bapo", logp, b, mask, r, 2)
    assert met["bapo_low"] == pytest.approx(0.8) and met["bapo_high"] == pytest.approx(1.45)
    assert g[0, 0] == 0 and float(g[1, 0]) == pytest.approx(1.4 * a / 2)
    batch = batch_four_spreads(seed=4)
    logp, b, mask, r, m = (batch[k] for k in ("logp", "b", "mask", "r", "m"))
    full, _ = grad_of("bapo", logp, b, mask, r, m)
    stats = losses.batch_stats("bapo", logp=logp, behavior_logp=b, mask=mask, rewards=r, group_size=m)
    half = logp.shape[0] // 2
    parts = []
    for sl in (slice(0, half), slice(half, None)):
        x = logp[sl].clone().requires_grad_(True)
        loss, _ = losses.compute_loss("bapo", logp=x, behavior_logp=b[sl], mask=mask[sl], rewards=r[sl],
                                      group_size=m, batch_stats=stats)
        (loss * mask[sl].sum() / mask.sum()).backward()
        parts.append(x.grad)
    torch.testing.assert_close(torch.cat(parts), full, atol=1e-14, rtol=1e-12)
