"""The importance-sampling health metrics every objective logs (losses.is_health) and the
weight metrics of the weighting objectives, against hand-computed values; which of clip_frac,
is_weight_mean and is_masked_frac each objective logs (oracles.METRICS_LOGGED).
"""
import math

import pytest
import torch

import losses
from oracles import D, METRICS_LOGGED, grad_of


def test_is_health_by_hand():
    """ell rows [ln 2, 0, pad] and [-ln 2, ln 4, ln 2]; n = 5, rho = 2, 1, 0.5, 4, 2:
    mean ell = 3 ln2 / 5; min 0.5, max 4; chi2_token = (4+1+0.25+16+4)/5 - 1 = 4.05;
    sequence sums ln 2 and 2 ln 2: chi2_seq = (4 + 16)/2 - 1 = 9, max |sum| = 2 ln 2, its 90th
    percentile ln 2 + 0.9 ln 2, sequence ESS (2 + 4)^2 / (2 (4 + 16)) = 0.9."""
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
        assert met["is_seq_log_ratio_q90"] == pytest.approx(1.9 * L2) and met["is_seq_ess"] == pytest.approx(0.9)
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
    assert logged == METRICS_LOGGED
