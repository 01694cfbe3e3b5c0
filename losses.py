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
rho = exp(l - b). The corrections (grpo_mis, icepop_primerl, grpo_tis_seq, grpo_mis_seq, m2po,
cispo, topr, vespo) are GRPO's coefficient A_i times a detached per-token weight w_{i,t} (0 =
masked):

    loss = -(1/n) sum_{i,t} mask A_i w_{i,t} exp(l - sg(l)),   dL/dl_{i,t} = -A_i w_{i,t} / n;

gspo, ds_mask, ds_v32 and icepop are PPO clips (icepop's against the learner's own log-probs of
the sampling weights, ``old_logp``), gmpo a clipped geometric mean, sapo a smooth gate, kimi a
squared log-ratio penalty. DESIGN.md lists the references and the equivalences (decoupled PPO,
RLOO, PPO against the sampler).

Entry point (what train.py calls)::

    loss, metrics = compute_loss(name, logp=, behavior_logp=, ref_logp=, mask=, rewards=,
                                 group_size=m, batch_stats=None, old_logp=None, **hparams)

``name`` is a key of ``LOSSES``; ``hparams`` keys are those of ``DEFAULTS`` (the one place
the hyperparameter defaults live; configs/defaults.yaml repeats them and a test keeps the two
equal). ``batch_stats``: statistics of the whole rollout batch that m2po, gspo and gmpo read
(``batch_stats()``); None: computed from this call's tensors, which is right when the call holds
the whole batch and wrong for one micro-batch of several. ``old_logp``: the learner's log-probs
of the tokens under the weights that sampled them, for icepop (``reads_old_logp``). ``metrics`` is a dict of Python
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
(with the batch statistics merged in, for objectives that declare them, and ``old_logp`` for
those that read it).
"""
import math
from dataclasses import dataclass, field
from typing import Callable

import torch

DEFAULTS = {}  # every objective's settings, key -> default: the union of their registrations
PPO_CLIP = {"clip_low": 0.2, "clip_high": 0.2}  # PPO's clip epsilons, shared by the clipped objectives
ADV_EPS = 1e-6  # GRPO's std guard: A = (r - mean) / (std + ADV_EPS)
WEIGHT_EPS = 1e-8  # guard of a denominator that is a sum of weights or a spread (snis, vcpo)
LOG_RATIO_BOUND = 20.0  # |log rho| clamp before an exp (verl's and SkyRL's SAFETY_BOUND)
GSPO_LOG_RATIO_MAX = 10.0  # verl's cap on GSPO's log sequence ratio
VESPO_MIN_WEIGHT = 1e-8  # VESPO's floor on the sequence ratio before its gamma weight
VESPO_MIN_LAMBDA = 1e-4  # VESPO's floor on lambda
BINARY_KL_EPS = 1e-8  # SkyRL's guard inside the binary KL's log(1 - p)
BAPO_EPS = 1e-8  # BAPO's guard in the positive / negative contribution ratio
DUAL_CLIP_C = 3.0  # PPO's dual clip of verl (clip_ratio_c): loss <= -c A for A < 0


@dataclass(frozen=True)
class Objective:
    """What an objective is and what it needs from the loop; every field but fn and label has a
    default that needs nothing."""
    fn: Callable          # (logp, behavior_logp, ref_logp, mask, rewards, group_size, hp) -> (loss, coef, extra)
    label: str            # name in figures and tables
    hparams: dict = field(default_factory=dict)  # its settings: key -> default
    checks: tuple = ()    # (hp, name) -> None each, ValueError naming a bad setting; they run on
                          #   every call, for every objective's settings (a bad value is an error
                          #   whichever objective runs)
    needs_ref: bool = False       # reads ref_logp: the trainer keeps a reference model only for these
    reads_old_logp: bool = False  # reads hp["old_logp"]: the learner's log-probs of each token
                                  #   under the weights that sampled it (icepop)
    needs_grad_sq: bool = False   # reads hp["response_grad_sq"]: ||grad_theta sum_t logp||^2 of each
                                  #   response, which the trainer measures first (vcpo's baseline)
    batch_stats: Callable = None  # (logp, behavior_logp, mask, hp) -> {key: float} of the whole
                                  #   rollout batch, merged into hp (m2po, gspo); None: none needed
    stats_read_logp: bool = True  # batch_stats reads the log-probs (m2po), not just the mask (gspo)
    stats_read_rewards: bool = False  # batch_stats reads hp["rewards"], hp["group_size"]
    prepare: Callable = None  # (loss_args, staleness) -> loss_args for one batch, staleness = learner
                              #   version - mean sampler version of the batch (a3po's alpha)
    lr_scale: Callable = None  # (seq_log_ratio [B] of the whole batch) -> this step's lr factor (vcpo)


LOSSES = {}  # name -> Objective, in registration order (the order of every figure's legend)


def register(name, *, label, hparams=None, checks=(), **needs):
    """Register the decorated function as objective ``name`` (the config's ``loss``), with its
    settings ``hparams`` (key -> default; a key two objectives share must have one default), the
    ``checks`` of those settings and what it ``needs`` (the other fields of Objective)."""
    def add(fn):
        if name in LOSSES:
            raise ValueError(f"objective {name!r} is registered twice")
        for key, default in (hparams or {}).items():
            if key in DEFAULTS and DEFAULTS[key] != default:
                raise ValueError(f"{name} sets {key} = {default!r} by default, another objective "
                                 f"{DEFAULTS[key]!r}: a shared setting has one default")
            DEFAULTS[key] = default
        LOSSES[name] = Objective(fn, label, dict(hparams or {}), tuple(checks), **needs)
        return fn
    return add


def objective(name) -> Objective:
    """The registered objective ``name``; ValueError naming the choices if there is none."""
    if name not in LOSSES:
        raise ValueError(f"unknown loss name {name!r}; choose one of {sorted(LOSSES)}")
    return LOSSES[name]


# ----------------------------------------------------------------------------- settings' checks

def _require_numbers(hp, keys, nonnegative=False):
    """Each of hp[keys] a finite int or float (not a bool, not a string from YAML), and >= 0 if
    `nonnegative`; else ValueError naming the key."""
    for key in keys:
        v = hp[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"{key} must be a finite number, got {v!r}; parse it as a float")
        if nonnegative and v < 0:
            raise ValueError(f"{key} must be >= 0, got {v}")


def _nonnegative(*keys):
    """A check: each key a finite number >= 0."""
    return lambda hp, name: _require_numbers(hp, keys, nonnegative=True)


def _positive(*keys):
    """A check: each key a finite number > 0."""
    def check(hp, name):
        _require_numbers(hp, keys)
        for key in keys:
            if hp[key] <= 0:
                raise ValueError(f"{key} must be > 0, got {hp[key]}")
    return check


def _choice(key, **meanings):
    """A check: hp[key] one of the keyword names (each value says what it means)."""
    def check(hp, name):
        if hp[key] not in meanings:
            ways = " or ".join(f"{k!r} ({v})" if v else repr(k) for k, v in meanings.items())
            raise ValueError(f"unknown {key} {hp[key]!r}; use {ways}")
    return check


def _check_ppo_clip(hp, name):
    _require_numbers(hp, ("clip_low", "clip_high"))
    if not 0 <= hp["clip_low"] < 1 or hp["clip_high"] < 0:
        raise ValueError(f"need 0 <= clip_low < 1 and clip_high >= 0, got {hp['clip_low']}, {hp['clip_high']}")


def _band(low, high):
    """A check: 0 <= hp[low] < hp[high], both numbers."""
    def check(hp, name):
        _require_numbers(hp, (low, high))
        if not 0 <= hp[low] < hp[high]:
            raise ValueError(f"need 0 <= {low} < {high}, got {hp[low]}, {hp[high]}")
    return check


def _grpo_advantages(rewards, m):
    """A_i = (r_i - mean r) / (std r + 1e-6) per group, std unbiased (as DeepSeekMath and TRL)."""
    g = rewards.view(-1, m)
    return ((g - g.mean(1, keepdim=True)) / (g.std(1, keepdim=True) + ADV_EPS)).view(-1)


def _clipped_surrogate(logp, anchor, A, clip_low, clip_high):
    """Token loss -min(rho A, clip(rho, 1-eps_low, 1+eps_high) A), rho = exp(logp - anchor),
    and the mask of tokens where the clipped branch is active (its gradient is zero)."""
    rho = torch.exp(logp - anchor)
    lo, hi = 1.0 - clip_low, 1.0 + clip_high
    token_loss = -torch.minimum(rho * A, rho.clamp(lo, hi) * A)
    clipped = ((A > 0) & (rho > hi)) | ((A < 0) & (rho < lo))
    return token_loss, clipped


def _check_grpo_anchor(hp, name):
    _choice("grpo_anchor", proximal="", behavior="")(hp, name)
    if name != "grpo" and hp["grpo_anchor"] != "proximal":
        raise ValueError(f"{name} has no anchor to choose (grpo_tis always uses the proximal anchor, "
                         "the corrections are ratios against the sampler); grpo_anchor='behavior' is "
                         "for 'grpo' only (drop it or set it to 'proximal')")


@register("grpo", label="GRPO", hparams={**PPO_CLIP, "grpo_anchor": "proximal"},
          checks=(_check_ppo_clip, _check_grpo_anchor))
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


@register("grpo_tis", label="GRPO+TIS", hparams={**PPO_CLIP, "tis_cap": 2.0},
          checks=(_check_ppo_clip, _positive("tis_cap")))
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


def _check_beta(hp, name):
    _require_numbers(hp, ("beta",))
    if hp["beta"] < 0 or (name == "ggpo" and hp["beta"] <= 0):
        raise ValueError(f"beta must be >= 0 (and > 0 for ggpo, which divides by it), got {hp['beta']}")


@register("agro", label="AGRO", hparams={"beta": 0.01}, checks=(_check_beta,), needs_ref=True)
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


@register("ggpo", label="GGPO", hparams={"beta": 0.01, **PPO_CLIP, "ggpo_variant": "detached"},
          checks=(_check_beta, _check_ppo_clip, _choice("ggpo_variant", detached="", original="")),
          needs_ref=True)
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


def _token_masked_is(logp, behavior_logp, mask, rewards, group_size, low, high, direction="both"):
    """w = rho 1[low <= rho <= high], rho = exp(l - b): masked token IS. direction "harmful"
    masks only where the ratio left the band in its advantage's direction, (A > 0, rho > high)
    or (A < 0, rho < low), and keeps w = rho elsewhere."""
    rho = torch.exp(logp.detach() - behavior_logp)
    if direction == "both":
        keep = (rho >= low) & (rho <= high)
    else:
        A = _grpo_advantages(rewards, group_size)[:, None]
        keep = ~(((A > 0) & (rho > high)) | ((A < 0) & (rho < low)))
    w = torch.where(keep, rho, 0.0)
    loss, A = _weighted_pg(logp, rewards, group_size, mask, w)
    return loss, A, _weight_health(w, mask, can_mask=True)


@register("grpo_mis", label="GRPO+MIS",
          hparams={"mis_low": 0.0, "mis_high": 5.0, "mis_direction": "both"},
          checks=(_band("mis_low", "mis_high"), _choice("mis_direction", both="", harmful="")))
def grpo_mis(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""Token masked IS (TRL ``vllm_importance_sampling_mode="token_mask"``; AReaL's decoupled PPO
    with ``behav_imp_weight_cap`` at one update per batch, where its proximal policy is the learner).

        w_{i,t} = rho_{i,t} 1[mis_low <= rho_{i,t} <= mis_high],   rho = exp(l - b) detached,
        dL/dl_{i,t} = -w_{i,t} A_i / n.
    References: TRL multiplies its PPO loss against the trainer's recomputed old log-probs by
    this weight (old vs vLLM); AReaL's cap drops tokens with rho > cap only (no lower bound, as
    mis_low = 0 here) and applies it to the ratio proximal / behavior.

    ``mis_direction: harmful`` is not a published method but the direction ablation of the
    leaderboard (docs/leaderboard.md): the mask acts only where rho has left the band in the
    advantage's direction, w = rho 1[not ((A > 0, rho > mis_high) or (A < 0, rho < mis_low))].
    With the band [1 - clip_low, 1 + clip_high] its gradient is exactly PPO's clip against the
    sampler (``grpo`` with ``grpo_anchor: behavior``): there the clipped branch is active, and
    the gradient zero, on those tokens only, and is rho A elsewhere.
    """
    return _token_masked_is(logp, behavior_logp, mask, rewards, group_size,
                            hp["mis_low"], hp["mis_high"], hp["mis_direction"])


@register("icepop", label="IcePop (Ring-1T)", hparams={**PPO_CLIP, "icepop_low": 0.5, "icepop_high": 5.0},
          checks=(_check_ppo_clip, _band("icepop_low", "icepop_high")), reads_old_logp=True)
def icepop(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""IcePop as the Ring-1T report publishes it (Ling team, arXiv 2510.18855, Sec. IcePop; its
    blog ringtech.notion.site/icepop; TRL's paper index, "Masked Importance Sampling", and slime's
    ``loss.py`` ``icepop_function`` write the same): the train/infer mismatch AT THE SAMPLING
    WEIGHTS masks PPO's clipped surrogate,

        k_{i,t} = pi_train(y_t; theta_old) / pi_infer(y_t; theta_old) = exp(o - b)  (detached),
        M(k) = k 1[icepop_low <= k <= icepop_high],   r_{i,t} = exp(l - o)  (with gradient),
        loss = -(1/n) sum_{i,t} mask M(k_{i,t}) min(r A_i, clip(r, 1-eps_l, 1+eps_h) A_i),
    so dL/dl_{i,t} = -M(k) r A_i / n where the clip is inactive, else 0.
    In this loop theta_old is the sampler's weights (version t-1-N) and both sides exist:
    b = ``behavior_logp`` is the engine's log-prob (pi_infer(theta_old)); o = ``old_logp`` is
    the learner's log-prob of the same token with the same weights, computed when the batch was
    sampled (learner.fresh_behavior; for a fresh batch, N = 0, the training forward pass), i.e.
    PPO's recomputed old log-prob pi_train(theta_old). So k is the engine-vs-learner numerical
    mismatch alone (what engine_k3 measures; ~1 on the CPU toy in float32, where the mask then
    never acts) and the staleness is in r, which PPO's clip bounds against the sampler's
    weights. With ``behavior_logp: learner`` b = o and k = 1 (config.py refuses it).
    Band [0.5, 5]: the IcePop blog's alpha, beta (quoted as the report's by rllm's icepop loss
    and TRL's IcePop test); prime-rl (0.2, 5), open-instruct ([1/beta, beta]) and a NeMo-RL fork
    ([0.5, 2]) quote others. The report normalizes per response (1/G sum_i 1/|y_i|); here the
    lab's token-mean. Metrics: is_masked_frac (k outside the band), is_weight_mean / is_ess of
    M(k), clip_frac (kept tokens whose PPO clip is active).
    """
    old = hp["old_logp"]
    A = _grpo_advantages(rewards, group_size)
    k = torch.exp(old - behavior_logp)
    w = torch.where((k >= hp["icepop_low"]) & (k <= hp["icepop_high"]), k, 0.0) * mask
    tok, clipped = _clipped_surrogate(logp, old, A[:, None], hp["clip_low"], hp["clip_high"])
    n = mask.sum()
    extra = {"clip_frac": (clipped * (w > 0) * mask).sum() / n, **_weight_health(w, mask, can_mask=True)}
    return (w * tok * mask).sum() / n, A.detach(), extra


@register("icepop_primerl", label="IcePop (prime-rl form)",
          hparams={"icepop_low": 0.5, "icepop_high": 5.0}, checks=(_band("icepop_low", "icepop_high"),))
def icepop_primerl(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""IcePop in the form prime-rl quotes (INTELLECT-3 technical report, arXiv 2512.16144, eq. 1;
    prime-rl PRs #2401 and #3526): the mask on the ratio of the CURRENT learner to the sampler,
    no PPO clip,

        w_{i,t} = rho_{i,t} 1[icepop_low <= rho_{i,t} <= icepop_high],  rho = exp(l - b) detached,
        dL/dl_{i,t} = -w A_i / n.
    The same masked token IS as grpo_mis, with a lower bound: tokens the learner now finds much
    less likely than the sampler did (rho < 0.5) are dropped too. At one update per batch rho
    holds the staleness and the engine mismatch together. The band is icepop's [0.5, 5]
    (prime-rl's own default is 0.2, 5: kept equal here so that the two forms differ only in
    form). This function was ``icepop`` before issue 31: the leaderboard's earlier icepop runs
    are runs of this objective.
    """
    return _token_masked_is(logp, behavior_logp, mask, rewards, group_size,
                            hp["icepop_low"], hp["icepop_high"])


def _seq_log_ratio(logp, behavior_logp, mask):
    """sum_t ell_{i,t} per response [B, 1], detached (padding holds 0 in both inputs)."""
    return ((logp.detach() - behavior_logp) * mask).sum(1, keepdim=True)


@register("grpo_tis_seq", label="GRPO+seq-TIS", hparams={"tis_seq_cap": 2.0},
          checks=(_positive("tis_seq_cap"),))
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


@register("grpo_mis_seq", label="GRPO+seq-MIS", hparams={"mis_seq_cap": 3.0},
          checks=(_positive("mis_seq_cap"),))
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


def _check_gspo_eps(hp, name):
    _require_numbers(hp, ("gspo_eps_low", "gspo_eps_high"))
    if not 0 <= hp["gspo_eps_low"] < 1 or hp["gspo_eps_high"] < 0:
        raise ValueError(f"need 0 <= gspo_eps_low < 1 and gspo_eps_high >= 0, got "
                         f"{hp['gspo_eps_low']}, {hp['gspo_eps_high']}")


@register("gspo", label="GSPO", hparams={"gspo_eps_low": 3e-4, "gspo_eps_high": 4e-4},
          checks=(_check_gspo_eps,), batch_stats=_gspo_stats, stats_read_logp=False)
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
    log_s = (_seq_log_ratio(logp, behavior_logp, mask) / lengths).clamp(max=GSPO_LOG_RATIO_MAX)
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


def _m2po_region(logp, behavior_logp, mask, rewards, group_size, tokens):
    """The tokens M2PO's rule runs over, [B, T] 0/1: ``trust_region`` (the paper's Algorithm 1,
    line 2, as the authors' ``_get_trust_region_tokens_delta_sq`` defines them: (A_i > 0 and
    rho > 1) or (A_i < 0 and rho < 1), tokens of zero advantage left out) or ``all``."""
    if tokens == "all":
        return mask
    A = _grpo_advantages(rewards, group_size)[:, None]
    ell = logp.detach() - behavior_logp
    return (((A > 0) & (ell > 0)) | ((A < 0) & (ell < 0))).to(mask.dtype) * mask


def _m2po_stats(logp, behavior_logp, mask, hp):
    sq = (logp.detach() - behavior_logp) ** 2
    region = _m2po_region(logp, behavior_logp, mask, hp["rewards"], hp["group_size"], hp["m2_tokens"])
    return {"m2_cutoff": m2po_cutoff(sq, region, hp["m2_threshold"])}


@register("m2po", label="M2PO", hparams={"m2_threshold": 0.04, "m2_tokens": "trust_region"},
          checks=(_nonnegative("m2_threshold"),
                  _choice("m2_tokens", trust_region="the M2PO paper's Algorithm 1",
                          all="AReaL's m2_threshold")),
          batch_stats=_m2po_stats, stats_read_rewards=True)
def m2po(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""M2PO (Zheng, Zhao and Chen, 2025, "Prosperity before Collapse", arXiv 2510.01161), the
    paper's Algorithm 1 against the sampler. ``m2_tokens: trust_region`` (default, the paper):
    T = the trust-region tokens of the rollout batch, (A_i > 0, rho > 1) or (A_i < 0, rho < 1)
    (the authors' Infini-AI-Lab/M2PO, verl/trainer/ppo/core_algos.py,
    ``_get_trust_region_tokens_delta_sq``; A_i = 0 left out); drop from T the tokens of largest
    ell^2 one by one while M2 = mean of ell^2 over the tokens left in T > m2_threshold
    (m2po_cutoff; a property of the whole batch: its cutoff is a batch statistic). Every token
    outside T keeps its weight, so the tokens that pull the learner back toward the sampler are
    never dropped. ``m2_tokens: all``: the same rule over every response token (AReaL's
    ``actor.m2_threshold``, areal/trainer/ppo/actor.py ``_apply_m2po_masking``; this
    objective's rule before issue 31). Either way

        w_{i,t} = rho_{i,t} (1 - 1[t in T] 1[ell_{i,t}^2 >= cutoff]),  dL/dl_{i,t} = -w A_i / n
    (no ratio clip). At one update per batch the paper's old policy is the sampler: rho =
    exp(l - b). The authors' repository implements the budget as an ADAPTIVE CLIP, not a mask
    (``kpo_clip_harmful_tokens`` / ``compute_m2po_policy_loss``): over T it solves for tau with
    sum_T min(ell^2, tau^2) = m2_threshold |T| and runs PPO's clip with bounds [exp(-tau),
    exp(tau)] (``miniclip_low/high`` floors, unset in its scripts), per micro-batch, against the
    learner's log-probs recomputed when the batch was sampled. PPO's clip zeroes exactly the
    gradient of the tokens of T with |ell| > tau and no other, so it is this mask with another
    cutoff: the clipped tokens count at tau^2 in its M2 instead of leaving it, which keeps a set
    that also meets Algorithm 1's budget and so drops at least as many tokens. Judged the same
    method (not registered twice). AReaL drops as here (strict <, keeping at least one token)
    but on ell = proximal - behavior, per micro-batch, inside decoupled PPO; at one update per
    batch its proximal policy is the learner, as here.
    Metric m2po_m2: M2 before dropping, mean ell^2 over the tokens the rule runs over (nan when
    there are none); m2po_region_frac: their share of the response tokens.
    """
    ell = logp.detach() - behavior_logp
    sq = ell ** 2
    region = _m2po_region(logp, behavior_logp, mask, rewards, group_size, hp["m2_tokens"])
    dropped = region * (sq >= hp["m2_cutoff"])
    w = torch.exp(ell) * (1 - dropped) * mask
    loss, A = _weighted_pg(logp, rewards, group_size, mask, w)
    n = mask.sum()
    return loss, A, {"m2po_m2": (sq * region).sum() / region.sum(), "m2po_region_frac": region.sum() / n,
                     **_weight_health(w, mask, can_mask=True)}


def _sampler_clip_kept(logp, behavior_logp, mask, rewards, group_size, hp, keep):
    """PPO's clip against the sampler on the responses `keep` [B, 1] holds: loss, A, metrics
    is_masked_frac (tokens of dropped responses) and clip_frac (kept tokens clipped)."""
    A = _grpo_advantages(rewards, group_size)
    tok, clipped = _clipped_surrogate(logp, behavior_logp, A[:, None], hp["clip_low"], hp["clip_high"])
    n = mask.sum()
    extra = {"clip_frac": (clipped * keep * mask).sum() / n,
             "is_masked_frac": ((1 - keep) * mask).sum() / n}
    return (tok * keep * mask).sum() / n, A.detach(), extra


@register("ds_mask", label="PPO+OPSM (δ 0.5, TRL's)", hparams={**PPO_CLIP, "ds_mask_delta": 0.5},
          checks=(_check_ppo_clip, lambda hp, name: _require_numbers(hp, ("ds_mask_delta",))))
def ds_mask(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""DeepSeek-V3.2's off-policy sequence masking (arXiv 2512.02556; TRL
    ``off_policy_mask_threshold``, grpo_trainer.py ``get_off_policy_mask``) on PPO's clip
    against the sampler (``grpo`` with ``grpo_anchor: behavior``):

        rho = exp(l - b) (with gradient), drop_i = A_i < 0 and mean_t(b - l)_{i,t} > ds_mask_delta,
        loss = -(1/n) sum_{i,t} mask (1 - drop_i) min(rho A_i, clip(rho, 1-eps_l, 1+eps_h) A_i),
    so dL/dl_{i,t} = -rho A_i (1 - drop_i) / n where the clip is inactive, else 0.
    ds_mask_delta = 0.5 is TRL's suggested starting point (its paper index: "the paper doesn't
    specify a delta value used"); DeepSeek gives none. TRL keeps A_i >= 0 and measures the KL
    against the sampler's log-probs, as here; DeepSeek states it for the PPO ratio against the
    sampling policy (their "old" policy: the inference framework's probabilities). This is the
    mask alone, as TRL offers it; DeepSeek's whole objective, with its importance-corrected K3
    term, is ``ds_v32``.
    Metrics: is_masked_frac = share of response tokens in dropped responses; clip_frac =
    share of response tokens clipped among the kept ones.
    """
    A = _grpo_advantages(rewards, group_size)
    lengths = mask.sum(1).clamp(min=1)
    kl = -_seq_log_ratio(logp, behavior_logp, mask).view(-1) / lengths
    keep = (~((A < 0) & (kl > hp["ds_mask_delta"]))).to(mask.dtype)[:, None]
    return _sampler_clip_kept(logp, behavior_logp, mask, rewards, group_size, hp, keep)


@register("ds_v32", label="DeepSeek-V3.2 (OPSM + K3)",
          hparams={**PPO_CLIP, "ds_mask_delta": 0.5, "ds_kl_beta": 0.001},
          checks=(_check_ppo_clip, _nonnegative("ds_kl_beta")), needs_ref=True)
def ds_v32(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""DeepSeek-V3.2's GRPO objective (arXiv 2512.02556, Sec. 3, "Unbiased KL Estimate" and
    "Off-Policy Sequence Masking"; TRL ``use_bias_correction_kl`` with
    ``off_policy_mask_threshold``): ``ds_mask`` plus the K3 estimate of KL(pi_theta || pi_ref)
    corrected by the ratio to the sampling policy, which at one update per batch is rho:

        k3_ref = exp(R - l) - (R - l) - 1   (R = ref_logp; Schulman's K3),
        loss = ds_mask's loss + ds_kl_beta (1/n) sum_{i,t} mask rho_{i,t} k3_ref_{i,t},
    rho = exp(l - b) with gradient, so the K3 term adds ds_kl_beta rho (l - R) / n to
    dL/dl_{i,t}: an importance-weighted gradient of KL(pi_theta || pi_ref), unbiased under mu.
    The mask acts on the surrogate only, not on the KL term (the report's J; TRL likewise).
    DeepSeek sets the KL weight per domain and writes that a weak one or none can do better
    in some domains, without a value: ds_kl_beta = 0.001 is TRL's (taken from DeepSeek-R1).
    At logp == behavior_logp == ref_logp it is GRPO. Metrics: ds_mask's, and ds_kl = the
    corrected estimate, mean over response tokens of rho k3_ref.
    """
    loss, A, extra = ds_mask(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp)
    d = ref_logp - logp
    kl = torch.exp(logp - behavior_logp) * (torch.exp(d) - d - 1)
    n = mask.sum()
    return loss + hp["ds_kl_beta"] * (kl * mask).sum() / n, A, {**extra, "ds_kl": (kl.detach() * mask).sum() / n}


def _check_cispo(hp, name):
    _require_numbers(hp, ("cispo_eps_low", "cispo_eps_high"), nonnegative=True)
    if hp["cispo_eps_low"] > 1:
        raise ValueError(f"cispo_eps_low must be in [0, 1] (1: no lower bound), got {hp['cispo_eps_low']}")


@register("cispo", label="CISPO", hparams={"cispo_eps_low": 1.0, "cispo_eps_high": 4.0},
          checks=(_check_cispo,))
def cispo(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""CISPO (MiniMax-M1, arXiv 2506.13585) against the sampler (verl core_algos.py
    ``compute_policy_loss_cispo``; TRL ``loss_type="cispo"``): the clipped IS weight is
    detached and multiplies the REINFORCE term, so no token loses its gradient,

        w_{i,t} = sg(clip(rho_{i,t}, 1 - cispo_eps_low, 1 + cispo_eps_high)),  rho = exp(l - b),
        dL/dl_{i,t} = -w A_i / n.
    Defaults: cispo_eps_low = 1 (lower bound 0: none, as the paper, which leaves it unbounded),
    cispo_eps_high = 4 (a cap of 5: TRL's recommended epsilon_high = 5.0 for CISPO from
    ScaleRL, where TRL's epsilon_high is the cap itself, clamp(rho, max=epsilon_high); verl
    clamps at 1 + clip_ratio_high). At these defaults CISPO is grpo_tis with tis_cap = 5.
    At one update per batch verl's old policy is the sampler (bypass mode) and so is rho here.
    clip_frac: share of response tokens whose weight was clipped.
    """
    rho = torch.exp(logp.detach() - behavior_logp)
    w = rho.clamp(1 - hp["cispo_eps_low"], 1 + hp["cispo_eps_high"])
    loss, A = _weighted_pg(logp, rewards, group_size, mask, w)
    n = mask.sum()
    return loss, A, {"clip_frac": ((w != rho) * mask).sum() / n, **_weight_health(w, mask, can_mask=False)}


@register("sapo", label="SAPO", hparams={"sapo_tau_pos": 1.0, "sapo_tau_neg": 1.05},
          checks=(_positive("sapo_tau_pos", "sapo_tau_neg"),))
def sapo(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""SAPO (Qwen, "Soft Adaptive Policy Optimization", arXiv 2511.20347) against the sampler
    (verl core_algos.py ``compute_policy_loss_sapo``; TRL ``loss_type="sapo"``): a smooth gate
    in place of PPO's clip,

        r = exp(clamp(l - b, -20, 20)) (with gradient),  tau_i = sapo_tau_pos if A_i > 0 else sapo_tau_neg,
        f(r) = sigmoid(tau_i (r - 1)) 4 / tau_i,   loss = -(1/n) sum_{i,t} mask f(r_{i,t}) A_i,
    so dL/dl_{i,t} = -A_i 4 s (1 - s) r / n with s = sigmoid(tau_i (r - 1)): the weight is 1 at
    r = 1 (GRPO's gradient) and decays on both sides, faster for negative advantages
    (tau_neg 1.05 > tau_pos 1.0, the defaults of verl and TRL). Normalization: the lab's
    token-mean (TRL's default ``loss_type`` for its other losses); verl forces
    seq-mean-token-mean, as the paper writes. At one update per batch r is against the sampler.
    Metrics: is_weight_mean / is_ess of the effective weight 4 s (1 - s) r.
    """
    A = _grpo_advantages(rewards, group_size)[:, None]
    tau = torch.where(A > 0, A.new_tensor(hp["sapo_tau_pos"]), A.new_tensor(hp["sapo_tau_neg"]))
    r = torch.exp((logp - behavior_logp).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND))
    s = torch.sigmoid(tau * (r - 1))
    n = mask.sum()
    w = (4 * s * (1 - s) * r).detach()
    return -(s * 4 / tau * A * mask).sum() / n, A.view(-1).detach(), _weight_health(w, mask, can_mask=False)


@register("gmpo", label="GMPO", hparams={"gmpo_eps": 0.4}, checks=(_positive("gmpo_eps"),),
          batch_stats=_gspo_stats, stats_read_logp=False)
def gmpo(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""GMPO (Geometric-Mean Policy Optimization, arXiv 2507.20673) against the sampler (verl
    core_algos.py ``compute_policy_loss_geo_mean``, loss_mode ``geo_mean``): the geometric mean
    of the token ratios, each clipped in log space on the side the advantage's sign makes harmful,

        ell = l - b (with gradient),  c_{i,t} = sgn(A_i) min(sgn(A_i) ell, sgn(A_i) clip(ell, -eps, eps)),
        s_i = exp(mean_t c_{i,t}),    loss = -(1/B) sum_i A_i s_i,
    so dL/dl_{i,t} = -A_i s_i / (B |y_i|), and 0 on the tokens clipped: (A_i > 0, ell > eps) or
    (A_i < 0, ell < -eps). eps = gmpo_eps = 0.4 (GMPO's clip range (e^-0.4, e^0.4), verl's
    example clip_ratio_low = clip_ratio_high = 0.4; one symmetric key here). B = responses in
    the batch; written as a token-mean with the whole batch's n/B (gspo_len_mean, a batch
    statistic) so micro-batches add up to the full batch. With equal lengths and ell = 0 the
    gradient is GRPO's. At one update per batch verl's old policy is the sampler (bypass mode).
    clip_frac: share of response tokens clipped.
    """
    A = _grpo_advantages(rewards, group_size)[:, None]
    sgn = torch.sign(A)
    ell = logp - behavior_logp
    c = sgn * torch.minimum(sgn * ell, sgn * ell.clamp(-hp["gmpo_eps"], hp["gmpo_eps"]))
    lengths = mask.sum(1, keepdim=True).clamp(min=1)
    s = torch.exp((c * mask).sum(1, keepdim=True) / lengths)
    e = ell.detach()
    clipped = ((A > 0) & (e > hp["gmpo_eps"])) | ((A < 0) & (e < -hp["gmpo_eps"]))
    n = mask.sum()
    loss = -(A * s * hp["gspo_len_mean"]).sum() / n
    return loss, A.view(-1).detach(), {"clip_frac": (clipped * mask).sum() / n}


@register("topr", label="TOPR", hparams={"topr_positive_weight": 1.0, "topr_negative_weight": 1.0},
          checks=(_nonnegative("topr_positive_weight", "topr_negative_weight"),))
def topr(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""TOPR (Tapered Off-Policy REINFORCE, arXiv 2503.14286) against the sampler, as ROLL writes
    it (roll/pipeline/rlvr/actor_pg_worker.py ``_compute_topr_loss``): responses of positive
    REWARD get the plain REINFORCE gradient, the others the IS weight truncated to [0, 1],

        w_{i,t} = topr_positive_weight               if r_i > 0,
                  topr_negative_weight min(rho, 1)   if r_i <= 0,     rho = exp(l - b) detached,
        dL/dl_{i,t} = -w A_i / n.
    The split is on the reward's sign (ROLL's ``scores > 0``), not the advantage's: with rewards
    in {0, 1} the two agree on every group with a gradient, with other rewards they do not. The
    paper weights the reward R itself; ROLL (and here) the advantage, GRPO's A_i here. At one
    update per batch ROLL's old policy (recomputed or the engine's) is the sampler.
    Metrics: is_weight_mean / is_ess of w; topr_trunc_frac = share of response tokens of
    non-positive responses whose rho > 1 was truncated.
    """
    rho = torch.exp(logp.detach() - behavior_logp)
    positive = (rewards > 0)[:, None]
    w = torch.where(positive, hp["topr_positive_weight"], hp["topr_negative_weight"] * rho.clamp(max=1.0))
    loss, A = _weighted_pg(logp, rewards, group_size, mask, w)
    n = mask.sum()
    return loss, A, {"topr_trunc_frac": ((~positive) & (rho > 1) & mask.bool()).sum() / n,
                     **_weight_health(w, mask, can_mask=False)}


@register("kimi", label="Kimi k1.5", hparams={"kimi_tau": 0.1}, checks=(_nonnegative("kimi_tau"),))
def kimi(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""Kimi k1.5's policy optimization (arXiv 2501.12599, eq. 3) against the sampler, as ROLL
    writes it (roll/pipeline/rlvr/actor_pg_worker.py ``_compute_kimi15_loss``): REINFORCE with
    the group-mean baseline and a squared log-ratio penalty toward the sampler,

        a_i = r_i - mean_group r   (k1.5's r - r_bar: no division by the std),
        loss = (1/n) sum_{i,t} mask [-a_i exp(l - sg(l)) + (kimi_tau / 2) (l - b)^2],
    so dL/dl_{i,t} = (-a_i + kimi_tau (l - b)) / n. It does NOT reduce to GRPO at logp ==
    behavior_logp: the penalty's gradient vanishes there, but a_i is GRPO's A_i times the
    group's std (+1e-6). ROLL applies the penalty per token, as here; the paper writes it on
    the sequence log-ratio (log pi(y) / pi_theta_i(y))^2, pi_theta_i the iteration's policy:
    at one update per batch, the sampler. kimi_tau = 0.1 is ROLL's ``kimi15_tau``.
    Metric kimi_penalty: (kimi_tau / 2) mean over response tokens of (l - b)^2.
    """
    g = rewards.view(-1, group_size)
    a = (g - g.mean(1, keepdim=True)).view(-1)[:, None]
    ell = logp - behavior_logp
    n = mask.sum()
    penalty = hp["kimi_tau"] / 2 * ell ** 2
    loss = ((-a * torch.exp(logp - logp.detach()) + penalty) * mask).sum() / n
    return loss, a.view(-1).detach(), {"kimi_penalty": (penalty.detach() * mask).sum() / n}


@register("vespo", label="VESPO", hparams={"vespo_k_pos": 2.0, "vespo_lambda_pos": 3.0,
                                           "vespo_k_neg": 3.0, "vespo_lambda_neg": 2.0},
          checks=(_nonnegative("vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg"),))
def vespo(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""VESPO (arXiv 2602.10693) against the sampler (FloyedShen/VESPO recipe/vespo/code/
    core_algos.py ``compute_policy_loss_vespo``; TRL grpo_trainer.py ``get_gamma_weights``): a
    gamma-shaped weight of the SEQUENCE ratio, a product over tokens, on REINFORCE,

        log w_i = clamp(sum_t clamp(ell_{i,t}, -20, 20), log 1e-8, 20),   ell = l - b,
        phi_i = exp(lambda + k log w_i - lambda w_i)  (= e^lambda w^k e^{-lambda w}, phi(1) = 1),
        (k, lambda) = (vespo_k_pos, vespo_lambda_pos) if A_i >= 0 else (vespo_k_neg, vespo_lambda_neg),
        dL/dl_{i,t} = -phi_i A_i / n   (phi detached).
    Defaults 2, 3, 3, 2: the recipe's code and TRL's (the recipe's docstring still lists 1.5,
    4.0, 2.5 for three of them; its code is taken). Token-mean, the recipe's default
    ``loss_agg_mode`` and TRL's. At one update per batch the ratio is against the sampler.
    Metrics: is_weight_mean / is_ess of phi.
    """
    A = _grpo_advantages(rewards, group_size)[:, None]
    ell = (logp.detach() - behavior_logp).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    log_w = (ell * mask).sum(1, keepdim=True)
    log_w = log_w.clamp(math.log(VESPO_MIN_WEIGHT), LOG_RATIO_BOUND)
    pos = A >= 0
    k = torch.where(pos, A.new_tensor(hp["vespo_k_pos"]), A.new_tensor(hp["vespo_k_neg"]))
    lam = torch.where(pos, A.new_tensor(hp["vespo_lambda_pos"]), A.new_tensor(hp["vespo_lambda_neg"]))
    lam = lam.clamp(min=VESPO_MIN_LAMBDA)
    phi = torch.exp(lam + k * log_w - lam * torch.exp(log_w)).nan_to_num(0.0, 0.0, 0.0).expand_as(mask)
    loss, A = _weighted_pg(logp, rewards, group_size, mask, phi)
    return loss, A, _weight_health(phi, mask, can_mask=False)


def _seq_mean(x, mask):
    """mean_t x_{i,t} over each response's tokens [B] (lengths clamped at 1)."""
    return (x * mask).sum(1) / mask.sum(1).clamp(min=1)


def _check_gepo(hp, name):
    _require_numbers(hp, ("gepo_eps",))
    if not 0 <= hp["gepo_eps"] < 1:
        raise ValueError(f"need 0 <= gepo_eps < 1, got {hp['gepo_eps']}")


@register("gepo", label="GEPO", hparams={"gepo_eps": 0.2}, checks=(_check_gepo,),
          batch_stats=_gspo_stats, stats_read_logp=False)
def gepo(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""GEPO (group expectation policy optimization, the HeteroRL paper, 2025: "Group Expectation
    Policy Optimization for Heterogeneous Reinforcement Learning"), as the HeteroRL_GEPO learner
    computes it (``src/open-r1/learner_script_checkpoint.py``, ``_compute_loss``, loss_type
    "gepo"; its "old" log-probs are the sampler's, so it is already a ratio against the sampler):
    per response the geometric-mean token probabilities of learner and sampler,

        P_i = exp(mean_t l_{i,t}) (with gradient),   Q_i = exp(mean_t b_{i,t}),
    the group expectation of Q under q_j = Q_j / sum_k Q_k, E_q[Q] = sum_j Q_j^2 / sum_j Q_j,
    the group-expectation weight w_i = P_i / E_q[Q] and GSPO's sequence clip on it,

        loss = -(1/B) sum_i min(w_i A_i, clip(w_i, 1 - gepo_eps, 1 + gepo_eps) A_i),
        dL/dl_{i,t} = -w_i A_i / (B |y_i|), 0 where (A_i > 0, w_i > 1 + eps) or (A_i < 0, w_i < 1 - eps).
    Written as a token-mean with the whole batch's n/B (``gspo_len_mean``, a batch statistic, as
    gspo) so micro-batches add up. The code sums E_q[Q] over the rows of one call (its recipe:
    per_device_train_batch_size 8 = num_generations 8, one group); here over the group, as the
    paper. eps: TRL's epsilon 0.2 (the recipe sets none). Left out: the recipe's CPPO-KL term
    (cppo_beta 0.005), a regularizer beside GEPO. At one update per batch nothing changes.
    Not GRPO at logp == behavior_logp: w_i = Q_i / E_q[Q] != 1 unless the group's Q are equal,
    so GEPO clips on-policy responses too, and each response is weighed 1/|y_i|.
    Metrics: clip_frac = share of response tokens in clipped responses, is_weight_mean of w.
    """
    m = group_size
    A = _grpo_advantages(rewards, m)[:, None]
    lengths = mask.sum(1, keepdim=True).clamp(min=1)
    mean_b = _seq_mean(behavior_logp, mask).view(-1, m)
    # log E_q[Q] = log sum Q^2 - log sum Q, in log space (no underflow of Q^2 at low mean log-probs)
    log_e = (torch.logsumexp(2 * mean_b, 1, keepdim=True) - torch.logsumexp(mean_b, 1, keepdim=True))
    w = torch.exp(_seq_mean(logp, mask)[:, None] - log_e.expand(-1, m).reshape(-1, 1))
    lo, hi = 1.0 - hp["gepo_eps"], 1.0 + hp["gepo_eps"]
    seq_loss = -torch.minimum(w * A, w.clamp(lo, hi) * A)
    wd = w.detach()
    clipped = (((A > 0) & (wd > hi)) | ((A < 0) & (wd < lo))).to(mask.dtype)
    n = mask.sum()
    loss = (seq_loss * (hp["gspo_len_mean"] / lengths) * mask).sum() / n
    return loss, A.view(-1).detach(), {"clip_frac": (clipped * mask).sum() / n,
                                       **_weight_health(wd.expand_as(mask), mask, can_mask=False)}


def a3po_alpha(staleness):
    """A-3PO's weight on the learner in the proximal policy of a batch of this staleness s
    (learner version - sampler version): alpha = (s - 1) / s clamped to [0, 1], and 0 at s = 0
    (AReaL ``compute_prox_logp_approximations``: v_prox = v_theta - 1, alpha = (v_prox - v_behave)
    / (v_theta - v_behave), 0 where v_theta = v_behave). s = 1: 0 (the proximal is the sampler);
    s -> inf: 1 (it approaches the learner)."""
    return 0.0 if staleness <= 0 else min(1.0, max(0.0, (staleness - 1) / staleness))


def _check_a3po_alpha(hp, name):
    alpha = hp["a3po_alpha"]
    if alpha is not None and (isinstance(alpha, bool) or not isinstance(alpha, (int, float))
                              or not 0 <= alpha <= 1):
        raise ValueError(f"a3po_alpha must be null (set per batch from its staleness) or a number "
                         f"in [0, 1], got {alpha!r}")


def _a3po_prepare(loss_args, staleness):
    """a3po_alpha null: this batch's alpha from its staleness (a3po_alpha(staleness))."""
    if loss_args.get("a3po_alpha") is not None:
        return loss_args
    return {**loss_args, "a3po_alpha": a3po_alpha(staleness)}


@register("a3po", label="A-3PO",
          hparams={**PPO_CLIP, "mis_low": 0.0, "mis_high": 5.0, "a3po_alpha": None},
          checks=(_check_ppo_clip, _band("mis_low", "mis_high"), _check_a3po_alpha),
          prepare=_a3po_prepare)
def a3po(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""A-3PO (staleness-aware proximal policy approximation; AReaL's docs/en/algorithms/
    prox_approx.md; ``areal/trainer/ppo/actor.py``,
    ``compute_prox_logp_approximations`` with ``prox_logp_method: loglinear``, inside
    ``areal/utils/functional/functional.py`` ``ppo_actor_loss_fn``, decoupled PPO): the proximal
    policy is not recomputed but interpolated in log space between the sampler and the learner,

        log pi_prox = (1 - alpha) b + alpha sg(l),   alpha: the key a3po_alpha (the loop: a3po_alpha(s)),
        r = exp(l - log pi_prox) (value rho^(1 - alpha)),  u = exp(log pi_prox - b) = rho^alpha,
        w = u 1[mis_low <= u <= mis_high]   (AReaL's rejection_sampling: token, mask, upper 5),
        loss = -(1/n) sum mask w min(r A_i, clip(r, 1 - eps_l, 1 + eps_h) A_i),
        dL/dl_{i,t} = -rho A_i 1[w > 0] / n, 0 where (A_i > 0, r > 1 + eps_h) or (A_i < 0, r < 1 - eps_l).
    alpha = 0 (s <= 1) is PPO's clip against the sampler; alpha -> 1 (s large) leaves the behavior
    weight rho masked above mis_high with a clip that hardly acts, i.e. ``grpo_mis``. The
    direction: alpha weighs the learner, so the proximal policy moves from the sampler to the
    learner as the batch gets staler. At one update per batch the proximal policy AReaL recomputes
    (prox_logp_method: recompute) is the learner itself (ratio 1: ``grpo_mis``); A-3PO places it
    one version behind the learner instead, which is what makes it differ from decoupled PPO
    here. AReaL's example (gsm8k_grpo_prox_approx.yaml) uses eps_clip 0.4; here clip_low /
    clip_high (0.2, AReaL's default). No dual clip (c_clip defaults to None). a3po_alpha null
    (the default): set per batch by train.learn_or_skip.
    Metrics: clip_frac (kept tokens clipped), is_weight_mean / is_masked_frac of w, a3po_alpha.
    """
    alpha = hp["a3po_alpha"]
    if alpha is None:
        raise ValueError("a3po needs a3po_alpha, the proximal policy's weight on the learner: "
                         "train.learn_or_skip sets it per batch from its staleness "
                         "(losses.a3po_alpha); pass a number in [0, 1] when calling compute_loss")
    A = _grpo_advantages(rewards, group_size)
    ell = logp.detach() - behavior_logp
    prox = behavior_logp + alpha * ell
    tok, clipped = _clipped_surrogate(logp, prox, A[:, None], hp["clip_low"], hp["clip_high"])
    u = torch.exp(alpha * ell)
    w = torch.where((u >= hp["mis_low"]) & (u <= hp["mis_high"]), u, 0.0)
    n = mask.sum()
    extra = {"clip_frac": (clipped * (w > 0) * mask).sum() / n,
             **_weight_health(w, mask, can_mask=True), "a3po_alpha": logp.new_tensor(float(alpha))}
    return (w * tok * mask).sum() / n, A.detach(), extra


@register("dppo_tv", label="DPPO-TV", hparams={"dppo_delta": 0.2, "dppo_rho_cap": 3.0},
          checks=(_nonnegative("dppo_delta"), _positive("dppo_rho_cap")))
def dppo_tv(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""DPPO-Binary-TV (Qi et al., 2026, "Rethinking the Trust Region in LLM Reinforcement
    Learning"; sail-sg/Stable-RL ``verl/trainer/ppo/core_algos.py``,
    ``_compute_token_mask_for_policy_loss`` with loss_mode "dppo_binary_tv" and
    ``compute_policy_loss_with_mask``): a trust region on the probability difference between the
    learner and the sampler, one side per advantage sign,

        d = exp(l) - exp(b),  invalid = d > dppo_delta if A_i > 0, else d < -dppo_delta,
        w = sg(min(exp(min(ell, 20)), dppo_rho_cap)) (1 - invalid),
        loss = -(1/n) sum mask A_i w exp(l - sg(l)),   dL/dl_{i,t} = -A_i w_{i,t} / n.
    dppo_rho_cap is Stable-RL's ``clip_ratio_c`` read as a cap on the detached ratio (3.0, verl's
    actor.yaml value; the function's own fallback is 10). dppo_delta: the config's clip_ratio_low
    = clip_ratio_high = 0.2, also prime-rl's ``dppo_mask_low`` / ``dppo_mask_high``. prime-rl's
    ``default_loss_fn`` differs: the ratio is not capped and carries the gradient (the same
    gradient where rho <= cap) and it adds kl_tau (ell)^2, kl_tau = 1e-3; Stable-RL's form here.
    Both are stated against the sampler; at one update per batch nothing changes.
    Metrics: is_weight_mean / is_masked_frac (tokens outside the trust region).
    """
    A = _grpo_advantages(rewards, group_size)[:, None]
    ell = logp.detach() - behavior_logp
    d = torch.exp(logp.detach()) - torch.exp(behavior_logp)
    invalid = torch.where(A > 0, d > hp["dppo_delta"], d < -hp["dppo_delta"])
    rho = torch.exp(ell.clamp(max=LOG_RATIO_BOUND)).clamp(max=hp["dppo_rho_cap"])
    w = torch.where(invalid, 0.0, rho)
    loss, A = _weighted_pg(logp, rewards, group_size, mask, w)
    return loss, A, _weight_health(w, mask, can_mask=True)


def _check_geo_rs(hp, name):
    _require_numbers(hp, ("geo_rs_low", "geo_rs_high"))
    if not 0 < hp["geo_rs_low"] < hp["geo_rs_high"]:
        raise ValueError(f"need 0 < geo_rs_low < geo_rs_high (bounds on a geometric-mean ratio), "
                         f"got {hp['geo_rs_low']}, {hp['geo_rs_high']}")


@register("geo_rs", label="REINFORCE+Geo-RS", hparams={"geo_rs_low": 0.999, "geo_rs_high": 1.001},
          checks=(_check_geo_rs,))
def geo_rs(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""verl's geometric rejection sampling with its bypass preset's REINFORCE loss
    (``verl/trainer/config/algorithm.py`` ``RolloutCorrectionConfig.bypass_pg_geo_rs``:
    rollout_is None, rollout_rs "seq_mean_k1", threshold "0.999_1.001", loss_type "reinforce";
    ``verl/trainer/ppo/rollout_corr_helper.py`` ``compute_rollout_rejection_mask``,
    ``core_algos.py`` ``compute_policy_loss_reinforce``): a response is kept only if the mean of
    its token k1 = -ell (ell clamped to +-20) lies in [log geo_rs_low, log geo_rs_high], i.e. the
    geometric mean of sampler / learner lies in [geo_rs_low, geo_rs_high]; no IS weight,

        keep_i = log(geo_rs_low) <= mean_t(-ell_{i,t}) <= log(geo_rs_high),
        loss = -(1/n) sum mask A_i keep_i exp(l - sg(l)),   dL/dl_{i,t} = -A_i keep_i / n.
    verl divides by the kept tokens (the rejection mask becomes the loss mask); here by all n, as
    every masking correction of this file. Bypass mode is already against the sampler; at one
    update per batch nothing changes. Metrics: is_masked_frac (tokens of rejected responses).
    """
    ell = (logp.detach() - behavior_logp).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    k1_mean = _seq_mean(-ell, mask)[:, None]
    keep = ((k1_mean >= math.log(hp["geo_rs_low"])) & (k1_mean <= math.log(hp["geo_rs_high"])))
    w = keep.to(mask.dtype).expand_as(mask)
    loss, A = _weighted_pg(logp, rewards, group_size, mask, w)
    return loss, A, {"is_masked_frac": ((1 - w) * mask).sum() / mask.sum()}


def _check_k3_rs_clip_c(hp, name):
    _require_numbers(hp, ("k3_rs_clip_c",))
    if hp["k3_rs_clip_c"] <= 1:
        raise ValueError(f"k3_rs_clip_c must be > 1 (verl's dual-clip bound), got {hp['k3_rs_clip_c']}")


@register("k3_rs", label="PPO+K3-RS", hparams={**PPO_CLIP, "k3_rs_threshold": 0.01, "k3_rs_clip_c": 3.0},
          checks=(_check_ppo_clip, _positive("k3_rs_threshold"), _check_k3_rs_clip_c))
def k3_rs(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""verl's K3 rejection sampling on PPO's clip against the sampler
    (``verl/trainer/config/algorithm.py`` ``RolloutCorrectionConfig.bypass_ppo_clip_k3_rs``:
    rollout_rs "seq_mean_k3", threshold 0.01, loss_type "ppo_clip" in bypass mode, old = the
    sampler; ``rollout_corr_helper.py`` ``compute_rollout_rejection_mask``, ``core_algos.py``
    ``compute_policy_loss_vanilla``, whose dual clip is part of it):

        keep_i = mean_t (rho - 1 - ell)_{i,t} <= k3_rs_threshold   (ell clamped to +-20),
        rho = exp(l - b) (with gradient), token loss -min(rho A, clip(rho, 1-eps_l, 1+eps_h) A),
        for A_i < 0 capped at -k3_rs_clip_c A_i (verl's clip_ratio_c, 3: the dual clip),
        dL/dl_{i,t} = -rho A_i keep_i / n where no clip acts, else 0.
    verl clamps ell to +-20 inside the PPO ratio too; not here (past it the gradient is 0 or
    ~0 either way). verl divides by the kept tokens; here by all n. At one update per batch
    nothing changes (bypass mode is against the sampler).
    Metrics: is_masked_frac (tokens of rejected responses), clip_frac (kept tokens clipped,
    dual clip included).
    """
    A = _grpo_advantages(rewards, group_size)
    Ac = A[:, None]
    lr = (logp.detach() - behavior_logp).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    keep = (_seq_mean(torch.exp(lr) - 1 - lr, mask) <= hp["k3_rs_threshold"]).to(mask.dtype)[:, None]
    tok, clipped = _clipped_surrogate(logp, behavior_logp, Ac, hp["clip_low"], hp["clip_high"])
    c = hp["k3_rs_clip_c"]
    dual = (Ac < 0) & (torch.exp(logp.detach() - behavior_logp) > c)
    tok = torch.where(Ac < 0, torch.minimum(tok, -Ac * c), tok)
    n = mask.sum()
    extra = {"clip_frac": ((clipped | dual) * keep * mask).sum() / n,
             "is_masked_frac": ((1 - keep) * mask).sum() / n}
    return (tok * keep * mask).sum() / n, A.detach(), extra


def _tis_weights(logp, behavior_logp, cap):
    """verl's token TIS weight min(exp(clamp(ell, -20, 20)), cap), detached."""
    ell = (logp.detach() - behavior_logp).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    return torch.exp(ell).clamp(max=cap)


def _snis_stats(logp, behavior_logp, mask, hp):
    """The mean token TIS weight of the whole batch (snis's normalizer)."""
    w = _tis_weights(logp, behavior_logp, hp["tis_cap"])
    return {"snis_weight_mean": float((w * mask).sum() / mask.sum())}


@register("snis", label="GRPO+SNIS", hparams={"tis_cap": 2.0}, checks=(_positive("tis_cap"),),
          batch_stats=_snis_stats)
def snis(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""Self-normalized token TIS: verl's ``rollout_is: token`` with
    ``rollout_is_batch_normalize: true`` (``verl/trainer/ppo/rollout_corr_helper.py``,
    ``compute_rollout_correction_weights``) in decoupled mode, where at one update per batch the
    old policy is the learner (PPO ratio 1) and the weight is against the sampler:

        v_{i,t} = min(exp(clamp(ell, -20, 20)), tis_cap),   vbar = mean of v over the batch's tokens,
        w = v / vbar (w = v if vbar <= 1e-8),   dL/dl_{i,t} = -A_i w_{i,t} / n.
    vbar is a statistic of the whole rollout batch (``snis_weight_mean``, batch_stats: verl takes
    it over the batch the trainer holds, all ranks together), so micro-batches add up.
    At logp == behavior_logp, v = 1 = vbar: GRPO.
    Metrics: is_weight_mean / is_ess of w, tis_clip_frac (share of v at the cap), snis_norm (vbar).
    """
    v = _tis_weights(logp, behavior_logp, hp["tis_cap"])
    vbar = hp["snis_weight_mean"]
    w = v / vbar if vbar > WEIGHT_EPS else v
    loss, A = _weighted_pg(logp, rewards, group_size, mask, w)
    n = mask.sum()
    raw = torch.exp((logp.detach() - behavior_logp).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND))
    return loss, A, {**_weight_health(w, mask, can_mask=False),
                     "tis_clip_frac": ((raw >= hp["tis_cap"]) * mask).sum() / n,
                     "snis_norm": logp.new_tensor(vbar)}


def vcpo_lr_scale(seq_log_ratio):
    r"""VCPO's step-size factor of one rollout batch, from its B sequence log-ratios
    log S_i = sum_t ell_{i,t} (all of the batch's responses, not one micro-batch):

        ESS = (sum_i S_i)^2 / sum_i S_i^2,   scale = sqrt(min(1, ESS / B))
    (mit-han-lab/vcpo ``verl/workers/actor/megatron_actor.py`` ``_optimizer_step_with_buffer``
    with ``recipe/fully_async_policy/staleness_utils.py`` ``compute_ess_info``: ess_scaling
    scaling_rule "sqrt", base_ess_ratio 1.0, use_clipped false, so unclipped S_i). Computed in
    log space; the reference adds 1e-8 to sum S^2, which changes ESS only when every S_i is
    below ~1e-4 (and then makes it depend on the scale of S); left out. Returns a float."""
    x = seq_log_ratio.detach().to(torch.float64).reshape(-1)
    ess = torch.exp(2 * torch.logsumexp(x, 0) - torch.logsumexp(2 * x, 0))
    return math.sqrt(min(1.0, float(ess) / x.numel()))


@register("vcpo", label="VCPO", hparams={"vcpo_is_cap": 8.0}, checks=(_positive("vcpo_is_cap"),),
          needs_grad_sq=True, lr_scale=lambda seq_log_ratio: vcpo_lr_scale(seq_log_ratio))
def vcpo(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""VCPO (variance-controlled off-policy optimization; "Stable Asynchrony: Variance-Controlled
    Off-Policy RL for LLMs", arXiv 2602.17616; mit-han-lab/vcpo): its closed-form off-policy
    optimal baseline (OPOB) on sequence TIS. Its other half, the learning rate scaled by the
    batch's ESS, acts on the optimizer step: train.learn multiplies lr by vcpo_lr_scale of the
    whole batch for that step. Reference: ``recipe/fully_async_policy/staleness_utils.py``
    (``compute_opob_baseline``, ``compute_ess_info``, ``compute_is_info``),
    ``verl/workers/actor/megatron_actor.py`` (``update_policy_per_traj``, ``_update_grad_buffers``),
    ``verl/workers/utils/vcpo.py`` (the gradient buffers), recipes ``shell/vcpo/math/vcpo_k=*.sh``.
    Per response, S_i = exp(sum_t ell), the estimator's weight w_i = min(S_i, vcpo_is_cap),
    G_i = ||grad_theta sum_t log pi(y_{i,t})||^2 (``response_grad_sq``, measured by the trainer),
    and per group (scope "group", norm_by_std, agg "mean"):

        W_i = w_i^2 G_i,   b = sum_i W_i r_i / (sum_i W_i + 1e-8),   sigma = std(r) (population),
        c_i = (r_i - b) / sigma (r_i - b where sigma <= 1e-8),
        loss = -(1/n) sum_{i,t} mask c_i w_i exp(l - sg(l)),   dL/dl_{i,t} = -c_i w_i / n.
    Where the references disagree: the README's b has W_i = w_i^2 G_i (the variance-minimizing
    baseline of sum_i w_i (r_i - b) grad log pi(y_i)), taken here; the code's weight is
    ||w_i grad log pi||^2 S_i^2 (its gradient norms already carry the truncated weight, then
    use_is_weights multiplies by S_i^2 again). The recipes aggregate seq-mean-token-mean
    (1 / (B |y_i|)) without the baseline's 1/|y_i|^2 (normalize_by_length false); here the lab's
    token-mean 1/n, under which the README's b is the variance-minimizing one. The cap 8 is the
    recipes' rollout_is_threshold; verl's default would be 2. The reference runs one backward
    pass per response (micro-batch size 1 asserted) and adds them into buffers; here the trainer
    measures G_i first (learner.response_grad_sq: per-sample norms in one pass per micro-batch),
    then takes the usual micro-batched pass. At one update per batch the reference's setting is
    already this one (old = the learner, skip_recompute_old_log_prob, IS against the sampler).
    Not GRPO at logp == behavior_logp: b is the G-weighted mean reward and sigma the population std.
    Metrics: is_weight_mean / is_ess of w, vcpo_ess_ratio (ESS / B of this call's rows),
    vcpo_lr_scale, vcpo_baseline_mean (mean b over groups).
    """
    m = group_size
    log_s = _seq_log_ratio(logp, behavior_logp, mask).view(-1)
    w = torch.exp(log_s).clamp(max=hp["vcpo_is_cap"])
    W = (w ** 2 * hp["response_grad_sq"]).view(-1, m)
    r = rewards.view(-1, m)
    b = (W * r).sum(1, keepdim=True) / (W.sum(1, keepdim=True) + WEIGHT_EPS)
    sigma = r.std(1, unbiased=False, keepdim=True)
    c = torch.where(sigma > WEIGHT_EPS, (r - b) / sigma.clamp(min=WEIGHT_EPS), r - b).view(-1).detach()
    n = mask.sum()
    loss = -(c[:, None] * w[:, None] * torch.exp(logp - logp.detach()) * mask).sum() / n
    scale = vcpo_lr_scale(log_s)
    return loss, c, {**_weight_health(w[:, None].expand_as(mask), mask, can_mask=False),
                     "vcpo_ess_ratio": logp.new_tensor(scale ** 2), "vcpo_lr_scale": logp.new_tensor(scale),
                     "vcpo_baseline_mean": b.mean()}


@register("trm", label="TRM", hparams={**PPO_CLIP, "trm_divergence": "k2", "trm_delta": 2.5},
          checks=(_check_ppo_clip, _positive("trm_delta"),
                  _choice("trm_divergence", k2="(log rho)^2 / 2", k3="rho - 1 - log rho")))
def trm(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""Trust Region Masking (arXiv 2512.23075; verl ``rollout_corr_helper.py``
    ``compute_rollout_rejection_mask``, rollout_rs "seq_max_k2" / "seq_max_k3"): a response is
    dropped when its largest token divergence from the sampler exceeds trm_delta; the kept ones
    take PPO's clip against the sampler,

        ell = clamp(l - b, -20, 20),  D_t = ell^2 / 2 (trm_divergence "k2") or exp(ell) - 1 - ell ("k3"),
        keep_i = max_t D_{i,t} <= trm_delta,
        token loss keep_i (-min(rho A_i, clip(rho, 1 - eps_l, 1 + eps_h) A_i)),  rho = exp(l - b),
        dL/dl_{i,t} = -rho A_i keep_i / n where no clip acts, else 0.
    No source gives a default; verl's examples use k2 at 2.5 (|log rho| <= 2.24 on every token).
    verl's ppo_clip loss adds a dual clip (c = 3) and divides by the kept tokens; here PPO's clip
    alone, divided by all n. Against the sampler already; at one update per batch nothing
    changes. Metrics: is_masked_frac (tokens of dropped responses), clip_frac.
    """
    ell = (logp.detach() - behavior_logp).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    d = ell ** 2 / 2 if hp["trm_divergence"] == "k2" else torch.exp(ell) - 1 - ell
    worst = torch.where(mask.bool(), d, 0.0).max(1, keepdim=True).values
    keep = (worst <= hp["trm_delta"]).to(mask.dtype)
    return _sampler_clip_kept(logp, behavior_logp, mask, rewards, group_size, hp, keep)


def _check_outlier(hp, name):
    _require_numbers(hp, ("outlier_low", "outlier_high"))
    if not 0 <= hp["outlier_low"] < 1 < hp["outlier_high"]:
        raise ValueError(f"need 0 <= outlier_low < 1 < outlier_high (bounds on a token's ratio), got "
                         f"{hp['outlier_low']}, {hp['outlier_high']}")


@register("seq_outlier_rs", label="PPO+outlier RS (SkyRL)",
          hparams={**PPO_CLIP, "outlier_low": 1e-4, "outlier_high": 100.0},
          checks=(_check_ppo_clip, _check_outlier))
def seq_outlier_rs(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""SkyRL's outlier-token mask (``skyrl_train/utils/off_policy_correction_utils.py``
    ``compute_outlier_token_mask``, ``outlier_token_is_threshold_low/high``) with PPO's clip
    against the sampler on the kept responses: a response is dropped if any of its tokens'
    ratios leaves [outlier_low, outlier_high],

        rho_t = exp(clamp(l - b, -20, 20)),  keep_i = all_t outlier_low <= rho_{i,t} <= outlier_high,
        token loss keep_i (-min(rho A_i, clip(rho, 1 - eps_l, 1 + eps_h) A_i)),
        dL/dl_{i,t} = -rho A_i keep_i / n where no clip acts, else 0.
    Defaults 1e-4 / 100: SkyRL's suggested values (its config leaves both unset, i.e. off).
    SkyRL applies the mask to the ratio pi_old / pi_rollout and its loss to pi / pi_old; at one
    update per batch old is the learner, so both are the ratio to the sampler, as here.
    Metrics: is_masked_frac, clip_frac.
    """
    rho = torch.exp((logp.detach() - behavior_logp).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND))
    out = ((rho < hp["outlier_low"]) | (rho > hp["outlier_high"])) & mask.bool()
    keep = (~out.any(1, keepdim=True)).to(mask.dtype)
    return _sampler_clip_kept(logp, behavior_logp, mask, rewards, group_size, hp, keep)


@register("dppo_kl", label="DPPO-KL", hparams={"dppo_kl_delta": 0.05}, checks=(_positive("dppo_kl_delta"),))
def dppo_kl(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""DPPO-Binary-KL (Qi et al., 2026, arXiv 2602.04879; SkyRL ``ppo_utils.py``
    ``dppo_policy_loss``, dppo_type "binary_kl"): the sibling of ``dppo_tv`` with a trust region
    on the binary KL between the sampler's and the learner's probability of the sampled token,
    one side per advantage sign,

        p = exp(l), q = exp(b),  KL = q (b - l) + (1 - q) log((1 - q + 1e-8) / (1 - p + 1e-8)),
        invalid = (A_i > 0, p > q, KL > dppo_kl_delta) or (A_i < 0, p < q, KL > dppo_kl_delta),
        w = sg(exp(clamp(l - b, -20, 20))) (1 - invalid),
        loss = -(1/n) sum mask A_i w exp(l - sg(l)),   dL/dl_{i,t} = -A_i w_{i,t} / n.
    dppo_kl_delta 0.05 on both sides, the value the sources recommend for the KL form (SkyRL's
    field default 0.2 is shared with binary TV). SkyRL's ratio is not capped (dppo_tv follows
    Stable-RL's cap at 3); it carries the gradient, the same gradient as the detached weight here.
    Against the sampler (the paper's Section 5.2); at one update per batch nothing changes.
    Metrics: is_weight_mean / is_masked_frac (tokens outside the trust region).
    """
    A = _grpo_advantages(rewards, group_size)[:, None]
    lp = logp.detach()
    p, q = torch.exp(lp), torch.exp(behavior_logp)
    kl = q * (behavior_logp - lp) + (1 - q) * torch.log((1 - q + BINARY_KL_EPS) / (1 - p + BINARY_KL_EPS))
    invalid = (((A > 0) & (p > q)) | ((A < 0) & (p < q))) & (kl > hp["dppo_kl_delta"])
    rho = torch.exp((lp - behavior_logp).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND))
    w = torch.where(invalid, 0.0, rho)
    loss, A = _weighted_pg(logp, rewards, group_size, mask, w)
    return loss, A, _weight_health(w, mask, can_mask=True)


def _mean_baseline(rewards, m, shift=0.0):
    """A_i = r_i - (mean of its group's r - shift): REINFORCE's group-mean baseline, lowered by
    `shift`."""
    g = rewards.view(-1, m)
    return (g - g.mean(1, keepdim=True) + shift).view(-1)


def _rec(logp, behavior_logp, mask, rewards, group_size, keep):
    """REC's loss: -(1/n) sum mask A_i keep_{i,t} l, A = r - group mean, no weight."""
    A = _mean_baseline(rewards, group_size)
    n = mask.sum()
    loss = -(A[:, None] * keep * logp * mask).sum() / n
    return loss, A.detach(), {"clip_frac": ((1 - keep) * mask).sum() / n}


def _check_rec(hp, name):
    _require_numbers(hp, ("rec_eps_low", "rec_eps_high"))
    if not 0 < hp["rec_eps_low"] <= 1 or hp["rec_eps_high"] <= 0:
        raise ValueError(f"need 0 < rec_eps_low <= 1 and rec_eps_high > 0 (Trinity's asserts), got "
                         f"{hp['rec_eps_low']}, {hp['rec_eps_high']}")


def _check_rec_ring(hp, name):
    _require_numbers(hp, ("rec_ring_low", "rec_ring_high"))
    if not hp["rec_eps_low"] <= hp["rec_ring_low"] <= 1 or hp["rec_ring_high"] < hp["rec_eps_high"]:
        raise ValueError(f"need rec_eps_low <= rec_ring_low <= 1 and rec_ring_high >= rec_eps_high (the "
                         f"ring lies outside the band), got {hp['rec_ring_low']}, {hp['rec_ring_high']}")


REC_EPS = {"rec_eps_low": 0.2, "rec_eps_high": 0.2}  # Trinity's epsilon_low / epsilon_high


@register("rec_oneside", label="REC-OneSide-NoIS", hparams=REC_EPS, checks=(_check_rec,))
def rec_oneside(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""REC-OneSide-NoIS (arXiv 2509.24203; agentscope-ai/Trinity-RFT
    ``trinity/algorithm/policy_loss_fn/rec_policy_loss.py`` ``RECPolicyLossFn``, clip_mode
    "one-side", weight "none"): REINFORCE with the group-mean baseline and no importance weight,
    each token dropped where its ratio to the sampler has left the band on the advantage's side,

        rho = exp(l - b) (detached), A_i = r_i - mean_g r,
        keep = (A_i >= 0 and rho <= 1 + rec_eps_high) or (A_i <= 0 and rho >= 1 - rec_eps_low),
        loss = -(1/n) sum mask A_i keep l,   dL/dl_{i,t} = -A_i keep_{i,t} / n.
    The weight-free counterpart of PPO's clip (which keeps the weight rho where it keeps a
    token). Defaults 0.2 / 0.2, Trinity's epsilon_low / epsilon_high. Trinity's ratio is to its
    old log-probs, the sampler's in its asynchronous mode; here the sampler's; at one update per
    batch nothing changes. Metrics: clip_frac (tokens dropped).
    """
    rho = torch.exp(logp.detach() - behavior_logp)
    A = _mean_baseline(rewards, group_size)[:, None]
    keep = (((A >= 0) & (rho <= 1 + hp["rec_eps_high"]))
            | ((A <= 0) & (rho >= 1 - hp["rec_eps_low"]))).to(mask.dtype)
    return _rec(logp, behavior_logp, mask, rewards, group_size, keep)


@register("rec_ring", label="REC-Ring-NoIS", hparams={**REC_EPS, "rec_ring_low": 0.6, "rec_ring_high": 2.0},
          checks=(_check_rec, _check_rec_ring))
def rec_ring(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""REC-Ring-NoIS (arXiv 2509.24203; Trinity-RFT ``rec_policy_loss.py``, clip_mode "ring",
    weight "none"): as ``rec_oneside``, with Trinity's ring of kept ratios: the band [1 -
    rec_eps_low, 1 + rec_eps_high] on both sides, and beyond a wider one only where the ratio
    has moved against the advantage,

        keep = (1 - eps_l <= rho <= 1 + eps_h) or (A_i >= 0 and rho <= 1 - rec_ring_low)
               or (A_i <= 0 and rho >= 1 + rec_ring_high),
        dL/dl_{i,t} = -A_i keep_{i,t} / n,  A_i = r_i - mean_g r.
    rec_ring_low / rec_ring_high are Trinity's epsilon_low_prime / epsilon_high_prime of its
    ``default_args`` (0.6 / 2.0): with A > 0 the ring keeps rho in [0.8, 1.2] and below 0.4,
    dropping (0.4, 0.8) that one-side keeps, so it is not a superset of one-side.
    Metrics: clip_frac (tokens dropped).
    """
    rho = torch.exp(logp.detach() - behavior_logp)
    A = _mean_baseline(rewards, group_size)[:, None]
    band = (rho >= 1 - hp["rec_eps_low"]) & (rho <= 1 + hp["rec_eps_high"])
    keep = (band | ((A >= 0) & (rho <= 1 - hp["rec_ring_low"]))
            | ((A <= 0) & (rho >= 1 + hp["rec_ring_high"]))).to(mask.dtype)
    return _rec(logp, behavior_logp, mask, rewards, group_size, keep)


@register("asymre", label="AsymRE", hparams={"asymre_c": 0.1},
          checks=(lambda hp, name: _require_numbers(hp, ("asymre_c",)),))
def asymre(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""AsymRE (asymmetric REINFORCE, arXiv 2506.20520; Trinity-RFT's README, baseline shift
    -0.1): REINFORCE on the sampler's responses with the group-mean baseline lowered by asymre_c,
    no importance weight and no clip,

        A_i = r_i - (mean_g r - asymre_c),
        loss = -(1/n) sum mask A_i l,   dL/dl_{i,t} = -A_i / n.
    A lower baseline weighs correct responses more than incorrect ones; the paper's analysis is
    of this off-policy REINFORCE with behavior data, which is what the sampler's batch is here at
    any N. Metrics: the common ones.
    """
    A = _mean_baseline(rewards, group_size, hp["asymre_c"])
    return -(A[:, None] * logp * mask).sum() / mask.sum(), A.detach(), {}


def bapo_balance(rho, A, mask, lo, hi):
    """BAPO's positive / negative contribution ratio at ratio bounds [lo, hi]: with the effective
    ratio min(rho, hi) where A >= 0 and max(rho, lo) where A < 0, sum of the positive effective
    advantages over minus the sum of the negative ones (+1e-8); inf when there is no negative one."""
    eff = torch.where(A >= 0, torch.minimum(rho, rho.new_tensor(hi)), torch.maximum(rho, rho.new_tensor(lo)))
    adv = eff * A * mask
    pos, neg = float(adv.clamp(min=0).sum()), float(-adv.clamp(max=0).sum())
    return math.inf if neg <= 0 else pos / (neg + BAPO_EPS)


def _bapo_stats(logp, behavior_logp, mask, hp):
    """BAPO's bounds of the whole rollout batch: from (bapo_lo_start, bapo_hi_start) raise the
    lower bound by bapo_step (up to bapo_lo_max) while the balance is below bapo_rho0, then the
    upper one (up to bapo_hi_max), as the recipe's loop does (Python floats, its step order)."""
    A = _grpo_advantages(hp["rewards"], hp["group_size"])[:, None]
    rho = torch.exp((logp.detach() - behavior_logp).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND))
    lo, hi, step, target = hp["bapo_lo_start"], hp["bapo_hi_start"], hp["bapo_step"], hp["bapo_rho0"]
    balance = bapo_balance(rho, A, mask, lo, hi)
    while balance < target and lo < hp["bapo_lo_max"] and step > 0:
        lo = min(lo + step, hp["bapo_lo_max"])
        balance = bapo_balance(rho, A, mask, lo, hi)
    while balance < target and hi < hp["bapo_hi_max"] and step > 0:
        hi = min(hi + step, hp["bapo_hi_max"])
        balance = bapo_balance(rho, A, mask, lo, hi)
    return {"bapo_low": lo, "bapo_high": hi, "bapo_balance": balance}


def _check_bapo(hp, name):
    _require_numbers(hp, ("bapo_rho0", "bapo_lo_start", "bapo_lo_max", "bapo_hi_start", "bapo_hi_max",
                          "bapo_step"), nonnegative=True)
    if not 0 < hp["bapo_lo_start"] <= hp["bapo_lo_max"] <= 1 <= hp["bapo_hi_start"] <= hp["bapo_hi_max"]:
        raise ValueError("need 0 < bapo_lo_start <= bapo_lo_max <= 1 <= bapo_hi_start <= bapo_hi_max "
                         f"(ratio bounds), got {hp['bapo_lo_start']}, {hp['bapo_lo_max']}, "
                         f"{hp['bapo_hi_start']}, {hp['bapo_hi_max']}")


@register("bapo", label="BAPO", hparams={"bapo_rho0": 1.0, "bapo_lo_start": 0.6, "bapo_lo_max": 0.8,
                                         "bapo_hi_start": 1.2, "bapo_hi_max": 2.0, "bapo_step": 0.05},
          checks=(_check_bapo,), batch_stats=_bapo_stats, stats_read_rewards=True)
def bapo(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""BAPO (balanced policy optimization with adaptive clipping, arXiv 2510.18927;
    WooooDyy/BAPO ``recipe/bapo/policy_loss.py`` ``compute_policy_loss_bapo``): PPO's clip against
    the sampler whose ratio bounds [lo, hi] are searched per rollout batch (bapo_stats) until the
    positive advantages' clipped contribution reaches bapo_rho0 times the negative ones', with
    verl's dual clip,

        rho = exp(clamp(l - b, -20, 20)),
        token loss -min(rho A_i, clip(rho, lo, hi) A_i), for A_i < 0 capped at -3 A_i,
        dL/dl_{i,t} = -rho A_i / n where no clip acts (A >= 0: rho <= hi; A < 0: lo <= rho <= 3), else 0.
    lo and hi are bounds on the ratio, not epsilons. Defaults from the recipe's yaml
    (``bapo_trainer.yaml``: adv_ratio_target 1, lower 0.6 -> 0.8, upper 1.2 -> 2.0, steps 0.05;
    its example script uses a target of 0.5). The recipe searches per micro-batch (all-reduced
    across data-parallel ranks, not across gradient-accumulation steps); here once over the whole
    rollout batch (micro-batches add up, as for M2PO). Its old policy is the sampler's at one
    update per batch, as here. Metrics: clip_frac (clipped tokens, dual clip included),
    bapo_low, bapo_high, bapo_balance (the batch's balance at them).
    """
    A = _grpo_advantages(rewards, group_size)
    Ac = A[:, None]
    rho = torch.exp((logp - behavior_logp).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND))
    lo, hi = hp["bapo_low"], hp["bapo_high"]
    tok = -torch.minimum(rho * Ac, rho.clamp(lo, hi) * Ac)
    tok = torch.where(Ac < 0, torch.minimum(tok, -Ac * DUAL_CLIP_C), tok)
    r = rho.detach()
    clipped = ((Ac > 0) & (r > hi)) | ((Ac < 0) & ((r < lo) | (r > DUAL_CLIP_C)))
    n = mask.sum()
    return (tok * mask).sum() / n, A.detach(), {
        "clip_frac": (clipped * mask).sum() / n, "bapo_low": logp.new_tensor(lo),
        "bapo_high": logp.new_tensor(hi), "bapo_balance": logp.new_tensor(hp["bapo_balance"])}


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


def check_hparams(name, hparams):
    """The full hyperparameter dict (DEFAULTS updated by ``hparams``); ValueError naming a bad one.
    Every objective's checks run, so a bad setting is an error whichever objective ``name`` is."""
    objective(name)
    unknown = sorted(set(hparams) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"unknown hyperparameter(s) {unknown} for compute_loss; "
                         f"allowed keys are {sorted(DEFAULTS)}")
    hp = {**DEFAULTS, **hparams}
    for check in dict.fromkeys(c for o in LOSSES.values() for c in o.checks):
        check(hp, name)
    return hp


def _check_tensors(name, logp, behavior_logp, ref_logp, mask, rewards, m):
    if isinstance(m, bool) or not isinstance(m, int) or m < 2:
        raise ValueError(f"group_size must be an int >= 2 (baselines need two responses), got {m!r}")
    if ref_logp is None and objective(name).needs_ref:
        raise ValueError(f"{name} needs ref_logp (reference log-probs); pass them (its Objective's needs_ref)")
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


def _check_old_logp(name, old_logp, logp, mask):
    if not objective(name).reads_old_logp:
        return
    if not isinstance(old_logp, torch.Tensor):
        raise ValueError(f"{name} needs old_logp (the learner's log-probs of each token under the "
                         f"weights that sampled it, pi_train(theta_old)); pass them (its Objective's "
                         f"reads_old_logp)")
    if old_logp.shape != logp.shape:
        raise ValueError(f"old_logp has shape {tuple(old_logp.shape)} but logp has "
                         f"{tuple(logp.shape)}; all per-token inputs must be [B, T] and aligned")
    if not torch.isfinite(old_logp.detach()[mask.bool()]).all():
        raise ValueError("old_logp holds NaN/inf on response tokens (mask == 1); check the "
                         "learner's pass over the batch at sampling time")


def _check_grad_sq(name, response_grad_sq, logp):
    """A [B] tensor of squared norms >= 0 for the objectives that read it; a non-finite one is let
    through (an overflowing gradient makes a non-finite loss, and the trainer skips the update)."""
    if not objective(name).needs_grad_sq:
        return
    if not isinstance(response_grad_sq, torch.Tensor):
        raise ValueError(f"{name} needs response_grad_sq (per response ||grad_theta sum_t logp||^2; "
                         f"train.learn measures them with learner.response_grad_sq); pass them, "
                         f"(its Objective's needs_grad_sq)")
    if response_grad_sq.shape != (logp.shape[0],):
        raise ValueError(f"response_grad_sq must have shape ({logp.shape[0]},) (one per response), "
                         f"got {tuple(response_grad_sq.shape)}")
    if (response_grad_sq < 0).any():
        raise ValueError("response_grad_sq holds negative values; they are squared norms")


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
    bound = LOG_RATIO_BOUND
    return {"is_log_ratio_mean": ell.sum() / n,
            "is_ratio_min": torch.where(mb, rho, math.inf).min(),
            "is_ratio_max": torch.where(mb, rho, -math.inf).max(),
            "is_chi2_token": (torch.exp(2 * ell.clamp(-bound, bound)) * mb).sum() / n - 1,
            "is_chi2_seq": torch.exp(2 * seq.clamp(-bound, bound)).mean() - 1,
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


def batch_stats(name, *, logp, behavior_logp, mask, rewards=None, group_size=None, **hparams):
    """The statistics of the whole rollout batch that objective ``name`` reads ({} for most):
    m2po's cutoff ``m2_cutoff``, gspo's (and gmpo's, gepo's) mean response length
    ``gspo_len_mean`` and snis's mean TIS weight ``snis_weight_mean``, as floats.
    A trainer that splits the batch into micro-batches computes them once from the whole
    batch's log-probs (no gradient needed) and passes them to every compute_loss call, so the
    micro-batches give the update of one full batch. Where they need the mask alone
    (the objective's ``stats_read_logp`` is False), logp and behavior_logp may be None. ``rewards`` [B] and
    ``group_size``: needed where the statistics depend on the advantage's sign (m2po's trust
    region); ignored otherwise."""
    hp = check_hparams(name, hparams)
    fn = objective(name).batch_stats
    if fn is None:
        return {}
    if objective(name).stats_read_rewards:
        B = mask.shape[0] if isinstance(mask, torch.Tensor) and mask.dim() == 2 else None
        if (not isinstance(rewards, torch.Tensor) or B is None or rewards.shape != (B,)
                or isinstance(group_size, bool) or not isinstance(group_size, int)
                or group_size < 2 or B % group_size):
            raise ValueError(f"batch_stats of {name} needs rewards of shape [B] and group_size (an "
                             f"int >= 2 dividing B) of the whole batch: its statistics depend on the "
                             f"advantage's sign; got rewards {rewards!r}, group_size {group_size!r}")
    if logp is None and behavior_logp is None and not objective(name).stats_read_logp:
        return fn(None, None, mask.bool().to(torch.promote_types(mask.dtype, torch.float32)), hp)
    if (logp is None or behavior_logp is None or logp.dim() != 2
            or behavior_logp.shape != logp.shape or mask.shape != logp.shape):
        shape = lambda x: None if x is None else tuple(x.shape)
        raise ValueError(f"batch_stats of {name} needs logp, behavior_logp and mask of one [B, T] "
                         f"shape, got {shape(logp)}, {shape(behavior_logp)}, {shape(mask)}")
    lp, blp, _, mb, dt = _clean_inputs(logp.detach(), behavior_logp, None, mask)
    if objective(name).stats_read_rewards:
        hp = {**hp, "rewards": rewards.detach().to(device=lp.device, dtype=dt), "group_size": group_size}
    return fn(lp, blp, mb.to(dt), hp)


def compute_loss(name, *, logp, behavior_logp, ref_logp=None, mask, rewards, group_size,
                 batch_stats=None, old_logp=None, response_grad_sq=None, **hparams):
    """Validate inputs, run objective ``name`` and add the common diagnostics.

    Returns (loss: scalar tensor with gradient w.r.t. logp, metrics: dict of floats) with
    metrics loss, k3, coef_correct_sum (per mixed group, the signed sum of the per-response
    coefficient over correct responses, averaged; nan without a mixed group), coef_abs_mean
    (mean |coefficient| over responses), the objective's own ones (clip_frac first where a clip
    can act), and is_health. ``batch_stats``: losses.batch_stats(...) of the whole rollout batch
    when this call holds part of it; None: computed here (objectives that need them).
    ``old_logp`` [B, T]: the learner's log-probs of the tokens under the weights that sampled
    them (PPO's recomputed old log-probs), for the objectives that read them (reads_old_logp,
    icepop); ignored by the others. ``response_grad_sq`` [B]: per response ||grad_theta sum_t
    logp||^2, for the objectives that read them (needs_grad_sq, vcpo); ignored by the others.
    Raises ValueError on bad input."""
    hp = check_hparams(name, hparams)
    _check_tensors(name, logp, behavior_logp, ref_logp, mask, rewards, group_size)
    _check_old_logp(name, old_logp, logp, mask)
    _check_grad_sq(name, response_grad_sq, logp)
    lp, blp, rlp, mb, dt = _clean_inputs(logp, behavior_logp, ref_logp, mask)
    r = rewards.detach().to(device=logp.device, dtype=dt)
    obj = objective(name)
    if obj.reads_old_logp:
        hp = {**hp, "old_logp": torch.where(mb, old_logp.detach().to(dt), 0.0)}
    if obj.needs_grad_sq:
        hp = {**hp, "response_grad_sq": response_grad_sq.detach().to(device=logp.device, dtype=dt)}
    if obj.batch_stats is not None:
        if batch_stats is None:  # this call holds the whole batch
            batch_stats = obj.batch_stats(lp, blp, mb.to(dt), {**hp, "rewards": r, "group_size": group_size})
        elif not isinstance(batch_stats, dict) or not batch_stats:
            raise ValueError(f"{name} needs batch_stats=losses.batch_stats({name!r}, ...) of the "
                             f"whole rollout batch (or None), got {batch_stats!r}")
        hp = {**hp, **batch_stats}
    loss, coef, extra = obj.fn(lp, blp, rlp, mb.to(dt), r, group_size, hp)

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
