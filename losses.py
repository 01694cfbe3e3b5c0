r"""The study's four objectives (GRPO, GRPO+TIS, AGRO, GGPO) and the published off-policy
corrections as pure functions of tensors, plus diagnostics. DESIGN.md has the references, where
they disagree, and the equivalences.

Entry point: ``loss, metrics = compute_loss(name, logp=, behavior_logp=, ref_logp=None, mask=,
rewards=, group_size=m, batch_stats=None, old_logp=None, response_grad_sq=None, **hparams)``, the
hparams keyed as ``DEFAULTS``; a call holding one micro-batch of several passes batch_stats=
``batch_stats(name, ...)`` of the whole rollout batch.

Registry: ``@register(name, label=, hparams={key: default}, checks=(...), **needs)`` above a
function adds an ``Objective`` to ``LOSSES`` (in legend order) and its hparams to ``DEFAULTS`` (a
shared key has one default; configs/defaults.yaml repeats them). checks: (hp, name) -> None or
ValueError, all objectives' run on every call. needs: the other Objective fields (needs_ref,
reads_old_logp, needs_grad_sq, batch_stats, stats_read_logp, stats_read_rewards, prepare,
lr_scale). ``objective(name)`` returns the Objective. Its fn has the one signature
    fn(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp) -> (loss, coef, extra),
coef the detached per-response coefficient [B], extra a dict of scalar tensors; it gets mask as
float 0/1, padding of every [B, T] input set to 0, behavior/ref detached, and in hp the full
settings plus what it declares (batch statistics, old_logp, response_grad_sq).

Notation: a group is one prompt's m responses y_i (rows i*m .. i*m+m-1) sampled by mu, rewards r_i
(correct: r_i == 1). Per token l = logp (learner, with gradient), b = behavior_logp (sampler),
R = ref_logp; ell = l - b and rho = exp(ell), detached unless said "with gradient"; sg: stop the
gradient; L_i, B_i, R_i: sums over response i, |y_i| its length; A_i = (r_i - mean r) / (std r
+ 1e-6) in the group (unbiased std), GRPO's advantage. n = mask.sum(), the response tokens of
the batch (B responses): every loss is divided by n. One optimizer step per batch: the
"old"/proximal policy of a PPO-style method is the learner (ratio 1), so each correction is a
ratio against the sampler. A weighting
correction's loss is PG(w) = -(1/n) sum_{i,t} mask A_i w_{i,t} exp(l - sg(l)), w a detached weight
(0 = masked): value -(1/n) sum mask A_i w, dL/dl_{i,t} = -A_i w_{i,t} / n.
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
KL_VALUE_BOUND = 10.0  # the clamp of a token k3 value (SkyRL's and NeMo-RL's kl_output_clamp_value)
FLASH_PROB_CLAMP = 1e-6  # FlashREINFORCE's (and Molt's) clamp of p, q to [c, 1 - c] in its binary KL


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
                                  #   rollout batch, merged into hp (m2po, gspo, gmpo, gepo, snis,
                                  #   bapo, oapl, flash_reinforce); None: none needed
    stats_read_logp: bool = True  # batch_stats reads the log-probs (m2po), not just the mask (gspo)
    stats_read_rewards: bool = False  # batch_stats reads hp["rewards"], hp["group_size"] (m2po, bapo,
                                      #   flash_reinforce)
    prepare: Callable = None  # (loss_args, staleness) -> loss_args for one batch, staleness = learner
                              #   version - mean sampler version of the batch (a3po's alpha)
    lr_scale: Callable = None  # (seq_log_ratio [B] of the whole batch) -> this step's lr factor (vcpo)


LOSSES = {}  # name -> Objective, in registration order (the order of every figure's legend)


def register(name, *, label, hparams=None, checks=(), **needs):
    """Register the decorated function as objective ``name`` (the config's ``loss``) with its
    ``hparams`` (key -> default; a shared key has one default), ``checks`` and ``needs``."""
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


def _grpo_advantages(rewards, m, hp=None):
    """A_i = (r_i - mean r) / (std r + eps) per group: by default std unbiased and eps 1e-6 (verl's,
    SkyRL's); hp's adv_std ("unbiased" or "population") and adv_eps where the objective registers
    them (TRL's GRPOTrainer: unbiased, 1e-4; its AsyncGRPO: population, 1e-8)."""
    g = rewards.view(-1, m)
    population = hp is not None and hp.get("adv_std") == "population"
    eps = ADV_EPS if hp is None else hp.get("adv_eps", ADV_EPS)
    return ((g - g.mean(1, keepdim=True)) / (g.std(1, unbiased=not population, keepdim=True) + eps)).view(-1)


ADV = {"adv_std": "unbiased", "adv_eps": ADV_EPS}  # GRPO's advantage: its std and the guard of 1 / std
_check_adv = (_choice("adv_std", unbiased="Bessel-corrected, verl's and TRL's GRPOTrainer's",
                      population="ddof 0, TRL's AsyncGRPO's"), _nonnegative("adv_eps"))


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


def _batch_length_stats(logp, behavior_logp, mask, hp):
    """n / B of the whole batch: its mean response length (a sequence-mean's normalization)."""
    return {"gspo_len_mean": float(mask.sum() / mask.size(0))}


@register("grpo", label="GRPO", hparams={**PPO_CLIP, "grpo_anchor": "proximal", "grpo_agg": "token_mean", **ADV},
          checks=(_check_ppo_clip, _check_grpo_anchor, *_check_adv,
                  _choice("grpo_agg", token_mean="(1/n) sum over the batch's tokens",
                          seq_mean="(1/B) sum_i (1/|y_i|) sum_t: slime's and ROLL's default")),
          batch_stats=_batch_length_stats, stats_read_logp=False)
def grpo(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""GRPO (DeepSeekMath, arXiv 2402.03300), rho = exp(l - anchor), anchor sg(l) ("proximal",
    default) or b ("behavior", PPO's form):
        loss = -(1/n) sum_{i,t} mask min(rho A_i, clip(rho, 1-eps_l, 1+eps_h) A_i),
        dL/dl_{i,t} = -rho A_i / n, 0 where (A_i > 0, rho > 1+eps_h) or (A_i < 0, rho < 1-eps_l);
    ``grpo_agg: seq_mean``: -(1/B) sum_i (1/|y_i|) sum_t, dL/dl_{i,t} = -rho A_i / (B |y_i|) (written
    with the batch's n/B, ``gspo_len_mean``). A_i with ``adv_std`` and ``adv_eps`` (_grpo_advantages).
    Metric clip_frac (behavior anchor only). At one step per batch the proximal rho is 1 (stale
    data treated as fresh); "behavior" is PPO's clip against the sampler."""
    A = _grpo_advantages(rewards, group_size, hp)
    anchor = logp.detach() if hp["grpo_anchor"] == "proximal" else behavior_logp
    tok, clipped = _clipped_surrogate(logp, anchor, A[:, None], hp["clip_low"], hp["clip_high"])
    n = mask.sum()
    if hp["grpo_agg"] == "seq_mean":
        tok = tok * hp["gspo_len_mean"] / mask.sum(1, keepdim=True).clamp(min=1)
    # the proximal ratio is 1 in value: its clip never acts, so there is no clip_frac to log
    extra = {"clip_frac": (clipped * mask).sum() / n} if hp["grpo_anchor"] == "behavior" else {}
    return (tok * mask).sum() / n, A.detach(), extra


@register("grpo_tis", label="GRPO+TIS", hparams={**PPO_CLIP, "tis_cap": 2.0},
          checks=(_check_ppo_clip, _positive("tis_cap")))
def grpo_tis(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""GRPO+TIS: GRPO (proximal anchor), each token loss times a truncated IS weight (verl
    rollout_corr_helper.py ``compute_rollout_correction_weights``, ``rollout_is: token``):
        w_{i,t} = min(rho_{i,t}, tis_cap) (detached),  r = exp(l - sg(l)),
        loss = -(1/n) sum_{i,t} mask w min(r A_i, clip(r, 1-eps_l, 1+eps_h) A_i),  dL/dl_{i,t} = -w A_i / n.
    Metrics tis_weight_mean, tis_clip_frac (tokens with rho >= tis_cap), is_weight_mean / is_ess.
    At one step per batch r = 1 and w is the whole correction."""
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


def _loo_baseline(rewards, m):
    """r_i - mean_{j != i} r_j per group (leave-one-out, no std)."""
    g = rewards.view(-1, m)
    return (g - (g.sum(1, keepdim=True) - g) / (m - 1)).view(-1)


@register("agro", label="AGRO", hparams={"beta": 0.01}, checks=(_check_beta,), needs_ref=True)
def agro(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""AGRO (any-generation reward optimization, arXiv 2503.19612), no importance weight:
        G_i = r_i - beta (sg(L_i) - R_i),  b_i = (1/(m-1)) sum_{j != i} G_j,  a_i = sg(G_i - b_i),
        loss = -(1/n) sum_i a_i L_i,   dL/dl_{i,t} = -a_i / n.
    beta = 0: RLOO's r_i - mean_{j != i} r_j. No metrics of its own; no ratio: one step per batch
    changes nothing."""
    m = group_size
    L = (logp * mask).sum(1)
    R = (ref_logp * mask).sum(1)
    a = _loo_baseline(rewards - hp["beta"] * (L.detach() - R), m).detach()
    return -(a * L).sum() / mask.sum(), a, {}


@register("ggpo", label="GGPO", hparams={"beta": 0.01, **PPO_CLIP, "ggpo_variant": "detached"},
          checks=(_check_beta, _check_ppo_clip, _choice("ggpo_variant", detached="", original="")),
          needs_ref=True)
def ggpo(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""GGPO (group Gibbs policy optimization; this project's reconstruction, see DESIGN.md): q, a
    self-normalized estimate on the group of pi* ∝ pi_ref exp(r / beta), and the learner's p,
        q_i = softmax_i(R_i - B_i + r_i / beta)  (no gradient),   p_i = softmax_i(L_i - B_i);
    "original":  loss = -(1/n) sum_groups sum_i q_i log p_i,   dL/dL_i = -(q_i - p_i) / n;
    "detached" (default, the same gradient where no token is dropped): c_i = sg(q_i - p_i),
        keep_{i,t} = not[(c_i > 0, rho_{i,t} > 1+eps_h) or (c_i < 0, rho_{i,t} < 1-eps_l)],
        loss = -(1/n) sum_i c_i sum_t keep mask l,   dL/dl_{i,t} = -c_i keep_{i,t} / n.
    Metrics clip_frac ("detached"), ggpo_ess_success: over groups with k >= 2 correct responses,
    the mean normalized ESS (sum_S q)^2 / (k sum_S q^2) of q on the correct set S. Against the
    sampler: one step per batch changes nothing."""
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

def _weighted_pg(logp, rewards, group_size, mask, w, hp=None):
    """PG(w) of the module docstring (GRPO's A_i times a detached per-token weight w), and A
    (hp: the advantage's settings, where the objective registers them)."""
    A = _grpo_advantages(rewards, group_size, hp)
    n = mask.sum()
    return -(A[:, None] * w * torch.exp(logp - logp.detach()) * mask).sum() / n, A.detach()


def _weight_health(w, mask, can_mask):
    """is_weight_mean = mean w, is_ess = (mean w)^2 / mean w^2 (1 for equal weights, -> 1/n for one
    dominant token, nan if all are 0) and, if can_mask, is_masked_frac = share with w = 0."""
    n = mask.sum()
    mean_w = (w * mask).sum() / n
    out = {"is_weight_mean": mean_w, "is_ess": mean_w ** 2 / ((w ** 2 * mask).sum() / n)}
    if can_mask:
        out["is_masked_frac"] = ((w == 0) * mask).sum() / n
    return out


def _token_masked_is(logp, behavior_logp, mask, rewards, group_size, low, high, direction="both"):
    """w = rho 1[low <= rho <= high] (masked token IS); direction "harmful" masks only where
    (A > 0, rho > high) or (A < 0, rho < low), w = rho elsewhere."""
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
    r"""Token masked IS (TRL grpo_trainer.py, ``vllm_importance_sampling_mode="token_mask"``):
        w_{i,t} = rho_{i,t} 1[mis_low <= rho_{i,t} <= mis_high],  loss = PG(w),  dL/dl_{i,t} = -w A_i / n;
    ``mis_direction: harmful``: w = rho 1[not ((A_i > 0, rho > mis_high) or (A_i < 0, rho < mis_low))]
    (at [1 - clip_low, 1 + clip_high], the gradient of ``grpo`` with the behavior anchor).
    Metrics is_weight_mean / is_ess / is_masked_frac. At one step per batch it is also AReaL's
    decoupled PPO with a weight cap (its proximal policy is the learner)."""
    return _token_masked_is(logp, behavior_logp, mask, rewards, group_size,
                            hp["mis_low"], hp["mis_high"], hp["mis_direction"])


@register("icepop", label="IcePop (Ring-1T)", hparams={**PPO_CLIP, "icepop_low": 0.5, "icepop_high": 5.0},
          checks=(_check_ppo_clip, _band("icepop_low", "icepop_high")), reads_old_logp=True)
def icepop(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""IcePop as the Ring-1T report publishes it (arXiv 2510.18855, Sec. IcePop; slime loss.py
    ``icepop_function``): the engines' mismatch at the SAMPLING weights masks PPO's clip,
        k = exp(o - b) = pi_train(y_t; theta_old) / pi_infer(y_t; theta_old),  r = exp(l - o) (with gradient),
        M(k) = k 1[icepop_low <= k <= icepop_high],
        loss = -(1/n) sum_{i,t} mask M(k) min(r A_i, clip(r, 1-eps_l, 1+eps_h) A_i),
        dL/dl_{i,t} = -M(k) r A_i / n where the clip is inactive, else 0;
    o = ``old_logp``, the learner's log-prob under the weights that sampled the token: k is the
    numerical mismatch alone. Metrics is_masked_frac (k outside the band), is_weight_mean / is_ess of
    M(k), clip_frac (kept tokens clipped). At one step per batch theta_old is the sampler's weights
    (version t-1-N), so the staleness is in r, PPO's ratio against them."""
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
    r"""IcePop in the form prime-rl quotes (INTELLECT-3 report, arXiv 2512.16144, eq. 1): the mask
    on the current ratio, no PPO clip (``grpo_mis`` with a lower bound),
        w_{i,t} = rho_{i,t} 1[icepop_low <= rho_{i,t} <= icepop_high],  loss = PG(w),  dL/dl_{i,t} = -w A_i / n.
    Metrics is_weight_mean / is_ess / is_masked_frac. At one step per batch rho holds both the
    staleness and the engine mismatch."""
    return _token_masked_is(logp, behavior_logp, mask, rewards, group_size,
                            hp["icepop_low"], hp["icepop_high"])


def _seq_log_ratio(logp, behavior_logp, mask):
    """sum_t ell_{i,t} per response [B, 1], detached (padding holds 0 in both inputs)."""
    return ((logp.detach() - behavior_logp) * mask).sum(1, keepdim=True)


@register("grpo_tis_seq", label="GRPO+seq-TIS", hparams={"tis_seq_cap": 2.0},
          checks=(_positive("tis_seq_cap"),))
def grpo_tis_seq(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""Sequence truncated IS (verl rollout_corr_helper.py ``compute_rollout_correction_weights``,
    ``rollout_is: sequence``), on every token of y_i (computed in log space: no overflow):
        S_i = exp(sum_t ell_{i,t}), w_i = min(S_i, tis_seq_cap), loss = PG(w), dL/dl_{i,t} = -w_i A_i / n.
    Metrics is_weight_mean / is_ess. At one step per batch S_i is the ratio to the sampler."""
    log_cap = math.log(hp["tis_seq_cap"])
    w = torch.exp(_seq_log_ratio(logp, behavior_logp, mask).clamp(max=log_cap)).expand_as(mask)
    loss, A = _weighted_pg(logp, rewards, group_size, mask, w)
    return loss, A, _weight_health(w, mask, can_mask=False)


@register("grpo_mis_seq", label="GRPO+seq-MIS", hparams={"mis_seq_cap": 3.0, **ADV},
          checks=(_positive("mis_seq_cap"), *_check_adv))
def grpo_mis_seq(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""Sequence masked IS (TRL grpo_trainer.py, ``vllm_importance_sampling_mode="sequence_mask"``,
    its default), on every token of y_i (compared on log S_i: no overflow):
        S_i = exp(sum_t ell_{i,t}), w_i = S_i 1[S_i <= mis_seq_cap], loss = PG(w), dL/dl_{i,t} = -w_i A_i / n.
    A_i with ``adv_std`` and ``adv_eps`` (TRL's GRPOTrainer: 1e-4). Metrics is_weight_mean / is_ess /
    is_masked_frac. One step per batch: S_i is against the sampler (TRL's S_i is to its old policy,
    the learner recomputed before the update, so at one step per batch the two agree)."""
    log_cap = math.log(hp["mis_seq_cap"])
    log_s = _seq_log_ratio(logp, behavior_logp, mask)
    w = torch.where(log_s <= log_cap, torch.exp(log_s.clamp(max=log_cap)), 0.0).expand_as(mask)
    loss, A = _weighted_pg(logp, rewards, group_size, mask, w, hp)
    return loss, A, _weight_health(w, mask, can_mask=True)


def _check_gspo_eps(hp, name):
    _require_numbers(hp, ("gspo_eps_low", "gspo_eps_high"))
    if not 0 <= hp["gspo_eps_low"] < 1 or hp["gspo_eps_high"] < 0:
        raise ValueError(f"need 0 <= gspo_eps_low < 1 and gspo_eps_high >= 0, got "
                         f"{hp['gspo_eps_low']}, {hp['gspo_eps_high']}")


@register("gspo", label="GSPO", hparams={"gspo_eps_low": 3e-4, "gspo_eps_high": 4e-4},
          checks=(_check_gspo_eps,), batch_stats=_batch_length_stats, stats_read_logp=False)
def gspo(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""GSPO (arXiv 2507.18071) in GSPO-token form (verl core_algos.py, loss_mode ``gspo``, bypass mode):
        s_i = exp(min(mean_t ell_{i,t}, 10)),  s_{i,t} = sg(s_i) exp(l_{i,t} - sg(l_{i,t}))  (value s_i),
        loss = -(1/B) sum_i (1/|y_i|) sum_t min(s_{i,t} A_i, clip(s_{i,t}, 1-eps_l, 1+eps_h) A_i),
        dL/dl_{i,t} = -s_i A_i / (B |y_i|), 0 on y_i if (A_i > 0, s_i > 1+eps_h) or (A_i < 0, s_i < 1-eps_l);
    eps = gspo_eps_low / high; a token-mean with the batch's n/B (``gspo_len_mean``, a batch
    statistic). Metric clip_frac (tokens of clipped responses). Already against the sampler at one
    step per batch."""
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
    """The M2PO cutoff of one rollout batch, sq = ell^2 [B, T] over the tokens of mask: with the n
    values sorted v_1 >= ... >= v_n, k = the fewest largest to drop so that mean(v_{k+1..n}) <=
    threshold (k = n if none: every token dropped); returns v_k (+inf for k = 0). Tokens with
    sq < cutoff are kept, so ties with v_k go with it and the kept set does not depend on a sort."""
    v = torch.sort(sq[mask.bool()], descending=True).values
    left = v.flip(0).to(torch.float64).cumsum(0).flip(0)  # left[k] = sum of v[k:]
    means = left / torch.arange(v.numel(), 0, -1, device=v.device, dtype=torch.float64)
    ok = torch.nonzero(means <= threshold)
    k = int(ok[0]) if ok.numel() else v.numel()
    return math.inf if k == 0 else float(v[k - 1])


def _m2po_region(logp, behavior_logp, mask, rewards, group_size, tokens):
    """The tokens [B, T] 0/1 M2PO's rule runs over: ``trust_region``, (A_i > 0 and rho > 1) or
    (A_i < 0 and rho < 1) (A_i = 0 left out), or ``all``."""
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
    r"""M2PO (arXiv 2510.01161), Algorithm 1 against the sampler (trust region: Infini-AI-Lab/M2PO
    verl/trainer/ppo/core_algos.py ``_get_trust_region_tokens_delta_sq``). Over T, the batch's tokens
    with (A_i > 0, rho > 1) or (A_i < 0, rho < 1) (``m2_tokens: trust_region``, default) or all of
    them (``all``), the largest ell^2 are dropped until M2 = mean ell^2 over the rest of T <=
    m2_threshold (``m2po_cutoff``, a batch statistic); tokens outside T are kept:
        w_{i,t} = rho_{i,t} (1 - 1[t in T] 1[ell_{i,t}^2 >= cutoff]), loss = PG(w), dL/dl_{i,t} = -w A_i / n.
    Metrics m2po_m2 (M2 before dropping; nan for an empty T), m2po_region_frac (|T| / n),
    is_weight_mean / is_ess / is_masked_frac. At one step per batch the paper's old policy is mu."""
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
    r"""DeepSeek-V3.2's off-policy sequence masking (arXiv 2512.02556; TRL grpo_trainer.py
    ``get_off_policy_mask``) on PPO's clip against the sampler, rho = exp(l - b) with gradient:
        drop_i = A_i < 0 and mean_t (b - l)_{i,t} > ds_mask_delta,
        loss = -(1/n) sum_{i,t} mask (1 - drop_i) min(rho A_i, clip(rho, 1-eps_l, 1+eps_h) A_i),
        dL/dl_{i,t} = -rho A_i (1 - drop_i) / n where the clip is inactive, else 0.
    ds_mask_delta 0.5: TRL's suggestion. Metrics is_masked_frac (tokens of dropped responses),
    clip_frac (kept tokens clipped). At one step per batch DeepSeek's "old" policy is the sampler."""
    A = _grpo_advantages(rewards, group_size)
    lengths = mask.sum(1).clamp(min=1)
    kl = -_seq_log_ratio(logp, behavior_logp, mask).view(-1) / lengths
    keep = (~((A < 0) & (kl > hp["ds_mask_delta"]))).to(mask.dtype)[:, None]
    return _sampler_clip_kept(logp, behavior_logp, mask, rewards, group_size, hp, keep)


@register("ds_v32", label="DeepSeek-V3.2 (OPSM + K3)",
          hparams={**PPO_CLIP, "ds_mask_delta": 0.5, "ds_kl_beta": 0.001},
          checks=(_check_ppo_clip, _nonnegative("ds_kl_beta")), needs_ref=True)
def ds_v32(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""DeepSeek-V3.2's GRPO objective (arXiv 2512.02556, Sec. 3; TRL ``use_bias_correction_kl``):
    ``ds_mask`` plus Schulman's K3 of KL(pi_theta || pi_ref) weighted by rho = exp(l - b) (with gradient),
        loss = ds_mask's + ds_kl_beta (1/n) sum_{i,t} mask rho k3_ref,   k3_ref = exp(R - l) - (R - l) - 1,
        dL/dl_{i,t} = ds_mask's + ds_kl_beta rho (l - R) / n   (the mask leaves the K3 term alone).
    ds_kl_beta 0.001: TRL's. Metrics ds_mask's and ds_kl = mean over response tokens of rho k3_ref.
    At one step per batch the report's pi_old is the sampler, so the K3 weight is rho."""
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
    r"""CISPO (MiniMax-M1, arXiv 2506.13585; verl core_algos.py ``compute_policy_loss_cispo``): the
    clipped IS weight, detached, on the REINFORCE term, so no token loses its gradient,
        w_{i,t} = clip(rho_{i,t}, 1 - cispo_eps_low, 1 + cispo_eps_high), loss = PG(w), dL/dl = -w A_i / n.
    Defaults 1 / 4: no lower bound, cap 5 (``grpo_tis`` with tis_cap 5). Metrics clip_frac (weights
    clipped), is_weight_mean / is_ess. At one step per batch verl's old policy is the sampler."""
    rho = torch.exp(logp.detach() - behavior_logp)
    w = rho.clamp(1 - hp["cispo_eps_low"], 1 + hp["cispo_eps_high"])
    loss, A = _weighted_pg(logp, rewards, group_size, mask, w)
    n = mask.sum()
    return loss, A, {"clip_frac": ((w != rho) * mask).sum() / n, **_weight_health(w, mask, can_mask=False)}


@register("sapo", label="SAPO", hparams={"sapo_tau_pos": 1.0, "sapo_tau_neg": 1.05},
          checks=(_positive("sapo_tau_pos", "sapo_tau_neg"),))
def sapo(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""SAPO (arXiv 2511.20347; verl core_algos.py ``compute_policy_loss_sapo``): a smooth gate for
    PPO's clip, r = exp(clamp(l - b, -20, 20)) with gradient, tau_i = sapo_tau_pos if A_i > 0 else
    sapo_tau_neg, s = sigmoid(tau_i (r - 1)):
        loss = -(1/n) sum_{i,t} mask s (4 / tau_i) A_i,   dL/dl_{i,t} = -4 s (1 - s) r A_i / n,
    weight 1 at r = 1 (GRPO's gradient), decaying on both sides, faster for A_i < 0. Metrics
    is_weight_mean / is_ess of 4 s (1 - s) r. At one step per batch r is against the sampler."""
    A = _grpo_advantages(rewards, group_size)[:, None]
    tau = torch.where(A > 0, A.new_tensor(hp["sapo_tau_pos"]), A.new_tensor(hp["sapo_tau_neg"]))
    r = torch.exp((logp - behavior_logp).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND))
    s = torch.sigmoid(tau * (r - 1))
    n = mask.sum()
    w = (4 * s * (1 - s) * r).detach()
    return -(s * 4 / tau * A * mask).sum() / n, A.view(-1).detach(), _weight_health(w, mask, can_mask=False)


@register("gmpo", label="GMPO", hparams={"gmpo_eps": 0.4}, checks=(_positive("gmpo_eps"),),
          batch_stats=_batch_length_stats, stats_read_logp=False)
def gmpo(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""GMPO (arXiv 2507.20673; verl core_algos.py ``compute_policy_loss_geo_mean``): the geometric
    mean of the token ratios, each clipped in log space on its harmful side, ell with gradient,
        c_{i,t} = sgn(A_i) min(sgn(A_i) ell, sgn(A_i) clip(ell, -eps, eps)),  s_i = exp(mean_t c_{i,t}),
        loss = -(1/B) sum_i A_i s_i,
        dL/dl_{i,t} = -A_i s_i / (B |y_i|), 0 where (A_i > 0, ell > eps) or (A_i < 0, ell < -eps);
    eps = gmpo_eps (the paper's range (e^-0.4, e^0.4)); a token-mean with the batch's n/B
    (``gspo_len_mean``). Metric clip_frac (tokens clipped). At one step per batch verl's old policy
    is the sampler (bypass mode)."""
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
    r"""TOPR (arXiv 2503.14286) as ROLL writes it (roll/pipeline/rlvr/actor_pg_worker.py
    ``_compute_topr_loss``): REINFORCE for positive rewards, the IS weight truncated to [0, 1] else,
        w_{i,t} = topr_positive_weight if r_i > 0, else topr_negative_weight min(rho_{i,t}, 1),
        loss = PG(w),   dL/dl_{i,t} = -w A_i / n.
    Metrics is_weight_mean / is_ess, topr_trunc_frac (tokens of responses with r_i <= 0 whose rho > 1
    was truncated). The ratio is to the sampler, as TOPR's paper states it for off-policy data;
    ROLL's pipeline takes it against its old policy, which at one step per batch is the learner
    (there ROLL's TOPR is REINFORCE)."""
    rho = torch.exp(logp.detach() - behavior_logp)
    positive = (rewards > 0)[:, None]
    w = torch.where(positive, hp["topr_positive_weight"], hp["topr_negative_weight"] * rho.clamp(max=1.0))
    loss, A = _weighted_pg(logp, rewards, group_size, mask, w)
    n = mask.sum()
    return loss, A, {"topr_trunc_frac": ((~positive) & (rho > 1) & mask.bool()).sum() / n,
                     **_weight_health(w, mask, can_mask=False)}


@register("kimi", label="Kimi k1.5", hparams={"kimi_tau": 0.1}, checks=(_nonnegative("kimi_tau"),))
def kimi(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""Kimi k1.5's policy optimization (arXiv 2501.12599, eq. 3) as ROLL writes it
    (roll/pipeline/rlvr/actor_pg_worker.py ``_compute_kimi15_loss``): REINFORCE with a group-mean
    baseline (no 1/std) and a per-token squared log-ratio penalty toward the sampler,
        loss = (1/n) sum_{i,t} mask [-a_i exp(l - sg(l)) + (kimi_tau / 2) (l - b)^2], a_i = r_i - mean_group r,
        dL/dl_{i,t} = (-a_i + kimi_tau (l - b)) / n.
    Metric kimi_penalty = (kimi_tau / 2) mean over response tokens of (l - b)^2. At one step per
    batch the paper's pi_theta_i (the iteration's policy) is the sampler."""
    a = _mean_baseline(rewards, group_size)[:, None]
    ell = logp - behavior_logp
    n = mask.sum()
    penalty = hp["kimi_tau"] / 2 * ell ** 2
    loss = ((-a * torch.exp(logp - logp.detach()) + penalty) * mask).sum() / n
    return loss, a.view(-1).detach(), {"kimi_penalty": (penalty.detach() * mask).sum() / n}


@register("vespo", label="VESPO", hparams={"vespo_k_pos": 2.0, "vespo_lambda_pos": 3.0,
                                           "vespo_k_neg": 3.0, "vespo_lambda_neg": 2.0},
          checks=(_nonnegative("vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg"),))
def vespo(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""VESPO (arXiv 2602.10693; FloyedShen/VESPO recipe/vespo/code/core_algos.py
    ``compute_policy_loss_vespo``): a gamma-shaped weight of the SEQUENCE ratio on REINFORCE,
        log w_i = clamp(sum_t clamp(ell_{i,t}, -20, 20), log 1e-8, 20),
        phi_i = exp(lambda + k log w_i - lambda w_i) = e^lambda w^k e^{-lambda w}  (phi(1) = 1),
        (k, lambda) = (vespo_k_pos, vespo_lambda_pos) if A_i >= 0 else (vespo_k_neg, vespo_lambda_neg),
        loss = PG(phi),   dL/dl_{i,t} = -phi_i A_i / n   (lambda floored at 1e-4).
    Metrics is_weight_mean / is_ess of phi. At one step per batch the ratio is against the sampler."""
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
          batch_stats=_batch_length_stats, stats_read_logp=False)
def gepo(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""GEPO (group expectation policy optimization, HeteroRL, 2025) as the HeteroRL_GEPO learner
    computes it (src/open-r1/learner_script_checkpoint.py ``_compute_loss``, loss_type "gepo"):
    GSPO's sequence clip on P_i = exp(mean_t l_{i,t}) (with gradient) over the group expectation of
    Q_i = exp(mean_t b_{i,t}),
        E_q[Q] = sum_j Q_j^2 / sum_j Q_j over the group,  w_i = P_i / E_q[Q],
        loss = -(1/B) sum_i min(w_i A_i, clip(w_i, 1 - gepo_eps, 1 + gepo_eps) A_i),
        dL/dl_{i,t} = -w_i A_i / (B |y_i|), 0 where (A_i > 0, w_i > 1 + eps) or (A_i < 0, w_i < 1 - eps);
    a token-mean with the batch's n/B (``gspo_len_mean``). Metrics clip_frac (tokens of clipped
    responses), is_weight_mean / is_ess of w. Its "old" log-probs are the sampler's: one step per
    batch changes nothing."""
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
    """A-3PO's weight on the learner in the proximal policy at staleness s (learner - sampler version):
    (s - 1) / s, 0 for s <= 1, -> 1 as s grows (AReaL ``compute_prox_logp_approximations``)."""
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
    r"""A-3PO (AReaL areal/trainer/ppo/actor.py ``compute_prox_logp_approximations``,
    ``prox_logp_method: loglinear``, in decoupled PPO): the proximal policy interpolated in log space,
        log pi_prox = (1 - alpha) b + alpha sg(l),   alpha = a3po_alpha (null: a3po_alpha(s), per batch),
        r = exp(l - log pi_prox) (value rho^(1 - alpha)),  u = exp(log pi_prox - b) = rho^alpha,
        w = u 1[mis_low <= u <= mis_high], loss = -(1/n) sum mask w min(r A_i, clip(r, 1-eps_l, 1+eps_h) A_i),
        dL/dl_{i,t} = -rho A_i 1[w > 0] / n, 0 where (A_i > 0, r > 1 + eps_h) or (A_i < 0, r < 1 - eps_l).
    alpha = 0 is PPO's clip against the sampler, alpha -> 1 ``grpo_mis``. Metrics clip_frac (kept
    tokens clipped), is_weight_mean / is_ess / is_masked_frac of w, a3po_alpha. At one step per
    batch AReaL's recomputed proximal policy would be the learner; A-3PO's is one version behind."""
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
    r"""DPPO-Binary-TV (arXiv 2602.04879; sail-sg/Stable-RL verl/trainer/ppo/core_algos.py
    ``_compute_token_mask_for_policy_loss``, "dppo_binary_tv"): a trust region on the learner's minus
    the sampler's probability, one side per advantage sign,
        d = exp(l) - exp(b),  invalid = d > dppo_delta if A_i > 0, else d < -dppo_delta,
        w = min(exp(min(ell, 20)), dppo_rho_cap) (1 - invalid), loss = PG(w), dL/dl_{i,t} = -A_i w_{i,t} / n.
    Metrics is_weight_mean / is_ess / is_masked_frac (tokens outside the trust region). Stated
    against the sampler: one step per batch changes nothing."""
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
    r"""verl's geometric rejection sampling with REINFORCE (verl/trainer/config/algorithm.py
    ``RolloutCorrectionConfig.bypass_pg_geo_rs``): a response is kept only if the geometric mean of
    sampler / learner lies in [geo_rs_low, geo_rs_high]; no IS weight,
        keep_i = log(geo_rs_low) <= mean_t(-clamp(ell_{i,t}, -20, 20)) <= log(geo_rs_high),
        loss = PG(keep),   dL/dl_{i,t} = -A_i keep_i / n.
    Metric is_masked_frac (tokens of rejected responses). Bypass mode is against the sampler: one
    step per batch changes nothing."""
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
    r"""verl's K3 rejection sampling on PPO's clip against the sampler, with verl's dual clip
    (verl/trainer/config/algorithm.py ``RolloutCorrectionConfig.bypass_ppo_clip_k3_rs``):
        keep_i = mean_t (exp(e) - 1 - e)_{i,t} <= k3_rs_threshold,   e = clamp(ell, -20, 20),
        tok = -min(rho A_i, clip(rho, 1-eps_l, 1+eps_h) A_i), for A_i < 0 min(tok, -k3_rs_clip_c A_i),
        loss = (1/n) sum_{i,t} mask keep_i tok,   rho = exp(l - b) (with gradient),
        dL/dl_{i,t} = -rho A_i keep_i / n where no clip acts, else 0.
    Metrics is_masked_frac (tokens of rejected responses), clip_frac (kept tokens clipped, dual clip
    included). Bypass mode is against the sampler: one step per batch changes nothing."""
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
    r"""Self-normalized token TIS (verl rollout_corr_helper.py ``compute_rollout_correction_weights``,
    ``rollout_is: token``, ``rollout_is_batch_normalize: true``):
        v_{i,t} = min(exp(clamp(ell, -20, 20)), tis_cap),  vbar = mean of v over the batch's tokens,
        w = v / vbar (w = v if vbar <= 1e-8),   loss = PG(w),   dL/dl_{i,t} = -A_i w_{i,t} / n;
    vbar is a batch statistic (``snis_weight_mean``). Metrics is_weight_mean / is_ess of w,
    tis_clip_frac (share of v at the cap), snis_norm (vbar). At one step per batch verl's decoupled
    mode has old = the learner (PPO ratio 1), leaving this weight against the sampler."""
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
    r"""VCPO's lr factor sqrt(min(1, ESS / B)), ESS = (sum_i S_i)^2 / sum_i S_i^2, from all B sequence
    log-ratios log S_i of a rollout batch (never one micro-batch's), in log space; a float
    (mit-han-lab/vcpo staleness_utils.py ``compute_ess_info``: rule "sqrt", base ratio 1, unclipped S_i)."""
    x = seq_log_ratio.detach().to(torch.float64).reshape(-1)
    ess = torch.exp(2 * torch.logsumexp(x, 0) - torch.logsumexp(2 * x, 0))
    return math.sqrt(min(1.0, float(ess) / x.numel()))


@register("vcpo", label="VCPO", hparams={"vcpo_is_cap": 8.0}, checks=(_positive("vcpo_is_cap"),),
          needs_grad_sq=True, lr_scale=lambda seq_log_ratio: vcpo_lr_scale(seq_log_ratio))
def vcpo(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""VCPO (arXiv 2602.17616; mit-han-lab/vcpo recipe/fully_async_policy/staleness_utils.py
    ``compute_opob_baseline``): sequence TIS with the closed-form off-policy optimal baseline (its
    other half, lr times ``vcpo_lr_scale`` of the batch, acts on the step: ``lr_scale``). Per group,
    with w_i = min(exp(sum_t ell_{i,t}), vcpo_is_cap) and G_i = ||grad_theta L_i||^2 (``response_grad_sq``),
        W_i = w_i^2 G_i,  b = sum_i W_i r_i / (sum_i W_i + 1e-8),  sigma = std(r) (population),
        c_i = (r_i - b) / sigma (r_i - b where sigma <= 1e-8),
        loss = -(1/n) sum_{i,t} mask c_i w_i exp(l - sg(l)),   dL/dl_{i,t} = -c_i w_i / n.
    Metrics is_weight_mean / is_ess of w, vcpo_ess_ratio (ESS / B of this call's rows), vcpo_lr_scale,
    vcpo_baseline_mean (mean b over groups). At one step per batch it is the reference's setting."""
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
    r"""Trust Region Masking (arXiv 2512.23075; verl rollout_corr_helper.py
    ``compute_rollout_rejection_mask``, "seq_max_k2" / "seq_max_k3"): PPO's clip against the sampler
    on the responses whose largest token divergence from it is at most trm_delta,
        e = clamp(ell, -20, 20),  D = e^2 / 2 (trm_divergence "k2") or exp(e) - 1 - e ("k3"),
        keep_i = max_t D_{i,t} <= trm_delta,   rho = exp(l - b) (with gradient),
        loss = -(1/n) sum mask keep_i min(rho A_i, clip(rho, 1-eps_l, 1+eps_h) A_i),
        dL/dl_{i,t} = -rho A_i keep_i / n where the clip is inactive, else 0.
    Metrics is_masked_frac (tokens of dropped responses), clip_frac (kept tokens clipped). Against
    the sampler already: one step per batch changes nothing."""
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


@register("seq_outlier_rs", label="PPO+outlier RS (SkyRL's mask)",
          hparams={**PPO_CLIP, "outlier_low": 1e-4, "outlier_high": 100.0},
          checks=(_check_ppo_clip, _check_outlier))
def seq_outlier_rs(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""SkyRL's outlier-token mask (skyrl_train/utils/off_policy_correction_utils.py
    ``compute_outlier_token_mask``) with PPO's clip against the sampler on the kept responses:
        keep_i = all_t outlier_low <= exp(clamp(ell_{i,t}, -20, 20)) <= outlier_high,
        loss = -(1/n) sum mask keep_i min(rho A_i, clip(rho, 1-eps_l, 1+eps_h) A_i),  rho with gradient,
        dL/dl_{i,t} = -rho A_i keep_i / n where the clip is inactive, else 0.
    Metrics is_masked_frac (tokens of dropped responses), clip_frac (kept tokens clipped). This
    row puts SkyRL's mask on PPO's clip against the sampler, which SkyRL itself does not run: its
    loss and its mask take their ratios against pi_old, the learner at one step per batch, where
    its PPO ratio is 1 and the clip never acts (SkyRL's gradient there is -A_i keep_i / n)."""
    rho = torch.exp((logp.detach() - behavior_logp).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND))
    out = ((rho < hp["outlier_low"]) | (rho > hp["outlier_high"])) & mask.bool()
    keep = (~out.any(1, keepdim=True)).to(mask.dtype)
    return _sampler_clip_kept(logp, behavior_logp, mask, rewards, group_size, hp, keep)


@register("dppo_kl", label="DPPO-KL", hparams={"dppo_kl_delta": 0.05}, checks=(_positive("dppo_kl_delta"),))
def dppo_kl(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""DPPO-Binary-KL (arXiv 2602.04879; SkyRL ppo_utils.py ``dppo_policy_loss``, "binary_kl"):
    ``dppo_tv`` with a trust region on the binary KL of the sampled token's probabilities p = exp(l),
    q = exp(b), one side per advantage sign,
        KL = q (b - l) + (1 - q) log((1 - q + 1e-8) / (1 - p + 1e-8)),
        invalid = (A_i > 0, p > q, KL > dppo_kl_delta) or (A_i < 0, p < q, KL > dppo_kl_delta),
        w = exp(clamp(ell, -20, 20)) (1 - invalid),   loss = PG(w),   dL/dl_{i,t} = -A_i w_{i,t} / n.
    Metrics is_weight_mean / is_ess / is_masked_frac (tokens outside the trust region). Against the
    sampler (the paper's Sec. 5.2): one step per batch changes nothing."""
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
    """a_i = r_i - (mean of its group's r - shift): the group-mean baseline lowered by `shift`."""
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
    r"""REC-OneSide-NoIS (arXiv 2509.24203; Trinity-RFT trinity/algorithm/policy_loss_fn/
    rec_policy_loss.py ``RECPolicyLossFn``, "one-side", weight "none"): REINFORCE with the group-mean
    baseline, no IS weight, a token dropped where rho left the band on the advantage's side,
        a_i = r_i - mean_group r,
        keep = (a_i >= 0 and rho <= 1 + rec_eps_high) or (a_i <= 0 and rho >= 1 - rec_eps_low),
        loss = -(1/n) sum mask a_i keep l,   dL/dl_{i,t} = -a_i keep_{i,t} / n.
    Metric clip_frac (tokens dropped). Trinity's ratio is to the sampler (asynchronous mode): one
    step per batch changes nothing."""
    rho = torch.exp(logp.detach() - behavior_logp)
    A = _mean_baseline(rewards, group_size)[:, None]
    keep = (((A >= 0) & (rho <= 1 + hp["rec_eps_high"]))
            | ((A <= 0) & (rho >= 1 - hp["rec_eps_low"]))).to(mask.dtype)
    return _rec(logp, behavior_logp, mask, rewards, group_size, keep)


@register("rec_ring", label="REC-Ring-NoIS", hparams={**REC_EPS, "rec_ring_low": 0.6, "rec_ring_high": 2.0},
          checks=(_check_rec, _check_rec_ring))
def rec_ring(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""REC-Ring-NoIS (arXiv 2509.24203; Trinity-RFT rec_policy_loss.py ``RECPolicyLossFn``, "ring",
    weight "none"): ``rec_oneside`` with Trinity's ring of kept ratios, a_i = r_i - mean_group r,
        keep = (1 - rec_eps_low <= rho <= 1 + rec_eps_high) or (a_i >= 0 and rho <= 1 - rec_ring_low)
               or (a_i <= 0 and rho >= 1 + rec_ring_high),
        loss = -(1/n) sum mask a_i keep l,   dL/dl_{i,t} = -a_i keep_{i,t} / n.
    Metric clip_frac (tokens dropped). One step per batch: as ``rec_oneside``."""
    rho = torch.exp(logp.detach() - behavior_logp)
    A = _mean_baseline(rewards, group_size)[:, None]
    band = (rho >= 1 - hp["rec_eps_low"]) & (rho <= 1 + hp["rec_eps_high"])
    keep = (band | ((A >= 0) & (rho <= 1 - hp["rec_ring_low"]))
            | ((A <= 0) & (rho >= 1 + hp["rec_ring_high"]))).to(mask.dtype)
    return _rec(logp, behavior_logp, mask, rewards, group_size, keep)


@register("asymre", label="AsymRE", hparams={"asymre_c": 0.1},
          checks=(lambda hp, name: _require_numbers(hp, ("asymre_c",)),))
def asymre(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""AsymRE (asymmetric REINFORCE, arXiv 2506.20520): REINFORCE with the group-mean baseline
    lowered by asymre_c, no importance weight, no clip,
        a_i = r_i - (mean_group r - asymre_c),   loss = -(1/n) sum mask a_i l,   dL/dl_{i,t} = -a_i / n.
    No metrics of its own; no ratio, so one step per batch changes nothing."""
    A = _mean_baseline(rewards, group_size, hp["asymre_c"])
    return -(A[:, None] * logp * mask).sum() / mask.sum(), A.detach(), {}


def bapo_balance(rho, A, mask, lo, hi):
    """BAPO's balance at ratio bounds [lo, hi]: with min(rho, hi) where A >= 0 and max(rho, lo) where
    A < 0, sum of positive ratio x A over minus the sum of negative ones (+1e-8); inf if none negative."""
    eff = torch.where(A >= 0, torch.minimum(rho, rho.new_tensor(hi)), torch.maximum(rho, rho.new_tensor(lo)))
    adv = eff * A * mask
    pos, neg = float(adv.clamp(min=0).sum()), float(-adv.clamp(max=0).sum())
    return math.inf if neg <= 0 else pos / (neg + BAPO_EPS)


def _bapo_stats(logp, behavior_logp, mask, hp):
    """BAPO's bounds of the whole batch: from the starts raise lo by bapo_step (to bapo_lo_max) while
    the balance < bapo_rho0, then hi (to bapo_hi_max), in the recipe's step order."""
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
    r"""BAPO (arXiv 2510.18927; WooooDyy/BAPO recipe/bapo/policy_loss.py ``compute_policy_loss_bapo``):
    PPO's clip against the sampler with verl's dual clip, its ratio bounds [lo, hi] searched once per
    rollout batch (``_bapo_stats``, a batch statistic) until the positive advantages' clipped
    contribution is bapo_rho0 times the negative ones',
        rho = exp(clamp(l - b, -20, 20)) (with gradient),   tok = -min(rho A_i, clip(rho, lo, hi) A_i),
        for A_i < 0 min(tok, -3 A_i),   loss = (1/n) sum_{i,t} mask tok,
        dL/dl_{i,t} = -rho A_i / n where no clip acts (A_i >= 0: rho <= hi; A_i < 0: lo <= rho <= 3), else 0.
    Metrics clip_frac (dual clip included), bapo_low, bapo_high, bapo_balance (the batch's balance
    at them). At one step per batch the recipe's old policy is the sampler, as here."""
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



@register("oapl", label="OAPL", hparams={"oapl_beta1": 1.0, "oapl_beta2": 1e-3},
          checks=(_positive("oapl_beta1", "oapl_beta2"),), batch_stats=_batch_length_stats, stats_read_logp=False)
def oapl(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""OAPL (arXiv 2602.19362; danieldritter/OAPL verl/trainer/oapl/core_algos.py
    ``compute_policy_loss``): a squared regression of beta2 times each response's log-ratio to the
    lagged inference policy onto its optimal advantage r_i - V*, no importance weight and no clip,
        V*_g = beta1 log mean_{j in g} exp(r_j / beta1),   res_i = beta2 (L_i - B_i) - (r_i - V*_g),
        loss = (1/B) sum_i res_i^2,   dL/dl_{i,t} = 2 beta2 res_i / B,
    (beta1, beta2) = (oapl_beta1, oapl_beta2), 1 and 1e-3. Written as a token-mean with the whole
    batch's n/B (gspo_len_mean, a batch statistic) so that micro-batches add up. The lagged policy
    is the sampler here, lagged by exactly N. Not GRPO at logp == behavior_logp: REINFORCE with the
    baseline V* >= mean r, sequence-mean. Metrics oapl_v_star_mean (mean V* over groups),
    oapl_residual_mean, oapl_residual_abs_mean; coef = -res_i."""
    m, beta1, beta2 = group_size, hp["oapl_beta1"], hp["oapl_beta2"]
    g = rewards.view(-1, m)
    v_star = beta1 * (torch.logsumexp(g / beta1, 1, keepdim=True) - math.log(m))
    target = (g - v_star).view(-1)
    res = beta2 * ((logp - behavior_logp) * mask).sum(1) - target
    n = mask.sum()
    loss = (res ** 2).sum() * hp["gspo_len_mean"] / n
    r = res.detach()
    return loss, -r, {"oapl_v_star_mean": v_star.mean(), "oapl_residual_mean": r.mean(),
                      "oapl_residual_abs_mean": r.abs().mean()}

def _flash_stats(logp, behavior_logp, mask, hp):
    """n / B and the mean reward of the whole batch (FlashREINFORCE's baseline and normalization)."""
    return {"gspo_len_mean": float(mask.sum() / mask.size(0)), "flash_reward_mean": float(hp["rewards"].mean())}


@register("flash_reinforce", label="FlashREINFORCE", hparams={"flash_delta": 3e-3},
          checks=(_nonnegative("flash_delta"),), batch_stats=_flash_stats, stats_read_logp=False,
          stats_read_rewards=True)
def flash_reinforce(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""FlashREINFORCE (yifanzhang-pro/FlashREINFORCE flashreinforce/loss.py ``flashreinforce_loss``,
    q = 1): REINFORCE with the whole batch's mean reward as baseline, unclipped token IS against the
    sampler, and a sequence trust region on the mean binary KL of the sampled tokens' probabilities
    p = exp(b), q = exp(l), both clamped to [1e-6, 1 - 1e-6],
        d_{i,t} = p log(p / q) + (1 - p) log((1 - p) / (1 - q)),   keep_i = 1[mean_t d_{i,t} <= flash_delta],
        a_i = r_i - mean_batch r,   w = exp(clamp(ell, -20, 20)) keep_i,
        loss = -(1/B) sum_i (a_i / |y_i|) sum_t w_{i,t} exp(l - sg(l)),   dL/dl_{i,t} = -a_i w_{i,t} / (B |y_i|),
    a sequence-mean written as a token-mean with the batch's n/B (``gspo_len_mean``; the mean reward
    ``flash_reward_mean`` is a batch statistic too). flash_delta 3e-3 (the reference function's
    default and its math recipe's; its R1 recipe 5e-3, the alternative 1e-3); flash_delta >= 14 keeps
    every response (the clamped d is at most log 1e6 < 14), its no-trust-region ablation. Metrics is_weight_mean,
    is_ess, is_masked_frac (tokens of rejected responses), flash_seq_kl_mean. Its ratio is to the
    sampler already: one step per batch changes nothing."""
    lp = logp.detach()
    p = torch.exp(behavior_logp).clamp(FLASH_PROB_CLAMP, 1 - FLASH_PROB_CLAMP)
    q = torch.exp(lp).clamp(FLASH_PROB_CLAMP, 1 - FLASH_PROB_CLAMP)
    d = p * (p.log() - q.log()) + (1 - p) * (torch.log1p(-p) - torch.log1p(-q))
    lengths = mask.sum(1).clamp(min=1)
    seq_kl = ((d * mask).sum(1) / lengths).clamp(min=0)
    keep = (seq_kl <= hp["flash_delta"]).to(mask.dtype)[:, None]
    rho = torch.exp((lp - behavior_logp).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND))
    w = rho * keep
    a = rewards - hp["flash_reward_mean"]
    n = mask.sum()
    tok = -a[:, None] * w * torch.exp(logp - lp) * (hp["gspo_len_mean"] / lengths[:, None])
    return (tok * mask).sum() / n, a.detach(), {**_weight_health(w, mask, can_mask=True),
                                                 "flash_seq_kl_mean": seq_kl.mean()}


# ----------------------------------------------------------------------------- frameworks' defaults
# What a framework runs by default on off-policy data, as its code computes it (DESIGN.md has
# each one's file, function, commit and defaults, and the lag its knob allows).

def _member_stats(logp, behavior_logp, mask, hp):
    """prime-rl's token count of the whole batch over its response tokens: the tokens whose
    advantage r_i - mean_group r is nonzero (at least 1), as a share of n."""
    a = _mean_baseline(hp["rewards"], hp["group_size"])
    member = (mask * (a != 0)[:, None]).sum()
    return {"primerl_member_frac": float(member.clamp(min=1) / mask.sum())}


def _primerl(logp, behavior_logp, mask, rewards, group_size, hp, out_of_region):
    """prime-rl's loss with the trust-region mask out_of_region(A [B, 1], d [B, T]) (True: out of
    the region), d = exp(l) - exp(b): the per-token loss -keep A rho + kl_tau ell^2 over the tokens
    with A != 0, a token-mean over them."""
    A = _mean_baseline(rewards, group_size)[:, None]
    masked = out_of_region(A, torch.exp(logp.detach()) - torch.exp(behavior_logp))
    member = mask * (A != 0)
    keep = member * ~masked
    ell = logp - behavior_logp  # with gradient: rho and the squared term both train
    rho = torch.exp(ell)
    per_token = -torch.where(keep.bool(), A * rho, 0.0) + hp["primerl_kl_tau"] * member * ell ** 2
    n = mask.sum()
    loss = per_token.sum() / (n * hp["primerl_member_frac"])
    w = (keep * rho).detach()
    return loss, A.view(-1).detach(), {**_weight_health(w, mask, can_mask=True),
                                       "primerl_member_frac": logp.new_tensor(hp["primerl_member_frac"])}


def _check_primerl(hp, name):
    _require_numbers(hp, ("primerl_mask_low", "primerl_mask_high", "ipo_threshold", "primerl_kl_tau"),
                     nonnegative=True)


PRIMERL = {"primerl_mask_low": 0.2, "primerl_mask_high": 0.2, "primerl_kl_tau": 1e-3}  # DefaultLossConfig


@register("primerl", label="prime-rl default (DPPO-TV + KL)", hparams=PRIMERL, checks=(_check_primerl,),
          batch_stats=_member_stats, stats_read_logp=False, stats_read_rewards=True)
def primerl(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""prime-rl's default loss (PrimeIntellect-ai/prime-rl src/prime_rl/trainer/rl/loss.py
    ``default_loss_fn``, ``DefaultLossConfig``): DPPO's binary-TV mask on the learner's minus the
    sampler's probability, an uncapped ratio, and a squared log-ratio penalty toward the sampler,
        A_i = r_i - mean_group r (no std),   M = mask 1[A_i != 0] (zero-advantage tokens filtered),
        d = exp(l) - exp(b),   out = d > primerl_mask_high if A_i > 0, else d < -primerl_mask_low,
        loss = (1/n_M) sum_{i,t} [-M (1 - out) A_i rho + primerl_kl_tau M (l - b)^2],  n_M = max(sum M, 1),
        dL/dl_{i,t} = (-A_i rho (1 - out) + 2 primerl_kl_tau (l - b)) M / n_M,
    rho = exp(l - b) with gradient (prime-rl has no old policy: every ratio is to the sampler, at
    any number of steps per batch; its adv_tau is 1). n_M is a batch statistic
    (``primerl_member_frac`` = n_M / n). Metrics is_weight_mean / is_ess / is_masked_frac (tokens
    with weight 0, the filtered ones included), primerl_member_frac."""
    return _primerl(logp, behavior_logp, mask, rewards, group_size, hp, lambda A, d: torch.where(
        A > 0, d > hp["primerl_mask_high"], d < -hp["primerl_mask_low"]))


@register("primerl_ipo", label="prime-rl IPO", hparams={"ipo_threshold": 0.1, "primerl_kl_tau": 1e-3},
          checks=(_check_primerl,), batch_stats=_member_stats, stats_read_logp=False, stats_read_rewards=True)
def primerl_ipo(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""prime-rl's IPO loss (loss.py ``ipo_loss_fn``, ``[trainer.loss] type = "ipo"``): ``primerl``
    with a symmetric mask whatever the advantage's sign,
        out = |exp(l) - exp(b)| > ipo_threshold,
        loss = (1/n_M) sum_{i,t} [-M (1 - out) A_i rho + primerl_kl_tau M (l - b)^2],
        dL/dl_{i,t} = (-A_i rho (1 - out) + 2 primerl_kl_tau (l - b)) M / n_M,
    A_i, M, n_M as ``primerl``. Metrics as ``primerl``. Against the sampler at any number of steps."""
    return _primerl(logp, behavior_logp, mask, rewards, group_size, hp,
                    lambda A, d: d.abs() > hp["ipo_threshold"])


@register("pipelinerl", label="PipelineRL default (REINFORCE, ratio <= 1.02)",
          hparams={"pipelinerl_eps_high": 0.02}, checks=(_nonnegative("pipelinerl_eps_high"),),
          batch_stats=_batch_length_stats, stats_read_logp=False)
def pipelinerl(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""PipelineRL's default (ServiceNow/PipelineRL pipelinerl/finetune/rl/__init__.py ``rl_step``,
    ``policy_loss: reinforce`` and ``epsilon_high: 0.02`` of conf/finetune/base.yaml): REINFORCE with a
    leave-one-out baseline (no std), each token weighted by its ratio to the sampler truncated at
    1 + pipelinerl_eps_high, summed over tokens and divided by the batch's responses,
        a_i = r_i - mean_{j != i} r_j,   w = min(rho, 1 + pipelinerl_eps_high) (detached),
        loss = -(1/B) sum_{i,t} mask a_i w l,   dL/dl_{i,t} = -a_i w_{i,t} / B,
    written with the batch's n/B (``gspo_len_mean``). Its "old" log-probs are the sampler's (never
    recomputed), so one step per batch changes nothing. Metrics is_weight_mean / is_ess."""
    a = _loo_baseline(rewards, group_size)[:, None]
    w = torch.exp(logp.detach() - behavior_logp).clamp(0, 1 + hp["pipelinerl_eps_high"])
    loss = -(a * w * logp * mask).sum() * hp["gspo_len_mean"] / mask.sum()
    return loss, a.view(-1).detach(), _weight_health(w, mask, can_mask=False)


def _check_skyrl(hp, name):
    _require_numbers(hp, ("skyrl_geo_low", "skyrl_geo_high", "skyrl_kl_coef"), nonnegative=True)
    if not hp["skyrl_geo_low"] <= 1 <= hp["skyrl_geo_high"]:
        raise ValueError(f"need skyrl_geo_low <= 1 <= skyrl_geo_high (bounds on a geometric-mean ratio), "
                         f"got {hp['skyrl_geo_low']}, {hp['skyrl_geo_high']}")


def k3_to_reference(logp, ref_logp):
    """SkyRL's and NeMo-RL's k3 = exp(R - l) - 1 - (R - l), R - l clamped to [-20, 20] (their
    input clamp; each clamps the value to [-10, 10] after it, NeMo-RL after a weight)."""
    log_ratio = (ref_logp - logp).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    return torch.exp(log_ratio) - 1 - log_ratio


@register("skyrl_geo", label="SkyRL (geometric mask 0.99-1.01, KL 1e-3)",
          hparams={**PPO_CLIP, "skyrl_geo_low": 0.99, "skyrl_geo_high": 1.01, "skyrl_kl_coef": 1e-3},
          checks=(_check_ppo_clip, _check_skyrl), needs_ref=True,
          batch_stats=_batch_length_stats, stats_read_logp=False)
def skyrl_geo(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""SkyRL's default loss with the sequence mask its docs recommend for off-policy data
    (NovaSky-AI/SkyRL skyrl/backends/skyrl_train/utils/ppo_utils.py ``ppo_policy_loss``,
    off_policy_correction_utils.py ``compute_off_policy_correction``, ``sequence_mask_metric:
    geometric``; its default ``use_kl_loss: true``, k3, 1e-3): PPO's clip against pi_old, the
    learner at one step per batch (ratio 1: the clip never acts), on the responses whose geometric
    mean of learner / sampler lies in [skyrl_geo_low, skyrl_geo_high], plus the k3 to the reference
    as a sequence-mean,
        keep_i = skyrl_geo_low <= exp(clamp(mean_t ell_{i,t}, -20, 20)) <= skyrl_geo_high,
        loss = -(1/n) sum_{i,t} mask keep_i A_i + skyrl_kl_coef (1/B) sum_i mean_t k3_to_reference,
        dL/dl_{i,t} = -A_i keep_i / n + skyrl_kl_coef (1 - exp(R - l)) / (B |y_i|) (0 where a clamp acts),
    n all response tokens (the rejected ones too), the sequence-mean written with the batch's n/B
    (``gspo_len_mean``). Metrics is_masked_frac (tokens of rejected responses), skyrl_kl (the k3)."""
    A = _grpo_advantages(rewards, group_size)[:, None]
    lengths = mask.sum(1, keepdim=True).clamp(min=1)
    mean_ell = ((logp.detach() - behavior_logp) * mask).sum(1, keepdim=True) / lengths
    geo = torch.exp(mean_ell.float().clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)).to(mean_ell.dtype)  # SkyRL's float32
    keep = ((geo >= hp["skyrl_geo_low"]) & (geo <= hp["skyrl_geo_high"])).to(mask.dtype)
    tok, _ = _clipped_surrogate(logp, logp.detach(), A, hp["clip_low"], hp["clip_high"])
    kl = k3_to_reference(logp, ref_logp).clamp(-KL_VALUE_BOUND, KL_VALUE_BOUND)
    n = mask.sum()
    kl_seq_mean = (kl * mask / lengths).sum() * hp["gspo_len_mean"] / n
    loss = (tok * keep * mask).sum() / n + hp["skyrl_kl_coef"] * kl_seq_mean
    return loss, A.view(-1).detach(), {"is_masked_frac": ((1 - keep) * mask).sum() / n,
                                       "skyrl_kl": kl_seq_mean.detach()}


def nemorl_advantages(rewards, m):
    """NeMo-RL's GRPO advantage (nemo_rl/algorithms/utils.py ``calculate_baseline_and_std_per_prompt``,
    ``use_leave_one_out_baseline`` and ``normalize_rewards`` true): b_i the mean of the group's other
    rewards, s_i their unbiased std (0 where undefined), A_i = (r_i - b_i) / (s_i + 1e-6) where s_i > 0,
    r_i - b_i where s_i = 0."""
    g = rewards.view(-1, m)
    others = m - 1
    b = (g.sum(1, keepdim=True) - g) / others
    sq = ((g ** 2).sum(1, keepdim=True) - g ** 2) / others
    s = ((sq - b ** 2) * (others / (others - 1))).sqrt().nan_to_num(0) if others > 1 else torch.zeros_like(g)
    A = g - b
    return torch.where(s > 0, A / (s + ADV_EPS), A).view(-1)


@register("nemorl", label="NeMo-RL async default (token IS, KL 0.01)", hparams={**PPO_CLIP, "nemorl_kl_coef": 0.01},
          checks=(_check_ppo_clip, _nonnegative("nemorl_kl_coef")), needs_ref=True)
def nemorl(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""NeMo-RL's asynchronous GRPO default (NVIDIA-NeMo/RL nemo_rl/algorithms/loss/loss_functions.py
    ``ClippedPGLossFn``; ``use_importance_sampling_correction: true``, which its async entry point
    requires, untruncated; examples/configs/grpo_math_1B.yaml's k3 KL 0.01 and advantage): PPO's clip
    against prev, the learner at one step per batch (ratio 1: the clip never acts), each token
    weighted by prev / sampler, plus the k3 to the reference with a score-function weight,
        w = exp(sg(l) - b) (0 where it overflows),  A_i = nemorl_advantages,
        loss = (1/n) sum_{i,t} mask [-w A_i exp(l - sg(l)) + nemorl_kl_coef exp(l - sg(l)) k3_to_reference],
        dL/dl_{i,t} = (-w A_i + nemorl_kl_coef (l - R)) / n (the KL part 0 where a clamp acts).
    (NeMo-RL divides by n + 1e-8; here n >= 1, unguarded.) Metrics is_weight_mean / is_ess, nemorl_kl."""
    A = nemorl_advantages(rewards, group_size)[:, None]
    w = torch.exp(logp.detach() - behavior_logp).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
    tok, _ = _clipped_surrogate(logp, logp.detach(), A, hp["clip_low"], hp["clip_high"])
    score = torch.exp(logp - logp.detach())
    log_ratio = ref_logp - logp
    inside = log_ratio.abs() <= LOG_RATIO_BOUND  # the input clamp detaches the score weight
    kl = (k3_to_reference(logp, ref_logp) * torch.where(inside, score, score.detach())).clamp(
        -KL_VALUE_BOUND, KL_VALUE_BOUND)
    n = mask.sum()
    kl_mean = (kl * mask).sum() / n
    loss = (w * tok * mask).sum() / n + hp["nemorl_kl_coef"] * kl_mean
    return loss, A.view(-1).detach(), {**_weight_health(w, mask, can_mask=False), "nemorl_kl": kl_mean.detach()}


def _token_count_stats(logp, behavior_logp, mask, hp):
    """n of the whole batch (a sum over tokens written as a token-mean)."""
    return {"batch_tokens": float(mask.sum())}


@register("tinker", label="Tinker default (importance_sampling)", batch_stats=_token_count_stats,
          stats_read_logp=False)
def tinker(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""The Tinker cookbook's default (thinking-machines-lab/tinker-cookbook, ``loss_fn:
    importance_sampling``, the loss the Tinker docs define; its server code is not public): the
    ratio to the sampler times the group-mean advantage, summed over the batch's tokens, no clip,
        a_i = r_i - mean_group r,   loss = -sum_{i,t} mask exp(l - b) a_i,   dL/dl_{i,t} = -rho a_i,
    written with the batch's n (``batch_tokens``). Against the sampler: one step per batch changes
    nothing. Metrics is_weight_mean / is_ess."""
    a = _mean_baseline(rewards, group_size)[:, None]
    rho = torch.exp(logp - behavior_logp)
    loss = -(rho * a * mask).sum() * hp["batch_tokens"] / mask.sum()
    return loss, a.view(-1).detach(), _weight_health(rho.detach(), mask, can_mask=False)


@register("delightful", label="Delightful PG", hparams={"dg_eta": 1.0, "dg_lambda": 0.0},
          checks=(_nonnegative("dg_eta"), lambda hp, name: _require_numbers(hp, ("dg_lambda",))))
def delightful(logp, behavior_logp, ref_logp, mask, rewards, group_size, hp):
    r"""Delightful Policy Gradient (Osband, arXiv 2603.14608 and 2603.20521; google-deepmind/egg
    egg/losses/dg.py ``DelightSigmoidLoss``): REINFORCE with the group-mean baseline, each token's
    term gated by a sigmoid of its delight, advantage times the learner's surprisal; no ratio,
        a_i = r_i - mean_group r,   w_{i,t} = sigmoid((a_i (-sg(l_{i,t})) - dg_lambda) / dg_eta)
        (dg_eta = 0: 1[a_i (-l) > dg_lambda]),
        loss = -(1/n) sum_{i,t} mask w a_i l,   dL/dl_{i,t} = -a_i w_{i,t} / n.
    (egg guards its baseline's count with +1e-9 and n with +1e-8; here both are >= 1 and unguarded.)
    The sampler's log-probs do not enter: the lag acts only through which tokens were sampled.
    Metrics is_weight_mean / is_ess of the gate."""
    A = _mean_baseline(rewards, group_size)[:, None]
    delight = A * -logp.detach()
    if hp["dg_eta"] == 0:
        w = (delight > hp["dg_lambda"]).to(mask.dtype)
    else:
        w = torch.sigmoid((delight - hp["dg_lambda"]) / hp["dg_eta"])
    loss = -(w * A * logp * mask).sum() / mask.sum()
    return loss, A.view(-1).detach(), _weight_health(w, mask, can_mask=False)


def k3(logp, behavior_logp, mask):
    """Token-mean over mask of (rho - 1) - log rho, rho = exp(logp - behavior_logp), detached:
    an estimate of KL(behavior || learner) (Schulman, 2020). Padding positions are ignored."""
    mb = mask.bool()
    lr = torch.where(mb, logp.detach() - behavior_logp.detach(), 0.0)
    return ((torch.exp(lr) - 1 - lr) * mb).sum() / mb.sum()


def entropy_from_logits(logits, mask):
    """Token-mean entropy over mask of softmax(logits), logits [B, T, V] aligned with mask [B, T]:
    H = logsumexp(z) - sum_v softmax(z)_v z_v, computed as -sum p log_softmax(z) in float32 (or
    wider), -inf logits allowed. Call it under torch.no_grad()."""
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
    r"""Importance-sampling health of a batch from the raw ratio rho = exp(ell), before any truncation,
    over response tokens, detached: is_log_ratio_mean = mean ell (k1: -KL(mu || learner)),
    is_ratio_min / is_ratio_max = min / max rho, is_chi2_token = mean exp(2 clamp(ell, -20, 20)) - 1,
    is_chi2_seq = mean_i exp(2 clamp(sum_t ell_{i,t}, -20, 20)) - 1 (the chi^2 as verl's
    compute_offpolicy_metrics), is_seq_log_ratio_max = max_i |sum_t ell_{i,t}|, is_seq_log_ratio_q90
    its 90th percentile over the call's responses (linear interpolation), is_seq_ess = (sum_i S_i)^2 /
    (B sum_i S_i^2), S_i = exp(sum_t ell_{i,t}), in log space (1: equal sequence weights, 1/B:
    one dominates); the sequence-level tail a long answer is built to show."""
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
            "is_seq_log_ratio_max": seq.abs().max(),
            "is_seq_log_ratio_q90": torch.quantile(seq.abs(), 0.9),
            "is_seq_ess": torch.exp(2 * torch.logsumexp(seq, 0) - torch.logsumexp(2 * seq, 0)) / seq.numel()}


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
    """The statistics of the whole rollout batch that objective ``name`` reads ({} for most), as
    floats: ``m2_cutoff`` (m2po), ``gspo_len_mean`` (grpo, gspo, gmpo, gepo, oapl, flash_reinforce, pipelinerl, skyrl_geo),
    ``snis_weight_mean`` (snis), ``bapo_low`` / ``bapo_high`` / ``bapo_balance`` (bapo),
    ``flash_reward_mean`` (flash_reinforce), ``primerl_member_frac`` (primerl, primerl_ipo),
    ``batch_tokens`` (tinker). Computed once from the whole batch (no
    gradient) and passed to every micro-batch's compute_loss, they make the micro-batches give the
    update of one full batch. logp, behavior_logp may be None where ``stats_read_logp`` is False;
    rewards [B] and group_size are needed where ``stats_read_rewards`` is True."""
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
                             f"int >= 2 dividing B) of the whole batch: its statistics read the "
                             f"rewards; got rewards {rewards!r}, group_size {group_size!r}")
    if logp is None and behavior_logp is None and not objective(name).stats_read_logp:
        mb = mask.bool().to(torch.promote_types(mask.dtype, torch.float32))
        if objective(name).stats_read_rewards:
            hp = {**hp, "rewards": rewards.detach().to(device=mask.device, dtype=mb.dtype), "group_size": group_size}
        return fn(None, None, mb, hp)
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
    """Validate inputs, run objective ``name`` and add the common diagnostics (ValueError on bad
    input). Returns (loss with gradient w.r.t. logp, metrics: dict of floats): loss, k3,
    coef_correct_sum (mean over mixed groups, with correct and not-correct responses, of the sum of
    the coefficient over the correct ones; nan without one), coef_abs_mean, the objective's own
    (clip_frac first), is_health's. batch_stats: ``batch_stats(name, ...)`` of the whole batch when
    this call holds part of it (None: computed here). old_logp [B, T], response_grad_sq [B]: for
    the objectives with reads_old_logp / needs_grad_sq (see Objective)."""
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
    stats = {"surrogate": loss.detach(), "k3": k3(lp, blp, mb), **clip,
             "coef_correct_sum": w_correct[mixed].mean() if mixed.any() else torch.full((), math.nan, device=lp.device),
             "coef_abs_mean": coef.abs().mean(), **extra, **is_health(lp, blp, mb)}
    values = torch.stack([v.detach().to(dt) for v in stats.values()]).tolist()  # one device sync
    return loss, dict(zip(stats, values))
