"""The leaderboard's model (lab/stats.py) on data whose answers are known by hand."""
import math

import numpy as np
import pandas as pd
import pytest
import scipy.stats

from lab import stats

DELAYS = (0, 8, 32, 128)


def _frame(rows):
    return pd.DataFrame(rows, columns=["method", "N", "seed", "rounding_path", "y"])


def test_balanced_cells_give_the_cell_means_and_the_pooled_sd_per_n():
    """Two methods, four seeds, one path; y = cell + a wobble (+1, -1, +2, -2) by seed, x 1, 2, 3,
    4 at N = 0, 8, 32, 128, with opposite signs in the two methods. Balanced, so each cell's
    estimate is its mean; the seeds shift nothing (the wobbles cancel across the methods: the
    seed test's F is 0, the blocks' effects are 0), so the residuals are the wobbles, and
    sigma[N]^2 is their sum of squares over 8 - 2 - 3 (the N's runs less its two cells and its
    four seed blocks' three free shifts)."""
    wobble = (1, -1, 2, -2)
    cell = {("a", 0): 50, ("a", 8): 40, ("a", 32): 30, ("a", 128): 20,
            ("b", 0): 52, ("b", 8): 30, ("b", 32): 20, ("b", 128): 10}
    scale = {0: 1, 8: 2, 32: 3, 128: 4}
    rows = [(m, n, s, "P", cell[(m, n)] + wobble[s] * scale[n] * (1 if m == "a" else -1))
            for (m, n) in cell for s in range(4)]
    r = stats.fit_leaderboard(_frame(rows))
    assert r["score"]["a"][0] == pytest.approx(30.0, abs=1e-9)
    assert r["score"]["b"][0] == pytest.approx(20.0, abs=1e-9)
    assert r["drop"]["a"][0] == pytest.approx(30 - 50, abs=1e-9)
    assert r["drop"]["b"][0] == pytest.approx(20 - 52, abs=1e-9)
    assert r["seed"]["F"] == pytest.approx(0, abs=1e-9) and r["seed"]["tau"] == 0
    for n in DELAYS:
        ss = 2 * sum((w * scale[n]) ** 2 for w in wobble)  # both methods
        assert r["sigma"][n] == pytest.approx(math.sqrt(ss / (8 - 2 - 3)), rel=1e-9)
    assert r["df"] == 32 - 8 - 3 - 9


def test_satterthwaite_degrees_of_freedom_by_hand():
    """The balanced design above (_shifted_rows with no shift): sigma[N]^2 is in proportion to 1,
    4, 9, 16 at N = 0, 8, 32, 128, each on 8 - 2 - 3 = 3 residual degrees of freedom. A cell at
    one N rests on that N's variance: 3 df. The score (the mean of the stale cells) has variance
    in proportion to 4 + 9 + 16, so Satterthwaite gives 3 (4 + 9 + 16)^2 / (4^2 + 9^2 + 16^2) =
    3 x 841 / 353 = 7.15 df; the interval is that t quantile times the standard error, both
    methods alike."""
    r = stats.fit_leaderboard(_shifted_rows((0, 0, 0, 0)))
    fit = r["fit"]
    assert stats.contrast_df(fit, stats._contrast(fit, {("a", 8): 1})) == pytest.approx(3, rel=1e-9)
    score = stats._contrast(fit, {("a", n): 1 / 3 for n in (8, 32, 128)})
    assert stats.contrast_df(fit, score) == pytest.approx(3 * 841 / 353, rel=1e-9)
    se = math.sqrt(sum(r["sigma"][n] ** 2 for n in (8, 32, 128)) / 9 / 4)
    assert r["score"]["a"][1] == pytest.approx(scipy.stats.t.ppf(0.975, 3 * 841 / 353) * se, rel=1e-9)


def _spread_rows(scales, seeds=10, seed=0):
    """Methods m0, m1, ... with stale noise SD scales[i] (Normal draws, a fixed seed), N = 0 noise SD
    1, cell means 50 at N = 0 and 40 - i at N > 0, one path."""
    rng = np.random.default_rng(seed)
    return _frame([(f"m{i}", n, s, "P", (50 if n == 0 else 40 - i) + (sd if n else 1) * rng.standard_normal())
                   for i, sd in enumerate(scales) for n in DELAYS for s in range(seeds)])


def test_a_spread_per_method_is_found_where_the_methods_differ_and_nowhere_else():
    """Three methods with stale noise SD 1 and three with SD 3 (10 seeds): the moderated spreads
    recover the ratio (about 3; within 2-4.5 at these draws, each method's own estimate on ~27 df),
    and the wide methods' score intervals are wider in about that ratio, where one SD per N gives
    every method the same interval. Where every method has the same noise (the same draws, their
    sign alternating between methods), no spread is found: the prior's df is infinite, every spread is 1
    and the model is the one with one SD per N, to the digit."""
    data = _spread_rows((1, 1, 1, 3, 3, 3))
    r, pooled = stats.fit_leaderboard(data), stats.fit_leaderboard(data, by_method=False)
    narrow = np.mean([r["spread"][f"m{i}"] for i in range(3)])
    wide = np.mean([r["spread"][f"m{i}"] for i in range(3, 6)])
    assert 2 < wide / narrow < 4.5 and math.isfinite(r["prior_df"])
    halves = [r["score"][f"m{i}"][1] for i in range(6)]
    assert 2 < np.mean(halves[3:]) / np.mean(halves[:3]) < 4.5
    assert max(pooled["score"][m][1] for m in pooled["methods"]) == pytest.approx(
        min(pooled["score"][m][1] for m in pooled["methods"]), rel=1e-9)
    rng = np.random.default_rng(1)
    noise = {n: rng.standard_normal(4) for n in DELAYS}
    same = _frame([(f"m{i}", n, s, "P", (50 if n == 0 else 40 - i) + (-1) ** i * noise[n][s])
                   for i in range(6) for n in DELAYS for s in range(4)])
    r, pooled = stats.fit_leaderboard(same), stats.fit_leaderboard(same, by_method=False)
    assert r["prior_df"] == math.inf and all(v == 1 for v in r["spread"].values())
    for m in r["methods"]:
        assert r["score"][m] == pytest.approx(pooled["score"][m], rel=1e-9)


def test_a_wide_method_is_never_given_less_than_its_own_variance():
    """_spread_rows((1, 1, 1, 3, 3, 3)): balanced with one path, so each cell's estimate is its
    mean over the ten seeds (the sum-to-zero seed x N shifts cancel) whatever the weights, and a
    score's variance is sum over N > 0 of sigma[N]^2 lambda^2 / (9 x 10), lambda^2 the variance
    in units of sigma[N]^2 the intervals take for the method: the larger of the moderated one
    (spread^2) and its own, s2 = the sum of its stale runs' (residual / sigma[N])^2 over their
    residual degrees of freedom d. Moderation pulls the wide methods' variances down and the
    narrow ones' up, so the wide ones take their own (on their own d, not d0 + d) and the narrow
    ones the moderated."""
    data = _spread_rows((1, 1, 1, 3, 3, 3))
    r = stats.fit_leaderboard(data)
    fit = r["fit"]
    resid, free = np.asarray(fit.resid), 1 - stats.hat_diagonal(fit)
    scaled = resid / data["N"].map(r["sigma"]).to_numpy()
    d0, unit = r["prior_df"], sum(r["sigma"][n] ** 2 for n in stats.STALE_DELAYS) / 90
    own = {}
    for i in range(6):
        rows = ((data["method"] == f"m{i}") & (data["N"] > 0)).to_numpy()
        own[i] = (float(free[rows].sum()), float((scaled[rows] ** 2).sum() / free[rows].sum()))
    floored = [i for i in range(6) if own[i][1] > r["spread"][f"m{i}"] ** 2]
    assert floored == [3, 4, 5]
    for i in range(6):
        m = f"m{i}"
        cells = data[(data["method"] == m) & (data["N"] > 0)].groupby("N")["y"].mean()
        assert r["score"][m][0] == pytest.approx(cells.mean(), abs=1e-9)
        _, se, _ = stats._estimate(fit, {(m, n): 1 / 3 for n in stats.STALE_DELAYS})
        assert se ** 2 == pytest.approx(unit * max(r["spread"][m] ** 2, own[i][1]), rel=1e-9)
    # the degrees of freedom of each method's variance (after the four N's): d alone where floored
    method_df = [nu for _, nu in fit.variance_groups[len(DELAYS):]]
    assert method_df == pytest.approx([own[i][0] + (0 if i in floored else d0) for i in range(6)], rel=1e-9)


def test_each_reference_difference_takes_its_own_degrees_of_freedom():
    """The reference family of _spread_rows((1, 1, 1, 3, 3, 3)) with m0 as GRPO+TIS: five
    differences, two against narrow methods (many degrees of freedom) and three against wide ones
    (few: each wide method's variance on its own ~27 df and the prior's). Each difference's
    critical value is the max-|t| quantile on its own contrast_df: above the single t quantile
    on that df, below the Bonferroni one over the five, and the fewer the df the larger."""
    data = _spread_rows((1, 1, 1, 3, 3, 3)).replace({"method": {"m0": "grpo_tis"}})
    r = stats.fit_leaderboard(data)
    crit, dfs = [], []
    for m in [f"m{i}" for i in range(1, 6)]:
        _, se, df = stats._estimate(r["fit"], {**{(m, n): 1 / 3 for n in stats.STALE_DELAYS},
                                               **{("grpo_tis", n): -1 / 3 for n in stats.STALE_DELAYS}})
        crit.append(r["vs"]["grpo_tis"][m][1] / se)
        dfs.append(df)
        assert scipy.stats.t.ppf(0.975, df) < crit[-1] < scipy.stats.t.ppf(1 - 0.05 / 10, df)
    assert min(dfs[:2]) > max(dfs[2:]) + 2  # the narrow pairs rest on more df (30-32 against 26-27)
    assert min(crit[:2]) < max(crit[2:])
    order = np.argsort(dfs)
    assert all(np.diff(np.array(crit)[order]) <= 1e-12)
    assert r["vs_df"] == pytest.approx((min(dfs), max(dfs)), rel=1e-12)
    assert r["vs_critical"] == pytest.approx((max(crit), min(crit)), rel=1e-12)


def test_a_collapsed_method_keeps_a_finite_weight():
    """A method whose stale runs all end at 0% has almost no spread of its own: its residuals are
    only the seed blocks' shifts, which it does not share (s2 on d degrees of freedom, d the sum
    of (1 - leverage) over its 30 stale runs, below 3 x (10 - 1) = 27 since the blocks take
    some). The prior is fitted without it, and its spread^2 is the posterior
    (d0 s0^2 + d s2) / (d0 + d) over s0^2, s0^2 read off another method's posterior the same way:
    a finite weight, an interval above zero."""
    data = _spread_rows((1, 2, 1.5, 1, 2.5, 1))
    data.loc[(data["method"] == "m0") & (data["N"] > 0), "y"] = 0.0
    r = stats.fit_leaderboard(data)
    resid, free = np.asarray(r["fit"].resid), 1 - stats.hat_diagonal(r["fit"])
    scaled = resid / data["N"].map(r["sigma"]).to_numpy()

    def own(m):  # (d, s2) of a method's stale runs
        rows = ((data["method"] == m) & (data["N"] > 0)).to_numpy()
        return float(free[rows].sum()), float((scaled[rows] ** 2).sum() / free[rows].sum())
    d0 = r["prior_df"]
    d1, s2_1 = own("m1")
    s0 = d1 * s2_1 / (r["spread"]["m1"] ** 2 * (d0 + d1) - d0)
    d, s2 = own("m0")
    assert 10 < d < 27 and s2 < 0.1 * s2_1
    assert r["spread"]["m0"] ** 2 == pytest.approx((d0 * s0 + d * s2) / (d0 + d) / s0, rel=1e-6)
    assert r["spread"]["m0"] < 0.6 < min(r["spread"][f"m{i}"] for i in range(1, 6))
    assert 0 < r["score"]["m0"][1] < r["score"]["m1"][1]
    assert r["score"]["m0"][0] == pytest.approx(0, abs=1e-9)


def _shifted_rows(shift, wobble_scale=1.0):
    """The balanced design above with every run of seed s moved by shift[s] (both methods alike)."""
    wobble = (1, -1, 2, -2)
    cell = {("a", 0): 50, ("a", 8): 40, ("a", 32): 30, ("a", 128): 20,
            ("b", 0): 52, ("b", 8): 30, ("b", 32): 20, ("b", 128): 10}
    scale = {0: 1, 8: 2, 32: 3, 128: 4}
    return _frame([(m, n, s, "P", cell[(m, n)] + shift[s]
                    + wobble_scale * wobble[s] * scale[n] * (1 if m == "a" else -1))
                   for (m, n) in cell for s in range(4)])


def test_a_seed_shift_shared_by_every_row_is_fitted_and_removed():
    """The balanced design with seeds 0-3 shifting every run by +6, -2, 0, -4 (sum 0): the seed
    test rejects, the seed's effects (sum-to-zero) are the shifts, the scores are still 30 and
    20, twelve degrees of freedom go to the blocks (32 - 8 cells - 3 seeds - 9 seed x N), and the
    residuals are the wobbles alone, where the model without the seed on the same runs takes
    the shifts as noise too (2 x (36 + 4 + 0 + 16) = 112 more in each N's sum of squares). One shift per seed and N fits no better (F 0) unless the seeds shift N = 0
    apart; the cells stay at each N's average seed either way. Where 'b' lacks seed 0 (the +6
    one) the raw mean of its stale cells is 2 points low (the other seeds' mean shift); the
    seed restores b's score to 20."""
    data = _shifted_rows((6, -2, 0, -4))
    r = stats.fit_leaderboard(data)
    assert r["seed"]["fitted"] and r["seed"]["p"] < 0.01
    for s, shift in enumerate((6, -2, 0, -4)):
        assert r["seed"]["effects"][s][0] == pytest.approx(shift, abs=1e-9)
    assert r["score"]["a"][0] == pytest.approx(30, abs=1e-9) and r["score"]["b"][0] == pytest.approx(20, abs=1e-9)
    assert r["df"] == 32 - 8 - 3 - 9
    assert r["seed"]["per_n"]["F"] == pytest.approx(0, abs=1e-9) and r["seed"]["per_n"]["fitted"]
    varies = data.assign(y=data["y"] + (data["N"] == 0) * data["seed"].map({0: 10, 1: -10, 2: 10, 3: -10}))
    per_n = stats.fit_leaderboard(varies)  # N = 0's seeds shift apart
    assert per_n["seed"]["per_n"]["p"] < 0.05
    assert per_n["drop"]["a"][0] == pytest.approx(30 - 50, abs=1e-9)
    _, without, _ = stats._fgls(data.assign(cell=data["method"] + "@" + data["N"].astype(str)))
    for n, scale in zip(DELAYS, (1, 2, 3, 4)):
        wobbles = 2 * 10 * scale ** 2  # both methods' (1 + 1 + 4 + 4) x scale^2
        assert r["sigma"][n] ** 2 * (8 - 2 - 3) == pytest.approx(wobbles, rel=1e-9)
        assert without[n] ** 2 * (8 - 2) == pytest.approx(wobbles + 112, rel=1e-9)
    partial = _shifted_rows((6, -2, 0, -4), wobble_scale=0.01)
    partial = partial[~((partial["method"] == "b") & (partial["seed"] == 0))]
    raw = partial[(partial["method"] == "b") & (partial["N"] > 0)]["y"].mean()
    assert raw == pytest.approx(18, abs=0.05)
    r = stats.fit_leaderboard(partial)
    # compared at the average seed (20); shown at b's own runs, whose seeds lack seed 0's +6 (18)
    assert r["seed"]["fitted"] and r["score_at_average"]["b"][0] == pytest.approx(20, abs=0.05)
    assert r["score"]["b"][0] == pytest.approx(raw, abs=1e-9)
    assert r["seed"]["moves"]["max_apart"] == pytest.approx(1, abs=0.05)  # b's +2 against a's 0, less the mean


def test_the_seed_stays_in_the_model_whatever_its_test_says():
    """No seed shift at all: the seed's test finds nothing (F 0), the blocks are kept anyway, and
    in the balanced design they move no score (each cell is at its N's average seed with or
    without them); only the degrees of freedom go (12 of 24). A seed that lacks an N keeps its
    shift and loses the seed x N term (its block at that N has no run). A seed whose only runs
    are on a path of their own holds that path: the model keeps the seed's blocks (and
    its shift there is the path's too) with no path term, which would only alias them; where a
    seed's runs span two paths and the path still cannot be told from the seeds, the seed is left
    out and the table says so."""
    r = stats.fit_leaderboard(_shifted_rows((0, 0, 0, 0)))
    assert r["seed"]["F"] == pytest.approx(0, abs=1e-9) and r["seed"]["fitted"] and r["seed"]["per_n"]["fitted"]
    assert r["score"]["a"][0] == pytest.approx(30, abs=1e-9) and r["score"]["b"][0] == pytest.approx(20, abs=1e-9)
    assert r["seed"]["moves"]["mean"] == pytest.approx(0, abs=1e-9)
    assert r["seed"]["moves"]["max_apart"] == pytest.approx(0, abs=1e-9)
    assert r["df"] == 32 - 8 - 3 - 9
    lacking = _shifted_rows((6, -2, 0, -4))
    r = stats.fit_leaderboard(lacking[~((lacking["seed"] == 3) & (lacking["N"] == 0))])
    assert r["seed"]["fitted"] and not r["seed"]["per_n"]["fitted"] and r["seed"]["per_n"]["F"] is None
    assert r["seed"]["effects"][3][0] == pytest.approx(-4, abs=1e-9) and r["df"] == 30 - 8 - 3
    alone = _shifted_rows((6, -2, 0, -4))
    alone = alone.assign(rounding_path=np.where(alone["seed"] == 3, "Q", "P"))  # seed 3 ran on Q alone
    r = stats.fit_leaderboard(alone)
    assert r["seed"]["fitted"] and r["seed"]["per_n"]["fitted"] and r["rounding_path"]["effects"] == {}
    assert r["seed"]["effects"][3][0] == pytest.approx(-4, abs=1e-9) and r["df"] == 32 - 8 - 3 - 9
    split = alone.assign(rounding_path=np.where((alone["seed"] == 3) & (alone["method"] == "a"), "Q", "P"))
    split.loc[(split["seed"] == 2) & (split["method"] == "b"), "rounding_path"] = "Q"  # Q: seed 3's a, seed 2's b
    r = stats.fit_leaderboard(split)
    assert r["rounding_path"]["effects"] and r["seed"]["fitted"]  # the path varies within seeds: its own term


NOISE = [0.03, -0.02, 0.01, -0.04, 0.025, -0.005]


def _reference_on_two_paths(other) -> list:
    """Rows of grpo_tis at 20 on paths P and Q (Q adds +6), seeds 0-2 x DELAYS, with a little
    noise, and after each (N, seed) the row other(N, seed, k) (k: a running count for the noise)."""
    rows, k = [], 0
    for seed in range(3):
        for n in DELAYS:
            for path in ("P", "Q"):
                rows.append(("grpo_tis", n, seed, path, 20 + 6 * (path == "Q") + NOISE[k % 6]))
                k += 1
            rows.append(other(n, seed, k))
            k += 1
    return rows


def test_the_rounding_path_factor_undoes_a_confounded_design():
    """Method 'b' ran only on path Q for seeds 0-1, 'grpo_tis' on both paths at every seed; path
    Q adds +6 points to every run. The raw mean credits 'b' with part of Q's +6; the model
    recovers b - grpo_tis = 10 (+- the noise) and Q - P = 6."""
    rows = _reference_on_two_paths(lambda n, seed, k: ("b", n, seed, "Q" if seed < 2 else "P",
                                                      30 + 6 * (seed < 2) + NOISE[k % 6]))
    data = _frame(rows)
    raw = data[data.method == "b"].y.mean() - data[data.method == "grpo_tis"].y.mean()
    assert raw == pytest.approx(10 + 6 * (2 / 3 - 1 / 2), abs=0.3)  # biased by the design
    r = stats.fit_leaderboard(data)
    diff, half, p = r["vs"]["grpo_tis"]["b"]
    assert diff == pytest.approx(10, abs=0.3) and p < 0.001
    effects = r["rounding_path"]["effects"]
    assert effects["Q"][0] - effects["P"][0] == pytest.approx(6, abs=0.3)
    # a family of one difference: the max-|t| critical value is the t quantile (Monte Carlo)
    assert r["vs_family"] == 1
    assert r["vs_df"][0] == r["vs_df"][1] and r["vs_critical"][0] == r["vs_critical"][1]
    assert r["vs_critical"][0] == pytest.approx(scipy.stats.t.ppf(0.975, r["vs_df"][0]), abs=0.03)
    assert 0 < half < 0.3 and r["tiers"] == {"b": "a", "grpo_tis": "b"}
    assert r["rank"] == {"b": (1, 1), "grpo_tis": (2, 2)}


def test_letter_display_by_hand():
    """a > b > c > d; a differs from c and d, b from d: tiers {a, b}, {b, c}, {c, d}... here c
    and d are not found different, so c shares b's and d's letters."""
    letters = stats.letter_display(["a", "b", "c", "d"], [4, 3, 2, 1], [("a", "c"), ("a", "d"), ("b", "d")])
    assert letters == {"a": "a", "b": "ab", "c": "bc", "d": "c"}
    assert stats.letter_display(["x", "y"], [1, 2], []) == {"x": "a", "y": "a"}
    assert stats.letter_display(["x", "y"], [1, 2], [("x", "y")]) == {"x": "b", "y": "a"}


def test_rank_intervals_count_the_methods_found_above_and_below():
    """a > b > c > d > e, the test split a from c, d, e; b from d, e; c from e. a: none above, three
    below: rank 1-2; b: none above, two below: 1-3; c: a above, e below: 2-4; d: a and b above:
    3-5; e: a, b and c above: 4-5. With nothing split every rank is 1-5, with everything split the
    observed order."""
    names, est = ["c", "a", "e", "b", "d"], [3.0, 5.0, 1.0, 4.0, 2.0]  # any order in, by value
    split = [("a", "c"), ("d", "a"), ("a", "e"), ("b", "d"), ("e", "b"), ("c", "e")]
    assert stats.rank_sets(names, est, split) == {
        "a": (1, 2), "b": (1, 3), "c": (2, 4), "d": (3, 5), "e": (4, 5)}
    assert set(stats.rank_sets(names, est, []).values()) == {(1, 5)}
    every = [(x, y) for i, x in enumerate(names) for y in names[i + 1:]]
    assert stats.rank_sets(names, est, every) == {"a": (1, 1), "b": (2, 2), "c": (3, 3), "d": (4, 4), "e": (5, 5)}


def test_seeds_needed_by_hand():
    """n = 2 sd^2 (z[1 - alpha / 2f] + z[power])^2 / delta^2: sd 5, delta 5, one comparison:
    2 (1.95996 + 0.84162)^2 = 15.70 -> 16; a family of 10: z[0.9975] = 2.80703, 2 x 3.64865^2 =
    26.63 -> 27."""
    assert stats.seeds_needed(5, 5, 1) == 16
    assert stats.seeds_needed(5, 5, 10) == 27
    assert stats.seeds_needed(10, 5, 1) == 4  # a quarter: 3.93 -> 4


def test_seeds_for_an_unresolved_pair_come_from_its_own_error_on_t_quantiles():
    """Pair (a, b): 5 points apart, standard error 2 on 4 df at 3 seeds each, so per seed an SD
    of 2 sqrt(3 / 2) = 2.449 and 2 df. Two pairs make the family, so the level is 0.05 / 4 per
    side; at n seeds, 2.449 sqrt(2 / n) (t[0.9875] + t[0.8]) on 2 (n - 1) df is 5.640 at n = 5
    (3.6404) and 4.968 at n = 6 (3.5128), the first below 5: 6 seeds, where the normal formula
    says 5 (2 x 6 x (2.2414 + 0.8416)^2 / 25 = 4.56 -> 5).
    The resolved pair (a, c) names no one; with at most 5 seeds allowed, neither does (a, b)."""
    result = {"pairs": {("a", "b"): 0.2, ("a", "c"): 0.01},
              "score_at_average": {"a": (50.0, 1.0), "b": (45.0, 1.0), "c": (30.0, 1.0)},
              "pair_se": {("a", "b"): (2.0, 4.0), ("a", "c"): (2.0, 4.0)}, "seeds": {"a": 3, "b": 3, "c": 3}}
    assert stats.touching_rows(result, 10) == {"a": 6, "b": 6}
    assert stats.touching_rows(result, 5) == {}
    assert stats.seeds_needed(5, 2 * math.sqrt(1.5), 2, 2.0) == 6
    assert stats.seeds_needed(5, 5, 1, 1.0) > stats.seeds_needed(5, 5, 1) == 16  # few df need more


def test_a_cell_without_replicates_or_a_kind_of_one_method_is_refused():
    rows = [("a", n, 0, "P", 10.0 + n) for n in DELAYS]
    with pytest.raises(ValueError, match="no residual degrees of freedom"):
        stats.fit_leaderboard(_frame(rows))
    rows = [("a", n, s, "P", 10.0 + n + s) for n in DELAYS for s in (0, 1)]
    rows += [("b", n, s, "Q", 10.0 + n - s) for n in DELAYS for s in (0, 1)]  # b only on Q
    with pytest.raises(ValueError, match="run the reference rows on every kind"):
        stats.fit_leaderboard(_frame(rows))


def drift_runs(lr_shift: float, drift_scale: float, seed: int) -> pd.DataFrame:
    """Two methods x N in {0, 8, 32, 128} x 5 seeds whose drop is a + b log10(drift) + noise,
    plus `lr_shift` on every stale run (0: the hypothesis holds)."""
    rng = np.random.default_rng(seed)
    rows = []
    for method, (a, b, base) in {"m1": (-5.0, -10.0, 60.0), "m2": (-2.0, -4.0, 50.0)}.items():
        for N in (0, 8, 32, 128):
            for s in range(5):
                drift = drift_scale * N ** 1.2 * 1e-4 if N else 1e-9
                drop = a + b * math.log10(drift) + lr_shift if N else 0.0
                rows.append({"method": method, "N": N, "seed": s, "drift": drift,
                             "y": base + drop + rng.normal(0, 1.0)})
    return pd.DataFrame(rows)


def test_drift_prediction_judges_each_step_size_against_its_own_noise():
    """Each side's noise is its own (SD about the method x N means, per N): three times the noise
    at the tested step size gives three times its share of the error's SD, and the hypothesis
    (true here) is not refuted for it; the fit weighs its runs by its own side's noise."""
    fit_on, quiet = drift_runs(0.0, 1.0, seed=0), drift_runs(0.0, 0.1, seed=1)
    noisy = quiet.assign(y=quiet["y"] + 2.0 * (quiet["y"] - quiet.groupby(["method", "N"])["y"].transform("mean")))
    a, b = stats.drift_prediction(fit_on, quiet), stats.drift_prediction(fit_on, noisy)
    assert a["fit_sd"] == b["fit_sd"] and a["scale"] == b["scale"]  # the same fit
    for n, sd in a["test_sd"].items():
        assert b["test_sd"][n] == pytest.approx(3 * sd)
        group = quiet[quiet["N"] == n].groupby("method")["y"]  # 2 methods x 5 seeds: 8 degrees of freedom
        assert sd == pytest.approx(math.sqrt(sum(g.var() * 4 for _, g in group) / 8))
    for m in a["methods"]:
        own = quiet[quiet["method"] == m]
        fit_share = a["methods"][m]["se"] ** 2 - sum(a["test_sd"][n] ** 2 for n in own["N"] if n) / 15 ** 2 \
            - a["test_sd"][0] ** 2 / 5
        assert 0 < fit_share < a["methods"][m]["se"] ** 2
        assert b["methods"][m]["se"] ** 2 == pytest.approx(9 * (a["methods"][m]["se"] ** 2 - fit_share) + fit_share)
        assert b["methods"][m]["error"] == pytest.approx(a["methods"][m]["error"])  # the means are the same
        assert not b["methods"][m]["refuted"]
    # the fitted side is weighed by its own noise too: five times the spread at N = 128 there
    loud = fit_on["N"].eq(128) * 4.0 * (fit_on["y"] - fit_on.groupby(["method", "N"])["y"].transform("mean"))
    c = stats.drift_prediction(fit_on.assign(y=fit_on["y"] + loud), quiet)
    assert c["fit_sd"][128] == pytest.approx(5 * a["fit_sd"][128]) and c["fit_sd"][8] == a["fit_sd"][8]
    assert c["scale"] == pytest.approx(a["scale"], rel=0.5)  # unweighted, several times larger


def test_drift_prediction_holds_out_of_sample_and_refutes_a_step_size_effect():
    fit_on = drift_runs(0.0, 1.0, seed=0)
    same = stats.drift_prediction(fit_on, drift_runs(0.0, 0.1, seed=1))  # 10x smaller drift
    pooled = lambda sd: math.sqrt(sum(v ** 2 for v in sd.values()) / len(sd))  # over the N (equal runs)
    assert all(sd == pytest.approx(1.0, abs=0.4) for sd in [*same["fit_sd"].values(), *same["test_sd"].values()])
    assert pooled(same["fit_sd"]) == pytest.approx(1.0, abs=0.3) and pooled(same["test_sd"]) == pytest.approx(1.0, abs=0.3)
    assert same["scale"] == pytest.approx(1.0, abs=0.4) and same["rmse"] < 2 * pooled(same["fit_sd"])  # noise SD 1
    assert not any(m["refuted"] for m in same["methods"].values())
    assert all(m["runs"] == 15 and abs(m["error"]) < 3 * m["se"] for m in same["methods"].values())
    assert same["chi2_df"] == 2 and same["chi2_p"] > 0.01 and len(same["cells"]) == 6
    cell = same["cells"][0]  # m1 at N = 8: drift 0.1 * 8^1.2 * 1e-4, its drop a + b log10(drift)
    assert (cell["method"], cell["N"], cell["runs"]) == ("m1", 8, 5)
    # the fit saw drift 8^1.2 1e-4 .. 128^1.2 1e-4: the test's N = 128 lies inside, N = 8 and 32 below
    assert [c["inside"] for c in same["cells"]] == [False, False, True] * 2
    assert cell["drift"] == pytest.approx(0.1 * 8 ** 1.2 * 1e-4)
    # the test on the inside cells alone: each method's N = 128 runs (5), the same family of two
    inside = same["inside"]
    assert {m: v["runs"] for m, v in inside["methods"].items()} == {"m1": 5, "m2": 5}
    assert inside["chi2_df"] == 2 and not any(v["refuted"] for v in inside["methods"].values())
    assert cell["predicted"] == pytest.approx(-5.0 - 10.0 * math.log10(cell["drift"]), abs=3.0)
    shifted = stats.drift_prediction(fit_on, drift_runs(6.0, 0.1, seed=1))  # the lr matters beyond drift
    assert all(m["refuted"] and abs(m["error"] - 6.0) < 3 * m["se"] for m in shifted["methods"].values())
    assert shifted["rmse"] > 4.0 and shifted["chi2_p"] < 1e-6
    assert all(v["refuted"] for v in shifted["inside"]["methods"].values()) and shifted["inside"]["chi2_p"] < 1e-6
    assert stats.drift_prediction(fit_on, drift_runs(0.0, 1e-3, seed=1))["inside"] == {  # all below
        "methods": {}, "chi2": 0.0, "chi2_df": 0, "chi2_p": pytest.approx(math.nan, nan_ok=True)}
    # the verdict: both directions inside only, each at 2.5%
    back_same = stats.drift_prediction(drift_runs(0.0, 0.1, seed=1), fit_on)
    held = stats.drift_verdict(same, back_same)
    assert held["refuted"] is False and [s["methods"] for s in held["sides"]] == [2, 2]
    assert held["sides"][0]["p"] == same["inside"]["chi2_p"] and held["sides"][0]["refuted"] == []
    back_shifted = stats.drift_prediction(drift_runs(6.0, 0.1, seed=1), fit_on)
    broken = stats.drift_verdict(shifted, back_shifted)
    assert broken["refuted"] is True and broken["sides"][0]["refuted"] == ["m1", "m2"]
    assert [m for m, _, _ in broken["sides"][0]["beyond_2se"]] and all(
        abs(z) > 2 and abs(e - 6.0) < 3 for _, e, z in broken["sides"][0]["beyond_2se"])
    below = stats.drift_prediction(fit_on, drift_runs(0.0, 1e-3, seed=1))
    assert stats.drift_verdict(below, back_same)["refuted"] is None
    one_n = fit_on[fit_on["method"].eq("m1") | fit_on["N"].isin([0, 8])]  # m2 has one stale N
    assert set(stats.drift_prediction(one_n, drift_runs(0.0, 0.1, seed=1))["methods"]) == {"m1"}


def test_resampled_errors_keep_each_method_its_own_standardized_residuals():
    """simulate_stats.error_pools on the balanced design (_shifted_rows, no shift): every cell holds
    four runs and each seed block at an N two, so each run's leverage is 1/4 + 1/2 - 1/8 = 5/8
    (the two-way additive fit within an N), and its residual is its wobble (1, -1, 2, -2) times
    the N's scale, as sigma[N] is. Standardized, a method's stale runs are its wobbles times one
    constant; centred and scaled to mean square 1 they are wobble / sqrt(2.5) for method a and
    -wobble / sqrt(2.5) for b (the signs are opposite), three times over (N = 8, 32, 128). Every
    run at N = 0 draws from one pool, both methods' N = 0 runs alike."""
    from lab import simulate_stats

    data = _shifted_rows((0, 0, 0, 0))
    r = stats.fit_leaderboard(data)
    assert stats.hat_diagonal(r["fit"]) == pytest.approx(np.full(len(data), 0.625), rel=1e-9)
    pools = simulate_stats.error_pools(r)
    wobble = np.array([1, -1, 2, -2] * 3) / math.sqrt(2.5)
    for i, (m, n) in enumerate(zip(data["method"], data["N"])):
        if n == 0:
            assert sorted(pools[i]) == pytest.approx(sorted(np.concatenate([wobble[:4], -wobble[:4]])), abs=1e-9)
        else:
            assert sorted(pools[i]) == pytest.approx(sorted(wobble if m == "a" else -wobble), abs=1e-9)


def test_the_reference_simulation_refits_the_leaderboard_model():
    """simulate_stats.simulate_references refits each table on the fitted model's design with a plain
    numpy WLS (stats.fgls_weights, stats.with_variances) instead of stats.fit_leaderboard's
    formula: on _spread_rows((1, 1, 1, 3, 3, 3)) with m0 as GRPO+TIS (the wide methods floored),
    that path gives the same scores, covariance and reference intervals to the digit."""
    import statsmodels.api as sm

    data = _spread_rows((1, 1, 1, 3, 3, 3)).replace({"method": {"m0": "grpo_tis"}})
    r = stats.fit_leaderboard(data)
    model = r["fit"].model
    frame = model.data.frame
    weights, _, *variances = stats.fgls_weights(model.exog, frame["y"].to_numpy(), frame["N"].to_numpy(),
                                                frame["method"].to_numpy(), by_method=True)
    assert (variances[-1] > 1).any()
    f = stats.with_variances(sm.WLS(frame["y"].to_numpy(), pd.DataFrame(model.exog, columns=model.exog_names),
                                    weights=weights).fit(), *variances)
    score_l, est, cov, _ = stats.scores(f, r["methods"])
    assert est == pytest.approx([r["score"][m][0] for m in r["methods"]], abs=1e-9)
    assert cov == pytest.approx(stats.scores(r["fit"], r["methods"])[2], rel=1e-9)
    vs = stats.reference_family(f, r["methods"], score_l, cov, np.random.default_rng(stats.DRAW_SEED))["vs"]
    for m, v in r["vs"]["grpo_tis"].items():
        assert vs["grpo_tis"][m] == pytest.approx(v, rel=1e-9, abs=1e-12)
    compared = stats.tiers(r["methods"], est, cov, lambda i, j: stats.contrast_df(f, score_l[i] - score_l[j]))
    assert compared["tiers"] == r["tiers"] and compared["rank"] == r["rank"]
    assert compared["pairs"] == pytest.approx(r["pairs"], rel=1e-9)


def test_the_reference_simulation_finds_every_rank_where_the_methods_lie_far_apart():
    """simulate_stats.simulate_references on four methods 10 points apart (noise SD 1, 6 seeds): no
    simulated table can leave a true rank outside its rank interval or its percentile one (both
    counted), and every share the bench prints is one of its tables."""
    from lab import simulate_stats

    rng = np.random.default_rng(0)
    names = ["grpo_tis", "m1", "m2", "m3"]
    data = _frame([(m, n, s, "P", (50 if n == 0 else 40 - 10 * i) + rng.standard_normal())
                   for i, m in enumerate(names) for n in DELAYS for s in range(6)])
    module_own = (stats.DRAWS, stats.OWN_VARIANCE_FLOOR)
    out = simulate_stats.simulate_references(data, reps=3, seed=1, draws=2000, own_floor=False)
    assert out["tables"] == 3 and out["reference"] == "grpo_tis"
    assert out["rank_cover"] == out["percentile_cover"] == 1.0
    assert out["rank_worst"][1] == out["percentile_worst"][1] == 0 and out["percentile_miss_mean"] == 0
    assert all(0 <= out[k] <= 1 for k in ("score_cover", "wide_cover", "reference_cover"))
    assert (stats.DRAWS, stats.OWN_VARIANCE_FLOOR) == module_own  # its settings are its own, not the module's


def test_model_checks_residual_shape_by_hand():
    """The balanced design (_shifted_rows, no shift): each run's standardized residual is its
    wobble (1, -1, 2, -2) over sqrt(2.5) (its residual over sigma[N] = scale sqrt(20 / 3), times
    1 / sqrt(1 - 5/8)); at every N: eight runs, skew 0, excess kurtosis (1 + 16) / 2 / 2.5^2 - 3
    = -1.64, none beyond 2; one path, so no processor check."""
    checks = stats.model_checks(stats.fit_leaderboard(_shifted_rows((0, 0, 0, 0))))
    assert checks["path_by_method"] is None
    for n in DELAYS:
        v = checks["residuals"][n]
        assert v["runs"] == 8 and v["beyond_2"] == 0
        assert v["skew"] == pytest.approx(0, abs=1e-9)
        assert v["excess_kurtosis"] == pytest.approx(8.5 / 6.25 - 3, rel=1e-9)


def test_model_checks_find_a_processor_that_moves_one_row_only():
    """The balanced design with seeds 2-3 on a second path Q (the wobbles sum to 0 on each path;
    the seeds' blocks hold the path). Q moving both methods by +10 is a shift of those blocks:
    the shift per method and path explains nothing more (F = 0). Q moving method a alone by +10
    cannot be one shift for every row: F well above 1, p under 5%."""
    def rows(shift_b):
        data = _shifted_rows((0, 0, 0, 0))
        q = data["seed"] >= 2
        data.loc[q, "rounding_path"] = "Q"
        data.loc[q, "y"] += np.where(data.loc[q, "method"] == "a", 10.0, shift_b)
        return data
    alike = stats.model_checks(stats.fit_leaderboard(rows(10.0)))["path_by_method"]
    assert alike["df"] == 1 and alike["F"] == pytest.approx(0, abs=1e-9)
    apart = stats.model_checks(stats.fit_leaderboard(rows(0.0)))["path_by_method"]
    assert apart["df"] == 1 and apart["F"] > 5 and apart["p"] < 0.05


def test_max_t_distribution_of_one_difference_is_students_t():
    """With one difference, max |T| = |T|, T = Z / sqrt(chi2(df) / df): _max_t_cdf at Student's
    97.5% point is 0.95 (the chi-square integrated by quadrature, |Z| from 400,000 draws: Monte
    Carlo SE 0.0004), at every df and with none (the Normal's 1.96)."""
    max_z = np.sort(np.abs(np.random.default_rng(0).standard_normal(400_000)))
    for df in (3.0, 12.4, 57.0):
        assert stats._max_t_cdf(max_z, df)(scipy.stats.t.ppf(0.975, df)) == pytest.approx(0.95, abs=0.002)
        assert stats._max_t_cdf(max_z, df)(scipy.stats.t.ppf(0.995, df)) == pytest.approx(0.99, abs=0.001)
    assert stats._max_t_cdf(max_z, math.inf)(scipy.stats.norm.ppf(0.975)) == pytest.approx(0.95, abs=0.002)


def test_the_seed_paired_analysis_by_hand():
    """Method b's stale finals sit 5, 6, 7, 6 points above GRPO+TIS's at seeds 0-3 (any N: the
    seed's score is their mean over N = 8, 32, 128), and a seed 4 that b lacks at N = 128 is not
    paired: d = (5, 6, 7, 6), mean 6, SD sqrt(2/3), half-width t(0.975, 3) SD / 2, p of t = 6 /
    (SD / 2) on 3 df; the family holds this one difference, so Holm leaves p as it is."""
    shift = {0: 5.0, 1: 6.0, 2: 7.0, 3: 6.0, 4: 9.0}
    rows = [("grpo_tis", n, s, "P", 20.0 + n / 10 + s) for s in range(5) for n in DELAYS]
    rows += [("b", n, s, "P", 20.0 + n / 10 + s + shift[s]) for s in range(5) for n in DELAYS
             if not (s == 4 and n == 128)]
    got = stats.seed_paired(_frame(rows), ["b", "grpo_tis"])
    d, half, p, k = got["grpo_tis"]["b"]
    sd = math.sqrt(2 / 3)
    assert (d, k) == (pytest.approx(6.0), 4)
    assert half == pytest.approx(scipy.stats.t.ppf(0.975, 3) * sd / 2)
    assert p == pytest.approx(2 * scipy.stats.t.sf(6 / (sd / 2), 3))
    assert set(got) == {"grpo_tis"} and set(got["grpo_tis"]) == {"b"}


def test_a_score_is_shown_at_the_methods_own_runs_and_compared_at_the_average_path():
    """'z' ends at 0 in every stale run, all of them on path Q, which adds +6 to every run of the
    reference (run on P and Q alike): path effects P -3, Q +3. At the average path z's score is
    -3, off the accuracy scale; shown, it is the mean of its own runs, 0, and its drop the same
    less its own N = 0 runs (41). The comparison stays at the average path: z - grpo_tis = -3 - 23."""
    rows = _reference_on_two_paths(lambda n, seed, k: ("z", n, seed, "Q", 41.0 if n == 0 else 0.0))
    r = stats.fit_leaderboard(_frame(rows))
    assert r["score_at_average"]["z"][0] == pytest.approx(-3, abs=0.05)
    assert r["score"]["z"][0] == pytest.approx(0, abs=1e-9)
    assert r["drop"]["z"][0] == pytest.approx(-41, abs=1e-9)
    assert r["score"]["grpo_tis"][0] == pytest.approx(23, abs=0.05)  # half its runs on Q
    assert r["vs"]["grpo_tis"]["z"][0] == pytest.approx(-3 - 23, abs=0.05)


def test_copies_at_n0_share_one_cell_and_count_once():
    """At N = 0, 'b' is 'a' run for run (the same computation on-policy: same rewards, same final
    accuracy at every seed); 'c' matches 'a' at seed 0 only, so it is another computation. a and b
    share one N = 0 cell fitted on a's three runs: the fit is the one without b's N = 0 runs (its
    SD at N = 0 and every cell), while b keeps that cell as its own, its drop included; c keeps
    its own cell and its seed-0 run counts as it is."""
    rows, wobble = [], (1.0, -1.0, 0.5)
    for s in range(3):
        rows += [("a", 0, s, "P", 50 + wobble[s], f"t{s}"), ("b", 0, s, "P", 50 + wobble[s], f"t{s}"),
                 ("c", 0, s, "P", 50 + wobble[s] if s == 0 else 47 + 2 * s, f"t{s}" if s == 0 else f"c{s}")]
        for k, n in enumerate(DELAYS[1:]):
            rows += [(m, n, s, "P", base - 3 * k + wobble[(s + j) % 3], f"{m}{n}{s}")
                     for j, (m, base) in enumerate((("a", 40), ("b", 30), ("c", 20)))]
    data = pd.DataFrame(rows, columns=["method", "N", "seed", "rounding_path", "y", "trajectory"])
    r = stats.fit_leaderboard(data)
    assert r["shared"] == {"a = b": 3} and (r["n_runs"], r["n_fitted"]) == (36, 33)
    alone = stats.fit_leaderboard(data[~((data["method"] == "b") & (data["N"] == 0))])
    assert r["sigma"][0] == pytest.approx(alone["sigma"][0], rel=1e-9)
    assert r["df"] == alone["df"]
    assert r["cell"][("a", 0)] == pytest.approx(alone["cell"][("a", 0)], rel=1e-9)
    assert r["cell"][("b", 0)] == r["cell"][("a", 0)]
    assert r["drop"]["b"][0] == pytest.approx(r["score"]["b"][0] - (50 + sum(wobble) / 3), abs=1e-9)
    assert r["cell"][("c", 0)][0] == pytest.approx((51 + 49 + 51) / 3, abs=1e-9)


def _drift_frames(off: float):
    """Two step sizes, seeds 0-3 sharing a shift per seed (eps) at every N. Fitted side: N 0, 2, 8
    at K3 1e-3 and 1e-2, drop -10 (log10 K3 + 3): 0 and -10. Test side: N 0 and 8 at K3 3e-3
    (inside), the same line, 'off' `off` points above it; 'z' at 0% in every stale run."""
    eps, rows = (0.3, -0.2, 0.1, -0.25), []
    for s, e in enumerate(eps):
        for m in ("on", "off", "z"):
            rows.append(("A", m, 0, s, 50 + e, 1e-9))
            rows += [("A", m, n, s, 0.0 if m == "z" else 50 + e - 10 * (math.log10(k) + 3), k)
                     for n, k in ((2, 1e-3), (8, 1e-2))]
            rows.append(("B", m, 0, s, 40 + e, 1e-9))
            rows.append(("B", m, 8, s, 0.0 if m == "z" else 40 + e - 10 * (math.log10(3e-3) + 3) + off * (m == "off"), 3e-3))
    frame = pd.DataFrame(rows, columns=["lr", "method", "N", "seed", "y", "drift"])
    return frame[frame["lr"] == "A"], frame[frame["lr"] == "B"]


def test_the_preregistered_drift_test_resamples_seeds_and_excludes_the_floor():
    """A row at 0% in every stale run at both steps is excluded (the floor rule); a draw of every
    seed once gives drift_prediction's errors; on the line every draw's error is 0 (to rounding), 10
    points off it every draw's is 10, so its p is the smallest the draws allow, 2 / (draws + 1),
    doubled by Holm over the two methods."""
    fit, test = _drift_frames(10.0)
    assert stats.at_the_floor(fit, test) == ["z"] and stats.at_the_floor(fit, test.assign(y=test["y"] + 6)) == []
    fit, test = fit[fit["method"] != "z"], test[test["method"] != "z"]
    exact = stats.drift_prediction(fit, test)["inside"]["methods"]
    assert exact["off"]["error"] == pytest.approx(10, abs=1e-9) and exact["on"]["error"] == pytest.approx(0, abs=1e-9)
    once = stats.drift_bootstrap(fit, test, counts=np.ones((1, 4)))
    assert {m: v["error"] for m, v in once.items()} == {m: v["error"] for m, v in exact.items()}
    boot = stats.drift_bootstrap(fit, test, draws=200)
    assert boot["off"]["p"] == pytest.approx(2 / 201) and boot["off"]["p_holm"] == pytest.approx(4 / 201)
    assert boot["off"]["se"] == pytest.approx(0, abs=1e-9) and boot["on"]["se"] == pytest.approx(0, abs=1e-9)
