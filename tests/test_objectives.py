"""Every registered objective (losses.LOSSES), parametrized from the registry, so that a newly
registered one is checked too: its gradient against its formula (tests/oracles.py) on a batch
where its masks, clips and caps act; what it becomes at logp == behavior_logp (GRPO, or the
named exception); micro-batches with the whole batch's statistics adding up to the full batch;
bad settings and bad inputs raising.

Notation as in tests/oracles.py: ell = l - b, rho = exp(ell), A_i = GRPO's group advantage,
n = response tokens of the batch, B = responses.
"""
import math

import pytest
import torch

import losses
from oracles import (D, EXPECTED, FORMULA_SETTINGS, METRICS_LOGGED, MOSTLY_KEPT, NEEDS_REF,
                     NO_FORMULA_ORACLE, NOT_GRPO_ON_POLICY_FORMULA, OWN_STATS_SAME_UPDATE, STATS_KEYS,
                     ZEROED_STILL_TRAIN,
                     advantages, batch_four_spreads, batch_one_spread, batch_with_old_and_ref,
                     expected_grad, grad_of, grad_of_batch, loss_inputs, mean_baseline, zeroes_or_caps)


def settings_id(hp):
    return ",".join(f"{k}={v}" for k, v in hp.items())


# ----------------------------------------------------------------------------- the oracle table

@pytest.mark.parametrize("name", list(losses.LOSSES))
def test_every_objective_has_a_formula_oracle_or_a_reason(name):
    assert (name in EXPECTED) != (name in NO_FORMULA_ORACLE), \
        f"{name}: add its formula to tests/oracles.py, or list it in NO_FORMULA_ORACLE with the reason"
    assert name in EXPECTED or NO_FORMULA_ORACLE[name].strip()
    assert set(EXPECTED) | set(NO_FORMULA_ORACLE) <= set(losses.LOSSES)  # no oracle of a removed one


# ----------------------------------------------------------------------------- gradient = formula

FORMULA_CASES = [pytest.param(name, hp, id="-".join(filter(None, (name, settings_id(hp)))))
                 for name in losses.LOSSES if name not in NO_FORMULA_ORACLE
                 for hp in FORMULA_SETTINGS.get(name, [{}])]


@pytest.mark.parametrize("name,hp", FORMULA_CASES)
def test_gradient_matches_its_formula_with_masks_that_trigger(name, hp):
    """dL/dlogp from compute_loss + backward equals the oracle's formula on the objective's batch
    (seed 0), padding gets 0, the metrics that count what acted read the oracle's counts, and
    each hard mask, clip or cap acts on some tokens but not on most."""
    oracle = EXPECTED[name]
    batch = oracle.batch(**{"seed": 0, **oracle.formula_batch})
    got, met = grad_of_batch(name, batch, **hp)
    want = expected_grad(name, batch, **hp)
    torch.testing.assert_close(got, want.grad, atol=1e-12, rtol=1e-9)
    mask, n = batch["mask"], want.n
    assert (got[mask == 0] == 0).all() and (got != 0).any()
    for key, value in want.metrics.items():  # the counts the objective logs
        assert met[key] == pytest.approx(value), key
    # what acted: some tokens zeroed or capped, most still training
    acted = want.dropped + want.capped
    kept = ((got != 0) & (mask == 1)).sum().item()
    if zeroes_or_caps(name, hp):
        assert 0 < acted < n and kept > n / 10, (acted, kept, n)
    else:
        assert acted == 0 and "clip_frac" not in met
    if name in MOSTLY_KEPT:
        assert acted < n / 2, acted
    # where it logs them, the zeroing metrics add up to the share of zeroed tokens (cispo's
    # clip_frac counts capped weights, ds_v32's K3 term trains the tokens its mask drops)
    if {"is_masked_frac", "clip_frac"} & set(met) and name not in ZEROED_STILL_TRAIN:
        zeroed = ((got == 0) & (mask == 1)).sum().item() / n
        assert met.get("is_masked_frac", 0) + met.get("clip_frac", 0) == pytest.approx(zeroed)
    if name in ("icepop", "ds_mask", "ds_v32"):  # the mask and PPO's clip both act
        assert met["is_masked_frac"] > 0 and met["clip_frac"] > 0
    if name == "ds_mask":
        assert want.dropped > 0 and want.capped > 0
    if name == "seq_outlier_rs" and not hp:
        assert met["is_masked_frac"] == 0  # |ell| < ln 100 everywhere: only PPO's clip acts
    elif name in ("trm", "seq_outlier_rs", "dppo_kl", "flash_reinforce"):
        assert met["is_masked_frac"] > 0
    if name == "vespo":  # both parameter sets in use, weights far from 1 somewhere
        A = torch.tensor(advantages(batch["r"], batch["m"]))
        assert (A > 0).any() and (A < 0).any() and met["is_ess"] < 0.9


# ----------------------------------------------------------------------------- logp == behavior_logp

EQUAL_LENGTHS = {"gspo", "gmpo"}  # -s_i A_i / (B |y_i|) is GRPO's -A_i / n when all |y_i| are equal
ON_POLICY_SETTINGS = {"a3po": [{"a3po_alpha": a} for a in (0.0, 0.5, 1.0)]}  # any alpha


def home_batch(name, seed):
    return (EXPECTED[name].batch if name in EXPECTED else batch_with_old_and_ref)(seed=seed)


def on_policy(batch):
    """The batch with sampler, learner at sampling and reference all equal to the learner."""
    logp = batch["logp"]
    return {**batch, "b": logp.clone(), "old": logp.clone(), "ref": logp.clone()}


def kimi_on_policy():
    """Its coefficient r_i - mean r lacks GRPO's 1/std (the penalty's gradient is 0 at ell = 0)."""
    batch = on_policy(batch_with_old_and_ref(seed=1))
    got, _ = grad_of_batch("kimi", batch)
    plain, _ = grad_of_batch("grpo", batch)
    g = batch["r"].view(-1, batch["m"])
    a = (g - g.mean(1, keepdim=True)).view(-1, 1) * batch["mask"] / batch["mask"].sum()
    torch.testing.assert_close(got, -a, atol=1e-14, rtol=1e-12)
    assert (got - plain).abs().max() > 0.1 * plain.abs().max()


def agro_on_policy():
    """With the reference equal to the learner G_i = r_i: RLOO's a_i = r_i - mean_{j != i} r_j,
    -a_i / n per token."""
    batch = on_policy(batch_with_old_and_ref(seed=1))
    m, r, mask = batch["m"], [float(x) for x in batch["r"]], batch["mask"]
    a = [r[i] - sum(r[j] for j in range(i - i % m, i - i % m + m) if j != i) / (m - 1) for i in range(len(r))]
    for beta in (0.01, 0.5):
        got, _ = grad_of_batch("agro", batch, beta=beta)
        torch.testing.assert_close(got, -torch.tensor(a, dtype=D)[:, None] * mask / mask.sum(), atol=1e-14, rtol=1e-12)


def ggpo_on_policy():
    """L = B = R: p_i = 1/m and q = softmax_group(r / beta), c_i = q_i - 1/m, -c_i / n per token;
    every ratio is 1, so no token is clipped."""
    batch = on_policy(batch_with_old_and_ref(seed=1))
    m, r, mask = batch["m"], [float(x) for x in batch["r"]], batch["mask"]
    beta = losses.DEFAULTS["beta"]
    c = []
    for s in range(0, len(r), m):
        top = max(r[s:s + m]) / beta
        e = [math.exp(x / beta - top) for x in r[s:s + m]]
        c += [v / sum(e) - 1 / m for v in e]
    for variant in ("detached", "original"):
        got, met = grad_of_batch("ggpo", batch, ggpo_variant=variant)
        torch.testing.assert_close(got, -torch.tensor(c, dtype=D)[:, None] * mask / mask.sum(), atol=1e-14, rtol=1e-12)
        assert met.get("clip_frac", 0) == 0


def gepo_on_policy():
    """w_i = Q_i / E_q[Q]: 1 only where a group's geometric-mean probabilities are equal; with
    those and equal lengths its gradient is GRPO's, otherwise it is not (and it clips on-policy
    responses)."""
    logp, _, mask, r, m, _ = (batch_four_spreads(seed=2)[k] for k in ("logp", "b", "mask", "r", "m", "grad_sq"))
    mask = torch.ones_like(mask)
    plain, _ = grad_of("grpo", logp, logp.clone(), mask, r, m)
    same = logp.view(-1, m, logp.size(1))[:, :1].expand(-1, m, -1).reshape(logp.shape)  # equal Q
    got, met = grad_of("gepo", same, same.clone(), mask, r, m)
    plain_same, _ = grad_of("grpo", same, same.clone(), mask, r, m)
    torch.testing.assert_close(got, plain_same, atol=1e-14, rtol=1e-12)
    got, met = grad_of("gepo", logp, logp.clone(), mask, r, m)
    assert met["clip_frac"] > 0 and (got - plain).abs().max() > 1e-3 * plain.abs().max()


def vcpo_on_policy():
    """With equal G_i in a group the baseline is the group mean and c_i = (r_i - mean) /
    population std: GRPO's gradient times (std + 1e-6) / population std; with unequal G_i it is
    not."""
    logp, _, mask, r, m, grad_sq = (batch_four_spreads(seed=2)[k] for k in ("logp", "b", "mask", "r", "m", "grad_sq"))
    mask = torch.ones_like(mask)
    plain, _ = grad_of("grpo", logp, logp.clone(), mask, r, m)
    std_ratio = torch.tensor([(math.sqrt(sum((float(x) - float(g.mean())) ** 2 for x in g) / (m - 1)) + 1e-6)
                              / float(g.std(unbiased=False)) for g in r.view(-1, m)], dtype=D)
    got, _ = grad_of("vcpo", logp, logp.clone(), mask, r, m, torch.full_like(grad_sq, 1e6))  # eps 1e-8 off
    torch.testing.assert_close(got, plain * std_ratio.repeat_interleave(m)[:, None], atol=1e-13, rtol=1e-10)
    got, _ = grad_of("vcpo", logp, logp.clone(), mask, r, m, grad_sq)
    assert (got - plain * std_ratio.repeat_interleave(m)[:, None]).abs().max() > 1e-3 * plain.abs().max()


def mean_baseline_on_policy():
    """REC keeps every token at rho = 1 and its coefficient is r_i - mean (no 1 / std): GRPO's
    gradient times std + 1e-6 per group; AsymRE adds asymre_c to every coefficient."""
    logp, _, mask, r, m, _ = (batch_four_spreads(seed=1)[k] for k in ("logp", "b", "mask", "r", "m", "grad_sq"))
    n = float(mask.sum())
    base = torch.tensor(mean_baseline(r, m), dtype=D)[:, None]
    for name, shift in (("rec_oneside", 0.0), ("rec_ring", 0.0), ("asymre", 0.1), ("asymre", 0.3)):
        got, met = grad_of(name, logp, logp.clone(), mask, r, m, asymre_c=shift)
        torch.testing.assert_close(got, -(base + shift) * mask / n, atol=1e-14, rtol=1e-12)



def oapl_on_policy():
    """At logp == behavior_logp the log-ratio is 0: res_i = -(r_i - V*), so the gradient is
    -2 beta2 (r_i - V*) / B on each token, REINFORCE with the soft-max baseline V* >= mean r;
    beta1 -> 0 makes V* the group's best reward, large beta1 its mean."""
    logp, _, mask, r, m, _ = (batch_four_spreads(seed=1)[k] for k in ("logp", "b", "mask", "r", "m", "grad_sq"))
    B = logp.size(0)
    for beta1 in (1.0, 0.01, 1e4):
        got, met = grad_of("oapl", logp, logp.clone(), mask, r, m, oapl_beta1=beta1)
        g = r.view(-1, m)
        v = beta1 * (torch.logsumexp(g / beta1, 1, keepdim=True) - math.log(m))
        torch.testing.assert_close(got, 2e-3 * (g - v).view(-1)[:, None] * mask / B * -1, atol=1e-15, rtol=1e-10)
        assert (v >= g.mean(1, keepdim=True) - 1e-12).all()
    assert float(v.view(-1)[0]) == pytest.approx(float(g[0].mean()), abs=1e-3)  # beta1 1e4: the mean
    got, met = grad_of("oapl", logp, logp.clone(), mask, r, m, oapl_beta1=0.01)
    assert met["oapl_v_star_mean"] == pytest.approx(float(g.max(1).values.mean()), abs=0.02)

def flash_reinforce_on_policy():
    """At logp == behavior_logp every binary KL is 0, so every response is kept with weight 1:
    -(r_i - batch mean r) / (B |y_i|) on each token, a sequence-mean REINFORCE with the batch's
    mean as baseline (no group, no 1 / std); flash_delta 0 still keeps them all."""
    logp, _, mask, r, m, _ = (batch_four_spreads(seed=1)[k] for k in ("logp", "b", "mask", "r", "m", "grad_sq"))
    B = logp.size(0)
    want = -(r - r.mean())[:, None] * mask / (B * mask.sum(1, keepdim=True))
    for delta in (3e-3, 0.0):
        got, met = grad_of("flash_reinforce", logp, logp.clone(), mask, r, m, flash_delta=delta)
        torch.testing.assert_close(got, want, atol=1e-15, rtol=1e-12)
        assert met["is_masked_frac"] == 0 and met["flash_seq_kl_mean"] == pytest.approx(0, abs=1e-12)
    far = batch_four_spreads(seed=1)  # |ell| up to ~1.5: the default gate drops responses, 14 none
    far["logp"] = far["b"] + 20.0 * (far["logp"] - far["b"]).clamp(-1, 1)
    far["logp"] = far["logp"].clamp(max=-1e-3)
    _, dropped = grad_of_batch("flash_reinforce", far)
    _, kept = grad_of_batch("flash_reinforce", far, flash_delta=14.0)
    assert dropped["is_masked_frac"] > 0.5 and kept["is_masked_frac"] == 0


NOT_GRPO_ON_POLICY = {  # name -> the check of what it is at logp == behavior_logp instead
    "oapl": oapl_on_policy, "flash_reinforce": flash_reinforce_on_policy,
    "kimi": kimi_on_policy, "agro": agro_on_policy, "ggpo": ggpo_on_policy,
    "gepo": gepo_on_policy, "vcpo": vcpo_on_policy,
    "rec_oneside": mean_baseline_on_policy, "rec_ring": mean_baseline_on_policy,
    "asymre": mean_baseline_on_policy}


@pytest.mark.parametrize("name", list(losses.LOSSES))
def test_at_logp_equal_behavior_it_is_grpo_or_the_named_exception(name):
    """rho = 1 (and icepop's old = b, the reference = l): no mask or clip acts and the gradient
    is GRPO's -A_i / n, except for the objectives in NOT_GRPO_ON_POLICY, whose check says what
    they are instead."""
    if name in NOT_GRPO_ON_POLICY:
        NOT_GRPO_ON_POLICY[name]()
        return
    if name in NOT_GRPO_ON_POLICY_FORMULA:  # its formula there, and not GRPO's
        same = on_policy(home_batch(name, seed=1))
        got, met = grad_of_batch(name, same)
        torch.testing.assert_close(got, expected_grad(name, same).grad, atol=1e-14, rtol=1e-12)
        plain, _ = grad_of_batch("grpo", same)
        assert (got - plain).abs().max() > 1e-3 * plain.abs().max()
        return
    batch = home_batch(name, seed=1)
    if name in EQUAL_LENGTHS:
        batch["mask"] = torch.ones_like(batch["mask"])
    same = on_policy(batch)
    plain, _ = grad_of_batch("grpo", same)
    assert plain.abs().sum() > 0
    for hp in ON_POLICY_SETTINGS.get(name, [{}]):
        got, met = grad_of_batch(name, same, **hp)
        torch.testing.assert_close(got, plain, atol=1e-14, rtol=1e-12)
        logged = METRICS_LOGGED[(name,)]  # a new objective: add what it logs to oracles.METRICS_LOGGED
        for key in ("is_masked_frac", "clip_frac"):
            assert met.get(key, 0) == 0 and (key in met) == (key in logged), key
        assert met["is_chi2_token"] == pytest.approx(0, abs=1e-12)


# ----------------------------------------------------------------------------- micro-batches

MICRO_SEED = {batch_one_spread: 2, batch_with_old_and_ref: 2, batch_four_spreads: 3}
MICRO_CASES = [pytest.param(name, None, id=name) for name in losses.LOSSES] + [
    pytest.param("m2po", batch_with_old_and_ref, id="m2po-batch_with_old_and_ref")]


@pytest.mark.parametrize("name,make", MICRO_CASES)
def test_micro_batches_with_batch_statistics_add_up_to_the_full_batch(name, make):
    """Two micro-batches of whole groups, each loss rescaled by its share of the tokens (as
    train.learn does), with losses.batch_stats of the whole batch where the objective reads them
    (gspo, gmpo, gepo, oapl: n / B; m2po: its cutoff; snis: the mean TIS weight; bapo: its
    bounds; flash_reinforce: n / B and the mean reward):
    their gradient is the full batch's; without them (each micro-batch its own statistics) it is
    not, except where OWN_STATS_SAME_UPDATE says the micro-batches' own statistics land where the
    whole batch's do."""
    own_stats_same_update = (name, make) in OWN_STATS_SAME_UPDATE
    make = make or (EXPECTED[name].batch if name in EXPECTED else batch_with_old_and_ref)
    batch = make(seed=MICRO_SEED[make])
    logp, b, mask, r, m = (batch[k] for k in ("logp", "b", "mask", "r", "m"))
    full, _ = grad_of_batch(name, batch)
    obj = losses.objective(name)
    stats = losses.batch_stats(name, logp=logp, behavior_logp=b, mask=mask, rewards=r, group_size=m)
    assert set(stats) == STATS_KEYS.get(name, set())
    assert (obj.batch_stats is not None) == (name in STATS_KEYS)
    n = mask.sum()
    for given in ((stats, None) if stats else (None,)):
        x = logp.clone().requires_grad_(True)
        for rows in (slice(0, 8), slice(8, None)):
            loss, _ = losses.compute_loss(name, logp=x[rows], batch_stats=given, **loss_inputs(name, batch, rows))
            (loss * mask[rows].sum() / n).backward()
        if given is not None or not stats:
            torch.testing.assert_close(x.grad, full, atol=1e-14, rtol=1e-12)
        elif not own_stats_same_update:
            assert (x.grad - full).abs().max() > 1e-3 * full.abs().max()
    if not stats:
        return
    with pytest.raises(ValueError, match="needs batch_stats"):
        losses.compute_loss(name, logp=logp, batch_stats={}, **loss_inputs(name, batch))
    if not obj.stats_read_logp:  # the mask (and the rewards where they read them) gives them
        given = {"rewards": r, "group_size": m} if obj.stats_read_rewards else {}
        assert losses.batch_stats(name, logp=None, behavior_logp=None, mask=mask, **given) == stats
    else:
        with pytest.raises(ValueError, match="needs logp, behavior_logp and mask"):
            losses.batch_stats(name, logp=None, behavior_logp=None, mask=mask, rewards=r, group_size=m)
    if obj.stats_read_rewards:
        with pytest.raises(ValueError, match="needs rewards"):
            losses.batch_stats(name, logp=logp, behavior_logp=b, mask=mask)


# ----------------------------------------------------------------------------- bad settings

ALL_BUT_GRPO = tuple(name for name in losses.LOSSES if name != "grpo")
# (settings, the error's match, the objectives they are bad for (None: every one; a check runs
# for every objective's settings, whichever objective is called); the others accept them)
BAD_SETTINGS = [
    ({"lr": 1e-3}, "unknown hyperparameter", None),
    ({"clip_low": 1.0}, "need 0 <= clip_low < 1", None),
    ({"grpo_anchor": "old"}, "unknown grpo_anchor", None),
    ({"grpo_anchor": "behavior"}, "proximal anchor.*grpo_anchor='behavior' is for 'grpo' only", ALL_BUT_GRPO),
    ({"ggpo_variant": "both"}, "unknown ggpo_variant", None),
    ({"beta": 0.0}, "beta must be", ("ggpo",)),
    ({"beta": "0.01"}, "beta must be a finite number", None),
    ({"mis_low": 2.0, "mis_high": 1.0}, "mis_low < mis_high", None),
    ({"mis_direction": "good"}, "mis_direction", None),
    ({"icepop_low": -0.1}, "icepop_low < icepop_high", None),
    ({"tis_seq_cap": 0.0}, "tis_seq_cap must be > 0", None),
    ({"gspo_eps_low": 1.0}, "gspo_eps_low < 1", None),
    ({"m2_threshold": -1.0}, "m2_threshold must be >= 0", None),
    ({"m2_tokens": "harmful"}, "unknown m2_tokens", None),
    ({"ds_mask_delta": math.nan}, "ds_mask_delta must be a finite number", None),
    ({"ds_kl_beta": "0.001"}, "ds_kl_beta must be a finite number", None),
    ({"cispo_eps_low": 1.5}, "cispo_eps_low must be in", None),
    ({"cispo_eps_high": -1.0}, "cispo_eps_high must be >= 0", None),
    ({"sapo_tau_pos": 0.0}, "sapo_tau_pos must be > 0", None),
    ({"gmpo_eps": 0.0}, "gmpo_eps must be > 0", None),
    ({"kimi_tau": -0.1}, "kimi_tau must be >= 0", None),
    ({"vespo_k_pos": math.nan}, "vespo_k_pos must be a finite number", None),
    ({"topr_negative_weight": -1.0}, "topr_negative_weight must be >= 0", None),
    ({"geo_rs_low": 1.01}, "geo_rs_low < geo_rs_high", None),
    ({"geo_rs_low": 0.0}, "0 < geo_rs_low", None),
    ({"k3_rs_clip_c": 1.0}, "k3_rs_clip_c must be > 1", None),
    ({"k3_rs_threshold": math.inf}, "finite number", None),
    ({"a3po_alpha": 1.5}, "a3po_alpha must be null", None),
    ({"dppo_delta": -0.1}, "dppo_delta must be >= 0", None),
    ({"gepo_eps": 1.0}, "0 <= gepo_eps < 1", None),
    ({"vcpo_is_cap": 0.0}, "vcpo_is_cap must be > 0", None),
    ({"trm_divergence": "kl"}, "unknown trm_divergence", None),
    ({"trm_delta": 0.0}, "trm_delta must be > 0", None),
    ({"outlier_low": 2.0}, "outlier_low < 1 < outlier_high", None),
    ({"dppo_kl_delta": -1.0}, "dppo_kl_delta", None),
    ({"rec_eps_low": 1.5}, "rec_eps_low <= 1", None),
    ({"rec_ring_low": 0.1}, "rec_eps_low <= rec_ring_low", None),
    ({"asymre_c": "0.1"}, "asymre_c must be a finite number", None),
    ({"bapo_lo_max": 1.5}, "bapo_lo_max <= 1", None),
    ({"bapo_step": -0.05}, "bapo_step must be", None),
    ({"oapl_beta1": 0.0}, "oapl_beta1 must be > 0", None),
    ({"oapl_beta2": "1e-3"}, "oapl_beta2 must be a finite number", None),
    ({"flash_delta": -1e-3}, "flash_delta must be >= 0", None),
]


@pytest.mark.parametrize("hp,match,bad_for", [pytest.param(*case, id=f"{settings_id(case[0])}")
                                              for case in BAD_SETTINGS])
def test_bad_settings_raise(hp, match, bad_for):
    batch = {**batch_with_old_and_ref(seed=2, B=8, T=3), "grad_sq": torch.ones(8, dtype=D)}
    for name in losses.LOSSES:
        if bad_for is None or name in bad_for:
            with pytest.raises(ValueError, match=match):
                losses.check_hparams(name, hp)
            with pytest.raises(ValueError, match=match):
                losses.compute_loss(name, logp=batch["logp"], **loss_inputs(name, batch, **hp))
        else:
            losses.check_hparams(name, hp)


# ----------------------------------------------------------------------------- bad inputs

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
])  # bad settings: BAD_SETTINGS
def test_bad_input_raises(case, match):
    name, kw = case
    with pytest.raises(ValueError, match=match):
        losses.compute_loss(name, **kw)


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
    with pytest.raises(ValueError, match="needs old_logp"):
        losses.compute_loss("icepop", **kw)


def test_padding_may_hold_garbage_and_registry():
    """Non-finite values at padding positions (mask 0) are accepted and give zero grad there."""
    logp = torch.tensor([[-1.0, 1e4], [-1.0, -2.0]], dtype=D).requires_grad_(True)
    blogp = torch.tensor([[-1.0, -math.inf], [-1.0, float("nan")]], dtype=D)
    mask = torch.tensor([[1, 0], [1, 0]], dtype=D)
    for name in losses.LOSSES:
        loss, met = losses.compute_loss(name, logp=logp, behavior_logp=blogp, ref_logp=blogp,
                                        mask=mask, rewards=torch.tensor([1, 0], dtype=D), group_size=2,
                                        old_logp=blogp, a3po_alpha=0.5, response_grad_sq=torch.tensor([1, 1], dtype=D))
        g, = torch.autograd.grad(loss, logp)
        assert torch.isfinite(g).all() and (g[:, 1] == 0).all() and math.isfinite(met["surrogate"])
    assert {name for name, o in losses.LOSSES.items() if o.needs_ref} == NEEDS_REF
    assert losses.objective("ggpo").needs_ref and not losses.objective("grpo").needs_ref


def test_primerl_counts_only_the_tokens_with_a_nonzero_advantage():
    """A group whose rewards are all equal has advantage 0: prime-rl filters its tokens out of
    the loss and out of the count n_M (its squared term included), so the other tokens' gradient
    is divided by n_M, not n; micro-batches with the whole batch's statistic add up to it, with
    their own they do not (the uniform group sits in one of them)."""
    batch = batch_four_spreads(seed=3, max_logp=-0.01)
    batch["r"][:4] = 1.0  # group 0 uniform
    got, met = grad_of_batch("primerl", batch)
    want = expected_grad("primerl", batch)
    torch.testing.assert_close(got, want.grad, atol=1e-12, rtol=1e-9)
    mask = batch["mask"]
    assert (got[:4] == 0).all() and met["primerl_member_frac"] == pytest.approx(1 - float(mask[:4].sum() / mask.sum()))
    stats = losses.batch_stats("primerl", logp=None, behavior_logp=None, mask=mask, rewards=batch["r"], group_size=4)
    for given, same in ((stats, True), (None, False)):
        x = batch["logp"].clone().requires_grad_(True)
        for rows in (slice(0, 8), slice(8, None)):
            loss, _ = losses.compute_loss("primerl", logp=x[rows], batch_stats=given,
                                          **loss_inputs("primerl", batch, rows))
            (loss * mask[rows].sum() / mask.sum()).backward()
        assert torch.allclose(x.grad, got, atol=1e-14, rtol=1e-12) == same
