"""The published staleness corrections (losses.py) against their formulas, the IS health metrics
against hand-computed values, and M2PO's batch-level mask through micro-batches.

Formulas (issue 19; one optimizer step per batch, so every ratio is against the sampler):
ell = l - b, rho = exp(ell), A_i = GRPO's group advantage, n = response tokens of the batch.
The expected gradients below are written from those formulas with plain loops, not by calling
the functions under test.
"""
import math
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import losses  # noqa: E402

D = torch.float64
NEW = ["grpo_mis", "icepop_primerl", "grpo_tis_seq", "grpo_mis_seq", "gspo", "m2po", "ds_mask"]


def random_batch(seed, B=24, T=6, m=4, spread=1.0):
    """B responses in groups of m, lengths 1..T (padding holds garbage), |ell| ~ spread."""
    g = torch.Generator().manual_seed(seed)
    b = -torch.rand(B, T, generator=g, dtype=D) * 3
    logp = b + torch.randn(B, T, generator=g, dtype=D) * spread
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None] < lengths[:, None]).to(D)
    logp = torch.where(mask.bool(), logp, 7.0)  # garbage on padding
    r = (torch.rand(B, generator=g) > 0.5).to(D)
    r[::m] = 1.0  # every group mixed: nonzero advantages
    r[1::m] = 0.0
    return logp, b, mask, r, m


def advantages(r, m):
    """A_i = (r_i - mean) / (unbiased std + 1e-6) per group, by hand."""
    out = []
    for i in range(0, len(r), m):
        g = [float(x) for x in r[i:i + m]]
        mu = sum(g) / m
        sd = math.sqrt(sum((x - mu) ** 2 for x in g) / (m - 1))
        out += [(x - mu) / (sd + 1e-6) for x in g]
    return out


def grad_of(name, logp, b, mask, r, m, **hp):
    x = logp.clone().requires_grad_(True)
    loss, met = losses.compute_loss(name, logp=x, behavior_logp=b, mask=mask, rewards=r,
                                    group_size=m, **hp)
    loss.backward()
    return x.grad, met


def paper_m2po_kept(sq_values, threshold):
    """Algorithm 1's loop read literally: drop the largest value one at a time while the mean of
    the values left exceeds the threshold. Returns the indices kept."""
    order = sorted(range(len(sq_values)), key=lambda j: -sq_values[j])
    kept = list(order)
    while kept and sum(sq_values[j] for j in kept) / len(kept) > threshold:
        kept.pop(0)
    return set(kept)


def paper_m2po_kept_tokens(ell, A, threshold):
    """Algorithm 1 over the trust-region tokens T = {(A > 0, ell > 0) or (A < 0, ell < 0)} (the
    authors' _get_trust_region_tokens_delta_sq): the loop above runs over T only, every token
    outside T is kept. ell: {token: log-ratio}, A: {token: advantage}; returns the tokens kept."""
    region = [k for k in ell if (A[k] > 0 and ell[k] > 0) or (A[k] < 0 and ell[k] < 0)]
    kept = paper_m2po_kept([ell[k] ** 2 for k in region], threshold)
    return {k for k in ell if k not in region} | {region[j] for j in kept}


def expected_grad(name, logp, b, mask, r, m):
    """dL/dl per token from the issue's formulas; also what each mask dropped and capped."""
    hp = losses.DEFAULTS
    B, T = logp.shape
    A = advantages(r, m)
    n = float(mask.sum())
    tokens = [(i, t) for i in range(B) for t in range(T) if mask[i, t] == 1]
    ell = {(i, t): float(logp[i, t] - b[i, t]) for i, t in tokens}
    length = [int(mask[i].sum()) for i in range(B)]
    seq = [sum(ell[(i, t)] for t in range(length[i])) for i in range(B)]
    g = torch.zeros(B, T, dtype=D)
    dropped, capped = 0, 0
    if name == "m2po":
        kept = paper_m2po_kept_tokens(ell, {(i, t): A[i] for i, t in tokens}, hp["m2_threshold"])
    for j, (i, t) in enumerate(tokens):
        rho = math.exp(ell[(i, t)])
        if name in ("grpo_mis", "icepop_primerl"):
            lo, hi = (hp["mis_low"], hp["mis_high"]) if name == "grpo_mis" else (hp["icepop_low"], hp["icepop_high"])
            keep = lo <= rho <= hi
            dropped += not keep
            g[i, t] = -rho * keep * A[i] / n
        elif name == "grpo_tis_seq":
            S = math.exp(seq[i])
            capped += S > hp["tis_seq_cap"]
            g[i, t] = -min(S, hp["tis_seq_cap"]) * A[i] / n
        elif name == "grpo_mis_seq":
            S = math.exp(seq[i])
            dropped += S > hp["mis_seq_cap"]
            g[i, t] = -S * (S <= hp["mis_seq_cap"]) * A[i] / n
        elif name == "gspo":
            s = math.exp(seq[i] / length[i])
            clip = (A[i] > 0 and s > 1 + hp["gspo_eps_high"]) or (A[i] < 0 and s < 1 - hp["gspo_eps_low"])
            dropped += clip
            g[i, t] = 0.0 if clip else -s * A[i] / (B * length[i])
        elif name == "m2po":
            dropped += (i, t) not in kept
            g[i, t] = -rho * A[i] / n if (i, t) in kept else 0.0
        elif name == "ds_mask":
            drop = A[i] < 0 and -seq[i] / length[i] > hp["ds_mask_delta"]
            clip = (A[i] > 0 and rho > 1 + hp["clip_high"]) or (A[i] < 0 and rho < 1 - hp["clip_low"])
            dropped += drop
            capped += clip and not drop
            g[i, t] = 0.0 if drop or clip else -rho * A[i] / n
    return g, dropped, capped, len(tokens)


@pytest.mark.parametrize("name", NEW)
def test_correction_gradient_matches_its_formula_with_masks_that_trigger(name):
    logp, b, mask, r, m = random_batch(0)
    got, met = grad_of(name, logp, b, mask, r, m)
    want, dropped, capped, n = expected_grad(name, logp, b, mask, r, m)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-9)
    assert (got[mask == 0] == 0).all()
    if name == "grpo_tis_seq":  # truncation only: tokens of some responses capped, not all
        assert 0 < capped < n
    else:  # something dropped, something kept
        assert 0 < dropped < n and (got != 0).any()
    if name == "ds_mask":
        assert capped > 0  # the PPO clip acts too, on kept responses
    if "is_masked_frac" in met and name != "ds_mask":
        assert met["is_masked_frac"] == pytest.approx(((got == 0) & (mask == 1)).sum().item() / n)


@pytest.mark.parametrize("name", NEW)
def test_at_logp_equal_behavior_every_correction_is_grpo(name):
    """rho = 1 everywhere: no mask or cap acts, and the gradient is GRPO's -A_i / n. GSPO's
    -s_i A_i / (B |y_i|) is GRPO's when all lengths are equal (here: no padding)."""
    logp, _, mask, r, m = random_batch(1)
    if name == "gspo":
        mask = torch.ones_like(mask)
    got, met = grad_of(name, logp, logp.clone(), mask, r, m)
    plain, _ = grad_of("grpo", logp, logp.clone(), mask, r, m)
    torch.testing.assert_close(got, plain, atol=1e-14, rtol=1e-12)
    assert plain.abs().sum() > 0
    assert met.get("is_masked_frac", 0) == 0 and met.get("clip_frac", 0) == 0
    assert met["is_chi2_token"] == pytest.approx(0, abs=1e-12)


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


@pytest.mark.parametrize("name", ["m2po", "gspo"])
def test_batch_statistics_make_micro_batches_add_up_to_the_full_batch(name):
    """Two micro-batches of whole groups, each loss rescaled by its share of the tokens (as
    train.learn does): with batch_stats of the whole batch their gradient is the full batch's;
    without (each micro-batch its own statistics) it is not."""
    logp, b, mask, r, m = random_batch(2)
    full, _ = grad_of(name, logp, b, mask, r, m)
    stats = losses.batch_stats(name, logp=logp, behavior_logp=b, mask=mask, rewards=r, group_size=m)
    n = mask.sum()
    for given in (stats, None):
        x = logp.clone().requires_grad_(True)
        for rows in (slice(0, 8), slice(8, 24)):
            loss, _ = losses.compute_loss(name, logp=x[rows], behavior_logp=b[rows], mask=mask[rows],
                                          rewards=r[rows], group_size=m, batch_stats=given)
            (loss * mask[rows].sum() / n).backward()
        if given is not None:
            torch.testing.assert_close(x.grad, full, atol=1e-14, rtol=1e-12)
        else:
            assert (x.grad - full).abs().max() > 1e-3 * full.abs().max()
    assert losses.batch_stats("grpo", logp=logp, behavior_logp=b, mask=mask) == {}
    assert (losses.objective(name).batch_stats is not None) and not (losses.objective("grpo_mis").batch_stats is not None)
    if not losses.objective(name).stats_read_logp:  # the mask alone gives them
        assert losses.batch_stats(name, logp=None, behavior_logp=None, mask=mask) == stats
    else:
        with pytest.raises(ValueError, match="needs logp, behavior_logp and mask"):
            losses.batch_stats(name, logp=None, behavior_logp=None, mask=mask, rewards=r, group_size=m)
        with pytest.raises(ValueError, match="needs rewards"):  # the trust region's sign
            losses.batch_stats(name, logp=logp, behavior_logp=b, mask=mask)


def test_is_health_by_hand():
    """ell rows [ln 2, 0, pad] and [-ln 2, ln 4, ln 2]; n = 5, rho = 2, 1, 0.5, 4, 2:
    mean ell = 3 ln2 / 5; min 0.5, max 4; chi2_token = (4+1+0.25+16+4)/5 - 1 = 4.05;
    sequence sums ln 2 and 2 ln 2: chi2_seq = (4 + 16)/2 - 1 = 9, max |sum| = 2 ln 2."""
    L2 = math.log(2)
    b = torch.full((2, 3), -2.0, dtype=D)
    ell = torch.tensor([[L2, 0.0, 0.0], [-L2, 2 * L2, L2]], dtype=D)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=D)
    logp = torch.where(mask.bool(), b + ell, 99.0)
    for name in losses.LOSSES:
        _, met = losses.compute_loss(name, logp=logp, behavior_logp=b, ref_logp=b, mask=mask,
                                     rewards=torch.tensor([1.0, 0.0], dtype=D), group_size=2, old_logp=b,
                                     a3po_alpha=0.5, response_grad_sq=torch.ones(2, dtype=D))
        assert met["is_log_ratio_mean"] == pytest.approx(3 * L2 / 5)
        assert (met["is_ratio_min"], met["is_ratio_max"]) == pytest.approx((0.5, 4.0))
        assert met["is_chi2_token"] == pytest.approx(4.05)
        assert met["is_chi2_seq"] == pytest.approx(9.0)
        assert met["is_seq_log_ratio_max"] == pytest.approx(2 * L2)
    # far off-policy: the squares are clamped at exp(40) (no overflow), min/max stay raw
    h = losses.is_health(torch.tensor([[60.0, 0.0]]), torch.zeros(1, 2), torch.ones(1, 2))
    assert math.isfinite(float(h["is_chi2_token"])) and float(h["is_chi2_seq"]) == pytest.approx(math.exp(40) - 1, rel=1e-5)
    assert float(h["is_ratio_max"]) == pytest.approx(math.exp(60), rel=1e-5)


def test_weight_health_and_which_metrics_each_objective_logs():
    """grpo_mis, rho = [2, 1, 0.5, 6]: 6 > mis_high = 5 is masked, w = [2, 1, 0.5, 0]:
    is_weight_mean = 3.5/4, is_masked_frac = 1/4, is_ess = (3.5/4)^2 / ((4+1+0.25)/4) = 7/12.
    clip_frac only where a clip can act; weight metrics only for weighting objectives."""
    b = torch.zeros(2, 2, dtype=D)
    logp = torch.log(torch.tensor([[2.0, 1.0], [0.5, 6.0]], dtype=D))
    mask, r = torch.ones(2, 2, dtype=D), torch.tensor([1.0, 0.0], dtype=D)
    _, met = grad_of("grpo_mis", logp, b, mask, r, 2)
    assert met["is_weight_mean"] == pytest.approx(0.875) and met["is_masked_frac"] == 0.25
    assert met["is_ess"] == pytest.approx(7 / 12)
    logged = {}
    for name in losses.LOSSES:
        for hp in ([{}, {"grpo_anchor": "behavior"}] if name == "grpo" else
                   [{}, {"ggpo_variant": "original"}] if name == "ggpo" else [{}]):
            _, met = losses.compute_loss(name, logp=logp, behavior_logp=b, ref_logp=b, mask=mask,
                                         rewards=r, group_size=2, old_logp=b, a3po_alpha=0.5,
                                         response_grad_sq=torch.ones(2, dtype=D), **hp)
            logged[(name, *hp.values())] = {k for k in ("clip_frac", "is_weight_mean", "is_masked_frac")
                                            if k in met}
    assert logged == {("grpo",): set(), ("grpo", "behavior"): {"clip_frac"}, ("grpo_tis",): {"is_weight_mean"},
                      ("agro",): set(), ("ggpo",): {"clip_frac"}, ("ggpo", "original"): set(),
                      ("grpo_mis",): {"is_weight_mean", "is_masked_frac"},
                      ("icepop",): {"clip_frac", "is_weight_mean", "is_masked_frac"},
                      ("icepop_primerl",): {"is_weight_mean", "is_masked_frac"}, ("grpo_tis_seq",): {"is_weight_mean"},
                      ("grpo_mis_seq",): {"is_weight_mean", "is_masked_frac"}, ("gspo",): {"clip_frac"},
                      ("m2po",): {"is_weight_mean", "is_masked_frac"}, ("ds_mask",): {"clip_frac", "is_masked_frac"},
                      ("ds_v32",): {"clip_frac", "is_masked_frac"}, ("cispo",): {"clip_frac", "is_weight_mean"},
                      ("sapo",): {"is_weight_mean"}, ("gmpo",): {"clip_frac"}, ("topr",): {"is_weight_mean"},
                      ("kimi",): set(), ("vespo",): {"is_weight_mean"},
                      ("gepo",): {"clip_frac", "is_weight_mean"},
                      ("a3po",): {"clip_frac", "is_weight_mean", "is_masked_frac"},
                      ("dppo_tv",): {"is_weight_mean", "is_masked_frac"}, ("geo_rs",): {"is_masked_frac"},
                      ("k3_rs",): {"clip_frac", "is_masked_frac"}, ("snis",): {"is_weight_mean"},
                      ("vcpo",): {"is_weight_mean"}, ("trm",): {"clip_frac", "is_masked_frac"},
                      ("seq_outlier_rs",): {"clip_frac", "is_masked_frac"},
                      ("dppo_kl",): {"is_weight_mean", "is_masked_frac"}, ("rec_oneside",): {"clip_frac"},
                      ("rec_ring",): {"clip_frac"}, ("asymre",): set(), ("bapo",): {"clip_frac"}}


@pytest.mark.parametrize("hp,match", [
    ({"mis_low": 2.0, "mis_high": 1.0}, "mis_low < mis_high"),
    ({"icepop_low": -0.1}, "icepop_low < icepop_high"),
    ({"tis_seq_cap": 0.0}, "tis_seq_cap must be > 0"),
    ({"gspo_eps_low": 1.0}, "gspo_eps_low < 1"),
    ({"m2_threshold": -1.0}, "m2_threshold must be >= 0"),
    ({"ds_mask_delta": math.nan}, "ds_mask_delta must be a finite number"),
    ({"grpo_anchor": "behavior"}, "grpo_anchor='behavior' is for 'grpo' only"),
])
def test_bad_correction_hyperparameters_raise(hp, match):
    with pytest.raises(ValueError, match=match):
        losses.compute_loss("m2po", logp=torch.zeros(2, 2), behavior_logp=torch.zeros(2, 2),
                            mask=torch.ones(2, 2), rewards=torch.tensor([1.0, 0.0]), group_size=2, **hp)
    with pytest.raises(ValueError, match="needs batch_stats"):
        losses.compute_loss("m2po", logp=torch.zeros(2, 2), behavior_logp=torch.zeros(2, 2),
                            mask=torch.ones(2, 2), rewards=torch.tensor([1.0, 0.0]), group_size=2,
                            batch_stats={})


@pytest.mark.parametrize("name", ["m2po", "gspo"])
def test_learn_in_micro_batches_gives_the_one_batch_update(tmp_path, toy_model, name, monkeypatch):
    """train.learn on one toy batch (4 groups of 4, behavior log-probs 0.3 off the learner's, so
    m2po drops tokens): one micro-batch of 16 and four of 4 give the same gradient (float32
    rounding), because the whole-batch statistics are computed first; a micro-batched learn that
    skips that step is measurably off."""
    import copy
    import learner
    import rollout
    import train
    from conftest import toy_config
    g = torch.Generator().manual_seed(0)
    rollouts = []
    for p in range(4):
        prompt = torch.randint(3, 20, (int(torch.randint(2, 6, (1,), generator=g)),), generator=g).tolist()
        for _ in range(4):
            n = int(torch.randint(1, 8, (1,), generator=g))
            rollouts.append(rollout.Rollout(p, prompt, torch.randint(3, 20, (n,), generator=g).tolist(),
                                            "", [], 0, True))
    cfg = toy_config(tmp_path, loss=name, micro_batch_size=16)
    base, _, _ = learner.build_learner(cfg)
    for r, lp in zip(rollouts, learner.rollout_logp(cfg, base, rollouts, 0)):
        r.behavior_logp = [x + 0.3 * float(torch.randn(1, generator=g)) for x in lp]
    rewards = [1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0]

    def gradient(mb, batch_stats=True):
        c = {**cfg, "micro_batch_size": mb}
        model, ref, opt = learner.build_learner(c)
        with monkeypatch.context() as patch:
            if not batch_stats:
                patch.setattr(train, "pre_passes", lambda *a: (None, None))  # per micro-batch
            if not losses.objective(name).stats_read_logp:  # gspo's mean length: no forward pass
                patch.setattr(learner, "rollout_logp", lambda *a: pytest.fail("a forward pass for gspo"))
            metrics = train.learn(c, model, ref, opt, rollout.RolloutBatch(0, copy.deepcopy(rollouts), rewards), 0)
        return torch.cat([p.grad.flatten() for p in model.parameters()]), metrics

    full, m_full = gradient(16)
    split, m_split = gradient(4)
    skipped, _ = gradient(4, batch_stats=False)
    scale = full.abs().max()
    assert (split - full).abs().max() <= 1e-4 * scale
    assert (skipped - full).abs().max() > 1e-2 * scale
    assert "time/batch_stats" in m_split and "time/batch_stats" not in m_full
    if name == "m2po":
        assert 0 < m_full["is_masked_frac"] < 1 and m_split["is_masked_frac"] == m_full["is_masked_frac"]


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
