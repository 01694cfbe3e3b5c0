r"""The four objectives of the staleness study, as pure functions of tensors, plus diagnostics.

Notation (one prompt, a group of m responses y_1..y_m sampled by the behavior policy mu,
rewards r_i; rows i*m .. i*m+m-1 of a batch form one group). Per token: learner log-prob
``logp`` (carries gradient), behavior log-prob ``behavior_logp`` (from the sampler),
reference log-prob ``ref_logp``. Sequence sums over response tokens:
L_i = sum_t logp, B_i = sum_t behavior_logp, R_i = sum_t ref_logp.

Normalization: every objective is divided by n = mask.sum(), the number of response tokens
in the whole batch (token-mean). The four objectives therefore differ only in their
per-response coefficient and per-token weighting, and one learning rate means the same step
scale for all of them.

Entry point (what train.py calls)::

    loss, metrics = compute_loss(name, logp=, behavior_logp=, ref_logp=, mask=, rewards=,
                                 group_size=m, **hparams)

``name`` is a key of ``LOSSES``; ``hparams`` keys are those of ``DEFAULTS`` (the one place
the hyperparameter defaults live; configs/defaults.yaml repeats them and a test keeps the two equal). ``metrics`` is a
dict of Python floats: loss, k3, clip_frac, coef_correct_sum, coef_abs_mean, and
tis_weight_mean / tis_clip_frac (grpo_tis), ggpo_ess_success (ggpo).
A response is "correct" when r_i == 1; a group is "mixed" when it has at least one correct
and one not-correct response.

Every objective is registered on the line above its function, ``@register(name, needs_ref=...,
label=...)``, and has the signature
``fn(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp) -> (loss, coef, extra)``
with ``coef`` the detached per-response coefficient [B] and ``extra`` a dict of scalar
tensors. They expect what compute_loss hands them: mask a float 0/1 tensor, padding positions
of every [B, T] input set to 0, behavior/ref detached, ``hp`` the full hyperparameter dict.
"""
import math
from dataclasses import dataclass
from typing import Callable

import torch

DEFAULTS = {"beta": 0.01, "clip_low": 0.2, "clip_high": 0.2, "tis_cap": 2.0,
            "grpo_anchor": "proximal", "ggpo_variant": "detached"}


@dataclass(frozen=True)
class Objective:
    fn: Callable          # (logp, behavior_logp, ref_logp, mask, rewards, group_size, hp) -> (loss, coef, extra)
    needs_ref: bool       # reads ref_logp: the trainer keeps a reference model only for these
    label: str            # name in figures and tables


LOSSES = {}  # name -> Objective, in registration order (the order of every figure's legend)


def register(name, *, needs_ref, label):
    """Register the decorated function as objective ``name`` (the config's ``loss``)."""
    def add(fn):
        if name in LOSSES:
            raise ValueError(f"objective {name!r} is registered twice")
        LOSSES[name] = Objective(fn, needs_ref, label)
        return fn
    return add


def needs_ref(name):
    """True when objective ``name`` needs reference log-probs (so the trainer can skip them)."""
    _check_name(name)
    return LOSSES[name].needs_ref


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
    return (tok * mask).sum() / n, A.detach(), {"clip_frac": (clipped * mask).sum() / n}


@register("grpo_tis", needs_ref=False, label="GRPO+TIS")
def grpo_tis(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""GRPO+TIS: GRPO with the proximal anchor, each token loss times a truncated IS weight.

        w_{i,t} = min(exp(logp_{i,t} - blogp_{i,t}), C)   (detached, C = tis_cap),
        loss = -(1/n) sum_{i,t} mask_{i,t} w_{i,t} min(rho A_i, clip(rho, 1-eps_l, 1+eps_h) A_i),
    rho = exp(logp - logp.detach()), so the gradient per token is -w_{i,t} A_i / n.
    """
    A = _grpo_advantages(rewards, group_size)
    tok, clipped = _clipped_surrogate(logp, logp.detach(), A[:, None], hp["clip_low"], hp["clip_high"])
    raw = torch.exp(logp.detach() - behavior_logp)
    w = raw.clamp(max=hp["tis_cap"])
    n = mask.sum()
    extra = {"clip_frac": (clipped * mask).sum() / n,
             "tis_weight_mean": (w * mask).sum() / n,
             "tis_clip_frac": ((raw >= hp["tis_cap"]) * mask).sum() / n}
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
    return loss, c, {"clip_frac": (dropped * mask).sum() / n, "ggpo_ess_success": ess_mean}


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
    for key in ("beta", "clip_low", "clip_high", "tis_cap"):
        v = hp[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"{key} must be a finite number, got {v!r}; parse it as a float")
    if hp["grpo_anchor"] not in ("proximal", "behavior"):
        raise ValueError(f"unknown grpo_anchor {hp['grpo_anchor']!r}; use 'proximal' or 'behavior'")
    if hp["ggpo_variant"] not in ("detached", "original"):
        raise ValueError(f"unknown ggpo_variant {hp['ggpo_variant']!r}; use 'detached' or 'original'")
    if name == "grpo_tis" and hp["grpo_anchor"] != "proximal":
        raise ValueError("grpo_tis always uses the proximal anchor; grpo_anchor='behavior' is for "
                         "'grpo' only (drop it or set it to 'proximal')")
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


def compute_loss(name, *, logp, behavior_logp, ref_logp=None, mask, rewards, group_size, **hparams):
    """Validate inputs, run objective ``name`` and add the common diagnostics.

    Returns (loss: scalar tensor with gradient w.r.t. logp, metrics: dict of floats) with
    metrics loss, k3, clip_frac, coef_correct_sum (per mixed group, the signed sum of the
    per-response coefficient over correct responses, averaged; nan without a mixed group),
    coef_abs_mean (mean |coefficient| over responses), plus the objective's own ones.
    Raises ValueError on bad input."""
    _check_name(name)
    hp = check_hparams(name, hparams)
    _check_tensors(name, logp, behavior_logp, ref_logp, mask, rewards, group_size)
    dt = torch.promote_types(logp.dtype, torch.float32)
    mb = mask.bool()

    def clean(x, grad=False):  # padding -> 0 (may hold anything), common dtype
        if x is None:
            return None
        x = x.to(dt) if grad else x.detach().to(dt)
        return torch.where(mb, x, 0.0)

    lp, blp, rlp = clean(logp, grad=True), clean(behavior_logp), clean(ref_logp)
    r = rewards.detach().to(device=logp.device, dtype=dt)
    loss, coef, extra = LOSSES[name].fn(lp, blp, rlp, mb.to(dt), r, group_size, hp)

    g, correct = coef.view(-1, group_size), (r == 1).view(-1, group_size)
    k = correct.sum(1)
    mixed = (k > 0) & (k < group_size)
    w_correct = (g * correct).sum(1)
    stats = {"loss": loss.detach(), "k3": k3(lp, blp, mb),
             "clip_frac": extra.pop("clip_frac", torch.zeros((), device=lp.device)),
             "coef_correct_sum": w_correct[mixed].mean() if mixed.any() else torch.full((), math.nan, device=lp.device),
             "coef_abs_mean": coef.abs().mean(), **extra}
    values = torch.stack([v.detach().to(dt) for v in stats.values()]).tolist()  # one device sync
    return loss, dict(zip(stats, values))
