"""The corrections that drop responses or tokens by their ratio to the sampler without weighting
by it, bound it by a binary KL or by bounds searched per batch, and AsymRE's lowered baseline:
trm, seq_outlier_rs, dppo_kl, rec_oneside, rec_ring, asymre, bapo, against their docstrings' formulas written here with plain loops
(not by calling the functions under test), with every mask made to act; what each becomes at
logp == behavior_logp; hand-sized cases; bad settings.

ell = l - b, rho = exp(ell), A_i = GRPO's group advantage (the PPO-clip ones and dppo_kl) or
r_i - group mean (REC, AsymRE), n = response tokens of the batch."""
import math

import pytest
import torch

import losses
from test_corrections import advantages
from test_corrections_rejection import D, grad_of, random_batch

NAMES = ["trm", "seq_outlier_rs", "dppo_kl", "rec_oneside", "rec_ring", "asymre"]


def mean_baseline(r, m, shift=0.0):
    out = []
    for i in range(0, len(r), m):
        g = [float(x) for x in r[i:i + m]]
        out += [x - sum(g) / m + shift for x in g]
    return out


def expected_grad(name, logp, b, mask, r, m, **over):
    """dL/dl per token from the formulas, and how many response tokens a mask or clip zeroed."""
    hp = {**losses.DEFAULTS, **over}
    B, T = logp.shape
    n = float(mask.sum())
    L = [int(mask[i].sum()) for i in range(B)]
    A = advantages(r, m) if name in ("trm", "seq_outlier_rs", "dppo_kl") else \
        mean_baseline(r, m, hp["asymre_c"] if name == "asymre" else 0.0)
    g, dropped = torch.zeros(B, T, dtype=D), 0
    for i in range(B):
        ell = [max(-20.0, min(20.0, float(logp[i, t] - b[i, t]))) for t in range(L[i])]
        if name == "trm":
            div = [e * e / 2 if hp["trm_divergence"] == "k2" else math.exp(e) - 1 - e for e in ell]
            keep_seq = max(div) <= hp["trm_delta"]
        if name == "seq_outlier_rs":
            keep_seq = all(hp["outlier_low"] <= math.exp(e) <= hp["outlier_high"] for e in ell)
        for t in range(L[i]):
            rho = math.exp(float(logp[i, t] - b[i, t]))
            if name in ("trm", "seq_outlier_rs"):
                clip = (A[i] > 0 and rho > 1 + hp["clip_high"]) or (A[i] < 0 and rho < 1 - hp["clip_low"])
                keep = keep_seq and not clip
                g[i, t] = -rho * A[i] / n if keep else 0.0
            elif name == "dppo_kl":
                p, q = math.exp(float(logp[i, t])), math.exp(float(b[i, t]))
                kl = q * (float(b[i, t]) - float(logp[i, t])) + (1 - q) * math.log((1 - q + 1e-8) / (1 - p + 1e-8))
                bad = ((A[i] > 0 and p > q) or (A[i] < 0 and p < q)) and kl > hp["dppo_kl_delta"]
                keep = not bad
                g[i, t] = -A[i] * rho / n if keep else 0.0
            elif name == "rec_oneside":
                keep = (A[i] >= 0 and rho <= 1 + hp["rec_eps_high"]) or (A[i] <= 0 and rho >= 1 - hp["rec_eps_low"])
                g[i, t] = -A[i] / n if keep else 0.0
            elif name == "rec_ring":
                keep = (1 - hp["rec_eps_low"] <= rho <= 1 + hp["rec_eps_high"]
                        or (A[i] >= 0 and rho <= 1 - hp["rec_ring_low"])
                        or (A[i] <= 0 and rho >= 1 + hp["rec_ring_high"]))
                g[i, t] = -A[i] / n if keep else 0.0
            else:  # asymre
                keep = True
                g[i, t] = -A[i] / n
            dropped += not keep
    return g, dropped, int(n)


@pytest.mark.parametrize("name,hp", [(name, {}) for name in NAMES] + [
    ("trm", {"trm_divergence": "k3", "trm_delta": 1.0}),
    ("seq_outlier_rs", {"outlier_low": 0.5, "outlier_high": 2.0}),  # the defaults drop nothing here
    ("rec_ring", {"rec_ring_low": 0.3, "rec_ring_high": 0.5})])
def test_gradient_matches_its_formula_with_masks_that_trigger(name, hp):
    logp, b, mask, r, m, _ = random_batch(0)
    logp = logp.clamp(max=-0.01)  # log-probabilities (the binary KL reads 1 - exp(l))
    got, met = grad_of(name, logp, b, mask, r, m, **hp)
    want, dropped, n = expected_grad(name, logp, b, mask, r, m, **hp)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-9)
    assert (got[mask == 0] == 0).all()
    if name == "asymre":
        assert dropped == 0
    else:
        assert 0 < dropped < n / 2, dropped  # some zeroed, most not
    if name == "seq_outlier_rs" and not hp:
        assert met["is_masked_frac"] == 0  # |ell| < ln 100 everywhere: only PPO's clip acts
    elif name in ("trm", "seq_outlier_rs", "dppo_kl"):
        assert met["is_masked_frac"] > 0
    if name.startswith("rec"):
        assert met["clip_frac"] == pytest.approx(dropped / n)


@pytest.mark.parametrize("name", ["trm", "seq_outlier_rs", "dppo_kl"])
def test_at_logp_equal_behavior_the_ppo_forms_are_grpo(name):
    """rho = 1: no response is dropped, no token clipped, and the gradient is GRPO's -A_i / n."""
    logp, _, mask, r, m, _ = random_batch(1)
    plain, _ = grad_of("grpo", logp, logp.clone(), mask, r, m)
    got, met = grad_of(name, logp, logp.clone(), mask, r, m)
    torch.testing.assert_close(got, plain, atol=1e-14, rtol=1e-12)
    assert met["is_masked_frac"] == 0 and met.get("clip_frac", 0) == 0


def test_at_logp_equal_behavior_rec_and_asymre_take_the_mean_baseline():
    """REC keeps every token at rho = 1 and its coefficient is r_i - mean (no 1 / std): GRPO's
    gradient times std + 1e-6 per group; AsymRE adds asymre_c to every coefficient."""
    logp, _, mask, r, m, _ = random_batch(1)
    n = float(mask.sum())
    base = torch.tensor(mean_baseline(r, m), dtype=D)[:, None]
    for name, shift in (("rec_oneside", 0.0), ("rec_ring", 0.0), ("asymre", 0.1), ("asymre", 0.3)):
        got, met = grad_of(name, logp, logp.clone(), mask, r, m, asymre_c=shift)
        torch.testing.assert_close(got, -(base + shift) * mask / n, atol=1e-14, rtol=1e-12)


def test_by_hand():
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


@pytest.mark.parametrize("hp,match", [
    ({"trm_divergence": "kl"}, "unknown trm_divergence"), ({"trm_delta": 0.0}, "trm_delta must be > 0"),
    ({"outlier_low": 2.0}, "outlier_low < 1 < outlier_high"), ({"dppo_kl_delta": -1.0}, "dppo_kl_delta"),
    ({"rec_eps_low": 1.5}, "rec_eps_low <= 1"), ({"rec_ring_low": 0.1}, "rec_eps_low <= rec_ring_low"),
    ({"asymre_c": "0.1"}, "asymre_c must be a finite number"),
    ({"bapo_lo_max": 1.5}, "bapo_lo_max <= 1"), ({"bapo_step": -0.05}, "bapo_step must be")])
def test_bad_settings_raise(hp, match):
    logp, b, mask, r, m, _ = random_batch(2)
    with pytest.raises(ValueError, match=match):
        losses.compute_loss("trm", logp=logp, behavior_logp=b, mask=mask, rewards=r, group_size=m, **hp)


def bapo_bounds(logp, b, mask, r, m, hp):
    """BAPO's search, written from the recipe's loop."""
    A = advantages(r, m)
    B = logp.shape[0]
    toks = [(math.exp(max(-20.0, min(20.0, float(logp[i, t] - b[i, t])))), A[i])
            for i in range(B) for t in range(int(mask[i].sum()))]

    def balance(lo, hi):
        adv = [(min(rho, hi) if a >= 0 else max(rho, lo)) * a for rho, a in toks]
        pos, neg = sum(x for x in adv if x > 0), -sum(x for x in adv if x < 0)
        return math.inf if neg <= 0 else pos / (neg + 1e-8)
    lo, hi = hp["bapo_lo_start"], hp["bapo_hi_start"]
    while balance(lo, hi) < hp["bapo_rho0"] and lo < hp["bapo_lo_max"]:
        lo = min(lo + hp["bapo_step"], hp["bapo_lo_max"])
    while balance(lo, hi) < hp["bapo_rho0"] and hi < hp["bapo_hi_max"]:
        hi = min(hi + hp["bapo_step"], hp["bapo_hi_max"])
    return lo, hi


@pytest.mark.parametrize("over", [{}, {"bapo_rho0": 0.5}, {"bapo_rho0": 3.0}])
def test_bapo_gradient_with_its_searched_bounds(over):
    """The bounds from the recipe's loop over the whole batch; then dL/dl = -rho A / n where no
    clip acts (A >= 0: rho <= hi; A < 0: lo <= rho <= 3), else 0; the clips act on some tokens."""
    logp, b, mask, r, m, _ = random_batch(3)
    hp = {**losses.DEFAULTS, **over}
    lo, hi = bapo_bounds(logp, b, mask, r, m, hp)
    got, met = grad_of("bapo", logp, b, mask, r, m, **over)
    assert (met["bapo_low"], met["bapo_high"]) == pytest.approx((lo, hi))
    A, n = advantages(r, m), float(mask.sum())
    want, clipped = torch.zeros_like(logp), 0
    for i in range(logp.shape[0]):
        for t in range(int(mask[i].sum())):
            rho = math.exp(float(logp[i, t] - b[i, t]))
            clip = (A[i] > 0 and rho > hi) or (A[i] < 0 and (rho < lo or rho > 3.0))
            clipped += clip
            want[i, t] = 0.0 if clip else -rho * A[i] / n
    torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-9)
    assert 0 < clipped < n / 2 and met["clip_frac"] == pytest.approx(clipped / n)


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
    logp, b, mask, r, m, _ = random_batch(4)
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


def test_bapo_at_logp_equal_behavior_is_grpo():
    """rho = 1 everywhere: a group's +-A balance (up to rounding), and whatever bounds the search
    ends at, no clip acts: GRPO's gradient."""
    logp, _, mask, r, m, _ = random_batch(1)
    plain, _ = grad_of("grpo", logp, logp.clone(), mask, r, m)
    got, met = grad_of("bapo", logp, logp.clone(), mask, r, m)
    torch.testing.assert_close(got, plain, atol=1e-14, rtol=1e-12)
    assert met["clip_frac"] == 0
