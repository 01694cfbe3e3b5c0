"""What train.py and learner.py give an objective that declares a need in its registration:
whole-batch statistics before micro-batches (batch_stats: m2po, gspo), per-response gradient
norms and the step's lr scale (needs_grad_sq, lr_scale: vcpo), alpha from the batch's staleness
(prepare: a3po), and the learner's log-probs at sampling time kept on the rollouts (reads_old_logp:
icepop); the learning ones on the toy model.
"""
import copy
import math
from pathlib import Path

import pytest
import torch

import losses
from oracles import D


@pytest.mark.parametrize("name", ["m2po", "gspo", "pipelinerl", "tinker"])
def test_learn_in_micro_batches_gives_the_one_batch_update(tmp_path, toy_model, name, monkeypatch):
    """train.learn on one toy batch (4 groups of 4, behavior log-probs 0.3 off the learner's, so
    m2po drops tokens): one micro-batch of 16 and four of 4 give the same gradient (float32
    rounding), because the whole-batch statistics are computed first; a micro-batched learn that
    skips that step is measurably off."""
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


@pytest.mark.parametrize("name", ["skyrl_geo", "nemorl", "primerl", "delightful"])
def test_the_frameworks_defaults_learn_through_the_loop(tmp_path, name):
    """train.learn with the objective's needs (a reference model for skyrl_geo's and nemorl's KL
    terms, batch statistics for primerl): finite metrics, a nonzero gradient, and the objective's
    own metric logged."""
    import copy
    import learner
    import rollout
    import train
    from conftest import toy_config
    base_cfg, rollouts, rewards = toy_batch(seed=1, off=0.005)  # within SkyRL's mask
    cfg = {**base_cfg, **toy_config(tmp_path, loss=name, micro_batch_size=8)}
    model, ref, opt = learner.build_learner(cfg)
    assert (ref is not None) == losses.objective(name).needs_ref
    metrics = train.learn(cfg, model, ref, opt, rollout.RolloutBatch(0, copy.deepcopy(rollouts), rewards), 0)
    grad = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    assert torch.isfinite(grad).all() and grad.abs().max() > 0
    assert all(math.isfinite(v) for k, v in metrics.items() if isinstance(v, float) and k != "ggpo_ess_success")
    own = {"skyrl_geo": "skyrl_kl", "nemorl": "nemorl_kl", "primerl": "primerl_member_frac",
           "delightful": "is_weight_mean"}[name]
    assert own in metrics
