"""Issue 31, part 2: gepo, a3po, dppo_tv, geo_rs, k3_rs, snis and vcpo against their formulas,
their reductions to GRPO at logp == behavior_logp (and where there is none), micro-batches
against the full batch where a batch statistic is involved, and VCPO's step size and
per-response gradient norms through train.learn.

ell = l - b, rho = exp(ell), A_i = GRPO's group advantage, n = response tokens of the batch,
B responses. The expected gradients are written from the docstrings' formulas with plain loops,
not by calling the functions under test.
"""
import copy
import math
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import losses  # noqa: E402
from test_corrections import advantages  # noqa: E402  (A_i by hand)

D = torch.float64
NEW = ["gepo", "a3po", "dppo_tv", "geo_rs", "k3_rs", "snis", "vcpo"]
# responses of four kinds of staleness, so that every mask keeps some and drops some: |ell| about
# 1e-4 (inside geo_rs's +-0.1%), 0.05 (inside k3_rs's 0.01), 0.3 and 1.5
SPREADS = [1e-4, 0.05, 0.3, 1.5]


def random_batch(seed, B=32, T=6, m=4):
    """B responses in groups of m, lengths 1..T (padding holds garbage), row i's |ell| about
    SPREADS[i % 4] (a group spans all four), every group mixed."""
    g = torch.Generator().manual_seed(seed)
    b = -torch.rand(B, T, generator=g, dtype=D) * 2 - 0.05
    spread = torch.tensor([SPREADS[i % 4] for i in range(B)], dtype=D)[:, None]
    logp = b + torch.randn(B, T, generator=g, dtype=D) * spread
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None] < lengths[:, None]).to(D)
    logp = torch.where(mask.bool(), logp, 7.0)
    r = (torch.rand(B, generator=g) > 0.5).to(D)
    r[::m], r[1::m] = 1.0, 0.0
    grad_sq = torch.rand(B, generator=g, dtype=D) * 10 + 0.1
    return logp, b, mask, r, m, grad_sq


def extra_inputs(name, grad_sq, **hp):
    """What each objective needs beside the tensors: a3po its alpha, vcpo the gradient norms."""
    kw = dict(hp)
    if name == "a3po":
        kw.setdefault("a3po_alpha", 0.75)
    if name == "vcpo":
        kw["response_grad_sq"] = grad_sq
    return kw


def grad_of(name, logp, b, mask, r, m, grad_sq=None, **hp):
    x = logp.clone().requires_grad_(True)
    loss, met = losses.compute_loss(name, logp=x, behavior_logp=b, mask=mask, rewards=r,
                                    group_size=m, **extra_inputs(name, grad_sq, **hp))
    loss.backward()
    return x.grad, met


def expected_grad(name, logp, b, mask, r, m, grad_sq, **over):
    """dL/dl per token from the docstrings' formulas, and how many tokens got a zero from a
    mask or a clip (`dropped`)."""
    hp = {**losses.DEFAULTS, "a3po_alpha": 0.75, **over}
    B, T = logp.shape
    A = advantages(r, m)
    n = float(mask.sum())
    L = [int(mask[i].sum()) for i in range(B)]
    ell = [[float(logp[i, t] - b[i, t]) for t in range(L[i])] for i in range(B)]
    g = torch.zeros(B, T, dtype=D)
    dropped = 0
    if name == "gepo":
        P = [math.exp(sum(float(logp[i, t]) for t in range(L[i])) / L[i]) for i in range(B)]
        Q = [math.exp(sum(float(b[i, t]) for t in range(L[i])) / L[i]) for i in range(B)]
        E = {i: sum(Q[j] ** 2 for j in range(i - i % m, i - i % m + m)) /
             sum(Q[j] for j in range(i - i % m, i - i % m + m)) for i in range(B)}
    if name == "snis":
        v = [[min(math.exp(e), hp["tis_cap"]) for e in row] for row in ell]
        vbar = sum(map(sum, v)) / n
    if name == "vcpo":
        w = [min(math.exp(sum(row)), hp["vcpo_is_cap"]) for row in ell]
        c = []
        for s in range(0, B, m):
            rs = [float(x) for x in r[s:s + m]]
            W = [w[i] ** 2 * float(grad_sq[i]) for i in range(s, s + m)]
            base = sum(Wi * ri for Wi, ri in zip(W, rs)) / (sum(W) + 1e-8)
            sd = math.sqrt(sum((x - sum(rs) / m) ** 2 for x in rs) / m)
            c += [(x - base) / sd if sd > 1e-8 else x - base for x in rs]
    for i in range(B):
        k1 = -sum(ell[i]) / L[i]
        k3 = sum(math.exp(e) - 1 - e for e in ell[i]) / L[i]
        for t in range(L[i]):
            e, rho = ell[i][t], math.exp(ell[i][t])
            if name == "gepo":
                wi = P[i] / E[i]
                clip = (A[i] > 0 and wi > 1 + hp["gepo_eps"]) or (A[i] < 0 and wi < 1 - hp["gepo_eps"])
                dropped += clip
                g[i, t] = 0.0 if clip else -wi * A[i] / (B * L[i])
            elif name == "a3po":
                a = hp["a3po_alpha"]
                u, ratio = math.exp(a * e), math.exp((1 - a) * e)
                clip = (A[i] > 0 and ratio > 1 + hp["clip_high"]) or (A[i] < 0 and ratio < 1 - hp["clip_low"])
                keep = hp["mis_low"] <= u <= hp["mis_high"]
                dropped += clip or not keep
                g[i, t] = -rho * A[i] / n if keep and not clip else 0.0
            elif name == "dppo_tv":
                d = math.exp(float(logp[i, t])) - math.exp(float(b[i, t]))
                invalid = d > hp["dppo_delta"] if A[i] > 0 else d < -hp["dppo_delta"]
                dropped += invalid
                g[i, t] = 0.0 if invalid else -A[i] * min(rho, hp["dppo_rho_cap"]) / n
            elif name == "geo_rs":
                keep = math.log(hp["geo_rs_low"]) <= k1 <= math.log(hp["geo_rs_high"])
                dropped += not keep
                g[i, t] = -A[i] * keep / n
            elif name == "k3_rs":
                keep = k3 <= hp["k3_rs_threshold"]
                clip = ((A[i] > 0 and rho > 1 + hp["clip_high"]) or (A[i] < 0 and rho < 1 - hp["clip_low"])
                        or (A[i] < 0 and rho > hp["k3_rs_clip_c"]))
                dropped += clip or not keep
                g[i, t] = -rho * A[i] / n if keep and not clip else 0.0
            elif name == "snis":
                g[i, t] = -A[i] * v[i][t] / vbar / n
                dropped += v[i][t] == hp["tis_cap"]  # (capped, not dropped)
            elif name == "vcpo":
                g[i, t] = -c[i] * w[i] / n
                dropped += w[i] == hp["vcpo_is_cap"]  # (capped)
    return g, dropped, int(n)


@pytest.mark.parametrize("name,hp", [(name, {}) for name in NEW] + [
    ("k3_rs", {"k3_rs_threshold": 0.6}),  # looser: PPO's clip and the dual clip act on kept tokens
    ("a3po", {"a3po_alpha": 0.0}), ("a3po", {"a3po_alpha": 31 / 32}),
    ("dppo_tv", {"dppo_delta": 0.05, "dppo_rho_cap": 1.5})])
def test_gradient_matches_its_formula_with_masks_that_trigger(name, hp):
    logp, b, mask, r, m, grad_sq = random_batch(0)
    got, met = grad_of(name, logp, b, mask, r, m, grad_sq, **hp)
    want, dropped, n = expected_grad(name, logp, b, mask, r, m, grad_sq, **hp)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-9)
    assert (got[mask == 0] == 0).all()
    assert 0 < dropped < n and ((got != 0) & (mask == 1)).sum() > n / 10  # some zeroed/capped, most not
    if "is_masked_frac" in met and name not in ("a3po", "k3_rs"):
        assert met["is_masked_frac"] == pytest.approx(((got == 0) & (mask == 1)).sum().item() / n)


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


@pytest.mark.parametrize("name", ["a3po", "dppo_tv", "geo_rs", "k3_rs", "snis"])
def test_at_logp_equal_behavior_they_are_grpo(name):
    """rho = 1: no mask or clip acts (a3po at any alpha), and the gradient is GRPO's -A_i / n."""
    logp, _, mask, r, m, grad_sq = random_batch(1)
    plain, _ = grad_of("grpo", logp, logp.clone(), mask, r, m)
    for hp in ([{"a3po_alpha": a} for a in (0.0, 0.5, 1.0)] if name == "a3po" else [{}]):
        got, met = grad_of(name, logp, logp.clone(), mask, r, m, grad_sq, **hp)
        torch.testing.assert_close(got, plain, atol=1e-14, rtol=1e-12)
        assert met.get("is_masked_frac", 0) == 0 and met.get("clip_frac", 0) == 0
    assert plain.abs().sum() > 0


def test_where_gepo_and_vcpo_are_not_grpo_at_logp_equal_behavior():
    """GEPO at l == b: w_i = Q_i / E_q[Q], 1 only where a group's geometric-mean probabilities
    are equal; with those and equal lengths its gradient is GRPO's, otherwise it is not (and it
    clips on-policy responses). VCPO at l == b with equal G_i in a group: b = the group mean and
    c_i = (r_i - mean) / population std, so its gradient is GRPO's times (std + 1e-6) / pop. std;
    with unequal G_i it is not."""
    logp, _, mask, r, m, grad_sq = random_batch(2)
    mask = torch.ones_like(mask)
    plain, _ = grad_of("grpo", logp, logp.clone(), mask, r, m)
    same = logp.view(-1, m, logp.size(1))[:, :1].expand(-1, m, -1).reshape(logp.shape)  # equal Q
    got, met = grad_of("gepo", same, same.clone(), mask, r, m)
    plain_same, _ = grad_of("grpo", same, same.clone(), mask, r, m)
    torch.testing.assert_close(got, plain_same, atol=1e-14, rtol=1e-12)
    got, met = grad_of("gepo", logp, logp.clone(), mask, r, m)
    assert met["clip_frac"] > 0 and (got - plain).abs().max() > 1e-3 * plain.abs().max()
    std_ratio = torch.tensor([(math.sqrt(sum((float(x) - float(g.mean())) ** 2 for x in g) / (m - 1)) + 1e-6)
                              / float(g.std(unbiased=False)) for g in r.view(-1, m)], dtype=D)
    got, _ = grad_of("vcpo", logp, logp.clone(), mask, r, m, torch.full_like(grad_sq, 1e6))  # eps 1e-8 off
    torch.testing.assert_close(got, plain * std_ratio.repeat_interleave(m)[:, None], atol=1e-13, rtol=1e-10)
    got, _ = grad_of("vcpo", logp, logp.clone(), mask, r, m, grad_sq)
    assert (got - plain * std_ratio.repeat_interleave(m)[:, None]).abs().max() > 1e-3 * plain.abs().max()


@pytest.mark.parametrize("name", ["snis", "gepo"])
def test_batch_statistics_make_micro_batches_add_up_to_the_full_batch(name):
    """Two micro-batches of whole groups, each loss rescaled by its token share (as train.learn):
    with the whole batch's statistics (snis: mean TIS weight; gepo: n / B) their gradient is the
    full batch's, without them it is not."""
    logp, b, mask, r, m, _ = random_batch(3)
    full, _ = grad_of(name, logp, b, mask, r, m)
    stats = losses.batch_stats(name, logp=logp, behavior_logp=b, mask=mask,
                               rewards=r, group_size=m)
    assert set(stats) == {"snis": {"snis_weight_mean"}, "gepo": {"gspo_len_mean"}}[name]
    n = mask.sum()
    for given in (stats, None):
        x = logp.clone().requires_grad_(True)
        for rows in (slice(0, 8), slice(8, 32)):
            loss, _ = losses.compute_loss(name, logp=x[rows], behavior_logp=b[rows], mask=mask[rows],
                                          rewards=r[rows], group_size=m, batch_stats=given)
            (loss * mask[rows].sum() / n).backward()
        if given is not None:
            torch.testing.assert_close(x.grad, full, atol=1e-14, rtol=1e-12)
        else:
            assert (x.grad - full).abs().max() > 1e-3 * full.abs().max()


def test_a3po_alpha_from_staleness_and_the_loop_passes_it(monkeypatch):
    """alpha = (s - 1) / s clamped to [0, 1], 0 at s = 0 (AReaL's version arithmetic);
    learn_or_skip gives learn() the batch's: update t = 11 on a batch of version 3 (s = 7) gets
    6/7; a fixed a3po_alpha in the config is left alone, and other objectives get nothing."""
    import rollout
    import train
    assert [losses.a3po_alpha(s) for s in (0, 1, 2, 4, 32)] == [0.0, 0.0, 0.5, 0.75, 31 / 32]
    seen = []
    monkeypatch.setattr(train, "learn", lambda cfg, *a: seen.append(dict(cfg["loss_args"])) or {})
    batch = rollout.RolloutBatch(0, [rollout.Rollout(0, [1], [2], "", [-1.0], 3, True)] * 2, [1.0, 0.0])
    cfg = {"loss": "a3po", "loss_args": dict(losses.DEFAULTS)}
    train.learn_or_skip(cfg, None, None, torch.optim.SGD([torch.zeros(1)], lr=1), batch, 0, 11)
    train.learn_or_skip({**cfg, "loss_args": {**losses.DEFAULTS, "a3po_alpha": 0.25}}, None, None,
                        torch.optim.SGD([torch.zeros(1)], lr=1), batch, 0, 11)
    train.learn_or_skip({**cfg, "loss": "grpo"}, None, None, torch.optim.SGD([torch.zeros(1)], lr=1),
                        batch, 0, 11)
    assert [s["a3po_alpha"] for s in seen] == [6 / 7, 0.25, None]
    assert cfg["loss_args"]["a3po_alpha"] is None  # the run's own config is not changed


def test_vcpo_lr_scale_by_hand():
    """S = [1, 2, 3]: ESS = 36 / 14, scale = sqrt(ESS / 3) = sqrt(6/7); equal weights: 1; one
    dominant sequence (log S 1000 beside 0s, no overflow): ESS -> 1, scale -> sqrt(1/B)."""
    assert losses.vcpo_lr_scale(torch.log(torch.tensor([1.0, 2.0, 3.0]))) == pytest.approx(math.sqrt(6 / 7))
    assert losses.vcpo_lr_scale(torch.full((5,), -3.0)) == pytest.approx(1.0)
    assert losses.vcpo_lr_scale(torch.tensor([1000.0, 0.0, 0.0, 0.0])) == pytest.approx(0.5)


@pytest.mark.parametrize("hp,match", [
    ({"geo_rs_low": 1.01}, "geo_rs_low < geo_rs_high"), ({"geo_rs_low": 0.0}, "0 < geo_rs_low"),
    ({"k3_rs_clip_c": 1.0}, "k3_rs_clip_c must be > 1"), ({"a3po_alpha": 1.5}, "a3po_alpha must be null"),
    ({"dppo_delta": -0.1}, "dppo_delta must be >= 0"), ({"gepo_eps": 1.0}, "0 <= gepo_eps < 1"),
    ({"vcpo_is_cap": 0.0}, "vcpo_is_cap must be > 0"), ({"k3_rs_threshold": math.inf}, "finite number"),
])
def test_bad_hyperparameters_raise(hp, match):
    with pytest.raises(ValueError, match=match):
        losses.check_hparams("gepo", hp)


def test_missing_inputs_raise_with_the_fix():
    kw = dict(logp=torch.zeros(2, 2), behavior_logp=torch.zeros(2, 2), mask=torch.ones(2, 2),
              rewards=torch.tensor([1.0, 0.0]), group_size=2)
    with pytest.raises(ValueError, match="a3po needs a3po_alpha"):
        losses.compute_loss("a3po", **kw)
    with pytest.raises(ValueError, match="vcpo needs response_grad_sq"):
        losses.compute_loss("vcpo", **kw)
    with pytest.raises(ValueError, match=r"response_grad_sq must have shape \(2,\)"):
        losses.compute_loss("vcpo", response_grad_sq=torch.ones(3), **kw)
    assert losses.objective("vcpo").needs_grad_sq and not losses.objective("grpo_tis").needs_grad_sq


def toy_batch(seed=0, groups=4, m=4, off=0.4):
    """A toy rollout batch of groups x m random responses, behavior log-probs `off` away from
    the base model's (so sequence weights spread), and rewards mixed in every group."""
    import learner
    import rollout
    from conftest import TOY_MODEL, toy_config
    g = torch.Generator().manual_seed(seed)
    rollouts = []
    for p in range(groups):
        prompt = torch.randint(3, 20, (int(torch.randint(2, 6, (1,), generator=g)),), generator=g).tolist()
        for _ in range(m):
            n = int(torch.randint(1, 8, (1,), generator=g))
            rollouts.append(rollout.Rollout(p, prompt, torch.randint(3, 20, (n,), generator=g).tolist(),
                                            "", [], 0, True))
    cfg = toy_config(Path("/nonexistent"), model=TOY_MODEL, loss="vcpo", micro_batch_size=groups * m)
    base, _, _ = learner.build_learner(cfg)
    for r, lp in zip(rollouts, learner.rollout_logp(cfg, base, rollouts, 0)):
        r.behavior_logp = [x + off * float(torch.randn(1, generator=g)) for x in lp]
    rewards = [float(i % 3 == 0) for i in range(groups * m)]
    return cfg, rollouts, rewards


def test_response_grad_sq_is_each_responses_own_gradient(toy_model):
    """learner.response_grad_sq (one response per pass) against autograd on one packed/shared
    forward pass of the whole batch, row by row; p.grad untouched."""
    import learner
    cfg, rollouts, _ = toy_batch()
    model, _, _ = learner.build_learner(cfg)
    got = learner.response_grad_sq(cfg, model, rollouts, 0)
    assert all(p.grad is None for p in model.parameters())
    logp, mask, _ = learner.response_logp(model, learner.model_inputs(model, rollouts, 0))
    params = list(model.parameters())
    want = []
    for i in range(len(rollouts)):
        grads = torch.autograd.grad((logp[i] * mask[i]).sum(), params, retain_graph=True)
        want.append(sum(float(x.double().pow(2).sum()) for x in grads))
    torch.testing.assert_close(got, torch.tensor(want, dtype=D), rtol=1e-4, atol=0)
    assert got.min() > 0 and got.max() > 1.5 * got.min()  # responses differ: the weights matter


def test_vcpo_learn_scales_the_step_by_the_whole_batchs_ess_and_micro_batches_add_up(toy_model, monkeypatch):
    """train.learn with vcpo: the lr of its optimizer step is lr * sqrt(ESS / B), ESS of the
    sequence weights S_i = exp(sum_t (l - b)) of all 16 responses computed here by hand, and is
    back to lr afterwards; one micro-batch of 16 and four of 4 give the same gradient and the
    same scale (the ESS is never one micro-batch's)."""
    import learner
    import rollout
    import train
    cfg, rollouts, rewards = toy_batch()

    def run(mb):
        c = {**cfg, "micro_batch_size": mb}
        model, ref, opt = learner.build_learner(c)
        lrs, step = [], opt.step
        monkeypatch.setattr(opt, "step", lambda: lrs.append([g["lr"] for g in opt.param_groups]) or step())
        logp = learner.rollout_logp(c, model, rollouts, 0)
        metrics = train.learn(c, model, ref, opt, rollout.RolloutBatch(0, copy.deepcopy(rollouts), rewards), 0)
        assert [g["lr"] for g in opt.param_groups] == [c["lr"]]
        return torch.cat([p.grad.flatten() for p in model.parameters()]), lrs, metrics, logp

    full, lrs_full, m_full, logp = run(16)
    split, lrs_split, m_split, _ = run(4)
    S = [math.exp(sum(a - b for a, b in zip(lp, r.behavior_logp))) for lp, r in zip(logp, rollouts)]
    scale = math.sqrt(sum(S) ** 2 / sum(s * s for s in S) / len(S))
    assert 0.2 < scale < 0.95  # the weights spread: the scale acts
    assert lrs_full == [[pytest.approx(cfg["lr"] * scale, rel=1e-5)]]
    assert lrs_split == [[pytest.approx(lrs_full[0][0], rel=1e-6)]]
    assert m_full["vcpo_lr_scale"] == pytest.approx(scale, rel=1e-5)
    assert "time/grad_sq" in m_full
    assert m_split["vcpo_baseline_mean"] == pytest.approx(m_full["vcpo_baseline_mean"])
    assert (split - full).abs().max() <= 1e-4 * full.abs().max()


def test_response_grad_sq_in_one_pass_equals_the_loop_in_float64(toy_model):
    """learner.response_grad_sq (per-sample "ghost" norms: one forward and one backward pass per
    micro-batch) against response_grad_sq_loop (one pair per response), float64 weights, the
    toy's tied embedding and output layer, its RMSNorms, tokens equal to the padding index, and
    micro-batches of 8 over 16 responses: equal to 1e-10 relative; p.grad untouched. A module
    ghost_grad_sq does not know sends the model to the loop."""
    import learner
    cfg, rollouts, _ = toy_batch()
    for r in rollouts[::3]:
        r.response_ids[0] = 0  # the embedding's padding_idx: no gradient to that row
    cfg = {**cfg, "micro_batch_size": 8}
    model, _, _ = learner.build_learner(cfg)
    model = model.double()
    assert learner.ghost_modules(model) is not None
    got = learner.response_grad_sq(cfg, model, rollouts, 0)
    want = learner.response_grad_sq_loop(cfg, model, rollouts, 0)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=0)
    assert all(p.grad is None for p in model.parameters())
    assert learner.ghost_modules(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.LayerNorm(2))) is None
