"""How far the leaderboard's model (stats.py) can be trusted on its own design: simulate runs from
its fit to the kept results (the fitted cell means, path effects and seed blocks, Normal errors
with the fitted SD per N and spread per method), refit each simulated table, and count how often the intervals
cover the truth and how often the tiers split methods that do not differ.

    python bench_stats.py results/leaderboard_toy --reps 200 [--pooled] [--errors resampled]

Prints, over `reps` simulated tables: the share of score intervals (95%) that cover the true
score (all methods, and the third with the largest spread), the share of tables whose reference
intervals (simultaneous 95%) all cover at once, and, from tables simulated with every method's
cells at the mean of its N (no true difference), the share in which some pair is declared
different (the family-wise error of the tiers; nominal 5%). --pooled refits each table with one
SD per N (stats.fit_leaderboard's by_method=False) on the same simulated tables. --errors
resampled draws each run's error from the kept runs' own standardized residuals instead of the
Normal (error_pools: the model's variances, the observed shape, a collapse to 0% included), which
checks the one assumption the Normal simulation cannot: Normal errors.
"""
import argparse
import time

import numpy as np
import pandas as pd

import plot
import stats


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
             resampled: bool = False) -> dict:
    """Coverage and family-wise error over `reps` tables simulated from the model fitted to `data`
    (`draws`: Monte Carlo draws per refit, fewer than the tables' own, for speed; `by_method`:
    the refits' model; `resampled`: errors from error_pools, else Normal)."""
    stats.DRAWS = draws
    fit = stats.fit_leaderboard(data)
    data = data.reset_index(drop=True)
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
    cover, cover_wide, simultaneous, family_error = [], [], [], []
    for _ in range(reps):
        f = stats.fit_leaderboard(data.assign(y=mean + sd * noise()), by_method)
        covered = {m: abs(f["score"][m][0] - fit["score"][m][0]) <= f["score"][m][1] for m in f["methods"]}
        cover += list(covered.values())
        cover_wide += [covered[m] for m in wide]
        simultaneous.append(all(abs(v[0] - fit["vs"][r][m][0]) <= v[1]
                                for r, vv in f["vs"].items() for m, v in vv.items()))
        f0 = stats.fit_leaderboard(data.assign(y=null_mean + sd * noise()), by_method)
        family_error.append(any(p < stats.ALPHA for p in f0["pairs"].values()))
    return {"score_cover": float(np.mean(cover)), "wide_cover": float(np.mean(cover_wide)),
            "reference_cover": float(np.mean(simultaneous)),
            "tier_family_error": float(np.mean(family_error))}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", help="kept results of the leaderboard (results/leaderboard_toy)")
    parser.add_argument("--reps", type=int, default=200, help="simulated tables")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pooled", action="store_true", help="refit with one SD per N")
    parser.add_argument("--errors", choices=("normal", "resampled"), default="normal",
                        help="simulated errors: Normal, or the kept runs' standardized residuals")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    out = simulate(plot.leaderboard_data(plot.load_runs(args.root)), args.reps, args.seed,
                   by_method=not args.pooled, resampled=args.errors == "resampled")
    print(f"{args.reps} simulated tables ({args.errors} errors), refitted with "
          f"{'one SD per N' if args.pooled else 'a spread per method'} "
          f"({time.perf_counter() - t0:.0f} s): score intervals cover "
          f"{out['score_cover']:.3f} (nominal 0.95; the third with the largest spread {out['wide_cover']:.3f}); the reference intervals all cover at once in "
          f"{out['reference_cover']:.3f} (nominal 0.95); with no true difference some pair is split "
          f"in {out['tier_family_error']:.3f} (nominal at most 0.05)")


if __name__ == "__main__":
    main()
