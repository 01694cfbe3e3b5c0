"""How far the leaderboard's model (lab/stats.py) can be trusted on its own design: simulate runs from
its fit to the kept results (the fitted cell means, path effects and seed blocks, Normal errors
with the fitted SD per N and spread per method), refit each simulated table, and count how often the intervals
cover the truth and how often the tiers split methods that do not differ.

    OMP_NUM_THREADS=1 python lab/simulate_stats.py results/leaderboard_toy --reps 200 [--pooled] [--errors resampled]
    OMP_NUM_THREADS=1 python lab/simulate_stats.py results/leaderboard_toy --references --reps 200 [--no-floor]

(one BLAS thread: the refits are small, and threads beside other work oversubscribe the cores)

Prints, over `reps` simulated tables: the share of score intervals (95%) that cover the true
score (all methods, and the third with the largest spread), the share of tables whose reference
intervals (simultaneous 95%) all cover at once, the share whose rank intervals hold every
method's true rank (its rank among the fitted scores) at once, and, from tables simulated with
every method's cells at the mean of its N (no true difference), the share in which some pair is
declared different (the family-wise error of the tiers; nominal 5%). --pooled refits each table
with one SD per N (stats.fit_leaderboard's by_method=False) on the same simulated tables.
--errors resampled draws each run's error from the kept runs' own standardized residuals instead
of the Normal (error_pools: the model's variances, the observed shape, a collapse to 0%
included), which checks the one assumption the Normal simulation cannot: Normal errors.
--references: scores, the reference family, tiers and rank intervals only, on the fitted design
(simulate_references; fast), --no-floor refitting with the moderated variances alone
(the fits' own_floor off).
"""
import argparse
import collections
import os
import sys
import time

if not __package__:  # run as `python lab/simulate_stats.py`: the loop and the lab import from the root
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import statsmodels.api as sm  # noqa: E402
from tqdm import tqdm  # noqa: E402

from lab import reader, stats  # noqa: E402


def error_pools(result: dict) -> list:
    """Per run that `result` was fitted to (in the fit's order), the values its simulated error / SD is
    drawn from: for a run at N > 0 its method's runs at N > 0, for a run at N = 0 every run at
    N = 0; each value a standardized residual (stats.standardized_residuals; runs alone in their
    cell left out), each pool centred and scaled to mean square 1 (a pool that does not vary, a
    method collapsed in every run, stays 0)."""
    z = stats.standardized_residuals(result["fit"])
    frame = result["fit"].model.data.frame
    key = np.where(frame["N"].to_numpy() > 0, frame["method"].to_numpy(), "")  # "": the N = 0 pool
    pools = {}
    for k in set(key):
        v = z[(key == k) & np.isfinite(z)]
        v = v - v.mean()
        rms = float(np.sqrt(np.mean(v ** 2)))
        pools[k] = v / rms if rms > 0 else v
    return [pools[k] for k in key]


def simulate(data: pd.DataFrame, reps: int, seed: int = 0, draws: int = 4000, by_method: bool = True,
             resampled: bool = False, own_floor: bool = stats.OWN_VARIANCE_FLOOR) -> dict:
    """Coverage and family-wise error over `reps` tables simulated from the model fitted to `data`
    (`draws`: Monte Carlo draws per refit, fewer than the tables' own, for speed; `by_method`:
    the refits' model; `resampled`: errors from error_pools, else Normal; `own_floor`: the
    fits', stats.fgls_weights')."""
    fit = stats.fit_leaderboard(data, own_floor=own_floor, draws=draws)
    data = fit["frame"]  # the runs the model fits, row for row (a copy counted once)
    mean = np.asarray(fit["fit"].fittedvalues)
    spread = np.where(data["N"] > 0, data["method"].map(fit["spread"]), 1.0)
    sd = data["N"].map(fit["sigma"]).to_numpy() * spread
    pools = error_pools(fit) if resampled else None
    wide = sorted(fit["methods"], key=lambda m: -fit["spread"][m])[:len(fit["methods"]) // 3]
    cell = data["method"] + "@" + data["N"].astype(str)
    frame = data.assign(f=mean)
    null_mean = mean - cell.map(frame.groupby(cell)["f"].mean()).to_numpy() \
        + data["N"].map(frame.groupby("N")["f"].mean()).to_numpy()
    rng = np.random.default_rng(seed)
    noise = (lambda: np.array([p[rng.integers(len(p))] if len(p) else 0.0 for p in pools])) if resampled \
        else (lambda: rng.standard_normal(len(data)))
    true_rank = true_ranks(fit)
    cover, cover_wide, simultaneous, ranks_cover, family_error = [], [], [], [], []
    for _ in range(reps):
        f = stats.fit_leaderboard(data.assign(y=mean + sd * noise()), by_method, own_floor, draws)
        covered = {m: abs(f["score"][m][0] - fit["score"][m][0]) <= f["score"][m][1] for m in f["methods"]}
        cover += list(covered.values())
        cover_wide += [covered[m] for m in wide]
        simultaneous.append(all(abs(v[0] - fit["vs"][r][m][0]) <= v[1]
                                for r, vv in f["vs"].items() for m, v in vv.items()))
        ranks_cover.append(all(lo <= true_rank[m] <= hi for m, (lo, hi) in f["rank"].items()))
        f0 = stats.fit_leaderboard(data.assign(y=null_mean + sd * noise()), by_method, own_floor, draws)
        family_error.append(any(p < stats.ALPHA for p in f0["pairs"].values()))
    return {"score_cover": float(np.mean(cover)), "wide_cover": float(np.mean(cover_wide)),
            "reference_cover": float(np.mean(simultaneous)), "rank_cover": float(np.mean(ranks_cover)),
            "tier_family_error": float(np.mean(family_error))}


def true_ranks(fit: dict) -> dict:
    """{method: its rank among the fitted scores, 1 the best}: the truth the simulations draw from."""
    order = sorted(fit["methods"], key=lambda m: -fit["score_at_average"][m][0])
    return {m: k + 1 for k, m in enumerate(order)}


def simulate_references(data: pd.DataFrame, reps: int, seed: int = 0, draws: int = 20_000,
                        own_floor: bool = stats.OWN_VARIANCE_FLOOR) -> dict:
    """Scores, the reference family and the rank intervals only, over `reps` Normal tables
    simulated from the model fitted to `data`, each refitted on the fitted model's design
    (stats.fgls_weights, a numpy WLS, stats.with_variances: the same fit as
    stats.fit_leaderboard's without rebuilding the design or testing its terms; `draws`: the
    max-|t| draws per refit; `own_floor`: the fits'). Against the rank intervals, the percentile
    intervals of the ranks over `draws` draws from Normal(scores, their covariance). Also the
    estimated SE of each difference to the first reference over its true one (the GLS SE at the
    true variances), averaged over tables: for the third of methods with the widest spread and
    for the rest."""
    fit = stats.fit_leaderboard(data, own_floor=own_floor, draws=draws)
    model = fit["fit"].model
    x = pd.DataFrame(model.exog, columns=model.exog_names)
    frame = model.data.frame
    n_of_run, method_of_run = frame["N"].to_numpy(), frame["method"].to_numpy()
    mean = np.asarray(fit["fit"].fittedvalues)
    sd = frame["N"].map(fit["sigma"]).to_numpy() * np.where(n_of_run > 0, frame["method"].map(fit["spread"]), 1.0)
    methods, ref = fit["methods"], next(r for r in stats.REFERENCES if r in fit["methods"])
    wide = set(sorted(methods, key=lambda m: -fit["spread"][m])[:len(methods) // 3])
    score_l = stats.scores(fit["fit"], methods)[0]
    c = np.array([score_l[methods.index(m)] - score_l[methods.index(ref)] for m in methods if m != ref])
    true_se = np.sqrt(np.diag(c @ np.linalg.inv((model.exog / sd[:, None] ** 2).T @ model.exog) @ c.T))
    true_rank = true_ranks(fit)
    rng = np.random.default_rng(seed)
    cover, cover_wide, simultaneous, ratio = [], [], [], np.zeros(len(c))
    rank_missed, percentile_missed = [], []  # per table, the methods whose true rank fell outside
    for _ in tqdm(range(reps), desc="tables", mininterval=60):
        y = mean + sd * rng.standard_normal(len(mean))
        weights, _, *variances = stats.fgls_weights(model.exog, y, n_of_run, method_of_run, True, own_floor)
        f = stats.with_variances(sm.WLS(y, x, weights=weights).fit(), *variances)
        _, est, cov, half = stats.scores(f, methods)
        for i, m in enumerate(methods):
            cover.append(abs(est[i] - fit["score_at_average"][m][0]) <= half[i])
            if m in wide:
                cover_wide.append(cover[-1])
        vs = stats.reference_family(f, methods, score_l, cov, rng, draws)["vs"]
        simultaneous.append(all(abs(v[0] - fit["vs"][r][m][0]) <= v[1] for r, vv in vs.items() for m, v in vv.items()))
        ratio += np.sqrt(np.diag(c @ f.cov_params().to_numpy() @ c.T)) / true_se / reps
        rank = stats.tiers(methods, est, cov, lambda i, j: stats.contrast_df(f, score_l[i] - score_l[j]))["rank"]
        rank_missed.append([m for m, (lo, hi) in rank.items() if not lo <= true_rank[m] <= hi])
        # against them: the 2.5% and 97.5% quantiles of each rank over draws from Normal(est, cov)
        drawn = (-(est + rng.standard_normal((draws, len(methods))) @ np.linalg.cholesky(cov).T)).argsort(1).argsort(1) + 1
        low, high = np.quantile(drawn, 0.025, axis=0, method="lower"), np.quantile(drawn, 0.975, axis=0, method="higher")
        percentile_missed.append([m for i, m in enumerate(methods) if not low[i] <= true_rank[m] <= high[i]])
    is_wide = np.array([m in wide for m in methods if m != ref])
    return {"score_cover": float(np.mean(cover)), "wide_cover": float(np.mean(cover_wide)),
            "reference_cover": float(np.mean(simultaneous)), "tables": reps,
            # nan where a group holds no difference (a design whose widest third is the reference alone)
            "se_ratio_wide": float(ratio[is_wide].mean()) if is_wide.any() else float("nan"),
            "se_ratio_rest": float(ratio[~is_wide].mean()) if (~is_wide).any() else float("nan"),
            "reference": ref, **missed_counts("rank", rank_missed, methods),
            **missed_counts("percentile", percentile_missed, methods)}


def missed_counts(name: str, missed: list, methods: list) -> dict:
    """From the methods missed in each table: {name_cover: share of tables missing none,
    name_worst: (the method missed most, in how many tables), name_miss_mean: share of tables
    missing a method, averaged over the methods}."""
    count = collections.Counter(m for table in missed for m in table)
    worst = max(methods, key=lambda m: count[m])
    return {f"{name}_cover": float(np.mean([not table for table in missed])),
            f"{name}_worst": (worst, count[worst]),
            f"{name}_miss_mean": sum(count.values()) / len(methods) / len(missed)}


def missed_most(worst: tuple) -> str:
    """'name, in k tables' for (name, k), or 'none' where k is 0."""
    return f"{worst[0]}, in {worst[1]} tables" if worst[1] else "none"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", help="kept results of the leaderboard (results/leaderboard_toy)")
    parser.add_argument("--reps", type=int, default=200, help="simulated tables")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pooled", action="store_true", help="refit with one SD per N")
    parser.add_argument("--errors", choices=("normal", "resampled"), default="normal",
                        help="simulated errors: Normal, or the kept runs' standardized residuals")
    parser.add_argument("--references", action="store_true",
                        help="scores and the reference family only, on the fitted design (fast)")
    parser.add_argument("--no-floor", action="store_true",
                        help="refit with the moderated variances alone (the fits' own_floor off)")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    if args.references:
        out = simulate_references(reader.leaderboard_data(reader.load_runs(args.root)), args.reps, args.seed,
                                  own_floor=not args.no_floor)
        print(f"{args.reps} simulated tables (Normal errors), refitted on the fitted design "
              f"{'without' if args.no_floor else 'with'} the own-variance floor ({time.perf_counter() - t0:.0f} s): "
              f"score intervals cover {out['score_cover']:.3f} (the third with the largest spread "
              f"{out['wide_cover']:.3f}); the reference intervals all cover at once in "
              f"{out['reference_cover']:.3f} (nominal 0.95); estimated over true SE of the differences "
              f"to {out['reference']}: {out['se_ratio_wide']:.3f} for the widest third, "
              f"{out['se_ratio_rest']:.3f} for the rest; the rank intervals hold every true rank at "
              f"once in {out['rank_cover']:.3f} (nominal at least 0.95; the row missed most: "
              f"{missed_most(out['rank_worst'])}); quantiles of the ranks over draws from Normal(score, "
              f"cov) would in {out['percentile_cover']:.3f} (missing a row's rank in "
              f"{out['percentile_miss_mean']:.3f} of tables on average; the row missed most: "
              f"{missed_most(out['percentile_worst'])})")
        return
    out = simulate(reader.leaderboard_data(reader.load_runs(args.root)), args.reps, args.seed,
                   by_method=not args.pooled, resampled=args.errors == "resampled", own_floor=not args.no_floor)
    print(f"{args.reps} simulated tables ({args.errors} errors), refitted with "
          f"{'one SD per N' if args.pooled else 'a spread per method'} "
          f"({time.perf_counter() - t0:.0f} s): score intervals cover "
          f"{out['score_cover']:.3f} (nominal 0.95; the third with the largest spread {out['wide_cover']:.3f}); the reference intervals all cover at once in "
          f"{out['reference_cover']:.3f} (nominal 0.95); the rank intervals hold every true rank at once "
          f"in {out['rank_cover']:.3f} (nominal at least 0.95); with no true difference some pair is split "
          f"in {out['tier_family_error']:.3f} (nominal at most 0.05)")


if __name__ == "__main__":
    main()
