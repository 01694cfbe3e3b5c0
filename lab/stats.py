"""The leaderboard's statistics: one pooled linear model of every run's final accuracy, and from it
each method's stale accuracy with an interval, its differences to the reference rows with
simultaneous intervals, tiers, rank intervals and the seeds a comparison needs.

The model (statsmodels WLS, feasible GLS), one row r per run, y in percentage points:

    y_r = mu[method_r, N_r] + k[path_r] (+ s[seed_r] (+ sn[seed_r, N_r])) + e_r,
    e_r ~ Normal(0, sigma[N_r]^2 lambda[method_r]^2)   (lambda = 1 at N = 0)

- mu: one mean per cell (method x N), fixed: the quantities of interest.
- k: the rounding path (processor kind; thread count and matmul backend when a table mixes
  them), fixed, sum-to-zero (mu is at the average path). Fixed because the kinds are few (a
  variance from four or five levels is not an estimate), and because fixed effects adjust every
  comparison for the exact mix of kinds behind each row: a row whose seeds ran on a kind that
  ends high is not credited with it. Code commits are not a factor: a change of code that
  moves a toy run's numbers would be a change of the experiment, and the project checks
  refactors number for number. The reference rows run on every kind, which keeps k estimable.
- s, sn: the seed and the seed x N interaction, fixed, sum-to-zero: the design's blocks (a sweep
  runs one seed at one N on one machine, and the same seed samples the same prompts and the same
  evaluation draws in every row, so a block can shift every row alike). Both stay in the model
  whatever their tests say, as a blocking factor does: at the toy's lr 2e-4 the seed's test crosses
  5% back and forth as seeds land (the trajectories part chaotically within a hundred updates,
  so its shifts are small), and a model chosen by it would change from one table to the next; at the
  smaller steps the policies stay close, the shared draws dominate and the tests reject by far.
  They cost a few dozen of several hundred degrees of freedom, and they adjust a row that has
  only some of the seeds for which seeds it has. The cells stay at each N's average seed. The
  tests are reported: the model with s against the model without it, and with sn against s
  alone (statsmodels' compare_f_test, same weights). Where every seed (s) or every seed and N
  (sn) ran on one rounding path, the blocks hold the path: k gets no term of its own
  (path_in_blocks). A term that is not estimable apart from the path (a seed that lacks an N; a
  seed split across paths yet aliased with them) is left out, and the table says so.
- sigma[N]: the residual SD per N. A processor or seed change moves a cell by more at larger N
  (the trajectories part earlier and end further apart), and a Levene test across N rejects
  equal variances (printed); sigma[N]^2 = sum of the N's squared residuals / lambda^2 over sum
  of (1 - leverage).
- lambda[m]: each method's spread at N > 0, the SD of its errors in units of sigma[N]. A Levene
  test across methods within N rejects at lr 2e-4 (printed): the rows that sometimes collapse
  spread more than those that hold. Each method's own variance, s2 = sum of its stale runs'
  (residual / sigma[N])^2 over their sum of (1 - leverage) (~12 df at four seeds), is too
  noisy alone, so it is moderated by empirical Bayes (_squeeze: Smyth 2004, limma's
  squeezeVar): the true variances are taken as scaled inverse chi-square with prior df d0 and
  scale s0^2 fitted to the methods' s2; the posterior (d0 s0^2 + d s2) / (d0 + d) is lambda^2
  s0^2. Where the methods' variances spread no more than their df give, d0 is infinite and
  every lambda is 1 (the model with one SD per N). A method whose stale runs all end alike
  (collapsed to 0%) is left out of the prior's fit: its variance sits at a bound.
  The weights are 1 / (sigma[N]^2 lambda^2), re-estimated to a fixed point (FGLS).
- The intervals' variances: moderation pulls a truly wide method's variance toward the typical
  one, which leaves that method's intervals short (simulated from the fit, lab/simulate_stats.py
  --references: the widest rows' estimated SEs fall short of the true ones, and the reference
  family covers below its 95%). So every interval and test takes, for each method at N > 0, the
  larger of its moderated variance and its own s2 (OWN_VARIANCE_FLOOR): the estimates are
  those of the moderated weights, their covariance (X'WX)^-1 X'W diag(f / w) WX (X'WX)^-1 with
  f = max(1, s2 / lambda^2) on the method's stale runs (a sandwich of the same estimator), and
  a floored method's variance rests on its own d degrees of freedom, not d0 + d.

From the fit (cov: the parameters' covariance, floored as above; t quantiles on Satterthwaite's degrees of freedom
of each estimate, contrast_df: a contrast resting on a few high-spread methods' variances has
fewer than one resting on many):

- cell[m, N] = mu[m, N] with its 95% t interval (estimate: any such linear contrast).
- score[m] = mean over N in STALE_DELAYS of the model's prediction at m's own runs (their
  paths, seeds and blocks: own_design), which is the mean of m's own final accuracies, with its
  95% t interval; drop[m] = score[m] less the same at N = 0, the mean loss from m's own
  on-policy cell. The comparisons below are at one point for every method, the average seed
  and path: score_avg[m] = mean over N in STALE_DELAYS of mu[m, N].
- vs a reference: score_avg[m] - score_avg[ref] for every method and each of REFERENCES, one family,
  with simultaneous 95% intervals (single-step max-|t|, each difference on its own degrees of
  freedom as Hasler and Hothorn 2008 (Biometrical Journal 50: 793) do under unequal variances:
  difference k's critical value is the 95% quantile of max_i |T_i| for T multivariate t with the
  contrasts' correlation and k's contrast_df: max_i |Z_i| by Monte Carlo with a fixed seed (the
  scores' errors drawn through the Cholesky factor of their covariance, so a change of the fit
  at the rounding level moves the draws as little), the chi-square of the t's denominator by
  quadrature; an interval excludes 0 exactly when its adjusted p is below 0.05).
- tiers: every pair of methods, two-sided t tests with Holm's step-down adjustment over all
  pairs (family-wise 5%), summarised by a compact letter display (insert-absorb): two methods
  that share a letter cannot be told apart; letters go by the best score in each group.
- rank intervals: read off the tiers' own decisions, the confidence sets for ranks of Mogstad,
  Romano, Shaikh and Wilhelm (2024, Review of Economic Studies 91: 476; the R package csranks)
  with Holm's step-down in place of their bootstrap one: rank[m] lies in [1 + the methods found
  above m, p - the methods found below m]. Whenever no pair is split wrongly (none falsely:
  family-wise 95%; none in the wrong order: Shaffer 1980, Annals of Statistics 8: 1342, for
  independent tests, lab/simulate_stats.py on this design) every method's true rank is inside at once:
  simultaneous, where quantiles of the ranks over draws from Normal(score, cov(score)) are not
  even marginal intervals (they centre on the observed order and run short for near-ties).
- seeds needed: the per-seed SD of a score of spread 1, sd = sqrt(sum over STALE_DELAYS of
  sigma[N]^2) / len(STALE_DELAYS) (a pair's: sd sqrt((lambda_a^2 + lambda_b^2) / 2)), gives
  seeds per row for 80% power to find a difference delta at the Bonferroni level of a family
  of f comparisons (Holm's first step, so conservative):
  n = 2 sd^2 (z[1 - 0.05 / 2f] + z[0.8])^2 / delta^2 (the table under the leaderboard, a
  normal approximation). The rows where more seeds would settle a tier boundary take each
  unresolved pair's own standard error and Satterthwaite df, scaled from the seeds it has to n
  (se sqrt(n_now / n), df (n - 1) / (n_now - 1)), and t quantiles on that df in place of z:
  at three or four seeds the t test needs several seeds more than the normal formula says.
- variance components (reported, not used): for the path and the seed, from the factor's F
  test, tau^2 = max(0, F - 1) s^2 / n0, the ANOVA moment estimate for unequal group sizes
  (n0 = (n - sum n_i^2 / n) / (L - 1), n_i runs at level i of L; s^2 the mean of sigma[N]^2):
  the variance of the levels' true shifts, in points^2.

Checks of the model's form (model_checks, printed under the table): the model with a shift per
method and rounding path against it (does a processor kind move every row alike?), and the
standardized residuals' shape per N (are the errors Normal?).

Also: fit_cells and holm_contrasts (the same model's cell means for a small design, one SD per
N, and named contrasts of them with Holm's adjustment: the direction ablation), and drift_prediction (whether
a method's drop from N = 0 depends on N and the step size only through the drift its batches
carry, fitted at one step size and tested at another).
"""
import json
import math
import warnings

import numpy as np
import pandas as pd
import scipy.linalg
import scipy.optimize
import scipy.special
import scipy.stats
import statsmodels.api as sm
import statsmodels.formula.api as smf
from statsmodels.stats.multitest import multipletests
from statsmodels.tools.sm_exceptions import SingularMatrixWarning

from lab.reader import connected

STALE_DELAYS = (8, 32, 128)  # the stale accuracy: mean final accuracy over these N
MIN_SEEDS = 3  # a row is scored, tiered and ranked once it has runs of this many seeds at each stale N
REFERENCES = ("grpo_tis", "grpo", "grpo_grpo_anchor-behavior")  # the named rows every method is set against
ALPHA = 0.05  # family-wise error rate of the tiers and of the reference intervals
POWER = 0.8  # the power the seed counts aim for
DRAWS = 100_000  # Monte Carlo draws of the max-|t| critical value
QUADRATURE = 2000  # quantile points of the chi-square in the max-|t| distribution (_max_t_cdf)
DRAW_SEED = 0  # fixed: the same tables from the same results
FGLS_ROUNDS = 50  # weight re-estimations at most (a fixed point is reached in 3-4 with one SD
# per N, in ~20 with a spread per method)
PRIOR_DF_MAX = 1e8  # a prior df above this counts as infinite: no spread between the methods' variances
OWN_VARIANCE_FLOOR = True  # the intervals never give a method less than its own variance (fgls_weights)
FGLS_TOLERANCE = 1e-10  # relative change of every sigma[N] that counts as the fixed point
LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _formula(data: pd.DataFrame, seed: bool = False, block: bool = False) -> str:
    """The model's formula; `seed`: with the seed term; `block`: with it and the seed x N columns
    of _with_seed_by_n on top."""
    terms = ["0 + C(cell)"]
    terms += ["C(rounding_path, Sum)"] if data["rounding_path"].nunique() > 1 and not path_in_blocks(data, seed, block) else []
    terms += ["C(seed, Sum)"] if (seed or block) and data["seed"].nunique() > 1 else []
    terms += [c for c in data.columns if c.startswith(SEED_BY_N)] if block else []
    return "y ~ " + " + ".join(terms)


def path_in_blocks(data: pd.DataFrame, seed: bool, block: bool) -> bool:
    """Whether the seed terms hold the rounding path: every seed (`seed`) or every seed and N
    (`block`) ran on one path, so the blocks' shifts are also the paths' and a path term would
    only alias them (a block made on one machine, as the sweeps make them)."""
    if not (seed or block) or data["seed"].nunique() < 2:
        return False
    keys = ["seed", "N"] if block else ["seed"]
    return bool((data.groupby(keys)["rounding_path"].nunique() == 1).all())


SEED_BY_N = "seed_x_N_"  # the columns of the seed x N interaction (_with_seed_by_n)


def _with_seed_by_n(data: pd.DataFrame) -> pd.DataFrame:
    """data with the sum-to-zero seed x N interaction as columns (products of the two factors'
    sum-to-zero codes: patsy codes a factor without its main effect in full, which the cells
    would alias)."""
    seeds, ns = sorted(data["seed"].unique()), sorted(data["N"].unique())
    code = lambda v, levels, k: (v == levels[k]).astype(float) - (v == levels[-1]).astype(float)
    return data.assign(**{f"{SEED_BY_N}{i}_{j}": code(data["seed"], seeds, i) * code(data["N"], ns, j)
                          for i in range(len(seeds) - 1) for j in range(len(ns) - 1)})


def _squeeze(s2: np.ndarray, d: np.ndarray, prior: np.ndarray) -> tuple:
    """(posterior variances, prior df d0, prior variance s0^2) of sample variances s2 on d degrees
    of freedom, moderated by empirical Bayes (Smyth 2004, as limma's squeezeVar and fitFDist): the
    true variances are taken as s0^2 d0 / chi2(d0), with d0 and s0^2 fitted on the variances
    where `prior` (a mask) by moments of e = log s2 - digamma(d/2) + log(d/2):
    trigamma(d0/2) = var(e) - mean(trigamma(d/2)) (the spread of the log variances beyond what
    their own d gives), s0^2 = exp(mean(e) + digamma(d0/2) - log(d0/2)); each posterior is
    (d0 s0^2 + d s2) / (d0 + d), every variance's, in the mask or not. No excess spread:
    d0 = inf, every posterior s0^2. A zero variance is floored at 1e-5 x the median for the
    logarithm (limma's floor); its posterior is then d0 s0^2 / (d0 + d)."""
    floor = 1e-5 * (float(np.median(s2[prior])) or 1.0)
    e = np.log(np.maximum(s2[prior], floor)) - scipy.special.digamma(d[prior] / 2) + np.log(d[prior] / 2)
    excess = float(np.var(e, ddof=1) - np.mean(scipy.special.polygamma(1, d[prior] / 2)))
    if excess <= float(scipy.special.polygamma(1, PRIOR_DF_MAX / 2)):
        s0 = math.exp(float(e.mean()))
        return np.full(len(s2), s0), math.inf, s0
    d0 = 2 * scipy.optimize.brentq(lambda y: float(scipy.special.polygamma(1, y)) - excess,
                                   1e-8, PRIOR_DF_MAX / 2)
    s0 = math.exp(float(e.mean()) + float(scipy.special.digamma(d0 / 2)) - math.log(d0 / 2))
    return (d0 * s0 + d * s2) / (d0 + d), d0, s0


def _fgls(data: pd.DataFrame, seed: bool = False, block: bool = False, by_method: bool = False,
          own_floor: bool = OWN_VARIANCE_FLOOR):
    """(fit, {N: sigma}, weights) of the model (with the seed term if `seed`, one per seed and N if
    `block`) with weights 1 / (sigma[N]^2 lambda[method]^2) at their fixed point (fgls_weights). The
    fit carries `spread` ({method: lambda}), `prior_df` (d0) and `variance_groups` ([(runs,
    degrees of freedom)] of each estimated variance factor: each N's sigma^2, each method's
    lambda^2) for contrast_df."""
    formula = _formula(data, seed, block)
    with warnings.catch_warnings():  # refused below, with the reason
        warnings.simplefilter("ignore", SingularMatrixWarning)
        x = smf.wls(formula, data, weights=np.ones(len(data))).exog  # the design, built once
    if np.linalg.matrix_rank(x) < x.shape[1]:  # positive weights do not change the rank
        raise ValueError("the leaderboard model cannot tell a processor kind from the methods "
                         "run on it: run the reference rows on every kind")
    if len(data) - x.shape[1] < 1:
        raise ValueError("the leaderboard model has no residual degrees of freedom: it needs "
                         "cells with more than one seed")
    weights, sigma, *variances = fgls_weights(
        x, data["y"].to_numpy(dtype=float), data["N"].to_numpy(), data["method"].to_numpy(), by_method, own_floor)
    return with_variances(smf.wls(formula, data, weights=weights).fit(), *variances), sigma, weights


def with_variances(fit, spread: dict, prior_df: float, variance_groups: list, inflation: np.ndarray):
    """A WLS fit at fgls_weights' weights, carrying the rest of its answer (for contrast_df and
    the tables), its covariance that of the same estimator with run r's variance inflation_r / w_r:
    (X'WX)^-1 X'W diag(inflation / w) WX (X'WX)^-1, times the fit's scale (1 at the fixed point)."""
    fit.spread, fit.prior_df, fit.variance_groups, fit.inflation = spread, prior_df, variance_groups, inflation
    if (inflation > 1).any():
        a = fit.model.wexog @ np.asarray(fit.normalized_cov_params)
        # read by cov_params, bse, t_test and f_test (as statsmodels' own robust covariances are)
        fit._results.cov_params_default = fit.scale * (a.T * inflation) @ a
    return fit


def fgls_weights(x: np.ndarray, y: np.ndarray, n_of_run: np.ndarray, method_of_run: np.ndarray,
                 by_method: bool = False, own_floor: bool = OWN_VARIANCE_FLOOR) -> tuple:
    """The feasible GLS fixed point of design x (full rank) and outcomes y: (weights 1 /
    (sigma[N]^2 lambda[method]^2), {N: sigma}, {method: lambda}, prior df d0, variance groups
    [(runs, degrees of freedom)], each run's variance inflation). lambda = 1 unless `by_method`,
    then one per method on its runs at N > 0, moderated (_squeeze) and relative to the prior's s0.
    The weights use the moderated variances; unless `own_floor` is False, the intervals never take
    a method's below its own: where its unmoderated s2 is the larger, its stale runs' inflation is
    s2 / lambda^2 and its variance rests on its own degrees of freedom d, not d0 + d (moderation
    pulls a truly wide method toward the typical one, which leaves its intervals short)."""
    weights, sigma, df_resid = np.ones(len(y)), {}, len(y) - x.shape[1]
    groups = {n: np.flatnonzero(n_of_run == n) for n in sorted(set(n_of_run))}
    stale = n_of_run != 0
    own = {m: np.flatnonzero(stale & (method_of_run == m)) for m in sorted(set(method_of_run))}
    spread, prior_df, method_df = {m: 1.0 for m in own}, math.inf, {}  # spread: lambda^2
    floor = {}  # {method: its own variance over its moderated one, where larger}
    lam2 = np.ones(len(y))  # each run's lambda^2 (1 at N = 0)
    sigma2_of_run = lambda v: np.select([n_of_run == n for n in v], list(v.values()))
    for _ in range(FGLS_ROUNDS):
        root = np.sqrt(weights)
        q, r = np.linalg.qr(x * root[:, None])  # the weighted least squares by QR
        resid = y - x @ scipy.linalg.solve_triangular(r, q.T @ (y * root))
        leverage = (q ** 2).sum(axis=1)  # the hat matrix's diagonal
        pooled = float(resid @ (resid * weights) / df_resid)  # in the weighted scale
        new, dof = {}, {}
        for n, rows in groups.items():
            dof[n] = float((1 - leverage[rows]).sum())
            # an N without a residual degree of freedom of its own takes the pooled variance
            new[n] = (float((resid[rows] ** 2 / lam2[rows]).sum()) / dof[n] if dof[n] >= 1
                      else pooled * float((1 / (weights[rows] * lam2[rows])).mean()))
        if any(v <= 0 for v in new.values()):
            raise ValueError(f"the leaderboard model's residual variance is 0 at some N ({new}): "
                             f"its cells do not vary across seeds")
        new_spread = dict(spread)
        if by_method:  # each method's variance at N > 0 relative to sigma[N]^2, moderated
            scaled = resid ** 2 / sigma2_of_run(new)
            method_df = {m: float((1 - leverage[rows]).sum()) for m, rows in own.items()}
            fitted = [m for m in own if method_df[m] >= 1]
            # a method whose runs at N > 0 all end alike (collapsed to 0%) sits at a bound: its
            # variance is no draw from the methods' distribution, and the prior leaves it out
            varies = np.array([np.ptp(y[own[m]]) > 0 for m in fitted], dtype=bool)
            if varies.sum() >= 3:  # the prior needs a spread of variances
                d = np.array([method_df[m] for m in fitted])
                s2 = np.array([scaled[own[m]].sum() for m in fitted]) / d
                post, prior_df, s0 = _squeeze(s2, d, varies)
                new_spread = {m: 1.0 for m in own} | {m: float(v / s0) for m, v in zip(fitted, post)}
                # each method's own variance s2 against the model's, lambda^2 (both in units of sigma[N]^2)
                floor = {m: max(1.0, float(raw * s0 / v)) for m, raw, v in zip(fitted, s2, post)}
        done = sigma and all(abs(new[n] - sigma[n]) <= FGLS_TOLERANCE * sigma[n] for n in new) \
            and all(abs(new_spread[m] - spread[m]) <= FGLS_TOLERANCE * spread[m] for m in own)
        sigma, spread = new, new_spread
        lam2 = np.where(stale, np.array([spread[m] for m in method_of_run]), 1.0)
        weights = 1 / (sigma2_of_run(sigma) * lam2)
        if done:
            break
    # above by more than rounding: equal variances (every method's s2 the model's) floor none
    floor = {m: f for m, f in floor.items() if f > 1 + 1e-9 and own_floor}
    # a floored method's variance is its own, on its own degrees of freedom
    variance_groups = [(groups[n], dof[n]) for n in groups] + (
        [(own[m], method_df[m] if m in floor else prior_df + method_df[m]) for m in own if len(own[m])]
        if by_method else [])
    inflation = np.where(stale, np.array([floor.get(m, 1.0) for m in method_of_run]), 1.0)
    return (weights, {n: math.sqrt(v) for n, v in sigma.items()}, {m: math.sqrt(v) for m, v in spread.items()},
            prior_df, variance_groups, inflation)


def hat_diagonal(fit) -> np.ndarray:
    """Each run's leverage in a weighted fit: the diagonal of X (X'X)^-1 X' for the weighted design."""
    x = fit.model.wexog
    return np.einsum("ij,jk,ik->i", x, np.linalg.pinv(x.T @ x), x)


def standardized_residuals(fit) -> np.ndarray:
    """Each run's residual over its SD under the fit, residual sqrt(weight) / sqrt(1 - leverage)
    (NaN for a run alone in its cell, leverage 1): about Normal(0, 1) where the model holds."""
    free = 1 - hat_diagonal(fit)
    ok = free > 1e-9
    return np.where(ok, np.asarray(fit.resid) * np.sqrt(fit.model.weights) / np.sqrt(np.where(ok, free, 1.0)), np.nan)


def model_checks(result: dict) -> dict:
    """Two checks of the form of fit_leaderboard's model. `path_by_method`: the model with a
    shift per method and rounding path on top (C(method):C(rounding_path)) against the model, same
    weights, {F, p, df} (None with one path): does a processor kind move every row alike?
    `residuals`, per N: the standardized residuals' count, skew, excess kurtosis, share beyond
    2 (Normal: 4.6%) and Shapiro-Wilk p: are the errors Normal?"""
    fit = result["fit"]
    frame = fit.model.data.frame
    out = {"path_by_method": None, "residuals": {}}
    if frame["rounding_path"].nunique() > 1:  # most methods ran on some kinds only: tested by rank
        _, (f, p, df) = _wider_f_test(fit, fit.model.formula + " + C(method):C(rounding_path)", frame, fit.model.weights)
        out["path_by_method"] = {"F": float(f), "p": float(p), "df": int(df)}
    z = standardized_residuals(fit)
    for n in sorted(frame["N"].unique()):
        v = z[(frame["N"].to_numpy() == n) & np.isfinite(z)]
        if len(v) >= 3 and np.ptp(v) > 0:
            out["residuals"][int(n)] = {"runs": len(v), "skew": float(scipy.stats.skew(v)),
                                        "excess_kurtosis": float(scipy.stats.kurtosis(v)),
                                        "beyond_2": float(np.mean(np.abs(v) > 2)),
                                        "shapiro_p": float(scipy.stats.shapiro(v).pvalue)}
    return out


def contrast_df(fit, v: np.ndarray) -> float:
    """Satterthwaite's degrees of freedom of the estimate v'beta of a fit of _fgls. The estimate is
    sum over runs of a_r y_r, a_r = w_r x_r' (X'WX)^-1 v, so its variance is V = sum of b_r =
    a_r^2 / w_r, each run's variance 1 / w_r a product of estimated factors (sigma[N]^2 on its
    N's residual degrees of freedom nu_N; lambda[m]^2 on d0 + d_m). With Var(log of a factor) =
    2 / nu: df = V^2 / sum over factors g of V_g^2 / nu_g, V_g the part of V from the runs g
    scales. A contrast of one N's cells with one SD per N gets about that N's nu."""
    b = (fit.model.wexog @ (np.asarray(fit.normalized_cov_params) @ v)) ** 2 * fit.inflation
    parts = sum(float(b[rows].sum()) ** 2 / nu for rows, nu in fit.variance_groups if math.isfinite(nu))
    return float(b.sum()) ** 2 / parts if parts > 0 else math.inf


def _fit(data: pd.DataFrame, by_method: bool = False, own_floor: bool = OWN_VARIANCE_FLOOR) -> tuple:
    """(fit, {N: sigma}, seed, the fit without the seed) of the model with the design's blocks: a
    shift per seed and one per seed and N on top, the widest of these that is estimable apart
    from the rounding path, whatever their tests say (the tests are reported in `seed`, not used
    to choose); a spread per method if `by_method`."""
    without, sigma, weights = _fgls(data, by_method=by_method, own_floor=own_floor)
    seed = {**_seed_test(data, without, weights, sigma), "fitted": False, "per_n": None}
    if seed["p"] is None:  # one seed
        return without, sigma, seed, without
    if data["N"].nunique() > 1:  # one shift per seed and N (the sweep's block)
        try:
            fit, block_sigma, block_weights = _fgls(_with_seed_by_n(data), block=True, by_method=by_method,
                                                          own_floor=own_floor)
        except ValueError:  # a seed missing an N, or a block alone on its kind, or no residual left
            seed["per_n"] = {"F": None, "p": None, "fitted": False}
        else:  # reported: against one shift per seed, both at the larger model's weights
            one = smf.wls(_formula(data, seed=True), data, weights=block_weights).fit()
            f, p, _ = fit.compare_f_test(one)
            seed.update(fitted=True, per_n={"F": float(f), "p": float(p), "fitted": True})
            return fit, block_sigma, seed, without
    try:  # one shift per seed (the block model holds it, so this runs only where that is refused)
        fit, seed_sigma, _ = _fgls(data, seed=True, by_method=by_method, own_floor=own_floor)
    except ValueError:  # a seed run on one kind alone: not estimable apart from the path
        return without, sigma, {**seed, "per_n": None}, without
    seed["fitted"] = True
    return fit, seed_sigma, seed, without


def _seed_test(data: pd.DataFrame, fit, weights, sigma: dict) -> dict:
    """{F, p, tau}: the model with a fixed seed term against the model, same weights (F, p: None
    with one seed); tau the seed's moment SD against the error variance of the model with it."""
    if data["seed"].nunique() < 2:
        return {"F": None, "p": None, "tau": None}
    with_seed, (f, p, _) = _wider_f_test(fit, _formula(data, seed=True), data, weights)
    # the error variance is the larger model's: its scale in the weighted units times sigma^2
    error = {n: v * math.sqrt(with_seed.scale) for n, v in sigma.items()}
    return {"F": float(f), "p": float(p), "tau": _moment_sd(f, data["seed"], error)}


def _wider_f_test(fit, formula: str, data: pd.DataFrame, weights) -> tuple:
    """(the wider model's fit, (F, p, df)): `formula`, a model holding fit's, at the same weights,
    F-tested against fit. A wider model short of full rank (a term that some levels do not
    reach) is tested by its rank."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SingularMatrixWarning)
        wider = smf.wls(formula, data, weights=weights).fit()
    return wider, wider.compare_f_test(fit)


def _moment_sd(f: float, levels: pd.Series, sigma: dict) -> float:
    """The ANOVA moment estimate of a factor's SD (points) from its F statistic; `levels`: each
    run's level."""
    n, counts = len(levels), levels.value_counts().to_numpy()
    n0 = (n - float((counts ** 2).sum()) / n) / (len(counts) - 1)
    s2 = sum(v ** 2 for v in sigma.values()) / len(sigma)
    return math.sqrt(max(0.0, f - 1) * s2 / n0)


def _contrast(fit, cells: dict) -> np.ndarray:
    """The parameter vector's weights of sum(weight * mu[cell]) for cells {(method, N): weight}
    (a method's N = 0 cell is its copies' shared one where it has them: shared_copies)."""
    names, shared = list(fit.params.index), getattr(fit, "cell_of", {})
    v = np.zeros(len(names))
    for (m, n), w in cells.items():
        v[names.index(f"C(cell)[{shared.get((m, n), f'{m}@{n}')}]")] += w
    return v


def shared_copies(data: pd.DataFrame) -> tuple:
    """(the frame the model fits, {(method, 0): shared cell}, {run's row in data: its row in that
    frame}): methods whose N = 0 runs at a seed and path are bit-identical (the same `trajectory`
    and final accuracy: the same computation on-policy) share one N = 0 cell, named by its methods
    joined by " = ", and their copies count once, so that the error at N = 0 is not estimated
    from copies. Methods join only where every run they both have at one seed and path is the
    same (two that differ at some seed are two computations, whose copies at the other seeds
    count twice). data: columns method, N, seed, path, y, cell and, for copies to be found, trajectory."""
    data = data.reset_index(drop=True)
    if "trajectory" not in data:
        return data, {}, dict(zip(data.index, data.index))
    on = data[data["N"] == 0]
    same = ["seed", "rounding_path", "trajectory", "y"]
    runs_of = {m: dict(zip(zip(g["seed"], g["rounding_path"]), zip(g["trajectory"], g["y"]))) for m, g in on.groupby("method")}
    links = []
    for _, g in on.groupby(same):
        first, *rest = sorted(g["method"].unique())
        # one identical run, and no run at a seed and path that differs
        links += [(first, m) for m in rest if all(runs_of[first].get(k, v) == v for k, v in runs_of[m].items())]
    cell_of = {}
    for group in set(connected(on["method"].unique(), links).values()):
        runs = on[on["method"].isin(group)]
        if len(group) > 1 and (runs.groupby(["seed", "rounding_path"])[["trajectory", "y"]].nunique() == 1).all().all():
            cell_of.update({(m, 0): " = ".join(group) + "@0" for m in group})
    data = data.assign(cell=[cell_of.get((m, n), c) for m, n, c in zip(data["method"], data["N"], data["cell"])])
    key = data["cell"] + "|" + data["seed"].astype(str) + "|" + data["rounding_path"] + "|" + data["trajectory"] + "|" + data["y"].astype(str)
    first = ~key.duplicated()
    fitted = data[first].reset_index(drop=True)
    row = dict(zip(key[first], fitted.index))
    return fitted, cell_of, {i: row[k] for i, k in key.items()}


def _estimate(fit, cells: dict) -> tuple:
    """(sum(weight * mu[cell]), its standard error, its contrast_df) for cells {(method, N): weight}."""
    v = _contrast(fit, cells)
    return float(v @ fit.params.to_numpy()), math.sqrt(v @ fit.cov_params().to_numpy() @ v), contrast_df(fit, v)


def estimate(fit, cells: dict) -> tuple:
    """(sum(weight * mu[cell]), its 95% t half-width on contrast_df) for cells {(method, N): weight}."""
    e, se, df = _estimate(fit, cells)
    return e, float(scipy.stats.t.ppf(1 - ALPHA / 2, df) * se)


def fit_cells(data: pd.DataFrame) -> tuple:
    """(fit, {N: sigma}) of the cell-means model alone (a mean per method x N, the rounding path
    as a factor where it varies within an N, the seed and seed x N blocks, an error SD per N,
    FGLS): the leaderboard's model for a small design. data: columns method, N, seed, path, y."""
    data = data.reset_index(drop=True).assign(cell=lambda d: d["method"] + "@" + d["N"].astype(str))
    if data.groupby("N")["rounding_path"].nunique().max() == 1:  # each N on one path: the cells absorb it
        data = data.assign(rounding_path="one per N")
    fit, sigma, _, _ = _fit(data)
    return fit, sigma


def holm_contrasts(fit, contrasts: dict) -> dict:
    """{name: (estimate, 95% t half-width, p, Holm-adjusted p)} for contrasts {name: {(method,
    N): weight}} of the model's cells, one family (Holm over the contrasts given; t on each
    contrast's contrast_df)."""
    out = {name: _estimate(fit, cells) for name, cells in contrasts.items()}
    p = [2 * scipy.stats.t.sf(abs(e) / se, df) for e, se, df in out.values()]
    p_holm = multipletests(p, alpha=ALPHA, method="holm")[1]
    return {name: (e, float(scipy.stats.t.ppf(1 - ALPHA / 2, df) * se), float(pv), float(ph))
            for (name, (e, se, df)), pv, ph in zip(out.items(), p, p_holm)}


def own_design(fit, data: pd.DataFrame, method: str, weights: dict) -> tuple:
    """(sum over N of weights[N] x the mean of the model's predictions over `method`'s own runs
    at N, its 95% t half-width): a prediction at the method's own point of the design (the
    rounding paths, seeds and blocks its runs have). With weights constant within a cell
    (fgls_weights'), a cell's residuals sum to zero, so this is the same sum of the method's
    own mean final accuracies, never off the accuracy scale. `data`: one row per run, `fit_row`
    its row in the model's frame (a copy's is the run it copies: shared_copies)."""
    x, own = np.asarray(fit.model.exog), data[data["method"] == method]
    v = sum(w * x[own.loc[own["N"] == n, "fit_row"]].mean(axis=0) for n, w in weights.items())
    se = math.sqrt(v @ fit.cov_params().to_numpy() @ v)
    return float(v @ fit.params.to_numpy()), float(scipy.stats.t.ppf(1 - ALPHA / 2, contrast_df(fit, v)) * se)


def _factor_effects(fit, factor: str, sigma: dict) -> tuple:
    """({level: (effect, 95% half-width)}, tau, F, p) of a sum-to-zero factor of the model
    ('rounding_path'); empty and None where the model has no such term."""
    names = list(fit.params.index)
    idx = [i for i, n in enumerate(names) if n.startswith(f"C({factor}, Sum)")]
    if not idx:
        return {}, None, None, None
    levels = sorted(fit.model.data.frame[factor].unique())
    a = np.zeros((len(levels), len(names)))  # level effects from the L - 1 parameters
    for row, i in enumerate(idx):
        a[row, i] = 1
        a[-1, i] = -1
    effects, cov = a @ fit.params.to_numpy(), a @ fit.cov_params().to_numpy() @ a.T
    q = [scipy.stats.t.ppf(1 - ALPHA / 2, contrast_df(fit, row)) for row in a]
    table = {lvl: (float(e), float(q[i] * math.sqrt(cov[i, i]))) for i, (lvl, e) in enumerate(zip(levels, effects))}
    test = fit.f_test(np.eye(len(names))[idx])
    f = float(np.squeeze(test.fvalue))
    return table, _moment_sd(f, fit.model.data.frame[factor], sigma), f, float(test.pvalue)


def _pair_p(est: np.ndarray, cov: np.ndarray, df) -> tuple:
    """([(i, j)], unadjusted two-sided t p-values, [(standard error, df)]) of every pair i < j of
    score differences; df(i, j): the difference's degrees of freedom."""
    pairs = [(i, j) for i in range(len(est)) for j in range(i + 1, len(est))]
    se_df = [(math.sqrt(cov[i, i] + cov[j, j] - 2 * cov[i, j]), df(i, j)) for i, j in pairs]
    p = [2 * scipy.stats.t.sf(abs(est[i] - est[j]) / se, d) for (i, j), (se, d) in zip(pairs, se_df)]
    return pairs, np.array(p), se_df


def letter_display(names: list, est: list, different: list) -> dict:
    """{name: letters}: a compact letter display (Piepho's insert-absorb) of the pairs found
    different; names sharing a letter are not. Letters in order of the best estimate of each
    group."""
    groups = [frozenset(names)]
    for a, b in different:
        split = []
        for g in groups:
            split += [g - {a}, g - {b}] if a in g and b in g else [g]
        groups = []
        for g in split:  # absorb: drop a group inside another, and repeats
            if g and not any(g < h for h in split) and g not in groups:
                groups.append(g)
    best = dict(zip(names, est))
    groups.sort(key=lambda g: (-max(best[n] for n in g), sorted(g)))
    if len(groups) > len(LETTERS):
        raise ValueError(f"{len(groups)} tiers: more than {len(LETTERS)} letters")
    return {n: "".join(LETTERS[k] for k, g in enumerate(groups) if n in g) for n in names}


def seeds_needed(delta: float, sd_score: float, family: int, df_per_seed: float = math.inf) -> int:
    """The fewest seeds per row (at least 2) for POWER to find a difference `delta` between two
    rows' scores at the Bonferroni level ALPHA / family (two-sided): the n with delta >=
    sd_score sqrt(2 / n) (t[1 - ALPHA / 2 family] + t[POWER]), both quantiles on df_per_seed (n - 1)
    degrees of freedom (infinite: the normal approximation)."""
    def enough(n):
        df = df_per_seed * (n - 1)
        q = scipy.stats.t.ppf(1 - ALPHA / (2 * family), df) + scipy.stats.t.ppf(POWER, df)
        return delta >= sd_score * math.sqrt(2 / n) * q
    n = max(2, math.ceil(2 * sd_score ** 2 * (scipy.stats.norm.ppf(1 - ALPHA / (2 * family))
                                               + scipy.stats.norm.ppf(POWER)) ** 2 / delta ** 2))
    while not enough(n):  # t quantiles exceed the normal ones: start at the normal n, go up
        n += 1
    return n


def check_one_setting(data: pd.DataFrame) -> None:
    """ValueError naming the method and the key where one method's runs differ in an objective
    setting: data's column `settings` (where there is one) holds each run's settings as JSON of
    {key: value}, and a method is one objective with one set of settings."""
    if "settings" not in data:
        return
    for m, group in data.groupby("method"):
        kinds = [json.loads(s) for s in dict.fromkeys(group["settings"])]
        if len(kinds) > 1:
            a, b = kinds[:2]
            key = next(k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k))
            raise ValueError(f"method {m!r} pools runs whose objective settings differ in {key} "
                             f"({a.get(key)!r} vs {b.get(key)!r}): two settings are two rows")


def fit_leaderboard(data: pd.DataFrame, by_method: bool = True, own_floor: bool = OWN_VARIANCE_FLOOR,
                    draws: int = DRAWS) -> dict:
    """The model and everything the leaderboard shows from it. data: one row per run with
    columns method, N, seed, path (the rounding path's name) and y (final accuracy, %).
    Methods with runs of fewer than MIN_SEEDS seeds at one of STALE_DELAYS have no score and
    are left out of the comparisons (their runs are fitted: a row part-way up its ladder shows
    its cells, and the tiers and ranks are drawn among the scored rows). by_method: the error
    SD's spread per method at N > 0 (False: one SD per N); own_floor: fgls_weights'; draws: of
    the reference family's max-|t| critical values."""
    check_one_setting(data)
    data = data.reset_index(drop=True).assign(cell=lambda d: d["method"] + "@" + d["N"].astype(str))
    frame, cell_of, fit_row = shared_copies(data)
    data = data.assign(fit_row=data.index.map(fit_row))
    fit, sigma, seed, without = _fit(frame, by_method, own_floor)
    fit.cell_of = without.cell_of = cell_of
    have = set(zip(data["method"], data["N"]))
    seeds = data.groupby(["method", "N"])["seed"].nunique()
    methods = sorted({m for m in data["method"] if all(seeds.get((m, n), 0) >= MIN_SEEDS for n in STALE_DELAYS)})
    fewest = {m: min(int(seeds[(m, n)]) for n in STALE_DELAYS) for m in methods}
    share = 1 / len(STALE_DELAYS)
    score_l, est, cov, half = scores(fit, methods)
    shared = sorted(set(cell_of.values()))
    out = {"fit": fit, "sigma": sigma, "df": fit.df_resid, "methods": methods, "n_runs": len(data), "seeds": fewest,
           "n_fitted": len(frame), "frame": frame, "shared": {c.removesuffix("@0"): int((frame["cell"] == c).sum()) for c in shared},
           "spread": fit.spread, "prior_df": fit.prior_df,
           # the methods whose own variance the intervals take: {method: own SD / moderated SD}
           "floored": {m: math.sqrt(float(f)) for m, f in zip(frame["method"], fit.inflation) if f > 1},
           "cell": {c: estimate(fit, {c: 1}) for c in sorted(have)},
           # shown: at each method's own runs (own_design); compared: at the average seed and path
           "score": {m: own_design(fit, data, m, {n: share for n in STALE_DELAYS}) for m in methods},
           "score_at_average": {m: (float(e), float(h)) for m, e, h in zip(methods, est, half)},
           "drop": {m: own_design(fit, data, m, {**{n: share for n in STALE_DELAYS}, 0: -1})
                    for m in methods if (m, 0) in have}}
    rng = np.random.default_rng(DRAW_SEED)
    out.update(reference_family(fit, methods, score_l, cov, rng, draws))
    out["paired"] = seed_paired(data, methods)
    if not methods:  # no method has every stale N yet: cells only
        out.update(tiers={}, pairs={}, pairs_raw={}, pair_se={}, rank={})
    else:
        out.update(tiers(methods, est, cov, lambda i, j: contrast_df(fit, score_l[i] - score_l[j])))
    out["sd_score"] = math.sqrt(sum(sigma[n] ** 2 for n in STALE_DELAYS if n in sigma)) / len(STALE_DELAYS)
    out["rounding_path"] = dict(zip(("effects", "tau", "F", "p"), _factor_effects(fit, "rounding_path", sigma)))
    out["seed"] = {**seed, "effects": _factor_effects(fit, "seed", sigma)[0], "moves": None}
    if seed["fitted"] and methods:  # how far the blocks move the scores: common shift, then the rest
        moved = est - np.array([_contrast(without, {(m, n): share for n in STALE_DELAYS}) @ without.params.to_numpy()
                                for m in methods])
        apart = np.abs(moved - moved.mean())
        out["seed"]["moves"] = {"mean": float(moved.mean()), "mean_apart": float(apart.mean()),
                                "max_apart": float(apart.max())}
    resid = pd.Series(np.asarray(fit.resid), index=frame.index)
    by_n = [resid[g.index] for _, g in frame.groupby("N")]
    out["levene_n"] = scipy.stats.levene(*by_n) if len(by_n) > 1 else None
    out["levene_methods"] = {}
    for n, g in frame.groupby("N"):
        per_method = [resid[h.index] for _, h in g.groupby("method") if len(h) > 1]
        if len(per_method) > 1:
            out["levene_methods"][n] = scipy.stats.levene(*per_method)
    return out


def scores(fit, methods: list) -> tuple:
    """(L, est, cov, half): the score contrasts (one row per method), the scores, their covariance
    and their 95% t half-widths (each on its contrast_df)."""
    share = 1 / len(STALE_DELAYS)
    score_l = np.array([_contrast(fit, {(m, n): share for n in STALE_DELAYS}) for m in methods]
                       ).reshape(len(methods), len(fit.params))
    cov = score_l @ fit.cov_params().to_numpy() @ score_l.T
    half = [scipy.stats.t.ppf(1 - ALPHA / 2, contrast_df(fit, row)) * math.sqrt(cov[i, i])
            for i, row in enumerate(score_l)]
    return score_l, score_l @ fit.params.to_numpy(), cov, np.array(half)


def reference_family(fit, methods: list, score_l: np.ndarray, cov: np.ndarray, rng, draws: int = DRAWS) -> dict:
    """{vs: {reference: {method: (difference, simultaneous 95% half-width, adjusted p)}},
    vs_family, vs_df, vs_critical}: every method against each of REFERENCES it is not, one
    family (the single-step max-|t| of the module's docstring); vs empty where no reference
    has a score."""
    refs = [r for r in REFERENCES if r in methods]
    family = [(m, r) for r in refs for m in methods if m != r]
    out = {"vs": {r: {} for r in refs}}
    if not family:
        return out
    c = np.array([score_l[methods.index(m)] - score_l[methods.index(r)] for m, r in family])
    diff, se = c @ fit.params.to_numpy(), np.sqrt(np.diag(c @ fit.cov_params().to_numpy() @ c.T))
    # max |Z| over the family, Z the differences' errors over their SEs, from draws of the
    # scores' errors (Cholesky of their covariance, full rank where the family's is not)
    errors = rng.standard_normal((draws, len(methods))) @ np.linalg.cholesky(cov).T
    pick = lambda names: [methods.index(n) for n in names]
    max_z = np.sort((np.abs(errors[:, pick(m for m, _ in family)] - errors[:, pick(r for _, r in family)])
                     / se).max(axis=1))
    dfs = [contrast_df(fit, row) for row in c]
    crits = []
    for k, (m, r) in enumerate(family):
        below = _max_t_cdf(max_z, dfs[k])  # P(max |T| <= t) on difference k's own df
        top = 10 * max_z[-1]
        while below(top) < 1 - ALPHA:  # few df: the t's tail reaches past ten times max |Z|
            top *= 10
        crits.append(scipy.optimize.brentq(lambda t: below(t) - (1 - ALPHA), 0, top))
        out["vs"][r][m] = (float(diff[k]), crits[-1] * float(se[k]), float(1 - below(abs(diff[k]) / se[k])))
    return {**out, "vs_family": len(family), "vs_df": (min(dfs), max(dfs)), "vs_critical": (max(crits), min(crits))}


def _max_t_cdf(max_z: np.ndarray, df: float):
    """t -> P(max_i |T_i| <= t), T_i = Z_i / sqrt(V), V ~ chi2(df) / df independent of Z (the
    multivariate t of Hasler and Hothorn 2008 on one difference's df): the empirical distribution
    of max |Z| (sorted draws) integrated over V at its QUADRATURE midpoint quantiles."""
    if not math.isfinite(df):
        return lambda t: np.searchsorted(max_z, t, side="right") / len(max_z)
    root_v = np.sqrt(scipy.stats.chi2.ppf((np.arange(QUADRATURE) + 0.5) / QUADRATURE, df) / df)
    return lambda t: np.searchsorted(max_z, t * root_v, side="right").mean() / len(max_z)


def seed_paired(data: pd.DataFrame, methods: list) -> dict:
    """The second analysis of the reference differences, free of the pooled model: per method m
    and reference r (REFERENCES) the seeds at which both ran every stale N, each seed's score
    (the mean of its final accuracies over STALE_DELAYS) and the paired differences d_s = score_m -
    score_r (a seed draws the same prompts and evaluation samples in every row, so the pair
    shares them); their mean, its unadjusted 95% t half-width on k - 1 degrees of freedom and
    the two-sided t test's p, Holm-adjusted over the whole family. No path, variance or shrinkage
    model: where the two analyses agree, a reading does not rest on the model's choices.
    {reference: {method: (mean difference, half-width, Holm p, seeds)}}; a pair with fewer than
    3 common seeds is left out."""
    scores = _seed_scores(data, methods)
    family = [(r, m) for r in REFERENCES if r in scores for m in methods if m != r and m in scores]
    tested = _paired_tests({(r, m): scores[m] - scores[r] for r, m in family})
    out = {r: {} for r in REFERENCES if r in scores}
    for (r, m), result in tested.items():
        out[r][m] = result
    return out


def seed_paired_pairs(data: pd.DataFrame, methods: list) -> dict:
    """The second analysis of the tiers' pairs, as seed_paired's of the reference differences:
    {(a, b): (mean of score_a - score_b over the seeds both ran every stale N, its 95% t
    half-width, the paired t test's p Holm-adjusted over every pair tested, seeds)} for each pair
    a before b in `methods` with 3 common seeds or more."""
    scores = _seed_scores(data, methods)
    have = [m for m in methods if m in scores]
    return _paired_tests({(a, b): scores[a] - scores[b] for i, a in enumerate(have) for b in have[i + 1:]})


def _seed_scores(data: pd.DataFrame, methods: list) -> dict:
    """{method: pd.Series of its score per seed}: the mean of its final accuracies over
    STALE_DELAYS, at the seeds where it ran every one of them."""
    stale = data[data["N"].isin(STALE_DELAYS)]
    per_seed = stale.groupby(["method", "seed"])["y"].agg(["mean", "count"])
    full = per_seed[per_seed["count"] == len(STALE_DELAYS)]["mean"]
    return {m: full.xs(m, level="method") for m in methods if m in full.index.get_level_values("method")}


def _paired_tests(differences: dict) -> dict:
    """{key: (mean, 95% t half-width, two-sided t p Holm-adjusted over the keys tested, seeds)}
    of each pd.Series of per-seed differences (NaN where a seed is missing on one side) with
    3 seeds or more."""
    tested = {}
    for key, d in differences.items():
        d = d.dropna()
        if len(d) < 3:
            continue
        se = float(d.std(ddof=1)) / math.sqrt(len(d))
        t = float(d.mean()) / se if se > 0 else math.copysign(math.inf, float(d.mean()) or 1.0)
        tested[key] = (float(d.mean()), float(scipy.stats.t.ppf(1 - ALPHA / 2, len(d) - 1)) * se,
                       2 * float(scipy.stats.t.sf(abs(t), len(d) - 1)), len(d))
    if tested:
        holm = multipletests([x[2] for x in tested.values()], alpha=ALPHA, method="holm")[1]
        tested = {k: (d, h, float(ph), n) for (k, (d, h, _, n)), ph in zip(tested.items(), holm)}
    return tested


def tiers(methods: list, est, cov, df) -> dict:
    """{tiers: letters, pairs: {(a, b): Holm-adjusted p}, pairs_raw: {(a, b): unadjusted p},
    pair_se: {(a, b): (the difference's standard error, its df)}, rank: rank intervals
    (rank_sets)} of the scores est with covariance cov, Holm over all pairs;
    df(i, j): a pair's degrees of freedom."""
    pairs, p_raw, se_df = _pair_p(est, cov, df)
    p_holm = multipletests(p_raw, alpha=ALPHA, method="holm")[1] if pairs else np.zeros(0)
    different = [(methods[i], methods[j]) for (i, j), p in zip(pairs, p_holm) if p < ALPHA]
    return {"tiers": letter_display(methods, list(est), different),
            "pairs": {(methods[i], methods[j]): float(p) for (i, j), p in zip(pairs, p_holm)},
            "pairs_raw": {(methods[i], methods[j]): float(p) for (i, j), p in zip(pairs, p_raw)},
            "pair_se": {(methods[i], methods[j]): x for (i, j), x in zip(pairs, se_df)},
            "rank": rank_sets(methods, list(est), different)}


def rank_sets(names: list, est: list, different: list) -> dict:
    """{name: (lowest, highest) rank, 1 the best}: 1 + the names found different from it with a
    larger estimate, len(names) - those with a smaller one (the module docstring's rank
    intervals; `different`: the pairs a multiple test split)."""
    value = dict(zip(names, est))
    above = {n: 0 for n in names}
    below = dict(above)
    for a, b in different:
        high, low = (a, b) if value[a] > value[b] else (b, a)
        above[low] += 1
        below[high] += 1
    return {n: (1 + above[n], len(names) - below[n]) for n in names}


def touching_rows(result: dict, max_seeds: int) -> dict:
    """{method: the fewest seeds per row that would resolve one of its unresolved pairs} for the
    methods in a pair the tiers cannot tell apart but that `max_seeds` seeds per row would: at
    the observed difference and the pairwise family's Bonferroni level (Holm's first step), with
    the pair's own standard error and degrees of freedom (`pair_se`) scaled from the n seeds the
    pair has now (the harmonic mean of its two rows' fewest seeds at a stale N) to n' seeds as
    sqrt(n / n') and (n' - 1) / (n - 1): where more seeds decide a tier boundary. An unresolved
    pair needs more seeds than it has (its Holm p is at least its Bonferroni one)."""
    family = max(1, len(result["pairs"]))
    need, seeds = {}, result["seeds"]
    for (a, b), p in result["pairs"].items():
        delta = abs(result["score_at_average"][a][0] - result["score_at_average"][b][0])
        if p >= ALPHA and delta > 0:
            se, df = result["pair_se"][(a, b)]
            now = 2 / (1 / seeds[a] + 1 / seeds[b])
            n = seeds_needed(delta, se * math.sqrt(now / 2), family, df / (now - 1))
            if n <= max_seeds:
                for m in (a, b):
                    need[m] = min(need.get(m, n), n)
    return dict(sorted(need.items()))


def drift_prediction(fit_runs: pd.DataFrame, test_runs: pd.DataFrame) -> dict:
    """Does a method's drop from its own on-policy accuracy depend on N and the step size only
    through the drift its batches carry? Fitted on one step size, predicted at another.

    Each frame has one row per run: method, N, y (final accuracy, %) and drift (the run's mean K3
    between learner and sampler over its updates); x = log10(drift), stale = [N > 0]. On
    fit_runs, WLS with a base per method and a drop linear in x on its stale runs:

        y_r = c[method_r] + stale_r (a[method_r] + b[method_r] x_r) + e_r,   e_r ~ (0, k f[N_r]^2),

    over the methods with N = 0 runs and stale runs at two N or more (a and b identifiable), f[N]
    the fitted step size's own noise at N (as t[N] below) and k the residual scale (about 1
    where the lines fit the cells, above 1 by their lack of fit).
    For each such method with N = 0 and stale runs in test_runs, its stale runs' mean prediction
    error, mean(y - ybar_0) - (a + b mean(x)) with ybar_0 the mean of its own N = 0 test runs,
    has variance sum over its n stale runs r of t[N_r]^2 / n^2 + t[0]^2 / n_0 + the fit's
    variance of a + b mean(x), where t[N] is the test step size's own noise at N: the SD of its
    runs about their method x N cell means, pooled over the methods (within_cell_sd; an N
    without a replicate takes the largest). The noise grows with N and differs between step
    sizes, so each side is weighed by its own; where a seed shifts every row alike (the smaller
    steps), t counts that shift, which the paired stale-minus-N = 0 difference partly cancels:
    conservative.

    Returns per method: runs, error, its standard error, z, its two-sided normal p, p_holm (Holm
    over the methods tested) and `refuted` (p_holm < 0.05); `cells`, per method x N of the test
    runs: runs, mean drift, observed and predicted drop from N = 0 and their difference; and
    whether its mean drift lies inside the range of the method's fitted stale runs (`inside`:
    else the line is extrapolated); `rmse`, the root mean square of the cells' errors
    (`rmse_inside`: of the cells inside); `fit_sd` = {N: f[N]}, `scale` = k, `test_sd` = {N:
    t[N]}; `lines`, per method fitted, (a, b); `chi2`, `chi2_df`, `chi2_p`: sum of the methods'
    z^2 against chi-square with one degree of freedom per method (the joint test of the
    hypothesis). `inside`: the same
    per-method tests and joint test on the stale runs of the cells inside the fitted range only
    (no extrapolation of the line), for the methods that have such cells."""
    rms = lambda errors: float(np.sqrt(np.mean(np.square(errors)))) if errors else math.nan

    def prepared(frame):
        frame = frame.copy()
        frame["stale"] = (frame["N"] > 0).astype(float)
        frame["x"] = np.where(frame["N"] > 0, np.log10(frame["drift"].clip(lower=1e-30)), 0.0)
        return frame
    train, test = prepared(fit_runs), prepared(test_runs)
    methods = sorted(m for m, g in train.groupby("method")
                     if (g["N"] == 0).any() and g.loc[g["N"] > 0, "N"].nunique() >= 2)
    train = train[train["method"].isin(methods)]
    if not methods:
        nothing = {"methods": {}, "chi2": math.nan, "chi2_df": 0, "chi2_p": math.nan}
        return {**nothing, "inside": nothing, "cells": [], "fit_sd": {}, "scale": math.nan,
                "test_sd": {}, "fit": None, "lines": {}, "rmse": math.nan, "rmse_inside": math.nan}
    design = np.column_stack([col for m in methods for col in (
        (train["method"] == m).to_numpy(float), (train["method"] == m) * train["stale"],
        (train["method"] == m) * train["stale"] * train["x"])])
    fit_noise = within_cell_sd(train)
    largest = max(fit_noise.values(), default=1.0)  # no replicated cell: weights 1, so OLS
    weights = 1 / train["N"].map(lambda n: fit_noise.get(n, largest)).to_numpy(float) ** 2
    fit = sm.WLS(train["y"].to_numpy(float), design, weights=weights).fit()
    lines = {m: (float(fit.params[3 * k + 1]), float(fit.params[3 * k + 2])) for k, m in enumerate(methods)}
    noise = within_cell_sd(test)  # an N without a replicate: the largest, else the OLS residual SD
    fallback = max(noise.values(), default=largest if fit_noise else math.sqrt(fit.scale))
    t2 = lambda ns: sum(noise.get(n, fallback) ** 2 for n in ns)  # summed over runs at these N

    def judged(k: int, m: str, stale: pd.DataFrame, base: pd.DataFrame) -> dict:
        c = np.zeros(design.shape[1])
        c[3 * k + 1], c[3 * k + 2] = 1.0, float(stale["x"].mean())
        predicted = lines[m][0] + lines[m][1] * c[3 * k + 2]
        error = float((stale["y"] - base["y"].mean()).mean()) - predicted
        se = math.sqrt(t2(stale["N"]) / len(stale) ** 2 + t2(base["N"]) / len(base) ** 2
                       + float(c @ fit.cov_params() @ c))
        return {"runs": len(stale), "error": error, "se": se, "z": error / se,
                "p": float(2 * scipy.stats.norm.sf(abs(error / se)))}

    def family(per: dict) -> dict:  # each method's test, Holm over the methods (family-wise 5%)
        if per:
            adjusted = multipletests([v["p"] for v in per.values()], alpha=ALPHA, method="holm")[1]
            for v, p_holm in zip(per.values(), adjusted):
                v.update(p_holm=float(p_holm), refuted=bool(p_holm < ALPHA))
        chi2 = float(sum(v["z"] ** 2 for v in per.values()))
        return {"methods": per, "chi2": chi2, "chi2_df": len(per),
                "chi2_p": float(scipy.stats.chi2.sf(chi2, len(per))) if per else math.nan}

    per, per_inside, cells = {}, {}, []
    for k, m in enumerate(methods):
        own = test[test["method"] == m]
        base, stale = own[own["N"] == 0], own[own["N"] > 0]
        if base.empty or stale.empty:
            continue
        per[m] = judged(k, m, stale, base)
        seen = train.loc[(train["method"] == m) & (train["N"] > 0), "x"]
        inside_n = []
        for N, g in stale.groupby("N"):
            observed = float((g["y"] - base["y"].mean()).mean())
            want = lines[m][0] + lines[m][1] * float(g["x"].mean())
            inside = bool(seen.min() <= g["x"].mean() <= seen.max())
            inside_n += [N] if inside else []
            cells.append({"method": m, "N": int(N), "runs": len(g), "drift": float(g["drift"].mean()),
                          "observed": observed, "predicted": want, "error": observed - want,
                          "inside": inside})
        if inside_n:
            per_inside[m] = judged(k, m, stale[stale["N"].isin(inside_n)], base)
    return {**family(per), "inside": family(per_inside), "cells": cells, "fit_sd": fit_noise,
            "scale": float(fit.scale), "test_sd": noise, "fit": fit, "lines": lines,
            "rmse": rms([c["error"] for c in cells]),
            "rmse_inside": rms([c["error"] for c in cells if c["inside"]])}


DRIFT_DRAWS = 2000  # the drift test's bootstrap draws over seeds (lab/docs/preregistration.md, section 2)
DRIFT_DRAWS_ADDED = 20_000  # an added analysis: with 2,000 draws and 25 methods Holm cannot reach 2.5%
DRIFT_FLOOR = 5.0  # %: a row below this at every stale cell at both step sizes is excluded from it


def at_the_floor(one: pd.DataFrame, other: pd.DataFrame) -> list:
    """The methods the drift test excludes (a rule fixed before its runs): mean final accuracy
    below DRIFT_FLOOR at every stale cell (method x N) at both step sizes, so that the drop is
    the N = 0 cell whatever the drift. Frames as drift_prediction's."""
    low = lambda d: {m for m, g in d[d["N"] > 0].groupby("method") if (g.groupby("N")["y"].mean() < DRIFT_FLOOR).all()}
    return sorted(low(one) & low(other))


def drift_bootstrap(fit_runs: pd.DataFrame, test_runs: pd.DataFrame, draws: int = DRIFT_DRAWS,
                    seed: int = DRAW_SEED, counts=None) -> dict:
    """The drift test as preregistered: drift_prediction's inside-only error per method (its
    stale test runs in the cells whose mean log-drift lies inside its fitted stale runs' range,
    less the fitted line), with a bootstrap over seeds: each draw takes as many seeds as there
    are, with replacement, from the seeds of both frames, and every run of a drawn seed comes
    with it (the runs that share a seed, the N = 0 runs every stale cell of a method is measured
    from, and one seed's runs at both step sizes stay together); the line is refitted per draw at
    the full fit's weights (1 / f[N]^2), the range and the cells inside recomputed. A method's p
    is twice the share of draws on the far side of zero, (count + 1) / (draws + 1); Holm over
    the methods (each direction is one family). Returns {method: {error, se (the draws' SD), p,
    p_holm, draws (those with an inside cell)}}. `counts`: the draws given instead, (draws,
    seeds) copies of each seed of the sorted union (a row of ones is the data itself)."""
    pred = drift_prediction(fit_runs, test_runs)
    base, fit_sd = pred["inside"]["methods"], pred["fit_sd"]  # its errors, and the weights its line takes
    if not base:
        return {}
    largest = max(fit_sd.values(), default=1.0)
    seeds = sorted(set(fit_runs["seed"]) | set(test_runs["seed"]))
    index = {s: i for i, s in enumerate(seeds)}
    if counts is None:
        rng = np.random.default_rng(seed)
        counts = np.stack([np.bincount(rng.integers(len(seeds), size=len(seeds)), minlength=len(seeds))
                           for _ in range(draws)])  # (draws, seeds): each seed's copies in a draw
    counts = np.asarray(counts, dtype=float)
    draws = len(counts)
    log_drift = lambda d: np.log10(d["drift"].clip(lower=1e-30).to_numpy(float))
    out = {}
    for m in base:
        tr, te = fit_runs[fit_runs["method"] == m], test_runs[test_runs["method"] == m]
        stale = (tr["N"] > 0).to_numpy(float)
        x_tr = np.where(stale > 0, log_drift(tr), 0.0)
        design = np.column_stack([np.ones(len(tr)), stale, stale * x_tr])
        w = counts[:, [index[s] for s in tr["seed"]]] / tr["N"].map(lambda n: fit_sd.get(n, largest)).to_numpy(float) ** 2
        xtwx = np.einsum("dn,ni,nj->dij", w, design, design)
        ok = np.abs(np.linalg.det(xtwx)) > 1e-12
        line = np.full((draws, 3), np.nan)
        xtwy = np.einsum("dn,ni,n->di", w[ok], design, tr["y"].to_numpy(float))
        line[ok] = np.linalg.solve(xtwx[ok], xtwy[..., None])[..., 0]
        seen = (w > 0) & (stale > 0)  # the stale runs a draw fits: the range of their drift
        lo, hi = np.where(seen, x_tr, np.inf).min(1), np.where(seen, x_tr, -np.inf).max(1)
        f = counts[:, [index[s] for s in te["seed"]]]  # (draws, test runs)
        y, n_of, x_te = te["y"].to_numpy(float), te["N"].to_numpy(), np.where(te["N"] > 0, log_drift(te), 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            ybar0 = (f * y * (n_of == 0)).sum(1) / (f * (n_of == 0)).sum(1)
            inside = np.zeros_like(f, dtype=bool)
            for n in sorted(set(n_of[n_of > 0])):
                cell = n_of == n
                mean_x = (f[:, cell] * x_te[cell]).sum(1) / f[:, cell].sum(1)
                inside[:, cell] = ((lo <= mean_x) & (mean_x <= hi))[:, None]
            g = f * inside
            errors = ((g * (y - ybar0[:, None])).sum(1) / g.sum(1)
                      - line[:, 1] - line[:, 2] * (g * x_te).sum(1) / g.sum(1))
        errors = errors[np.isfinite(errors)]
        far = min((errors <= 0).sum(), (errors >= 0).sum())
        out[m] = {"error": float(base[m]["error"]), "se": float(errors.std(ddof=1)) if len(errors) > 1 else math.nan,
                  "p": min(1.0, 2 * (far + 1) / (len(errors) + 1)), "draws": int(len(errors))}
    adjusted = multipletests([v["p"] for v in out.values()], method="holm")[1]
    for v, p in zip(out.values(), adjusted):
        v["p_holm"] = float(p)
    return out


def within_cell_sd(runs: pd.DataFrame, cells: tuple = ("method", "N"), by: str = "N") -> dict:
    """{level of `by`: the SD of its runs about their cell means (cells: the columns `cells`),
    pooled over its cells}, for the levels with a replicated cell. runs: those columns, `by`
    and y."""
    cell = runs.groupby(list(cells))["y"]
    squares = ((runs["y"] - cell.transform("mean")) ** 2).groupby(runs[by]).sum()
    dof = (cell.transform("count") - 1).div(cell.transform("count")).groupby(runs[by]).sum()
    return {n: math.sqrt(float(squares[n]) / float(dof[n])) for n in dof.index if dof[n] > 0}


def drift_verdict(one_way: dict, other_way: dict) -> dict:
    """The drift hypothesis judged on drift_prediction's inside-only tests (no extrapolation) in
    both directions, each at ALPHA / 2 (Bonferroni over the two, family-wise ALPHA): refuted if
    a direction's joint chi-square or one of its methods (Holm-adjusted p) falls below ALPHA / 2;
    None while a direction has no method with a stale cell inside its fitted range. `sides`: per
    direction, the joint p, the methods refuted and those whose error is beyond 2 SE unadjusted
    (method, error, z), largest |z| first."""
    sides = []
    for pred in (one_way, other_way):
        per = pred["inside"]["methods"]
        sides.append({"p": pred["inside"]["chi2_p"], "methods": len(per),
                      "refuted": [m for m, v in per.items() if v["p_holm"] < ALPHA / 2],
                      "beyond_2se": sorted(((m, v["error"], v["z"]) for m, v in per.items() if abs(v["z"]) > 2),
                                           key=lambda t: -abs(t[2]))})
    if not all(s["methods"] for s in sides):
        return {"refuted": None, "sides": sides}
    return {"refuted": any(s["p"] < ALPHA / 2 or s["refuted"] for s in sides), "sides": sides}
