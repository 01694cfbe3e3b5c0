"""Issue 31, part 1: the published corrections added to losses.py (cispo, sapo, gmpo, topr, kimi,
vespo, ds_v32) and IcePop in the Ring-1T report's form, against their formulas.

One optimizer step per batch, so every ratio is against the sampler: ell = l - b, rho = exp(ell),
A_i = GRPO's group advantage, n = response tokens of the batch, B = responses. The expected
gradients are written from the docstrings' formulas with plain loops over tokens, not by calling
the functions under test; each random batch is drawn so that the clip or mask of the method acts
on some tokens and not on others.
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
NEW = ["cispo", "sapo", "gmpo", "topr", "kimi", "vespo", "icepop", "ds_v32"]


def random_batch(seed, B=24, T=6, m=4, spread=1.0, rewards=(0.0, 1.0)):
    """B responses in groups of m, lengths 1..T (padding holds garbage), |ell| ~ spread; every
    group mixed. old (icepop's learner view at sampling) differs from b by ~0.6 per token, ref
    (ds_v32's reference) by ~0.5."""
    g = torch.Generator().manual_seed(seed)
    b = -torch.rand(B, T, generator=g, dtype=D) * 3
    logp = b + torch.randn(B, T, generator=g, dtype=D) * spread
    old = b + torch.randn(B, T, generator=g, dtype=D) * 0.6
    ref = b + torch.randn(B, T, generator=g, dtype=D) * 0.5
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None] < lengths[:, None]).to(D)
    logp = torch.where(mask.bool(), logp, 7.0)  # garbage on padding
    choices = torch.tensor(rewards, dtype=D)
    r = choices[torch.randint(0, len(rewards), (B,), generator=g)]
    r[::m], r[1::m] = max(rewards), min(rewards)  # every group mixed: nonzero advantages
    return dict(logp=logp, b=b, old=old, ref=ref, mask=mask, r=r, m=m)


def grad_of(name, batch, logp=None, batch_stats=None, **hp):
    x = (batch["logp"] if logp is None else logp).clone().requires_grad_(True)
    loss, met = losses.compute_loss(name, logp=x, behavior_logp=batch["b"], ref_logp=batch["ref"],
                                    old_logp=batch["old"], mask=batch["mask"], rewards=batch["r"],
                                    group_size=batch["m"], batch_stats=batch_stats, **hp)
    loss.backward()
    return x.grad, met


def expected_grad(name, batch, **over):
    """dL/dl per token from the formulas; also how many tokens the clip/mask acted on."""
    hp = {**losses.DEFAULTS, **over}
    logp, b, old, ref, mask, r, m = (batch[k] for k in ("logp", "b", "old", "ref", "mask", "r", "m"))
    B, T = logp.shape
    A = advantages(r, m)
    n = float(mask.sum())
    length = [int(mask[i].sum()) for i in range(B)]
    toks = [[(t, float(logp[i, t] - b[i, t])) for t in range(length[i])] for i in range(B)]
    g = torch.zeros(B, T, dtype=D)
    acted = 0
    for i in range(B):
        ri = float(r[i])
        mean_r = sum(float(x) for x in r[i // m * m:i // m * m + m]) / m
        if name == "gmpo":
            eps = hp["gmpo_eps"]
            c = [min(e, eps) if A[i] > 0 else max(e, -eps) if A[i] < 0 else 0.0 for _, e in toks[i]]
            s = math.exp(sum(c) / length[i])
        if name == "vespo":
            log_w = sum(max(-20.0, min(20.0, e)) for _, e in toks[i])
            log_w = max(math.log(1e-8), min(20.0, log_w))
            k, lam = ((hp["vespo_k_pos"], hp["vespo_lambda_pos"]) if A[i] >= 0
                      else (hp["vespo_k_neg"], hp["vespo_lambda_neg"]))
            phi = math.exp(lam + k * log_w - lam * math.exp(log_w))
        if name == "ds_v32":
            drop = A[i] < 0 and -sum(e for _, e in toks[i]) / length[i] > hp["ds_mask_delta"]
        for t, e in toks[i]:
            rho = math.exp(e)
            if name == "cispo":
                w = min(max(rho, 1 - hp["cispo_eps_low"]), 1 + hp["cispo_eps_high"])
                acted += w != rho
                g[i, t] = -w * A[i] / n
            elif name == "sapo":
                tau = hp["sapo_tau_pos"] if A[i] > 0 else hp["sapo_tau_neg"]
                sg = 1 / (1 + math.exp(-tau * (rho - 1)))
                g[i, t] = -A[i] * 4 * sg * (1 - sg) * rho / n
            elif name == "gmpo":
                clip = (A[i] > 0 and e > hp["gmpo_eps"]) or (A[i] < 0 and e < -hp["gmpo_eps"])
                acted += clip
                g[i, t] = 0.0 if clip else -A[i] * s / (B * length[i])
            elif name == "topr":
                w = hp["topr_positive_weight"] if ri > 0 else hp["topr_negative_weight"] * min(rho, 1.0)
                acted += ri <= 0 and rho > 1
                g[i, t] = -w * A[i] / n
            elif name == "kimi":
                g[i, t] = (-(ri - mean_r) + hp["kimi_tau"] * e) / n
            elif name == "vespo":
                g[i, t] = -phi * A[i] / n
            elif name == "icepop":
                o = float(old[i, t])
                k = math.exp(o - float(b[i, t]))
                M = k if hp["icepop_low"] <= k <= hp["icepop_high"] else 0.0
                ratio = math.exp(float(logp[i, t]) - o)
                clip = (A[i] > 0 and ratio > 1 + hp["clip_high"]) or (A[i] < 0 and ratio < 1 - hp["clip_low"])
                acted += M == 0
                g[i, t] = 0.0 if clip else -M * ratio * A[i] / n
            elif name == "ds_v32":
                clip = (A[i] > 0 and rho > 1 + hp["clip_high"]) or (A[i] < 0 and rho < 1 - hp["clip_low"])
                acted += drop
                surrogate = 0.0 if drop or clip else -rho * A[i] / n
                g[i, t] = surrogate + hp["ds_kl_beta"] * rho * (float(logp[i, t]) - float(ref[i, t])) / n
    return g, acted, int(n)


@pytest.mark.parametrize("name,hp", [("cispo", {}), ("cispo", {"cispo_eps_low": 0.5, "cispo_eps_high": 1.0}),
                                     ("sapo", {}), ("gmpo", {}), ("topr", {}),
                                     ("topr", {"topr_positive_weight": 0.7, "topr_negative_weight": 1.3}),
                                     ("kimi", {}), ("vespo", {}), ("icepop", {}), ("ds_v32", {"ds_kl_beta": 0.5})])
def test_gradient_matches_its_formula_where_the_clip_or_mask_acts(name, hp):
    rewards = (-1.0, 0.0, 0.5, 1.0) if name == "topr" else (0.0, 1.0)  # the reward's sign matters
    batch = random_batch(0, spread=1.2, rewards=rewards)
    got, met = grad_of(name, batch, **hp)
    want, acted, n = expected_grad(name, batch, **hp)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-9)
    assert (got[batch["mask"] == 0] == 0).all() and (got != 0).any()
    if name not in ("sapo", "kimi", "vespo"):  # these have no hard clip or mask
        assert 0 < acted < n
    if "clip_frac" in met and name in ("cispo", "gmpo"):
        assert met["clip_frac"] == pytest.approx(acted / n)
    if name in ("icepop", "ds_v32"):
        assert met["is_masked_frac"] > 0 and met["clip_frac"] > 0  # the mask and PPO's clip both act
    if name == "icepop":
        assert met["is_masked_frac"] == pytest.approx(acted / n)
    if name == "vespo":  # both parameter sets in use, weights far from 1 somewhere
        A = torch.tensor(advantages(batch["r"], batch["m"]))
        assert (A > 0).any() and (A < 0).any() and met["is_ess"] < 0.9
    if name == "kimi":
        assert met["kimi_penalty"] == pytest.approx(
            float(((batch["logp"] - batch["b"]) ** 2 * batch["mask"]).sum() / n) * 0.05)


@pytest.mark.parametrize("name", NEW)
def test_at_logp_equal_behavior_it_is_grpo_except_kimi(name):
    """rho = 1 (and icepop's old = b, ds_v32's ref = l): no clip or mask acts and the gradient is
    GRPO's -A_i / n; gmpo's -A_i s_i / (B |y_i|) is GRPO's with equal lengths (no padding).
    kimi is not GRPO there: its coefficient r_i - mean r lacks GRPO's 1/std."""
    batch = random_batch(1)
    if name == "gmpo":
        batch["mask"] = torch.ones_like(batch["mask"])
    same = {**batch, "b": batch["logp"].clone(), "old": batch["logp"].clone(), "ref": batch["logp"].clone()}
    got, met = grad_of(name, same)
    plain, _ = grad_of("grpo", same)
    assert plain.abs().sum() > 0
    if name == "kimi":
        g = batch["r"].view(-1, batch["m"])
        a = (g - g.mean(1, keepdim=True)).view(-1, 1) * batch["mask"] / batch["mask"].sum()
        torch.testing.assert_close(got, -a, atol=1e-14, rtol=1e-12)
        assert (got - plain).abs().max() > 0.1 * plain.abs().max()
        return
    torch.testing.assert_close(got, plain, atol=1e-14, rtol=1e-12)
    assert met.get("is_masked_frac", 0) == 0 and met.get("clip_frac", 0) == 0


@pytest.mark.parametrize("name", NEW + ["m2po"])
def test_micro_batches_add_up_to_the_full_batch(name):
    """Two micro-batches of whole groups, each loss rescaled by its share of the tokens (as
    train.learn does), with losses.batch_stats of the whole batch where the objective reads them
    (gmpo: n/B; m2po: its cutoff): their gradient is the full batch's."""
    batch = random_batch(2)
    full, _ = grad_of(name, batch)
    stats = None
    if (losses.objective(name).batch_stats is not None):
        stats = losses.batch_stats(name, logp=batch["logp"], behavior_logp=batch["b"], mask=batch["mask"],
                                   rewards=batch["r"], group_size=batch["m"])
    n = batch["mask"].sum()
    x = batch["logp"].clone().requires_grad_(True)
    for rows in (slice(0, 8), slice(8, 24)):
        part = {k: v[rows] if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
        loss, _ = losses.compute_loss(name, logp=x[rows], behavior_logp=part["b"], ref_logp=part["ref"],
                                      old_logp=part["old"], mask=part["mask"], rewards=part["r"],
                                      group_size=batch["m"], batch_stats=stats)
        (loss * part["mask"].sum() / n).backward()
    torch.testing.assert_close(x.grad, full, atol=1e-14, rtol=1e-12)
    assert (losses.objective(name).batch_stats is not None) == (name in ("gmpo", "m2po"))


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
    got, _ = grad_of("topr", batch, topr_negative_weight=0.5)
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
    g_ice, met = grad_of("icepop", batch)
    g_prime, _ = grad_of("icepop_primerl", batch)
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


def test_only_objectives_that_read_old_logp_keep_it(tmp_path):
    """learner.adopt_learner_view stores the learner's view as old_logp for icepop only (the
    queue of other objectives does not grow), beside behavior_logp=engine's log-probs; a batch
    without it is refused with the fix; a rollout with it survives the checkpoint's dict."""
    import learner
    import rollout
    import train
    make = lambda: [rollout.Rollout(0, [3], [4, 5], "", [-1.0, -2.0], 0, True)]
    for name, kept in (("icepop", [-1.5, -2.5]), ("icepop_primerl", None)):
        rs = make()
        learner.adopt_learner_view({"behavior_logp": "engine", "loss": name}, rs, [[-1.5, -2.5]])
        assert rs[0].old_logp == kept and rs[0].behavior_logp == [-1.0, -2.0]
    rs = make()
    learner.adopt_learner_view({"behavior_logp": "learner", "loss": "grpo"}, rs, [[-1.5, -2.5]])
    assert rs[0].behavior_logp == [-1.5, -2.5] and rs[0].old_logp is None
    with pytest.raises(ValueError, match="has none"):
        train.old_logp_of(make(), 2, "cpu")
    rs = make()
    rs[0].old_logp = [-1.5, -2.5]
    back = rollout.RolloutBatch.from_dict(copy.deepcopy(rollout.RolloutBatch(3, rs, [1.0]).to_dict()))
    assert back.rollouts[0].old_logp == [-1.5, -2.5]
    old_format = rollout.RolloutBatch(3, make(), [1.0]).to_dict()
    old_format["rollouts"][0].pop("old_logp")  # a checkpoint written before the field existed
    assert rollout.RolloutBatch.from_dict(old_format).rollouts[0].old_logp is None
    torch.testing.assert_close(train.old_logp_of(rs, 3, "cpu"), torch.tensor([[-1.5, -2.5, 0.0]]))


def test_ds_v32_kl_term_is_the_importance_weighted_gradient_of_kl_to_the_reference():
    """One token, no advantage (one group of equal rewards): the surrogate is 0 and the loss is
    beta rho k3 with rho = exp(l - b) and k3 = exp(R - l) - (R - l) - 1; its gradient is
    beta rho (l - R). l = -1, b = -1.5, R = -2: rho = e^0.5, k3 = e^-1 - (-1) - 1 = e^-1."""
    logp, b, ref = (torch.tensor([[v], [v]], dtype=D) for v in (-1.0, -1.5, -2.0))
    batch = dict(logp=logp, b=b, old=b, ref=ref, mask=torch.ones(2, 1, dtype=D), r=torch.ones(2, dtype=D), m=2)
    got, met = grad_of("ds_v32", batch, ds_kl_beta=0.2)
    rho = math.exp(0.5)
    assert got[:, 0].tolist() == pytest.approx([0.2 * rho * 1.0 / 2] * 2)
    assert met["ds_kl"] == pytest.approx(rho * math.exp(-1)) and met["loss"] == pytest.approx(0.2 * rho * math.exp(-1))
    assert losses.objective("ds_v32").needs_ref and not losses.objective("ds_mask").needs_ref


def test_sapo_gate_by_hand():
    """r = 2, A > 0, tau = 1: s = sigmoid(1) = 0.7311 and the weight is 4 s (1 - s) 2 = 1.5729; for
    A < 0 (tau 1.05) s = sigmoid(1.05) = 0.7408: 4 s (1 - s) 2 = 1.5362 (a smaller weight for the
    negative advantage at the same ratio)."""
    b = torch.zeros(2, 1, dtype=D)
    batch = dict(logp=torch.full((2, 1), math.log(2.0), dtype=D), b=b, old=b, ref=b,
                 mask=torch.ones(2, 1, dtype=D), r=torch.tensor([1.0, 0.0], dtype=D), m=2)
    got, met = grad_of("sapo", batch)
    A = advantages(batch["r"], 2)
    weights = [float(got[i, 0]) / (-A[i] / 2) for i in range(2)]
    s1, s2 = 1 / (1 + math.exp(-1.0)), 1 / (1 + math.exp(-1.05))
    assert weights == pytest.approx([8 * s1 * (1 - s1), 8 * s2 * (1 - s2)])
    assert weights == pytest.approx([1.57290, 1.53622], abs=1e-5)
    assert met["is_weight_mean"] == pytest.approx(sum(weights) / 2)


@pytest.mark.parametrize("hp,match", [
    ({"m2_tokens": "harmful"}, "unknown m2_tokens"),
    ({"cispo_eps_low": 1.5}, "cispo_eps_low must be in"),
    ({"cispo_eps_high": -1.0}, "cispo_eps_high must be >= 0"),
    ({"sapo_tau_pos": 0.0}, "sapo_tau_pos must be > 0"),
    ({"gmpo_eps": 0.0}, "gmpo_eps must be > 0"),
    ({"kimi_tau": -0.1}, "kimi_tau must be >= 0"),
    ({"vespo_k_pos": math.nan}, "vespo_k_pos must be a finite number"),
    ({"ds_kl_beta": "0.001"}, "ds_kl_beta must be a finite number"),
    ({"topr_negative_weight": -1.0}, "topr_negative_weight must be >= 0"),
])
def test_bad_hyperparameters_raise(hp, match):
    with pytest.raises(ValueError, match=match):
        losses.check_hparams("cispo", hp)
