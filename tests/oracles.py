"""The objectives' oracles: batches that make every mask and clip act, GRPO's A_i by hand, the
gradient of losses.compute_loss by autograd, and each registered objective's expected gradient
written from its formula with plain loops over tokens (never by calling the code under test).

One optimizer step per batch, so every ratio is against the sampler: l = learner log-prob,
b = sampler (behavior) log-prob, ell = l - b, rho = exp(ell), A_i = GRPO's group advantage,
n = response tokens of the batch, B = responses, |y_i| = tokens of response i.

EXPECTED[name] is objective `name`'s Oracle: its formula (`grad`), the batch it is checked on
(`batch`, with the settings `formula_batch` for the formula check) and nothing else; an
objective without one is listed in NO_FORMULA_ORACLE with the reason.
"""
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import losses  # noqa: E402

D = torch.float64
A3PO_ALPHA = 0.75  # a3po's alpha where a check does not set one (staleness 4)


# ----------------------------------------------------------------------------- batches
# Each returns {logp, b, old, ref, mask, r, m, grad_sq}: B responses in groups of m, lengths
# 1..T (padding holds garbage), every group mixed (nonzero advantages); old (the learner's view
# at sampling, icepop), ref (the reference) and grad_sq (per-response squared gradient norms,
# vcpo) are None where the batch has none.

def batch_one_spread(seed, B=24, T=6, m=4, spread=1.0):
    """|ell| ~ spread on every token."""
    g = torch.Generator().manual_seed(seed)
    b = -torch.rand(B, T, generator=g, dtype=D) * 3
    logp = b + torch.randn(B, T, generator=g, dtype=D) * spread
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None] < lengths[:, None]).to(D)
    logp = torch.where(mask.bool(), logp, 7.0)  # garbage on padding
    r = (torch.rand(B, generator=g) > 0.5).to(D)
    r[::m] = 1.0  # every group mixed: nonzero advantages
    r[1::m] = 0.0
    return dict(logp=logp, b=b, old=None, ref=None, mask=mask, r=r, m=m, grad_sq=None)


def batch_with_old_and_ref(seed, B=24, T=6, m=4, spread=1.0, rewards=(0.0, 1.0)):
    """|ell| ~ spread; old differs from b by ~0.6 per token, ref by ~0.5; rewards drawn from
    `rewards` (their sign matters to topr)."""
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
    return dict(logp=logp, b=b, old=old, ref=ref, mask=mask, r=r, m=m, grad_sq=None)


# responses of four kinds of staleness, so that every mask keeps some and drops some: |ell| about
# 1e-4 (inside geo_rs's +-0.1%), 0.05 (inside k3_rs's 0.01), 0.3 and 1.5
SPREADS = [1e-4, 0.05, 0.3, 1.5]


def batch_four_spreads(seed, B=32, T=6, m=4, max_logp=None):
    """Row i's |ell| about SPREADS[i % 4] (a group spans all four); grad_sq in [0.1, 10.1].
    max_logp: logp clamped to it (log-probabilities, where a formula reads 1 - exp(l))."""
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
    if max_logp is not None:
        logp = logp.clamp(max=max_logp)
    return dict(logp=logp, b=b, old=None, ref=None, mask=mask, r=r, m=m, grad_sq=grad_sq)


# ----------------------------------------------------------------------------- by hand

def advantages(r, m, std="unbiased", eps=1e-6):
    """A_i = (r_i - mean) / (std + eps) per group, std unbiased (or population), by hand."""
    out = []
    for i in range(0, len(r), m):
        g = [float(x) for x in r[i:i + m]]
        mu = sum(g) / m
        sd = math.sqrt(sum((x - mu) ** 2 for x in g) / (m - (std == "unbiased")))
        out += [(x - mu) / (sd + eps) for x in g]
    return out


def loo_baseline(r, m):
    """r_i - the mean of the other rewards of its group, by hand."""
    out = []
    for i in range(0, len(r), m):
        g = [float(x) for x in r[i:i + m]]
        out += [x - (sum(g) - x) / (m - 1) for x in g]
    return out


def mean_baseline(r, m, shift=0.0):
    """r_i - group mean + shift (REC's coefficient; AsymRE's with shift asymre_c), by hand."""
    out = []
    for i in range(0, len(r), m):
        g = [float(x) for x in r[i:i + m]]
        out += [x - sum(g) / m + shift for x in g]
    return out


def paper_m2po_kept(sq_values, threshold):
    """M2PO's Algorithm 1 read literally: drop the largest value one at a time while the mean of
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


def bapo_bounds(logp, b, mask, r, m, hp):
    """BAPO's search of its clip bounds over the whole batch, written from the recipe's loop."""
    A = advantages(r, m)
    B = logp.shape[0]
    toks = [(math.exp(max(-20.0, min(20.0, float(logp[i, t] - b[i, t])))), A[i])
            for i in range(B) for t in range(int(mask[i].sum()))]

    def balance(lo, hi):
        adv = [(min(rho, hi) if a >= 0 else max(rho, lo)) * a for rho, a in toks]
        pos, neg = sum(x for x in adv if x > 0), -sum(x for x in adv if x < 0)
        return math.inf if neg <= 0 else pos / (neg + 1e-8)
    lo, hi = hp["bapo_lo_start"], hp["bapo_hi_start"]
    while balance(lo, hi) < hp["bapo_rho0"] and lo < hp["bapo_lo_max"]:
        lo = min(lo + hp["bapo_step"], hp["bapo_lo_max"])
    while balance(lo, hi) < hp["bapo_rho0"] and hi < hp["bapo_hi_max"]:
        hi = min(hi + hp["bapo_step"], hp["bapo_hi_max"])
    return lo, hi


# ----------------------------------------------------------------------------- the code under test

def loss_inputs(name, batch, rows=slice(None), **hp):
    """losses.compute_loss's keyword arguments, all but logp, for the rows `rows` of a batch
    (a3po gets A3PO_ALPHA unless hp sets its alpha)."""
    part = {k: None if batch.get(k) is None else batch[k][rows] for k in ("b", "ref", "old", "mask", "r", "grad_sq")}
    kw = dict(behavior_logp=part["b"], ref_logp=part["ref"], old_logp=part["old"], mask=part["mask"],
              rewards=part["r"], group_size=batch["m"], response_grad_sq=part["grad_sq"], **hp)
    if name == "a3po":
        kw.setdefault("a3po_alpha", A3PO_ALPHA)
    return kw


def grad_of_batch(name, batch, logp=None, batch_stats=None, **hp):
    """compute_loss on a batch (its logp, or `logp`) + backward: (dL/dlogp, metrics)."""
    x = (batch["logp"] if logp is None else logp).clone().requires_grad_(True)
    loss, met = losses.compute_loss(name, logp=x, batch_stats=batch_stats, **loss_inputs(name, batch, **hp))
    loss.backward()
    return x.grad, met


def grad_of(name, logp, b, mask, r, m, grad_sq=None, *, ref=None, old=None, batch_stats=None, **hp):
    """grad_of_batch on tensors: (dL/dlogp, metrics)."""
    batch = dict(logp=logp, b=b, old=old, ref=ref, mask=mask, r=r, m=m, grad_sq=grad_sq)
    return grad_of_batch(name, batch, batch_stats=batch_stats, **hp)


# ----------------------------------------------------------------------------- formulas

@dataclass
class Expected:
    grad: torch.Tensor  # dL/dl per token, [B, T], 0 on padding
    dropped: int = 0    # response tokens whose gradient a mask or clip zeroed
    capped: int = 0     # response tokens whose weight a cap or clip bounded (gradient kept)
    n: int = 0          # response tokens
    metrics: dict = field(default_factory=dict)  # metric -> value the objective must log


class Tokens:
    """A batch as Python floats for the loops: x.toks[i] the token positions of response i,
    x.l / x.b / x.old / x.ref / x.ell [i][j] per token j of response i (ell = l - b),
    x.A GRPO's advantages, x.r the rewards, x.n, x.B, x.m, x.grad_sq; x.batch the tensors."""

    def __init__(self, batch):
        logp, b, mask = batch["logp"], batch["b"], batch["mask"]
        self.batch = batch
        self.B, self.T = logp.shape
        self.m = batch["m"]
        self.toks = [[t for t in range(self.T) if mask[i, t] == 1] for i in range(self.B)]
        self.len = [len(ts) for ts in self.toks]
        self.n = sum(self.len)
        per_token = lambda x: None if x is None else [[float(x[i, t]) for t in ts] for i, ts in enumerate(self.toks)]
        self.l, self.b, self.old, self.ref = (per_token(batch.get(k)) for k in ("logp", "b", "old", "ref"))
        self.ell = [[float(logp[i, t] - b[i, t]) for t in ts] for i, ts in enumerate(self.toks)]
        self.r = [float(x) for x in batch["r"]]
        self.A = advantages(batch["r"], self.m)
        self.grad_sq = None if batch.get("grad_sq") is None else [float(x) for x in batch["grad_sq"]]

    def group(self, i):
        return range(i - i % self.m, i - i % self.m + self.m)

    def tokens(self):
        """(i, j, t, ell) for every response token: response i, its j-th token at position t."""
        return [(i, j, t, self.ell[i][j]) for i in range(self.B) for j, t in enumerate(self.toks[i])]


def ppo_clipped(A, ratio, hp):
    """PPO's clip is active: (A > 0, ratio > 1 + clip_high) or (A < 0, ratio < 1 - clip_low)."""
    return (A > 0 and ratio > 1 + hp["clip_high"]) or (A < 0 and ratio < 1 - hp["clip_low"])


@dataclass(frozen=True)
class Oracle:
    grad: Callable            # (x: Tokens, hp, g: zeros [B, T]) -> Expected (g filled in)
    batch: Callable           # (seed, **kw) -> the batch the objective is checked on
    formula_batch: dict = field(default_factory=dict)  # that batch's settings in the formula check


EXPECTED = {}  # name -> Oracle
NO_FORMULA_ORACLE = {}  # name -> why the objective has no formula oracle (every objective has one)


def oracle(name, batch, **formula_batch):
    def add(fn):
        EXPECTED[name] = Oracle(fn, batch, formula_batch)
        return fn
    return add


def expected_grad(name, batch, **over):
    """Objective `name`'s dL/dl per token on `batch` from its formula (losses.DEFAULTS updated
    by `over`), and what its masks, clips and caps did: an Expected."""
    hp = {**losses.DEFAULTS, "a3po_alpha": A3PO_ALPHA, **over}
    x = Tokens(batch)
    out = EXPECTED[name].grad(x, hp, torch.zeros(x.B, x.T, dtype=D))
    out.n = x.n
    return out


# --- the study's four

@oracle("grpo", batch_with_old_and_ref, spread=1.2)
def _grpo(x, hp, g):
    """proximal anchor: -A_i / n; behavior anchor: -rho A_i / n, 0 where PPO's clip acts;
    A_i with adv_std and adv_eps; grpo_agg seq_mean: / (B |y_i|) in place of / n."""
    dropped = 0
    A = advantages(x.r, x.m, hp["adv_std"], hp["adv_eps"])
    for i, j, t, e in x.tokens():
        norm = x.B * x.len[i] if hp["grpo_agg"] == "seq_mean" else x.n
        if hp["grpo_anchor"] == "proximal":
            g[i, t] = -A[i] / norm
        else:
            clip = ppo_clipped(A[i], math.exp(e), hp)
            dropped += clip
            g[i, t] = 0.0 if clip else -math.exp(e) * A[i] / norm
    metrics = {"clip_frac": dropped / x.n} if hp["grpo_anchor"] == "behavior" else {}
    return Expected(g, dropped=dropped, metrics=metrics)


@oracle("grpo_tis", batch_with_old_and_ref, spread=1.2)
def _grpo_tis(x, hp, g):
    """w = min(rho, tis_cap): -w A_i / n."""
    capped, weights, at_cap = 0, 0.0, 0
    for i, j, t, e in x.tokens():
        rho = math.exp(e)
        w = min(rho, hp["tis_cap"])
        capped += w != rho
        at_cap += rho >= hp["tis_cap"]
        weights += w
        g[i, t] = -w * x.A[i] / x.n
    return Expected(g, capped=capped, metrics={"tis_weight_mean": weights / x.n, "tis_clip_frac": at_cap / x.n})


@oracle("agro", batch_with_old_and_ref, spread=1.2)
def _agro(x, hp, g):
    """G_i = r_i - beta (L_i - R_i), L_i = sum_t l, R_i = sum_t ref; a_i = G_i - mean_{j != i} G_j;
    -a_i / n (no importance weight)."""
    G = [x.r[i] - hp["beta"] * (sum(x.l[i]) - sum(x.ref[i])) for i in range(x.B)]
    for i, j, t, e in x.tokens():
        a = G[i] - sum(G[k] for k in x.group(i) if k != i) / (x.m - 1)
        g[i, t] = -a / x.n
    return Expected(g)


@oracle("ggpo", batch_with_old_and_ref, spread=1.2)
def _ggpo(x, hp, g):
    """q_i = softmax_group(R_i - B_i + r_i / beta), p_i = softmax_group(L_i - B_i), c = q - p;
    original: -c_i / n; detached: -c_i / n, 0 where (c_i > 0, rho > 1 + clip_high) or
    (c_i < 0, rho < 1 - clip_low)."""
    L, Bs, R = ([sum(v[i]) for i in range(x.B)] for v in (x.l, x.b, x.ref))

    def softmax(z, i):
        top = max(z[k] for k in x.group(i))
        return math.exp(z[i] - top) / sum(math.exp(z[k] - top) for k in x.group(i))
    z_q = [R[i] - Bs[i] + x.r[i] / hp["beta"] for i in range(x.B)]
    z_p = [L[i] - Bs[i] for i in range(x.B)]
    c = [softmax(z_q, i) - softmax(z_p, i) for i in range(x.B)]
    dropped = 0
    for i, j, t, e in x.tokens():
        drop = hp["ggpo_variant"] == "detached" and ppo_clipped(c[i], math.exp(e), hp)
        dropped += drop
        g[i, t] = 0.0 if drop else -c[i] / x.n
    metrics = {"clip_frac": dropped / x.n} if hp["ggpo_variant"] == "detached" else {}
    return Expected(g, dropped=dropped, metrics=metrics)


# --- token and sequence weights, masks and clips against the sampler

def _masked_is(low, high):
    def fn(x, hp, g):
        """w = rho 1[low <= rho <= high]: -w A_i / n."""
        dropped = 0
        for i, j, t, e in x.tokens():
            rho = math.exp(e)
            keep = hp[low] <= rho <= hp[high]
            dropped += not keep
            g[i, t] = -rho * keep * x.A[i] / x.n
        return Expected(g, dropped=dropped)
    return fn


oracle("grpo_mis", batch_one_spread)(_masked_is("mis_low", "mis_high"))
oracle("icepop_primerl", batch_one_spread)(_masked_is("icepop_low", "icepop_high"))


@oracle("icepop", batch_with_old_and_ref, spread=1.2)
def _icepop(x, hp, g):
    """k = exp(old - b), M = k 1[icepop_low <= k <= icepop_high], r = exp(l - old):
    -M r A_i / n, 0 where PPO's clip on r acts."""
    dropped = 0
    for i, j, t, e in x.tokens():
        o = x.old[i][j]
        k = math.exp(o - x.b[i][j])
        M = k if hp["icepop_low"] <= k <= hp["icepop_high"] else 0.0
        ratio = math.exp(x.l[i][j] - o)
        dropped += M == 0
        g[i, t] = 0.0 if ppo_clipped(x.A[i], ratio, hp) else -M * ratio * x.A[i] / x.n
    return Expected(g, dropped=dropped, metrics={"is_masked_frac": dropped / x.n})


@oracle("grpo_tis_seq", batch_one_spread)
def _grpo_tis_seq(x, hp, g):
    """S_i = exp(sum_t ell): -min(S_i, tis_seq_cap) A_i / n."""
    capped = 0
    for i, j, t, e in x.tokens():
        S = math.exp(sum(x.ell[i]))
        capped += S > hp["tis_seq_cap"]
        g[i, t] = -min(S, hp["tis_seq_cap"]) * x.A[i] / x.n
    return Expected(g, capped=capped)


@oracle("grpo_mis_seq", batch_one_spread)
def _grpo_mis_seq(x, hp, g):
    """S_i = exp(sum_t ell): -S_i 1[S_i <= mis_seq_cap] A_i / n, A_i with adv_std and adv_eps."""
    dropped = 0
    A = advantages(x.r, x.m, hp["adv_std"], hp["adv_eps"])
    for i, j, t, e in x.tokens():
        S = math.exp(sum(x.ell[i]))
        dropped += S > hp["mis_seq_cap"]
        g[i, t] = -S * (S <= hp["mis_seq_cap"]) * A[i] / x.n
    return Expected(g, dropped=dropped)


@oracle("gspo", batch_one_spread)
def _gspo(x, hp, g):
    """s_i = exp(mean_t ell): -s_i A_i / (B |y_i|), 0 where (A > 0, s > 1 + gspo_eps_high) or
    (A < 0, s < 1 - gspo_eps_low)."""
    dropped = 0
    for i, j, t, e in x.tokens():
        s = math.exp(sum(x.ell[i]) / x.len[i])
        clip = (x.A[i] > 0 and s > 1 + hp["gspo_eps_high"]) or (x.A[i] < 0 and s < 1 - hp["gspo_eps_low"])
        dropped += clip
        g[i, t] = 0.0 if clip else -s * x.A[i] / (x.B * x.len[i])
    return Expected(g, dropped=dropped)


@oracle("m2po", batch_one_spread)
def _m2po(x, hp, g):
    """Algorithm 1 over the trust region (paper_m2po_kept_tokens): -rho A_i / n on the tokens
    kept, 0 on those dropped."""
    ell = {(i, t): e for i, j, t, e in x.tokens()}
    kept = paper_m2po_kept_tokens(ell, {(i, t): x.A[i] for i, t in ell}, hp["m2_threshold"])
    dropped = 0
    for i, j, t, e in x.tokens():
        dropped += (i, t) not in kept
        g[i, t] = -math.exp(e) * x.A[i] / x.n if (i, t) in kept else 0.0
    return Expected(g, dropped=dropped)


@oracle("ds_mask", batch_one_spread)
def _ds_mask(x, hp, g):
    """A response with A_i < 0 and mean_t (b - l) > ds_mask_delta dropped; PPO's clip on rho;
    -rho A_i / n elsewhere. Capped: tokens the clip zeroes on kept responses."""
    dropped, capped = 0, 0
    for i, j, t, e in x.tokens():
        rho = math.exp(e)
        drop = x.A[i] < 0 and -sum(x.ell[i]) / x.len[i] > hp["ds_mask_delta"]
        clip = ppo_clipped(x.A[i], rho, hp)
        dropped += drop
        capped += clip and not drop
        g[i, t] = 0.0 if drop or clip else -rho * x.A[i] / x.n
    return Expected(g, dropped=dropped, capped=capped,
                    metrics={"is_masked_frac": dropped / x.n, "clip_frac": capped / x.n})


@oracle("ds_v32", batch_with_old_and_ref, spread=1.2)
def _ds_v32(x, hp, g):
    """ds_mask's surrogate plus ds_kl_beta rho (l - ref) / n (the importance-weighted K3 to
    the reference)."""
    dropped = 0
    for i, j, t, e in x.tokens():
        rho = math.exp(e)
        drop = x.A[i] < 0 and -sum(x.ell[i]) / x.len[i] > hp["ds_mask_delta"]
        dropped += drop
        surrogate = 0.0 if drop or ppo_clipped(x.A[i], rho, hp) else -rho * x.A[i] / x.n
        g[i, t] = surrogate + hp["ds_kl_beta"] * rho * (x.l[i][j] - x.ref[i][j]) / x.n
    return Expected(g, dropped=dropped, metrics={"is_masked_frac": dropped / x.n})


@oracle("cispo", batch_with_old_and_ref, spread=1.2)
def _cispo(x, hp, g):
    """w = clip(rho, 1 - cispo_eps_low, 1 + cispo_eps_high): -w A_i / n."""
    capped = 0
    for i, j, t, e in x.tokens():
        rho = math.exp(e)
        w = min(max(rho, 1 - hp["cispo_eps_low"]), 1 + hp["cispo_eps_high"])
        capped += w != rho
        g[i, t] = -w * x.A[i] / x.n
    return Expected(g, capped=capped, metrics={"clip_frac": capped / x.n})


@oracle("sapo", batch_with_old_and_ref, spread=1.2)
def _sapo(x, hp, g):
    """s = sigmoid(tau (rho - 1)), tau = sapo_tau_pos (A > 0) or sapo_tau_neg:
    -A_i 4 s (1 - s) rho / n."""
    for i, j, t, e in x.tokens():
        tau = hp["sapo_tau_pos"] if x.A[i] > 0 else hp["sapo_tau_neg"]
        rho = math.exp(e)
        s = 1 / (1 + math.exp(-tau * (rho - 1)))
        g[i, t] = -x.A[i] * 4 * s * (1 - s) * rho / x.n
    return Expected(g)


@oracle("gmpo", batch_with_old_and_ref, spread=1.2)
def _gmpo(x, hp, g):
    """ell clipped to gmpo_eps in A's direction, s_i = exp(mean_t clipped ell):
    -A_i s_i / (B |y_i|), 0 on the clipped tokens."""
    eps, dropped = hp["gmpo_eps"], 0
    for i, j, t, e in x.tokens():
        A = x.A[i]
        c = [min(v, eps) if A > 0 else max(v, -eps) if A < 0 else 0.0 for v in x.ell[i]]
        s = math.exp(sum(c) / x.len[i])
        clip = (A > 0 and e > eps) or (A < 0 and e < -eps)
        dropped += clip
        g[i, t] = 0.0 if clip else -A * s / (x.B * x.len[i])
    return Expected(g, dropped=dropped, metrics={"clip_frac": dropped / x.n})


@oracle("topr", batch_with_old_and_ref, spread=1.2, rewards=(-1.0, 0.0, 0.5, 1.0))
def _topr(x, hp, g):
    """w = topr_positive_weight (r_i > 0) or topr_negative_weight min(rho, 1) (r_i <= 0):
    -w A_i / n."""
    capped = 0
    for i, j, t, e in x.tokens():
        rho = math.exp(e)
        w = hp["topr_positive_weight"] if x.r[i] > 0 else hp["topr_negative_weight"] * min(rho, 1.0)
        capped += x.r[i] <= 0 and rho > 1
        g[i, t] = -w * x.A[i] / x.n
    return Expected(g, capped=capped)


@oracle("kimi", batch_with_old_and_ref, spread=1.2)
def _kimi(x, hp, g):
    """(-(r_i - group mean r) + kimi_tau ell) / n: no 1/std; kimi_penalty = kimi_tau / 2 mean ell^2."""
    for i, j, t, e in x.tokens():
        mean_r = sum(x.r[k] for k in x.group(i)) / x.m
        g[i, t] = (-(x.r[i] - mean_r) + hp["kimi_tau"] * e) / x.n
    penalty = hp["kimi_tau"] / 2 * sum(e * e for i, j, t, e in x.tokens()) / x.n
    return Expected(g, metrics={"kimi_penalty": penalty})


@oracle("vespo", batch_with_old_and_ref, spread=1.2)
def _vespo(x, hp, g):
    """log w_i = clamp(sum_t clamp(ell, +-20), log 1e-8, 20), (k, lambda) by A's sign,
    phi_i = exp(lambda + k log w - lambda w): -phi_i A_i / n."""
    for i, j, t, e in x.tokens():
        log_w = sum(max(-20.0, min(20.0, v)) for v in x.ell[i])
        log_w = max(math.log(1e-8), min(20.0, log_w))
        k, lam = ((hp["vespo_k_pos"], hp["vespo_lambda_pos"]) if x.A[i] >= 0
                  else (hp["vespo_k_neg"], hp["vespo_lambda_neg"]))
        phi = math.exp(lam + k * log_w - lam * math.exp(log_w))
        g[i, t] = -phi * x.A[i] / x.n
    return Expected(g)


@oracle("gepo", batch_four_spreads)
def _gepo(x, hp, g):
    """P_i, Q_i = exp(mean_t l), exp(mean_t b); w_i = P_i / E_q[Q] with E_q[Q] = sum_group Q^2 /
    sum_group Q: -w_i A_i / (B |y_i|), 0 where (A > 0, w > 1 + gepo_eps) or (A < 0,
    w < 1 - gepo_eps)."""
    P = [math.exp(sum(x.l[i]) / x.len[i]) for i in range(x.B)]
    Q = [math.exp(sum(x.b[i]) / x.len[i]) for i in range(x.B)]
    E = [sum(Q[k] ** 2 for k in x.group(i)) / sum(Q[k] for k in x.group(i)) for i in range(x.B)]
    dropped = 0
    for i, j, t, e in x.tokens():
        w = P[i] / E[i]
        clip = (x.A[i] > 0 and w > 1 + hp["gepo_eps"]) or (x.A[i] < 0 and w < 1 - hp["gepo_eps"])
        dropped += clip
        g[i, t] = 0.0 if clip else -w * x.A[i] / (x.B * x.len[i])
    return Expected(g, dropped=dropped)


@oracle("a3po", batch_four_spreads)
def _a3po(x, hp, g):
    """u = exp(alpha ell) masked outside [mis_low, mis_high], PPO's clip on exp((1 - alpha) ell):
    -rho A_i / n where neither acts."""
    a, dropped = hp["a3po_alpha"], 0
    for i, j, t, e in x.tokens():
        u, ratio = math.exp(a * e), math.exp((1 - a) * e)
        clip = ppo_clipped(x.A[i], ratio, hp)
        keep = hp["mis_low"] <= u <= hp["mis_high"]
        dropped += clip or not keep
        g[i, t] = -math.exp(e) * x.A[i] / x.n if keep and not clip else 0.0
    return Expected(g, dropped=dropped)


@oracle("dppo_tv", batch_four_spreads)
def _dppo_tv(x, hp, g):
    """d = exp(l) - exp(b): invalid where d > dppo_delta (A > 0) or d < -dppo_delta (A <= 0);
    -A_i min(rho, dppo_rho_cap) / n on the valid tokens."""
    dropped = 0
    for i, j, t, e in x.tokens():
        d = math.exp(x.l[i][j]) - math.exp(x.b[i][j])
        invalid = d > hp["dppo_delta"] if x.A[i] > 0 else d < -hp["dppo_delta"]
        dropped += invalid
        g[i, t] = 0.0 if invalid else -x.A[i] * min(math.exp(e), hp["dppo_rho_cap"]) / x.n
    return Expected(g, dropped=dropped)


@oracle("geo_rs", batch_four_spreads)
def _geo_rs(x, hp, g):
    """k1_i = mean_t (b - l) kept in [log geo_rs_low, log geo_rs_high]: -A_i / n on kept responses."""
    dropped = 0
    for i, j, t, e in x.tokens():
        k1 = -sum(x.ell[i]) / x.len[i]
        keep = math.log(hp["geo_rs_low"]) <= k1 <= math.log(hp["geo_rs_high"])
        dropped += not keep
        g[i, t] = -x.A[i] * keep / x.n
    return Expected(g, dropped=dropped)


@oracle("k3_rs", batch_four_spreads)
def _k3_rs(x, hp, g):
    """A response kept where mean_t (rho - 1 - ell) <= k3_rs_threshold; PPO's clip and the dual
    clip (A < 0, rho > k3_rs_clip_c): -rho A_i / n where none acts."""
    dropped = 0
    for i, j, t, e in x.tokens():
        rho = math.exp(e)
        k3 = sum(math.exp(v) - 1 - v for v in x.ell[i]) / x.len[i]
        keep = k3 <= hp["k3_rs_threshold"]
        clip = ppo_clipped(x.A[i], rho, hp) or (x.A[i] < 0 and rho > hp["k3_rs_clip_c"])
        dropped += clip or not keep
        g[i, t] = -rho * x.A[i] / x.n if keep and not clip else 0.0
    return Expected(g, dropped=dropped)


@oracle("snis", batch_four_spreads)
def _snis(x, hp, g):
    """v = min(rho, tis_cap), self-normalized by its batch mean: -A_i v / mean(v) / n."""
    v = [[min(math.exp(e), hp["tis_cap"]) for e in row] for row in x.ell]
    vbar = sum(map(sum, v)) / x.n
    capped = 0
    for i, j, t, e in x.tokens():
        g[i, t] = -x.A[i] * v[i][j] / vbar / x.n
        capped += v[i][j] == hp["tis_cap"]
    return Expected(g, capped=capped)


@oracle("vcpo", batch_four_spreads)
def _vcpo(x, hp, g):
    """w_i = min(exp(sum_t ell), vcpo_is_cap); per group the baseline sum W r / (sum W + 1e-8)
    with W = w^2 grad_sq, c_i = (r_i - baseline) / population std (r_i - baseline where the std
    is ~0): -c_i w_i / n."""
    w = [min(math.exp(sum(row)), hp["vcpo_is_cap"]) for row in x.ell]
    c = []
    for s in range(0, x.B, x.m):
        rs = x.r[s:s + x.m]
        W = [w[i] ** 2 * x.grad_sq[i] for i in range(s, s + x.m)]
        base = sum(Wi * ri for Wi, ri in zip(W, rs)) / (sum(W) + 1e-8)
        sd = math.sqrt(sum((v - sum(rs) / x.m) ** 2 for v in rs) / x.m)
        c += [(v - base) / sd if sd > 1e-8 else v - base for v in rs]
    capped = 0
    for i, j, t, e in x.tokens():
        g[i, t] = -c[i] * w[i] / x.n
        capped += w[i] == hp["vcpo_is_cap"]
    return Expected(g, capped=capped)


# --- responses dropped by their ratio, binary-KL bounds, REC's and AsymRE's mean baseline

LOG_PROBS = dict(max_logp=-0.01)  # log-probabilities: dppo_kl's binary KL reads 1 - exp(l)


def _ppo_response_rejection(keep_response):
    def fn(x, hp, g):
        """A response kept by keep_response(clamped ell of its tokens, hp); PPO's clip on rho:
        -rho A_i / n where neither drops."""
        dropped = 0
        for i, j, t, e in x.tokens():
            ell = [max(-20.0, min(20.0, v)) for v in x.ell[i]]
            rho = math.exp(e)
            keep = keep_response(ell, hp) and not ppo_clipped(x.A[i], rho, hp)
            dropped += not keep
            g[i, t] = -rho * x.A[i] / x.n if keep else 0.0
        return Expected(g, dropped=dropped)
    return fn


def _trm_keep(ell, hp):
    """max_t of k2 = ell^2 / 2 (or k3 = rho - 1 - ell) <= trm_delta."""
    div = [e * e / 2 if hp["trm_divergence"] == "k2" else math.exp(e) - 1 - e for e in ell]
    return max(div) <= hp["trm_delta"]


oracle("trm", batch_four_spreads, **LOG_PROBS)(_ppo_response_rejection(_trm_keep))
oracle("seq_outlier_rs", batch_four_spreads, **LOG_PROBS)(_ppo_response_rejection(
    lambda ell, hp: all(hp["outlier_low"] <= math.exp(e) <= hp["outlier_high"] for e in ell)))


@oracle("dppo_kl", batch_four_spreads, **LOG_PROBS)
def _dppo_kl(x, hp, g):
    """Binary KL(q || p) = q (b - l) + (1 - q) log((1 - q + 1e-8) / (1 - p + 1e-8)), p = exp(l),
    q = exp(b): a token moved in A's direction (A > 0, p > q or A < 0, p < q) with KL >
    dppo_kl_delta is dropped; -A_i rho / n elsewhere."""
    dropped = 0
    for i, j, t, e in x.tokens():
        p, q = math.exp(x.l[i][j]), math.exp(x.b[i][j])
        kl = q * (x.b[i][j] - x.l[i][j]) + (1 - q) * math.log((1 - q + 1e-8) / (1 - p + 1e-8))
        bad = ((x.A[i] > 0 and p > q) or (x.A[i] < 0 and p < q)) and kl > hp["dppo_kl_delta"]
        dropped += bad
        g[i, t] = 0.0 if bad else -x.A[i] * math.exp(e) / x.n
    return Expected(g, dropped=dropped)


def _mean_baseline_kept(keep_token, shift_key=None, clip_metric=True):
    def fn(x, hp, g):
        """a_i = r_i - group mean (+ hp[shift_key]): -a_i / n on the tokens keep_token(a_i, rho,
        hp); clip_frac the share of tokens dropped."""
        a = mean_baseline(x.r, x.m, hp[shift_key] if shift_key else 0.0)
        dropped = 0
        for i, j, t, e in x.tokens():
            keep = keep_token(a[i], math.exp(e), hp)
            dropped += not keep
            g[i, t] = -a[i] / x.n if keep else 0.0
        return Expected(g, dropped=dropped, metrics={"clip_frac": dropped / x.n} if clip_metric else {})
    return fn


oracle("rec_oneside", batch_four_spreads, **LOG_PROBS)(_mean_baseline_kept(
    lambda A, rho, hp: (A >= 0 and rho <= 1 + hp["rec_eps_high"]) or (A <= 0 and rho >= 1 - hp["rec_eps_low"])))
oracle("rec_ring", batch_four_spreads, **LOG_PROBS)(_mean_baseline_kept(
    lambda A, rho, hp: (1 - hp["rec_eps_low"] <= rho <= 1 + hp["rec_eps_high"]
                        or (A >= 0 and rho <= 1 - hp["rec_ring_low"])
                        or (A <= 0 and rho >= 1 + hp["rec_ring_high"]))))
oracle("asymre", batch_four_spreads, **LOG_PROBS)(
    _mean_baseline_kept(lambda A, rho, hp: True, "asymre_c", clip_metric=False))


@oracle("bapo", batch_four_spreads, seed=3)
def _bapo(x, hp, g):
    """Bounds [lo, hi] from bapo_bounds over the whole batch; -rho A_i / n, 0 where
    (A > 0, rho > hi) or (A < 0, rho < lo or rho > 3)."""
    bt = x.batch
    lo, hi = bapo_bounds(bt["logp"], bt["b"], bt["mask"], bt["r"], bt["m"], hp)
    dropped = 0
    for i, j, t, e in x.tokens():
        rho = math.exp(e)
        clip = (x.A[i] > 0 and rho > hi) or (x.A[i] < 0 and (rho < lo or rho > 3.0))
        dropped += clip
        g[i, t] = 0.0 if clip else -rho * x.A[i] / x.n
    return Expected(g, dropped=dropped, metrics={"bapo_low": lo, "bapo_high": hi, "clip_frac": dropped / x.n})



@oracle("oapl", batch_one_spread)
def _oapl(x, hp, g):
    """V*_g = beta1 log mean_g exp(r / beta1); res_i = beta2 sum_j ell_{i,j} - (r_i - V*_g):
    2 beta2 res_i / B on every token of response i."""
    beta1, beta2 = hp["oapl_beta1"], hp["oapl_beta2"]
    v_star = [beta1 * math.log(sum(math.exp(x.r[k] / beta1) for k in x.group(i)) / x.m) for i in range(x.B)]
    res = [beta2 * sum(x.ell[i]) - (x.r[i] - v_star[i]) for i in range(x.B)]
    for i, j, t, e in x.tokens():
        g[i, t] = 2 * beta2 * res[i] / x.B
    return Expected(g, metrics={"oapl_v_star_mean": sum(v_star) / x.B,
                                "oapl_residual_abs_mean": sum(abs(v) for v in res) / x.B})

@oracle("flash_reinforce", batch_four_spreads, **LOG_PROBS)
def _flash_reinforce(x, hp, g):
    """p = exp(b), q = exp(l) clamped to [1e-6, 1 - 1e-6], d = p log(p/q) + (1-p) log((1-p)/(1-q));
    response i kept iff mean_j d <= flash_delta; a_i = r_i - batch mean r: -a_i rho / (B |y_i|) on
    the tokens of a kept response, 0 on a rejected one."""
    c = 1e-6
    mean_r = sum(x.r) / x.B
    kept = []
    for i in range(x.B):
        d = []
        for j in range(x.len[i]):
            p = min(max(math.exp(x.b[i][j]), c), 1 - c)
            q = min(max(math.exp(x.l[i][j]), c), 1 - c)
            d.append(p * math.log(p / q) + (1 - p) * math.log((1 - p) / (1 - q)))
        kept.append(sum(d) / len(d) <= hp["flash_delta"])
    dropped = 0
    for i, j, t, e in x.tokens():
        dropped += not kept[i]
        g[i, t] = -(x.r[i] - mean_r) * math.exp(e) / (x.B * x.len[i]) if kept[i] else 0.0
    return Expected(g, dropped=dropped, metrics={"is_masked_frac": dropped / x.n})


# --- the frameworks' defaults and Delightful PG

def _primerl_masked(out_of_region):
    def fn(x, hp, g):
        """a_i = r_i - group mean; tokens with a_i != 0 count (n_M of them): (-a_i rho (not out) +
        2 primerl_kl_tau ell) / n_M, out = out_of_region(a_i, exp(l) - exp(b), hp)."""
        a = mean_baseline(x.r, x.m)
        n_m = max(sum(x.len[i] for i in range(x.B) if a[i] != 0), 1)
        dropped = 0
        for i, j, t, e in x.tokens():
            if a[i] == 0:
                continue
            out = out_of_region(a[i], math.exp(x.l[i][j]) - math.exp(x.b[i][j]), hp)
            dropped += out
            g[i, t] = (-a[i] * math.exp(e) * (not out) + 2 * hp["primerl_kl_tau"] * e) / n_m
        return Expected(g, dropped=dropped, metrics={"primerl_member_frac": n_m / x.n,
                                                     "is_masked_frac": (x.n - n_m + dropped) / x.n})
    return fn


oracle("primerl", batch_four_spreads, **LOG_PROBS)(_primerl_masked(
    lambda a, d, hp: d > hp["primerl_mask_high"] if a > 0 else d < -hp["primerl_mask_low"]))
oracle("primerl_ipo", batch_four_spreads, **LOG_PROBS)(_primerl_masked(
    lambda a, d, hp: abs(d) > hp["ipo_threshold"]))


@oracle("pipelinerl", batch_four_spreads)
def _pipelinerl(x, hp, g):
    """a_i = r_i - mean of the group's other rewards: -a_i min(rho, 1 + pipelinerl_eps_high) / B."""
    a = loo_baseline(x.r, x.m)
    capped = 0
    for i, j, t, e in x.tokens():
        cap = 1 + hp["pipelinerl_eps_high"]
        capped += math.exp(e) > cap
        g[i, t] = -a[i] * min(math.exp(e), cap) / x.B
    return Expected(g, capped=capped)


@oracle("skyrl_geo", batch_with_old_and_ref, spread=0.03)
def _skyrl_geo(x, hp, g):
    """keep_i = skyrl_geo_low <= exp(mean_t ell) <= skyrl_geo_high: -A_i keep_i / n, plus
    skyrl_kl_coef (1 - exp(R - l)) / (B |y_i|) on every token (0 where |R - l| > 20 or k3 > 10)."""
    dropped = 0
    for i, j, t, e in x.tokens():
        geo = math.exp(sum(x.ell[i]) / x.len[i])
        keep = hp["skyrl_geo_low"] <= geo <= hp["skyrl_geo_high"]
        dropped += not keep
        d = x.ref[i][j] - x.l[i][j]
        k3 = math.exp(d) - 1 - d
        kl = (1 - math.exp(d)) / (x.B * x.len[i]) if abs(d) <= 20 and abs(k3) <= 10 else 0.0
        g[i, t] = -x.A[i] * keep / x.n + hp["skyrl_kl_coef"] * kl
    return Expected(g, dropped=dropped, metrics={"is_masked_frac": dropped / x.n})


def nemorl_advantage(r, m):
    """NeMo-RL's: a_i = r_i - b_i, b_i the mean of the group's other rewards, divided by s_i + 1e-6
    where s_i, the unbiased std of those others, is > 0."""
    out = []
    for i in range(0, len(r), m):
        group = [float(v) for v in r[i:i + m]]
        for k, v in enumerate(group):
            others = group[:k] + group[k + 1:]
            b = sum(others) / len(others)
            s = math.sqrt(sum((o - b) ** 2 for o in others) / (len(others) - 1)) if len(others) > 1 else 0.0
            out.append((v - b) / (s + 1e-6) if s > 0 else v - b)
    return out


@oracle("nemorl", batch_with_old_and_ref, spread=1.2)
def _nemorl(x, hp, g):
    """(-A_i rho + nemorl_kl_coef (l - R)) / n, A_i NeMo-RL's (nemorl_advantage), the KL part 0
    where |R - l| > 20 or its k3 > 10."""
    A = nemorl_advantage(x.r, x.m)
    for i, j, t, e in x.tokens():
        d = x.ref[i][j] - x.l[i][j]
        k3 = math.exp(d) - 1 - d
        kl = -d if abs(d) <= 20 and abs(k3) <= 10 else 0.0
        g[i, t] = (-A[i] * math.exp(e) + hp["nemorl_kl_coef"] * kl) / x.n
    return Expected(g)


@oracle("tinker", batch_four_spreads)
def _tinker(x, hp, g):
    """a_i = r_i - group mean: -rho a_i (a sum, no 1/n)."""
    a = mean_baseline(x.r, x.m)
    for i, j, t, e in x.tokens():
        g[i, t] = -math.exp(e) * a[i]
    return Expected(g)


@oracle("delightful", batch_four_spreads)
def _delightful(x, hp, g):
    """a_i = r_i - group mean, w = sigmoid((a_i (-l) - dg_lambda) / dg_eta) (dg_eta 0: 1[a_i (-l) >
    dg_lambda]): -a_i w / n."""
    a = mean_baseline(x.r, x.m)
    dropped = 0
    for i, j, t, e in x.tokens():
        delight = a[i] * -x.l[i][j]
        if hp["dg_eta"] == 0:
            w = float(delight > hp["dg_lambda"])
            dropped += w == 0
        else:
            w = 1 / (1 + math.exp(-(delight - hp["dg_lambda"]) / hp["dg_eta"]))
        g[i, t] = -a[i] * w / x.n
    return Expected(g, dropped=dropped)


# ----------------------------------------------------------------------------- metrics

# which of clip_frac, is_weight_mean, is_masked_frac each objective logs, by (name, *settings)
METRICS_LOGGED = {
    ("grpo",): set(), ("grpo", "behavior"): {"clip_frac"}, ("grpo_tis",): {"is_weight_mean"},
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
    ("rec_ring",): {"clip_frac"}, ("asymre",): set(), ("bapo",): {"clip_frac"}, ("oapl",): set(),
    ("flash_reinforce",): {"is_weight_mean", "is_masked_frac"},
    ("primerl",): {"is_weight_mean", "is_masked_frac"}, ("primerl_ipo",): {"is_weight_mean", "is_masked_frac"},
    ("pipelinerl",): {"is_weight_mean"}, ("skyrl_geo",): {"is_masked_frac"}, ("nemorl",): {"is_weight_mean"},
    ("tinker",): {"is_weight_mean"}, ("delightful",): {"is_weight_mean"}}


# ----------------------------------------------------------------------------- what the registry-wide tests read
# Each objective's facts for tests/test_objectives.py: a new objective adds its lines here.

FORMULA_SETTINGS = {  # each objective is checked at its defaults and, where listed, at these
    "grpo": [{}, {"grpo_anchor": "behavior"}, {"grpo_agg": "seq_mean"},
             {"grpo_anchor": "behavior", "adv_std": "population", "adv_eps": 1e-8}],
    "agro": [{}, {"beta": 0.5}],
    "ggpo": [{}, {"ggpo_variant": "original"}],
    "cispo": [{}, {"cispo_eps_low": 0.5, "cispo_eps_high": 1.0}],
    "topr": [{}, {"topr_positive_weight": 0.7, "topr_negative_weight": 1.3}],
    "ds_v32": [{"ds_kl_beta": 0.5}],  # the K3 term large enough to matter
    "k3_rs": [{}, {"k3_rs_threshold": 0.6}],  # looser: PPO's clip and the dual clip act on kept tokens
    "a3po": [{}, {"a3po_alpha": 0.0}, {"a3po_alpha": 31 / 32}],
    "dppo_tv": [{}, {"dppo_delta": 0.05, "dppo_rho_cap": 1.5}],
    "trm": [{}, {"trm_divergence": "k3", "trm_delta": 1.0}],
    "seq_outlier_rs": [{}, {"outlier_low": 0.5, "outlier_high": 2.0}],  # the defaults drop no response here
    "rec_ring": [{}, {"rec_ring_low": 0.3, "rec_ring_high": 0.5}],
    "bapo": [{}, {"bapo_rho0": 0.5}, {"bapo_rho0": 3.0}],
    "grpo_mis_seq": [{}, {"adv_eps": 1e-4}, {"adv_std": "population", "adv_eps": 1e-8}],
    "primerl": [{}, {"primerl_kl_tau": 0.5}],  # the squared term large enough to matter
    "primerl_ipo": [{}, {"ipo_threshold": 0.05}],
    "skyrl_geo": [{}, {"skyrl_kl_coef": 0.5}, {"skyrl_kl_coef": 0.0, "skyrl_geo_low": 0.995, "skyrl_geo_high": 1.02}],
    "nemorl": [{}, {"nemorl_kl_coef": 0.5}],
    "delightful": [{}, {"dg_eta": 0.2, "dg_lambda": 0.1}, {"dg_eta": 0.0}],
}
# the objectives whose thresholds sit in the batch's tail: fewer than half the tokens zeroed
MOSTLY_KEPT = {"trm", "seq_outlier_rs", "dppo_kl", "rec_oneside", "rec_ring", "bapo"}


def zeroes_or_caps(name, hp):
    """Whether the objective, under settings hp, has a hard mask, clip or cap (False: a smooth
    weight, or none)."""
    if name == "grpo":
        return hp.get("grpo_anchor") == "behavior"  # the proximal ratio is 1: its clip never acts
    if name == "ggpo":
        return hp.get("ggpo_variant", "detached") == "detached"  # the original has no token clip
    if name == "delightful":
        return hp.get("dg_eta", 1.0) == 0  # a hard gate at dg_eta 0, a sigmoid else
    return name not in ("agro", "sapo", "kimi", "vespo", "asymre", "oapl", "nemorl", "tinker")



# where a zeroed weight still trains: the share of zeroed tokens is not what the zeroing metrics add
# up to (cispo's clip_frac counts capped weights; ds_v32's K3 term, primerl's squared term and
# skyrl_geo's K3 term train the tokens the mask drops)
ZEROED_STILL_TRAIN = {"cispo", "ds_v32", "primerl", "primerl_ipo", "skyrl_geo"}
# the objectives a reference model is kept for (losses' needs_ref)
NEEDS_REF = {"agro", "ggpo", "ds_v32", "skyrl_geo", "nemorl"}
# not GRPO at logp == behavior_logp, checked against their formula there: name -> what they are
NOT_GRPO_ON_POLICY_FORMULA = {
    "primerl": "the group-mean advantage (no 1/std) over the tokens with a nonzero one",
    "primerl_ipo": "as primerl",
    "pipelinerl": "the leave-one-out advantage (no 1/std), divided by B",
    "nemorl": "NeMo-RL's leave-one-out advantage divided by the others' std",
    "tinker": "the group-mean advantage (no 1/std), summed (no 1/n)",
    "delightful": "the group-mean advantage (no 1/std) times a sigmoid gate",
}
STATS_KEYS = {"gspo": {"gspo_len_mean"}, "gmpo": {"gspo_len_mean"}, "gepo": {"gspo_len_mean"},
              "m2po": {"m2_cutoff"}, "snis": {"snis_weight_mean"},
              "bapo": {"bapo_low", "bapo_high", "bapo_balance"}, "oapl": {"gspo_len_mean"},
              "flash_reinforce": {"gspo_len_mean", "flash_reward_mean"}, "grpo": {"gspo_len_mean"},
              "primerl": {"primerl_member_frac"}, "primerl_ipo": {"primerl_member_frac"},
              "pipelinerl": {"gspo_len_mean"}, "skyrl_geo": {"gspo_len_mean"}, "tinker": {"batch_tokens"}}
# on these batches each micro-batch's own statistics happen to give the full batch's update: there,
# only the sum is checked (bapo's searched bounds and m2po's cutoff land where the whole batch's do;
# grpo reads its statistic only at grpo_agg seq_mean; every group of primerl's batch is mixed, so
# each micro-batch's share of tokens with a nonzero advantage is the whole batch's, 1)
OWN_STATS_SAME_UPDATE = {("bapo", None), ("m2po", batch_with_old_and_ref), ("grpo", None),
                         ("primerl", None), ("primerl_ipo", None)}
