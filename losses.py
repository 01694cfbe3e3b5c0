r"""The study's four objectives and the published staleness corrections, as pure functions of
tensors, plus diagnostics.

Notation (one prompt, a group of m responses y_1..y_m sampled by the behavior policy mu,
rewards r_i; rows i*m .. i*m+m-1 of a batch form one group). Per token: learner log-prob
``logp`` = l (carries gradient), behavior log-prob ``behavior_logp`` = b (from the sampler),
reference log-prob ``ref_logp``; ell = l - b (detached), rho = exp(ell). Sequence sums over
response tokens: L_i = sum_t logp, B_i = sum_t behavior_logp, R_i = sum_t ref_logp.

Normalization: every objective is divided by n = mask.sum(), the number of response tokens
in the whole batch (token-mean). The objectives therefore differ only in their per-response
coefficient and per-token weighting, and one learning rate means the same step scale for all.

One optimizer step per rollout batch: the "old"/proximal policy of PPO-style methods is the
learner itself (its ratio is 1 in value), so every correction is a ratio against the sampler,
rho = exp(l - b). The corrections (grpo_mis, icepop, grpo_tis_seq, grpo_mis_seq, m2po) are GRPO's
coefficient A_i times a detached per-token weight w_{i,t} (0 = masked):

    loss = -(1/n) sum_{i,t} mask A_i w_{i,t} exp(l - sg(l)),   dL/dl_{i,t} = -A_i w_{i,t} / n;

gspo and ds_mask are PPO clips against the sampler. DESIGN.md lists the references and the
equivalences (CISPO, decoupled PPO, RLOO, PPO against the sampler).

Entry point (what train.py calls)::

    loss, metrics = compute_loss(name, logp=, behavior_logp=, ref_logp=, mask=, rewards=,
                                 group_size=m, batch_stats=None, **hparams)

``name`` is a key of ``LOSSES``; ``hparams`` keys are those of ``DEFAULTS`` (the one place
the hyperparameter defaults live; configs/defaults.yaml repeats them and a test keeps the two
equal). ``batch_stats``: statistics of the whole rollout batch that m2po and gspo read
(``batch_stats()``); None: computed from this call's tensors, which is right when the call holds
the whole batch and wrong for one micro-batch of several. ``metrics`` is a dict of Python
floats: loss, k3, coef_correct_sum, coef_abs_mean, the IS health of every objective
(is_log_ratio_mean, is_ratio_min, is_ratio_max, is_chi2_token, is_chi2_seq,
is_seq_log_ratio_max; ``is_health``), and each objective's own: clip_frac where a clip can act
(grpo with the behavior anchor, ggpo detached, gspo, ds_mask), is_weight_mean / is_ess (and
is_masked_frac where a weight can be 0) for the weighting corrections, tis_weight_mean /
tis_clip_frac (grpo_tis), ggpo_ess_success (ggpo), m2po_m2 (m2po).
A response is "correct" when r_i == 1; a group is "mixed" when it has at least one correct
and one not-correct response.

Every objective is registered on the line above its function, ``@register(name, needs_ref=...,
label=..., batch_stats=None)``, and has the signature
``fn(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp) -> (loss, coef, extra)``
with ``coef`` the detached per-response coefficient [B] and ``extra`` a dict of scalar
tensors. They expect what compute_loss hands them: mask a float 0/1 tensor, padding positions
of every [B, T] input set to 0, behavior/ref detached, ``hp`` the full hyperparameter dict
(with the batch statistics merged in, for objectives that declare them).
"""
import math
from dataclasses import dataclass
from typing import Callable

import torch

DEFAULTS = {"beta": 0.01, "clip_low": 0.2, "clip_high": 0.2, "tis_cap": 2.0,
            "grpo_anchor": "proximal", "ggpo_variant": "detached",
            "mis_low": 0.0, "mis_high": 5.0, "icepop_low": 0.5, "icepop_high": 5.0,
            "tis_seq_cap": 2.0, "mis_seq_cap": 3.0, "gspo_eps_low": 3e-4, "gspo_eps_high": 4e-4,
            "m2_threshold": 0.04, "ds_mask_delta": 0.5}


@dataclass(frozen=True)
class Objective:
    fn: Callable          # (logp, behavior_logp, ref_logp, mask, rewards, group_size, hp) -> (loss, coef, extra)
    needs_ref: bool       # reads ref_logp: the trainer keeps a reference model only for these
    label: str            # name in figures and tables
    batch_stats: Callable = None  # (logp, behavior_logp, mask, hp) -> {key: float} of the whole
                                  #   rollout batch, merged into hp (m2po, gspo); None: none needed
    stats_read_logp: bool = True  # batch_stats reads the log-probs (m2po), not just the mask (gspo)


LOSSES = {}  # name -> Objective, in registration order (the order of every figure's legend)


def register(name, *, needs_ref, label, batch_stats=None, stats_read_logp=True):
    """Register the decorated function as objective ``name`` (the config's ``loss``)."""
    def add(fn):
        if name in LOSSES:
            raise ValueError(f"objective {name!r} is registered twice")
        LOSSES[name] = Objective(fn, needs_ref, label, batch_stats, stats_read_logp)
        return fn
    return add


def needs_ref(name):
    """True when objective ``name`` needs reference log-probs (so the trainer can skip them)."""
    _check_name(name)
    return LOSSES[name].needs_ref


def needs_batch_stats(name):
    """True when objective ``name`` reads statistics of the whole rollout batch (m2po, gspo):
    a trainer that splits the batch into micro-batches computes them first (batch_stats)."""
    _check_name(name)
    return LOSSES[name].batch_stats is not None


def batch_stats_read_logp(name):
    """True when objective ``name``'s batch statistics read log-probs (m2po's cutoff), so the
    trainer needs a no-grad pass over the batch first; False when the mask alone gives them
    (gspo's mean length), and the trainer passes logp=None, behavior_logp=None."""
    _check_name(name)
    return LOSSES[name].stats_read_logp


def _grpo_advantages(rewards, m):
    """A_i = (r_i - mean r) / (std r + 1e-6) per group, std unbiased (as DeepSeekMath and TRL)."""
    g = rewards.view(-1, m)
    return ((g - g.mean(1, keepdim=True)) / (g.std(1, keepdim=True) + 1e-6)).view(-1)


def _clipped_surrogate(logp, anchor, A, clip_low, clip_high):
    """Token loss -min(rho A, clip(rho, 1-eps_low, 1+eps_high) A), rho = exp(logp - anchor),
    and the mask of tokens where the clipped branch is active (its gradient is zero)."""
    rho = torch.exp(logp - anchor)
    lo, hi = 1.0 - clip_low, 1.0 + clip_high
    token_loss = -torch.minimum(rho * A, rho.clamp(lo, hi) * A)
    clipped = ((A > 0) & (rho > hi)) | ((A < 0) & (rho < lo))
    return token_loss, clipped


@register("grpo", needs_ref=False, label="GRPO")
def grpo(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""GRPO.

    A_i = (r_i - \bar r) / (std(r) + 1e-6) over the group (unbiased std),
    rho_{i,t} = exp(logp_{i,t} - anchor_{i,t}) with anchor = logp.detach() ("proximal",
    default: value 1, stale data treated as fresh) or behavior_logp ("behavior", PPO's form),

        loss = -(1/n) sum_{i,t} mask_{i,t} min(rho_{i,t} A_i, clip(rho_{i,t}, 1-eps_l, 1+eps_h) A_i).
    """
    A = _grpo_advantages(rewards, group_size)
    anchor = logp.detach() if hp["grpo_anchor"] == "proximal" else behavior_logp
    tok, clipped = _clipped_surrogate(logp, anchor, A[:, None], hp["clip_low"], hp["clip_high"])
    n = mask.sum()
    # the proximal ratio is 1 in value: its clip never acts, so there is no clip_frac to log
    extra = {"clip_frac": (clipped * mask).sum() / n} if hp["grpo_anchor"] == "behavior" else {}
    return (tok * mask).sum() / n, A.detach(), extra


@register("grpo_tis", needs_ref=False, label="GRPO+TIS")
def grpo_tis(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""GRPO+TIS: GRPO with the proximal anchor, each token loss times a truncated IS weight.

        w_{i,t} = min(exp(logp_{i,t} - blogp_{i,t}), C)   (detached, C = tis_cap),
        loss = -(1/n) sum_{i,t} mask_{i,t} w_{i,t} min(rho A_i, clip(rho, 1-eps_l, 1+eps_h) A_i),
    rho = exp(logp - logp.detach()), so the gradient per token is -w_{i,t} A_i / n.
    """
    A = _grpo_advantages(rewards, group_size)
    tok, _ = _clipped_surrogate(logp, logp.detach(), A[:, None], hp["clip_low"], hp["clip_high"])
    raw = torch.exp(logp.detach() - behavior_logp)
    w = raw.clamp(max=hp["tis_cap"])
    n = mask.sum()
    extra = {"tis_weight_mean": (w * mask).sum() / n,
             "tis_clip_frac": ((raw >= hp["tis_cap"]) * mask).sum() / n,
             **_weight_health(w, mask, can_mask=False)}
    return (w * tok * mask).sum() / n, A.detach(), extra


@register("agro", needs_ref=True, label="AGRO")
def agro(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""AGRO (any-generation reward optimization); no importance weights.

        G_i = r_i - beta (L_i - R_i),   b_i = (1/(m-1)) sum_{j != i} G_j,
        a_i = sg(G_i - b_i),            loss = -(1/n) sum_i a_i L_i.
    With beta = 0 the coefficient is RLOO's r_i - mean_{j != i} r_j.
    """
    m = group_size
    L = (logp * mask).sum(1)
    R = (ref_logp * mask).sum(1)
    G = (rewards - hp["beta"] * (L.detach() - R)).view(-1, m)
    a = (G - (G.sum(1, keepdim=True) - G) / (m - 1)).view(-1).detach()
    return -(a * L).sum() / mask.sum(), a, {}


@register("ggpo", needs_ref=True, label="GGPO")
def ggpo(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""GGPO (group Gibbs policy optimization; this project's reconstruction).

    Target on the group, self-normalized estimate of pi* ∝ pi_ref exp(r / beta), and the
    learner's own group distribution (softmax over the m responses of a group):

        q_i = softmax_i(R_i - B_i + r_i / beta)   (no gradient),
        p_i = softmax_i(L_i - B_i).

    variant "original":  loss = -(1/n) sum_groups sum_i q_i log p_i   (gradient through p;
                         d/dL_i = -(q_i - p_i) / n since sum_i q_i = 1).
    variant "detached":  c_i = sg(q_i - p_i), ratio_{i,t} = sg(exp(logp_{i,t} - blogp_{i,t})),
                         keep_{i,t} = not[(c_i > 0 and ratio > 1+eps_h) or (c_i < 0 and ratio < 1-eps_l)],
                         loss = -(1/n) sum_i c_i sum_t keep_{i,t} mask_{i,t} logp_{i,t}.
    With no token dropped both variants have the same gradient.
    Metric ggpo_ess_success: for groups with k >= 2 correct responses, the normalized ESS
    (sum_S q)^2 / (k sum_S q^2) of q restricted to the correct set S, averaged over such groups.
    """
    m = group_size
    L = (logp * mask).sum(1)
    B = (behavior_logp * mask).sum(1)
    R = (ref_logp * mask).sum(1)
    z = (R - B + rewards / hp["beta"]).view(-1, m).detach()
    q = torch.softmax(z, 1)
    log_p = torch.log_softmax((L - B).view(-1, m), 1)
    c = (q - log_p.exp()).view(-1).detach()
    n = mask.sum()
    if hp["ggpo_variant"] == "original":
        loss, dropped = -(q * log_p).sum() / n, torch.zeros_like(mask)
    else:
        ratio = torch.exp(logp.detach() - behavior_logp)
        cc = c[:, None]
        dropped = (((cc > 0) & (ratio > 1 + hp["clip_high"])) |
                   ((cc < 0) & (ratio < 1 - hp["clip_low"]))).to(mask.dtype)
        loss = -(cc * (1 - dropped) * mask * logp).sum() / n
    succ = rewards.view(-1, m) == 1  # q restricted to the successes, renormalized in log space
    qs = torch.softmax(z.masked_fill(~succ, -math.inf), 1)
    k, ok = succ.sum(1), succ.sum(1) >= 2
    ess = 1.0 / (k * (qs ** 2).sum(1))  # = (sum_S q)^2 / (k sum_S q^2)
    ess_mean = ess[ok].mean() if ok.any() else torch.full((), math.nan, device=q.device)
    extra = {"ggpo_ess_success": ess_mean}
    if hp["ggpo_variant"] == "detached":  # the original update has no token clip
        extra["clip_frac"] = (dropped * mask).sum() / n
    return loss, c, extra


# ----------------------------------------------------------------------------- corrections
# One optimizer step per batch: each published correction below is stated against the sampler
# (its "old"/proximal policy is the learner itself). DESIGN.md has the table of references.

def _weighted_pg(logp, rewards, group_size, mask, w):
    """GRPO's coefficient times a detached per-token weight w (0 = masked):
    loss = -(1/n) sum mask A_i w_{i,t} exp(l - sg(l)); value -(1/n) sum mask A_i w, gradient
    -A_i w_{i,t} / n per token."""
    A = _grpo_advantages(rewards, group_size)
    n = mask.sum()
    return -(A[:, None] * w * torch.exp(logp - logp.detach()) * mask).sum() / n, A.detach()


def _weight_health(w, mask, can_mask):
    """is_weight_mean = mean w, is_ess = 1 / mean((w / mean w)^2) = (mean w)^2 / mean w^2 (1 for
    equal weights, -> 1/n for one dominant token; nan when every weight is 0) over response
    tokens, and is_masked_frac = share of response tokens with w = 0 when a weight can be 0."""
    n = mask.sum()
    mean_w = (w * mask).sum() / n
    out = {"is_weight_mean": mean_w, "is_ess": mean_w ** 2 / ((w ** 2 * mask).sum() / n)}
    if can_mask:
        out["is_masked_frac"] = ((w == 0) * mask).sum() / n
    return out


def _token_masked_is(logp, behavior_logp, mask, rewards, group_size, low, high):
    """w = rho 1[low <= rho <= high], rho = exp(l - b): masked token IS."""
    rho = torch.exp(logp.detach() - behavior_logp)
    w = torch.where((rho >= low) & (rho <= high), rho, 0.0)
    loss, A = _weighted_pg(logp, rewards, group_size, mask, w)
    return loss, A, _weight_health(w, mask, can_mask=True)


@register("grpo_mis", needs_ref=False, label="GRPO+MIS")
def grpo_mis(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""Token masked IS (TRL ``vllm_importance_sampling_mode="token_mask"``; AReaL's decoupled PPO
    with ``behav_imp_weight_cap`` at one update per batch, where its proximal policy is the learner).

        w_{i,t} = rho_{i,t} 1[mis_low <= rho_{i,t} <= mis_high],   rho = exp(l - b) detached,
        dL/dl_{i,t} = -w_{i,t} A_i / n.
    References: TRL multiplies its PPO loss against the trainer's recomputed old log-probs by
    this weight (old vs vLLM); AReaL's cap drops tokens with rho > cap only (no lower bound, as
    mis_low = 0 here) and applies it to the ratio proximal / behavior.
    """
    return _token_masked_is(logp, behavior_logp, mask, rewards, group_size,
                            hp["mis_low"], hp["mis_high"])


@register("icepop", needs_ref=False, label="IcePop")
def icepop(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""IcePop (Ling team's token masking of training-inference mismatch; verl's preset bounds):

        w_{i,t} = rho_{i,t} 1[icepop_low <= rho_{i,t} <= icepop_high],  dL/dl_{i,t} = -w A_i / n.
    The same masked token IS as grpo_mis, with a lower bound: tokens the learner now finds
    much less likely than the sampler did (rho < 0.5) are dropped too.
    """
    return _token_masked_is(logp, behavior_logp, mask, rewards, group_size,
                            hp["icepop_low"], hp["icepop_high"])


def _seq_log_ratio(logp, behavior_logp, mask):
    """sum_t ell_{i,t} per response [B, 1], detached (padding holds 0 in both inputs)."""
    return ((logp.detach() - behavior_logp) * mask).sum(1, keepdim=True)


@register("grpo_tis_seq", needs_ref=False, label="GRPO+seq-TIS")
def grpo_tis_seq(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""Sequence truncated IS (verl ``rollout_is: sequence`` with ``rollout_is_threshold``; TRL
    ``vllm_importance_sampling_mode="sequence_truncate"``):

        S_i = exp(sum_t ell_{i,t}),  w_i = min(S_i, tis_seq_cap)  (on every token of y_i),
        dL/dl_{i,t} = -w_i A_i / n.
    Computed as exp(min(sum_t ell, log cap)), which cannot overflow. verl clamps sum_t ell to
    +-20 first (same result below the cap); TRL also offers a lower clamp C_min (none here).
    """
    log_cap = math.log(hp["tis_seq_cap"])
    w = torch.exp(_seq_log_ratio(logp, behavior_logp, mask).clamp(max=log_cap)).expand_as(mask)
    loss, A = _weighted_pg(logp, rewards, group_size, mask, w)
    return loss, A, _weight_health(w, mask, can_mask=False)


@register("grpo_mis_seq", needs_ref=False, label="GRPO+seq-MIS")
def grpo_mis_seq(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""Sequence masked IS (TRL's default ``vllm_importance_sampling_mode="sequence_mask"``, its
    ``vllm_importance_sampling_clip_max`` = 3; verl's Seq-MIS preset, sequence IS with a
    sequence rejection bound):

        S_i = exp(sum_t ell_{i,t}),  w_i = S_i 1[S_i <= mis_seq_cap],  dL/dl_{i,t} = -w_i A_i / n.
    The comparison is done on log S_i (no overflow). verl's preset also rejects S_i below a
    lower bound; TRL has none by default, nor here.
    """
    log_cap = math.log(hp["mis_seq_cap"])
    log_s = _seq_log_ratio(logp, behavior_logp, mask)
    w = torch.where(log_s <= log_cap, torch.exp(log_s.clamp(max=log_cap)), 0.0).expand_as(mask)
    loss, A = _weighted_pg(logp, rewards, group_size, mask, w)
    return loss, A, _weight_health(w, mask, can_mask=True)


def _gspo_stats(logp, behavior_logp, mask, hp):
    """n / B of the whole batch: its mean response length (gspo's normalization)."""
    return {"gspo_len_mean": float(mask.sum() / mask.size(0))}


@register("gspo", needs_ref=False, label="GSPO", batch_stats=_gspo_stats, stats_read_logp=False)
def gspo(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""GSPO (Zheng et al., 2025) against the sampler (verl's bypass mode: old = rollout
    log-probs), in GSPO-token form:

        s_i = exp(mean_t ell_{i,t}),  s_{i,t} = sg(s_i) exp(l_{i,t} - sg(l_{i,t}))  (value s_i),
        loss = -(1/B) sum_i (1/|y_i|) sum_t min(s_{i,t} A_i, clip(s_{i,t}, 1-eps_l, 1+eps_h) A_i),
    so dL/dl_{i,t} = -s_i A_i / (B |y_i|), and 0 on every token of y_i when (A_i > 0 and
    s_i > 1 + gspo_eps_high) or (A_i < 0 and s_i < 1 - gspo_eps_low). B = responses in the
    batch; written as a token-mean, -(1/n) sum (n/B)/|y_i| ..., with n/B = gspo_len_mean of the
    whole batch (batch_stats), so micro-batches add up to the full-batch loss.
    The paper and verl (which forces seq-mean-token-mean) normalize this way; TRL's
    ``importance_sampling_level="sequence"`` uses its ``loss_type`` instead (default "dapo":
    token-mean, no 1/|y_i|). log s_i is clamped at 10 as in verl. With equal lengths
    (|y_i| = n/B) and s_i = 1 the gradient is GRPO's.
    clip_frac: share of response tokens in clipped responses.
    """
    A = _grpo_advantages(rewards, group_size)[:, None]
    lengths = mask.sum(1, keepdim=True).clamp(min=1)
    log_s = (_seq_log_ratio(logp, behavior_logp, mask) / lengths).clamp(max=10.0)
    s_tok = torch.exp(log_s + logp - logp.detach())
    lo, hi = 1.0 - hp["gspo_eps_low"], 1.0 + hp["gspo_eps_high"]
    tok = -torch.minimum(s_tok * A, s_tok.clamp(lo, hi) * A)
    s = log_s.exp()
    clipped = ((A > 0) & (s > hi)) | ((A < 0) & (s < lo))
    n = mask.sum()
    loss = (tok * (hp["gspo_len_mean"] / lengths) * mask).sum() / n
    return loss, A.view(-1).detach(), {"clip_frac": (clipped * mask).sum() / n}


def m2po_cutoff(sq, mask, threshold):
    """The M2PO cutoff of one rollout batch: sq = ell^2 per token [B, T], mask its response
    tokens. Sorting the n values v_1 >= v_2 >= ... >= v_n, k = the fewest largest ones to drop so
    that mean(v_{k+1}, ..., v_n) <= threshold (k = n if no such k < n: every token dropped);
    returns v_k (+inf for k = 0). Tokens with sq < cutoff are kept: tokens tied with v_k go
    with it, so the kept set does not depend on the order of a sort (it still meets the rule:
    dropping values >= the mean of the rest never raises that mean)."""
    v = torch.sort(sq[mask.bool()], descending=True).values
    left = v.flip(0).to(torch.float64).cumsum(0).flip(0)  # left[k] = sum of v[k:]
    means = left / torch.arange(v.numel(), 0, -1, device=v.device, dtype=torch.float64)
    ok = torch.nonzero(means <= threshold)
    k = int(ok[0]) if ok.numel() else v.numel()
    return math.inf if k == 0 else float(v[k - 1])


def _m2po_stats(logp, behavior_logp, mask, hp):
    sq = (logp.detach() - behavior_logp) ** 2
    return {"m2_cutoff": m2po_cutoff(sq, mask, hp["m2_threshold"])}


@register("m2po", needs_ref=False, label="M2PO", batch_stats=_m2po_stats)
def m2po(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""M2PO (Zheng, Zhao and Chen, 2025, "Prosperity before Collapse"), the paper's Algorithm 1
    against the sampler: over all response tokens of the rollout batch, drop the tokens of
    largest ell^2 one by one until M2 = mean of ell^2 over the tokens left <= m2_threshold
    (m2po_cutoff; the rule is a property of the whole batch: its cutoff is a batch statistic),

        w_{i,t} = rho_{i,t} 1[ell_{i,t}^2 < cutoff],  dL/dl_{i,t} = -w_{i,t} A_i / n  (no ratio clip).
    The paper's repository (Infini-AI-Lab/M2PO, on verl) caps instead of dropping: over the
    "harmful" tokens only ((A > 0, rho > 1) or (A < 0, rho < 1)) it solves for tau such that
    capping |ell| at tau brings their M2 to the budget, turns tau into PPO clip bounds
    [exp(-tau), exp(tau)] no tighter than [0.7, 1.5], and does so per micro-batch. AReaL
    (``m2_threshold``) drops as here (strict <, keeping at least one token) but on
    ell = proximal - behavior, per micro-batch, inside decoupled PPO; at one update per batch
    its proximal policy is the learner, as here.
    Metric m2po_m2: M2 before dropping, mean ell^2 over all response tokens.
    """
    ell = logp.detach() - behavior_logp
    sq = ell ** 2
    w = torch.where(sq < hp["m2_cutoff"], torch.exp(ell), 0.0) * mask
    loss, A = _weighted_pg(logp, rewards, group_size, mask, w)
    return loss, A, {"m2po_m2": (sq * mask).sum() / mask.sum(), **_weight_health(w, mask, can_mask=True)}


@register("ds_mask", needs_ref=False, label="PPO+OPSM")
def ds_mask(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""DeepSeek-V3.2's off-policy sequence masking (TRL ``off_policy_mask_threshold``) on PPO's
    clip against the sampler (``grpo`` with ``grpo_anchor: behavior``):

        rho = exp(l - b) (with gradient), drop_i = A_i < 0 and mean_t(b - l)_{i,t} > ds_mask_delta,
        loss = -(1/n) sum_{i,t} mask (1 - drop_i) min(rho A_i, clip(rho, 1-eps_l, 1+eps_h) A_i),
    so dL/dl_{i,t} = -rho A_i (1 - drop_i) / n where the clip is inactive, else 0.
    TRL keeps A_i >= 0 and measures the KL against the sampler's log-probs, as here; DeepSeek
    states it for the PPO ratio against the sampling policy (their "old" policy).
    Metrics: is_masked_frac = share of response tokens in dropped responses; clip_frac =
    share of response tokens clipped among the kept ones.
    """
    A = _grpo_advantages(rewards, group_size)
    tok, clipped = _clipped_surrogate(logp, behavior_logp, A[:, None], hp["clip_low"], hp["clip_high"])
    lengths = mask.sum(1).clamp(min=1)
    kl = -_seq_log_ratio(logp, behavior_logp, mask).view(-1) / lengths
    keep = (~((A < 0) & (kl > hp["ds_mask_delta"]))).to(mask.dtype)[:, None]
    n = mask.sum()
    extra = {"clip_frac": (clipped * keep * mask).sum() / n,
             "is_masked_frac": ((1 - keep) * mask).sum() / n}
    return (tok * keep * mask).sum() / n, A.detach(), extra


# ---- issue 31, part 1 ----


# ---- issue 31, part 2 ----


def k3(logp, behavior_logp, mask):
    """Token-mean over mask of (rho - 1) - log rho, rho = exp(logp - behavior_logp), detached:
    an estimate of KL(behavior || learner) (Schulman, 2020). Padding positions are ignored."""
    mb = mask.bool()
    lr = torch.where(mb, logp.detach() - behavior_logp.detach(), 0.0)
    return ((torch.exp(lr) - 1 - lr) * mb).sum() / mb.sum()


def entropy_from_logits(logits, mask):
    """Token-mean entropy over mask of softmax(logits), logits [B, T, V] aligned with mask [B, T].

    H = logsumexp(z) - sum_v softmax(z)_v z_v, computed as -sum p log_softmax(z) in float32
    (or wider); -inf logits are allowed. Call it under torch.no_grad()."""
    z = logits.to(torch.promote_types(logits.dtype, torch.float32))
    logq = torch.log_softmax(z, -1)
    h = -torch.where(logq > -math.inf, logq.exp() * logq, 0.0).sum(-1)
    mb = mask.bool()
    return torch.where(mb, h, 0.0).sum() / mb.sum()


def _check_name(name):
    if name not in LOSSES:
        raise ValueError(f"unknown loss name {name!r}; choose one of {sorted(LOSSES)}")


def check_hparams(name, hparams):
    """The full hyperparameter dict (DEFAULTS updated by ``hparams``); ValueError naming a bad one."""
    unknown = sorted(set(hparams) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"unknown hyperparameter(s) {unknown} for compute_loss; "
                         f"allowed keys are {sorted(DEFAULTS)}")
    hp = {**DEFAULTS, **hparams}
    for key in ("beta", "clip_low", "clip_high", "tis_cap", "mis_low", "mis_high", "icepop_low",
                "icepop_high", "tis_seq_cap", "mis_seq_cap", "gspo_eps_low", "gspo_eps_high",
                "m2_threshold", "ds_mask_delta"):
        v = hp[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"{key} must be a finite number, got {v!r}; parse it as a float")
    if hp["grpo_anchor"] not in ("proximal", "behavior"):
        raise ValueError(f"unknown grpo_anchor {hp['grpo_anchor']!r}; use 'proximal' or 'behavior'")
    if hp["ggpo_variant"] not in ("detached", "original"):
        raise ValueError(f"unknown ggpo_variant {hp['ggpo_variant']!r}; use 'detached' or 'original'")
    if name != "grpo" and hp["grpo_anchor"] != "proximal":
        raise ValueError(f"{name} has no anchor to choose (grpo_tis always uses the proximal anchor, "
                         "the corrections are ratios against the sampler); grpo_anchor='behavior' is "
                         "for 'grpo' only (drop it or set it to 'proximal')")
    for low, high in (("mis_low", "mis_high"), ("icepop_low", "icepop_high")):
        if not 0 <= hp[low] < hp[high]:
            raise ValueError(f"need 0 <= {low} < {high}, got {hp[low]}, {hp[high]}")
    for key in ("tis_seq_cap", "mis_seq_cap"):
        if hp[key] <= 0:
            raise ValueError(f"{key} must be > 0, got {hp[key]}")
    if not 0 <= hp["gspo_eps_low"] < 1 or hp["gspo_eps_high"] < 0:
        raise ValueError(f"need 0 <= gspo_eps_low < 1 and gspo_eps_high >= 0, got "
                         f"{hp['gspo_eps_low']}, {hp['gspo_eps_high']}")
    if hp["m2_threshold"] < 0:
        raise ValueError(f"m2_threshold must be >= 0 (a mean of squares), got {hp['m2_threshold']}")
    if not 0 <= hp["clip_low"] < 1 or hp["clip_high"] < 0:
        raise ValueError(f"need 0 <= clip_low < 1 and clip_high >= 0, got {hp['clip_low']}, {hp['clip_high']}")
    if hp["tis_cap"] <= 0:
        raise ValueError(f"tis_cap must be > 0, got {hp['tis_cap']}")
    if hp["beta"] < 0 or (name == "ggpo" and hp["beta"] <= 0):
        raise ValueError(f"beta must be >= 0 (and > 0 for ggpo, which divides by it), got {hp['beta']}")
    return hp


def _check_tensors(name, logp, behavior_logp, ref_logp, mask, rewards, m):
    if isinstance(m, bool) or not isinstance(m, int) or m < 2:
        raise ValueError(f"group_size must be an int >= 2 (baselines need two responses), got {m!r}")
    if ref_logp is None and LOSSES[name].needs_ref:
        raise ValueError(f"{name} needs ref_logp (reference log-probs); pass them, see needs_ref")
    named = {"logp": logp, "behavior_logp": behavior_logp, "mask": mask, "rewards": rewards}
    if ref_logp is not None:
        named["ref_logp"] = ref_logp
    for k, v in named.items():
        if not isinstance(v, torch.Tensor):
            raise ValueError(f"{k} must be a torch.Tensor, got {type(v).__name__}")
    if logp.dim() != 2:
        raise ValueError(f"logp must be [B, T] (batch, response tokens), got shape {tuple(logp.shape)}")
    for k in ("behavior_logp", "ref_logp", "mask"):
        if k in named and named[k].shape != logp.shape:
            raise ValueError(f"{k} has shape {tuple(named[k].shape)} but logp has {tuple(logp.shape)}; "
                             "all per-token inputs must be [B, T] and aligned")
    B = logp.shape[0]
    if rewards.shape != (B,):
        raise ValueError(f"rewards must have shape ({B},) (one per response), got {tuple(rewards.shape)}")
    if B % m:
        raise ValueError(f"batch size {B} is not a multiple of group_size {m}; rows i*m..i*m+m-1 "
                         "must form one group")
    if not ((mask == 0) | (mask == 1)).all():
        raise ValueError("mask must hold only 0 and 1 (1 on response tokens, 0 on padding)")
    mb = mask.bool()
    if not mb.any():
        raise ValueError("mask is all zero: the batch has no response tokens to train on")
    for k in ("logp", "behavior_logp", "ref_logp"):
        if k in named and not torch.isfinite(named[k].detach()[mb]).all():
            raise ValueError(f"{k} holds NaN/inf on response tokens (mask == 1); check the "
                             "forward pass / sampler log-probs")
    if not torch.isfinite(rewards).all():
        raise ValueError("rewards hold NaN/inf; every response needs a finite reward")


def is_health(logp, behavior_logp, mask):
    r"""Importance-sampling health of a batch, from the raw ratio rho = exp(ell), ell = l - b,
    before any truncation, over response tokens (mask; padding ignored), detached:

        is_log_ratio_mean    = mean ell  (-KL(mu || learner) estimate, k1)
        is_ratio_min/max     = min / max rho
        is_chi2_token        = mean rho^2 - 1                               (token chi^2)
        is_chi2_seq          = mean_i exp(2 clamp(sum_t ell_{i,t}, -20, 20)) - 1  (sequence chi^2)
        is_seq_log_ratio_max = max_i |sum_t ell_{i,t}|
    chi^2 as verl's compute_offpolicy_metrics, ell clamped to +-20 inside the squares (no overflow)."""
    mb = mask.bool()
    n = mb.sum()
    ell = torch.where(mb, logp.detach() - behavior_logp.detach(), 0.0)
    rho = torch.exp(ell)
    seq = ell.sum(1)
    return {"is_log_ratio_mean": ell.sum() / n,
            "is_ratio_min": torch.where(mb, rho, math.inf).min(),
            "is_ratio_max": torch.where(mb, rho, -math.inf).max(),
            "is_chi2_token": (torch.exp(2 * ell.clamp(-20, 20)) * mb).sum() / n - 1,
            "is_chi2_seq": torch.exp(2 * seq.clamp(-20, 20)).mean() - 1,
            "is_seq_log_ratio_max": seq.abs().max()}


def _clean_inputs(logp, behavior_logp, ref_logp, mask):
    """Padding -> 0 (it may hold anything), one float dtype (>= float32); logp keeps its graph."""
    dt = torch.promote_types(logp.dtype, torch.float32)
    mb = mask.bool()

    def clean(x, grad=False):
        if x is None:
            return None
        x = x.to(dt) if grad else x.detach().to(dt)
        return torch.where(mb, x, 0.0)

    return clean(logp, grad=True), clean(behavior_logp), clean(ref_logp), mb, dt


def batch_stats(name, *, logp, behavior_logp, mask, **hparams):
    """The statistics of the whole rollout batch that objective ``name`` reads ({} for most):
    m2po's cutoff ``m2_cutoff`` and gspo's mean response length ``gspo_len_mean``, as floats.
    A trainer that splits the batch into micro-batches computes them once from the whole
    batch's log-probs (no gradient needed) and passes them to every compute_loss call, so the
    micro-batches give the update of one full batch. Where they need the mask alone
    (``batch_stats_read_logp``), logp and behavior_logp may be None."""
    _check_name(name)
    hp = check_hparams(name, hparams)
    fn = LOSSES[name].batch_stats
    if fn is None:
        return {}
    if logp is None and behavior_logp is None and not LOSSES[name].stats_read_logp:
        return fn(None, None, mask.bool().to(torch.promote_types(mask.dtype, torch.float32)), hp)
    if (logp is None or behavior_logp is None or logp.dim() != 2
            or behavior_logp.shape != logp.shape or mask.shape != logp.shape):
        shape = lambda x: None if x is None else tuple(x.shape)
        raise ValueError(f"batch_stats of {name} needs logp, behavior_logp and mask of one [B, T] "
                         f"shape, got {shape(logp)}, {shape(behavior_logp)}, {shape(mask)}")
    lp, blp, _, mb, dt = _clean_inputs(logp.detach(), behavior_logp, None, mask)
    return fn(lp, blp, mb.to(dt), hp)


def compute_loss(name, *, logp, behavior_logp, ref_logp=None, mask, rewards, group_size,
                 batch_stats=None, **hparams):
    """Validate inputs, run objective ``name`` and add the common diagnostics.

    Returns (loss: scalar tensor with gradient w.r.t. logp, metrics: dict of floats) with
    metrics loss, k3, coef_correct_sum (per mixed group, the signed sum of the per-response
    coefficient over correct responses, averaged; nan without a mixed group), coef_abs_mean
    (mean |coefficient| over responses), the objective's own ones (clip_frac first where a clip
    can act), and is_health. ``batch_stats``: losses.batch_stats(...) of the whole rollout batch
    when this call holds part of it; None: computed here (objectives that need them).
    Raises ValueError on bad input."""
    _check_name(name)
    hp = check_hparams(name, hparams)
    _check_tensors(name, logp, behavior_logp, ref_logp, mask, rewards, group_size)
    lp, blp, rlp, mb, dt = _clean_inputs(logp, behavior_logp, ref_logp, mask)
    r = rewards.detach().to(device=logp.device, dtype=dt)
    objective = LOSSES[name]
    if objective.batch_stats is not None:
        if batch_stats is None:  # this call holds the whole batch
            batch_stats = objective.batch_stats(lp, blp, mb.to(dt), hp)
        elif not isinstance(batch_stats, dict) or not batch_stats:
            raise ValueError(f"{name} needs batch_stats=losses.batch_stats({name!r}, ...) of the "
                             f"whole rollout batch (or None), got {batch_stats!r}")
        hp = {**hp, **batch_stats}
    loss, coef, extra = objective.fn(lp, blp, rlp, mb.to(dt), r, group_size, hp)

    g, correct = coef.view(-1, group_size), (r == 1).view(-1, group_size)
    k = correct.sum(1)
    mixed = (k > 0) & (k < group_size)
    w_correct = (g * correct).sum(1)
    clip = {"clip_frac": extra.pop("clip_frac")} if "clip_frac" in extra else {}
    stats = {"loss": loss.detach(), "k3": k3(lp, blp, mb), **clip,
             "coef_correct_sum": w_correct[mixed].mean() if mixed.any() else torch.full((), math.nan, device=lp.device),
             "coef_abs_mean": coef.abs().mean(), **extra, **is_health(lp, blp, mb)}
    values = torch.stack([v.detach().to(dt) for v in stats.values()]).tolist()  # one device sync
    return loss, dict(zip(stats, values))
