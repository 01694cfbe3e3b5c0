"""Fits -> Markdown: the text of the tables lab/plot.py writes (numbers as the tables print
them, the leaderboard's table and the text under it: the model, the seed, the rounding paths and
the design, both analyses, the seeds a comparison needs; the lag map; the drift hypothesis's
tests), and `make row`'s summary of one row read back from a generated table. Text only: no
matplotlib."""
import math
import re
from collections import defaultdict

import pandas as pd

from lab import stats
from lab.reader import (LATE_EVALS, LATE_SPAN, base_accuracy, direction_arm, final_mean, last_fraction,
                        late_evaluations, leaderboard_data, mean, method, processor_kind, recorded_path,
                        row_label, run_mean)


def machines(runs: list) -> tuple:
    """(the line naming the machines behind a table, a warning or None). Counts runs per
    processor kind (a run resumed on another kind counts under each), then the library
    versions, matmul backends and samplers of their sessions and how many commits of the code
    they ran (each run names its own in run_info.json); runs without a
    run_info.json (made before it existed) are on an "unknown machine". The warning: the runs
    span several processor kinds, whose numbers agree only within the seed spread."""
    kinds, unknown = defaultdict(int), 0
    seen, code = defaultdict(set), set()
    for r in runs:
        if not r["sessions"]:
            unknown += 1
        for kind in {processor_kind(s) for s in r["sessions"]}:
            kinds[kind] += 1
        for s in r["sessions"]:
            for lib in ("torch", "vllm", "transformers"):
                seen[lib].add(s["versions"][lib] or "none")
            seen["matmul"].add(s["matmul"])
            seen["sampler"].add(s["sampler"])
            seen["threads"].add(str(s.get("torch_threads")))
            code.add((s["git"]["commit"], bool(s["git"]["dirty"])))
    where = [f"{n} on {kind}" for kind, n in sorted(kinds.items(), key=lambda kv: -kv[1])]
    where += [f"{unknown} on unknown machine (no run_info.json)"] if unknown else []
    used = [f"{key} {', '.join(sorted(values))}" for key, values in seen.items()]
    if code:
        dirty = sum(d for _, d in code)
        used.append(f"code at {len({c for c, _ in code})} commit(s)" + (f", {dirty} with local changes" if dirty else "")
                    + " (each run's in its run_info.json)")
    line = f"runs: {', '.join(where)}" + "".join(f"; {u}" for u in used)
    warning = None
    if len(kinds) > 1:
        warning = (f"warning: this table mixes {len(kinds)} processor kinds ({'; '.join(kinds)}): "
                   f"runs on different processors agree only within the seed spread")
    return line, warning


def seeds_note(runs: list) -> str:
    n = len({r["seed"] for r in runs})
    return f"{n} seed{'s' if n > 1 else ''}"


def delays_note(runs: list) -> str:
    return ", ".join(map(str, sorted({r["delay"] for r in runs})))


def fmt(values: list, scale: float = 100) -> str:
    """'mean (min-max)' over seeds, or the one value: percentages to 0.1, others to 4 digits."""
    spec = ".1f" if scale == 100 else ".4g"
    if len(values) == 1:
        return f"{scale * values[0]:{spec}}"
    return f"{scale * mean(values):{spec}} ({scale * min(values):{spec}}-{scale * max(values):{spec}})"


LEADERBOARD_AT = [("k3", 1e3, "K3 x1e-3"), ("is_chi2_token", 1, "is_chi2_token"),
                  ("is_masked_frac", 100, "is_masked_frac (%)")]
POWER_DELTAS = (2, 3, 5, 8, 10)  # differences (points) the power table prints seeds for
LADDER_SEEDS = 10  # rows whose tier more seeds can settle get this many (the seed ladder)
ANCHORS = ("m2po", "vespo", "vcpo", "gepo")  # published with a staleness claim (lab/docs/leaderboard.md)


def seed_scores(cells: dict) -> dict:
    """{seed: mean over stats.STALE_DELAYS of that seed's final accuracy} for the seeds that
    have every one of those N; cells: {delay: {seed: final}}."""
    seeds = set.intersection(*(set(cells.get(d, {})) for d in stats.STALE_DELAYS))
    return {k: mean([cells[d][k] for d in stats.STALE_DELAYS]) for k in sorted(seeds)}


def partial_score(cells: dict):
    """The mean final accuracy over the stats.STALE_DELAYS cells a method has, any seed (None
    if none): a method without a score ranks and is drawn by this."""
    have = [v for d in stats.STALE_DELAYS for v in cells.get(d, {}).values()]
    return mean(have) if have else None


def pm(m: float, half, scale: float = 100) -> str:
    return f"{round(scale * m, 1) + 0.0:.1f}" + (f" ± {scale * half:.1f}" if half is not None else "")  # no "-0.0"


def signed(x: float) -> str:
    """x to one decimal with its sign, "+0.0" for what rounds to zero (no "-0.0" from a rounding-
    level negative)."""
    return f"{round(x, 1) + 0.0:+.1f}"


def late_measure_lines(runs: list) -> list:
    """The late-evaluation measure against the final evaluation on the same runs: per N and over
    all, the pooled within-cell SD (cells: method x N x rounding path with >= 2 such runs)."""
    frame = pd.DataFrame([{"method": method(r), "N": r["delay"], "rounding_path": recorded_path(r), "all": "all",
                           "final": both[0], "late": both[1]} for r in runs if (both := late_evaluations(r))])
    if frame.empty:
        return []
    cell = ["method", "N", "rounding_path"]
    frame = frame[frame.groupby(cell)["final"].transform("count") > 1]
    if frame.empty:
        return []
    sd = {m: {**stats.within_cell_sd(frame.assign(y=frame[m]), cell),
              **stats.within_cell_sd(frame.assign(y=frame[m]), cell, by="all")} for m in ("final", "late")}
    lines = ["", f"**A lower-noise final measure?** The final evaluation against the mean of the last "
             f"{LATE_EVALS} evaluations, on the same runs (those evaluated at least {LATE_EVALS} times in "
             f"their last {LATE_SPAN:.0%} of updates): pooled within-cell SD over seeds (cells: method x "
             f"N x rounding path with two or more runs).", "",
             "| N | cells | runs | SD of the final evaluation | SD of the late mean | ratio |",
             "| --- | --- | --- | --- | --- | --- |"]
    for n in sorted(frame["N"].unique()) + ["all"]:
        runs_n = frame if n == "all" else frame[frame["N"] == n]
        final_sd, late_sd = sd["final"][n], sd["late"][n]
        lines.append(f"| {n} | {runs_n.groupby(cell).ngroups} | {len(runs_n)} | {100 * final_sd:.2f} | "
                     f"{100 * late_sd:.2f} | {late_sd / final_sd:.2f} |")
    ratio = (sd["late"]["all"] / sd["final"]["all"]) ** 2
    lines += ["", f"Over all cells the late mean's variance is {ratio:.2f} of the final evaluation's: a run "
              f"measured by it is worth {1 / ratio:.2f} measured by the final evaluation."]
    return lines


def seed_lines(seed: dict) -> list:
    """The seed's paragraph under the leaderboard: its test, effects, blocks and how far it moves
    the scores (stats' result["seed"])."""
    lines = []
    if seed["F"] is not None:
        kept = ("kept as the design's block whatever its test says" if seed["fitted"]
                else "left out: not estimable apart from the rounding path")
        lines += ["", f"**The seed** ({kept}): the model with a fixed seed term against "
                  f"the model without it, F = {seed['F']:.2f}, p = {seed['p']:.2g}; variance component "
                  f"(moments) SD {seed['tau']:.2f} points."]
        if seed["effects"]:
            lines[-1] += " Effects (points, 95% t" + (", means over N" if (seed["per_n"] or {}).get("fitted") else "") \
                + "): " + ", ".join(f"seed {lvl} {signed(e)} ± {h:.1f}" for lvl, (e, h) in seed["effects"].items()) + "."
        if seed["per_n"] and seed["per_n"]["fitted"]:
            lines[-1] += (" One shift per seed and N (the sweep's block), kept too, against one per seed: "
                          f"F = {seed['per_n']['F']:.2f}, p = {seed['per_n']['p']:.2g}.")
        elif seed["per_n"]:
            lines[-1] += (" One shift per seed and N (the sweep's block) is not estimable apart from "
                          "the path (a seed lacks an N, or a block ran alone on its kind): one per seed.")
        if seed["moves"]:
            lines[-1] += (f" Against the model without the seed, the scores move by {round(seed['moves']['mean'], 2) + 0.0:+.2f} "
                          f"points on average and, apart from that common shift, by {seed['moves']['mean_apart']:.2f} "
                          f"on average, at most {seed['moves']['max_apart']:.2f}.")
    return lines


def path_design_lines(path: dict, data: pd.DataFrame, order: list, name) -> list:
    """The rounding paths' effects (stats' result["rounding_path"]) and the design: runs per method and
    path (from `data`, the model's runs)."""
    lines = measured_path_lines(data)
    counts = data["rounding_path"].value_counts()
    if path["effects"]:
        lines += ["", f"**Rounding path effects** (sum-to-zero, points, 95% t): F = {path['F']:.2f}, "
                  f"p = {path['p']:.2g}; variance component (moments) SD {path['tau']:.2f} points.", "",
                  "| path | runs | effect |", "| --- | --- | --- |"]
        lines += [f"| P{i + 1}: {lvl} | {counts[lvl]} | {pm(e / 100, h / 100)} |"
                  for i, (lvl, (e, h)) in enumerate(path["effects"].items())]
    if len(counts) > 1:
        design = pd.crosstab(data["method"], data["rounding_path"])
        design = design[list(path["effects"]) or design.columns]  # columns in the effects' P order
        named = (f"P1..P{len(counts)} as above" if path["effects"] else
                 "; ".join(f"P{i + 1}: {lvl}" for i, lvl in enumerate(design.columns)))
        lines += ["", f"**The design**: runs per method and rounding path ({named}).", "",
                  "| method | " + " | ".join(f"P{i + 1}" for i in range(len(counts))) + " |",
                  "| --- |" + " --- |" * len(counts)]
        lines += [f"| {name(m)} | " + " | ".join(map(str, design.loc[m])) + " |" for m in order if m in design.index]
        lines += confounding_lines(data, name)
    return lines


def measured_path_lines(data: pd.DataFrame) -> list:
    """How the rounding paths were measured (reader.measured_paths), from the model's runs: the
    recorded paths found to round alike and the groups of bit-identical runs that join them."""
    same = ["seed", "N", "trajectory", "y"]
    joined = data.groupby(same).filter(lambda g: g["recorded_path"].nunique() > 1)
    found = joined.groupby(same)["rounding_path"].first().value_counts()
    if found.empty:
        return []
    return ["", "**Rounding paths, measured**: recorded paths (processor kind, threads, matmul) whose runs "
            "of one seed and N are bit-identical (the same training reward at every update and the same final "
            "accuracy: methods that are the same computation on-policy, each made on its own machine) round alike and are one path: "
            + "; ".join(f"{p} ({n} such group{'s' if n > 1 else ''})" for p, n in found.items()) + "."]


def confounding_lines(data: pd.DataFrame, name) -> list:
    """What the rounding paths still confound: how many runs of the other rows share their seed,
    N and path with a run of every reference (compared with them inside one block), and the
    rows that share none (compared with the references only through the path term, which
    assumes a path moves every row alike)."""
    refs = [r for r in stats.REFERENCES if r in set(data["method"])]
    if not refs:
        return []
    block = lambda d: set(zip(d["seed"], d["N"], d["rounding_path"]))
    with_all = set.intersection(*(block(data[data["method"] == r]) for r in refs))
    others = data[~data["method"].isin(refs)]
    inside = [(s, n, p) in with_all for s, n, p in zip(others["seed"], others["N"], others["rounding_path"])]
    shares = others.assign(inside=inside).groupby("method")["inside"].mean()
    none = [m for m, v in shares.items() if v == 0]
    return ["", f"**What the paths confound**: {sum(inside)} of the other rows' {len(others)} runs share their "
            f"seed, N and rounding path with a run of every reference (compared with them inside one "
            f"block); the other {len(others) - sum(inside)} meet the references only through the path "
            f"term, which assumes a path moves every row alike"
            + (f". Rows with no run inside such a block: {', '.join(name(m) for m in none)}." if none else ".")]


def model_lines(result: dict, data: pd.DataFrame, order: list, delays: list) -> list:
    """The generated summary under the leaderboard's table: the model, its variance, the
    rounding-path and seed effects, the design (method x path, from `data`, the model's runs),
    the anchors' cells and the seeds comparisons need."""
    fit, sigma = result["fit"], result["sigma"]
    name = row_label
    lines = ["", "**The model** (`lab/stats.py`; statsmodels WLS, feasible GLS): final mean@k (%) = cell mean "
             "(method x N) + rounding path" + (" + seed" if result["seed"].get("fitted") else "")
             + (" + seed x N" if (result["seed"].get("per_n") or {}).get("fitted") else "")
             + " + error, the path" + (" and the seed" if result["seed"].get("fitted") else "")
             + " fixed with sum-to-zero coding"
             + (" (each seed's block ran on one rounding path: its shift holds the path's, so the path "
                "has no term of its own)" if result["seed"].get("fitted") and not result["rounding_path"]["effects"]
                and data["rounding_path"].nunique() > 1 else "") + ", "
             "error SD per N: " + ", ".join(f"N = {n}: {s:.2f}" for n, s in sigma.items())
             + f"; {result['n_runs']} runs"
             + (f" ({result['n_fitted']} fitted: a copy counts once, below)" if result["n_fitted"] < result["n_runs"] else "")
             + f", {len(fit.params)} parameters, {result['df']:.0f} residual degrees of freedom."]
    spread = {m: result["spread"][m] for m in result["methods"]}
    if math.isfinite(result["prior_df"]):
        lines[-1] += (" At N > 0 each method's error SD is the N's times its spread (the SD per N is "
                      "that of a method of spread 1), moderated by empirical Bayes (a scaled inverse "
                      f"chi-square prior fitted to the methods' variances: prior df {result['prior_df']:.1f}): "
                      + ", ".join(f"{name(m)} {v:.2f}" for m, v in sorted(spread.items(), key=lambda t: (-t[1], t[0])))
                      + ". The intervals and tests never take a method's variance below its own "
                      "unmoderated one (moderation pulls a truly wide row toward the typical one); "
                      + ("the own SD is the larger, by the factor given, for " + ", ".join(
                          f"{name(m)} x{v:.2f}" for m, v in sorted(result["floored"].items(), key=lambda t: (-t[1], t[0])))
                         + ", whose variances then rest on their own degrees of freedom"
                         if result["floored"] else "no method's own SD is the larger")
                      + ". Every t interval and test takes Satterthwaite's degrees of freedom from "
                      "the variances it rests on.")
    else:
        lines[-1] += (" A spread per method at N > 0 was fitted and none found (the methods' variances "
                      "spread no more than their own degrees of freedom give: prior df infinite); t "
                      "intervals and tests take Satterthwaite's degrees of freedom from the SDs per N.")
    lev = result["levene_n"]
    if lev is not None:
        lines.append(f"Levene across N: W = {lev.statistic:.2f}, p = {lev.pvalue:.2g}; across methods "
                     "within each N: " + ", ".join(f"N = {n}: p = {t.pvalue:.2g}"
                                                   for n, t in result["levene_methods"].items()) + ".")
    checks = stats.model_checks(result)
    inter = checks["path_by_method"]
    lines.append("The model's form: " + (
        f"a shift per method and rounding path on top of the one per path, F = {inter['F']:.2f} on "
        f"{inter['df']} df, p = {inter['p']:.2g} (one test of every row at once: "
        + ("below 5%, so the paths move the rows unlike, against the model's one shift per path); "
           if inter["p"] < 0.05 else "not below 5%, no evidence that a path moves the rows unlike); ")
        if inter else "") + "standardized residuals per N (Normal: skew 0, excess kurtosis 0, 4.6% "
        "beyond 2 SD): " + "; ".join(
            f"N = {n}: {v['runs']} runs, skew {v['skew']:+.2f}, excess kurtosis {v['excess_kurtosis']:+.2f}, "
            f"{100 * v['beyond_2']:.1f}% beyond 2, Shapiro-Wilk p {v['shapiro_p']:.2g}"
            for n, v in checks["residuals"].items()) + ".")
    on_policy = data[data["N"] == 0]
    distinct = on_policy.groupby(["seed", "rounding_path", "y", "trajectory"]).ngroups
    if distinct < len(on_policy):
        shared = result["shared"]
        left = len(on_policy) - distinct - (result["n_runs"] - result["n_fitted"])
        lines.append(f"At N = 0 the {len(on_policy)} runs hold {distinct} distinct ones: methods that "
                     "are the same computation on-policy give the same run at a seed and path. The model "
                     "counts each copy once: methods whose N = 0 runs are the same at every seed and path "
                     "they share have one N = 0 cell, fitted on their distinct runs (stats.shared_copies; "
                     "each method's N = 0 interval and drop are that cell's): "
                     + "; ".join(f"{' = '.join(name(m) for m in c.split(' = '))} ({n} runs)" for c, n in shared.items())
                     + "." + (f" {left} copies of methods that differ at some other seed (two computations "
                              "that coincide there) still count twice." if left else ""))
    if not result["methods"]:
        return lines + ["", "No method has runs at every N of the stale accuracy yet (N = "
                        + ", ".join(map(str, stats.STALE_DELAYS)) + "): scores, tiers, the "
                        "comparisons and the seeds they need come when one does. Cells are mean "
                        "(min-max) over seeds of the runs themselves, in %."]
    (df_lo, df_hi), (crit_hi, crit_lo) = result.get("vs_df", (math.nan,) * 2), result.get("vs_critical", (math.nan,) * 2)
    lines.append("Stale accuracy: the model's mean over N = " + ", ".join(map(str, stats.STALE_DELAYS))
                 + " at the method's own runs (their rounding paths and seeds: the mean of its own final "
                 "accuracies, so on the accuracy scale), 95% t interval (for these seeds: a shift that another set "
                 "of seeds would give every row alike is not in it; the seed's SD is below); drop: score minus the same "
                 "at the method's own N = 0 runs; the comparisons (vs a reference, tiers, ranks) are at one point for "
                 "every method, the average seed and rounding path, so that a path's shift is not read as a "
                 "method's; vs a reference: simultaneous 95% intervals over the "
                 f"{result.get('vs_family', 0)} differences to {', '.join(name(r) for r in result['vs'])}"
                 f" (max-|t|, each difference on its own degrees of freedom, {df_lo:.0f}-{df_hi:.0f}: "
                 f"critical values {crit_hi:.2f}-{crit_lo:.2f}), * where "
                 "the interval excludes 0; tier: methods sharing a letter cannot be told apart "
                 f"(Holm over all {len(result['pairs'])} pairs, family-wise 5%); rank: from 1 + the methods "
                 "the tiers put above to the count less those they put below (simultaneous 95%: every "
                 "true rank inside at once unless a pair is split wrongly). Cells are mean (min-max) over "
                 "seeds of the runs themselves, in %.")
    lines += seed_lines(result["seed"]) + path_design_lines(result["rounding_path"], data, order, name)
    anchors = [m for m in ANCHORS if all((m, n) in result["cell"] for n in delays)]
    if anchors:
        lines += ["", "**The anchors' cells** (the study's four anchors, corrections published with a staleness claim; "
                  "the model's cell means, 95% t, and the drop from N = 0 to the largest N):", "",
                  "| method | " + " | ".join(f"N={n}" for n in delays) + f" | N=0 - N={delays[-1]} |",
                  "| --- |" + " --- |" * (len(delays) + 1)]
        for m in anchors:
            drop = stats.estimate(result["fit"], {(m, 0): 1, (m, delays[-1]): -1})
            lines.append(f"| {name(m)} | " + " | ".join(pm(*(v / 100 for v in result["cell"][(m, n)]))
                                                          for n in delays) + f" | {pm(*(v / 100 for v in drop))} |")
    sd, pairs = result["sd_score"], max(1, len(result["pairs"]))
    vs = max(1, result.get("vs_family", 1))
    lines += ["", f"**Seeds a comparison needs** (per row, {stats.POWER:.0%} power, two-sided, "
              f"Bonferroni over the family, a normal approximation; per-seed SD of a score {sd:.2f} points "
              "for a pair of spread 1: a pair's scales with the root mean square of its two spreads):", "",
              "| difference (points) | " + " | ".join(map(str, POWER_DELTAS)) + " |",
              "| --- |" + " --- |" * len(POWER_DELTAS),
              f"| tiers ({pairs} pairs) | " + " | ".join(str(stats.seeds_needed(d, sd, pairs))
                                                         for d in POWER_DELTAS) + " |",
              f"| vs the references ({vs} differences) | " + " | ".join(
                  str(stats.seeds_needed(d, sd, vs)) for d in POWER_DELTAS) + " |"]
    touching = stats.touching_rows(result, LADDER_SEEDS)
    lines += ["", f"Rows in a pair the tiers leave open that {LADDER_SEEDS} seeds per row would settle "
              f"at its observed difference (the fewest seeds per row that would, from the pair's own standard "
              f"error and degrees of freedom scaled to more seeds, with t quantiles): "
              + (", ".join(f"{name(m)} {n}" for m, n in touching.items()) or "none") + "."]
    return lines


def within_tier_lines(result: dict, name) -> list:
    """The pairs that share a tier letter yet differ at the unadjusted 5% (each pair's own t test,
    not family-wise: the tiers are the family-wise statement), the higher first, with the score
    difference and the unadjusted p."""
    same = [(a, b) for (a, b) in result.get("pairs_raw", {})
            if set(result["tiers"].get(a, "")) & set(result["tiers"].get(b, ""))]
    if not same:
        return []
    apart = []
    for a, b in same:
        p = result["pairs_raw"][(a, b)]
        if p < stats.ALPHA:
            avg = result["score_at_average"]
            hi, lo = (a, b) if avg[a][0] > avg[b][0] else (b, a)
            apart.append((p, f"{name(hi)} above {name(lo)} ({signed(avg[hi][0] - avg[lo][0])}, "
                             f"p {p:.2g})"))
    return ["", f"**Within a tier** (unadjusted: each pair's own t test at 5%, not family-wise): of the "
            f"{len(same)} pairs that share a letter, {len(apart)} differ individually"
            + (": " + "; ".join(text for _, text in sorted(apart)) if apart else "") + "."]


def paired_lines(result: dict, ranked: list, name) -> list:
    """The reference differences by the second analysis (stats.seed_paired) beside the pooled
    model's: how many agree (common_verdict: apart from 0 in both with one sign, or in neither),
    those that do not (model-dependent, both numbers), and every paired difference."""
    paired, pooled = result.get("paired", {}), result["vs"]
    both = [(r, m) for r in paired for m in paired[r] if m in pooled.get(r, {})]
    if not both:
        return []
    apart, level, split = 0, 0, []
    for r, m in both:
        verdict = common_verdict(pooled[r][m], paired[r][m])
        if verdict == "model-dependent":
            split.append(f"{name(m)} vs {name(r)}: pooled {signed(pooled[r][m][0])} ± {pooled[r][m][1]:.1f}"
                         f"{' *' if pooled[r][m][2] < stats.ALPHA else ''}, paired {signed(paired[r][m][0])} ± "
                         f"{paired[r][m][1]:.1f} (Holm p {paired[r][m][2]:.2g})")
        else:
            apart, level = apart + (verdict != "level"), level + (verdict == "level")
    refs = list(paired)
    lines = ["", f"**A second analysis** (seed-paired: per method and reference, the differences of the "
             f"score seed by seed over the seeds both ran, a t test on them, Holm over the {len(both)}; no "
             f"path, variance or shrinkage model): of the {len(both)} reference differences, {apart} are apart "
             f"from 0 in both analyses with one sign, {level} in neither, and {len(split)} in one only "
             f"(model-dependent)" + (": " + "; ".join(split) if split else "") + ".", "",
             "| method | " + " | ".join(f"vs {name(r)} (paired, 95% t; Holm p)" for r in refs) + " | seeds |",
             "| --- |" + " --- |" * (len(refs) + 1)]
    for m in ranked:
        cells = [paired[r].get(m) for r in refs]
        if not any(cells):
            continue
        seeds = max(c[3] for c in cells if c)
        lines.append(f"| {name(m)} | " + " | ".join(
            f"{signed(c[0])} ± {c[1]:.1f} ({c[2]:.2g})" if c else "" for c in cells) + f" | {seeds} |")
    return lines


def row_key(loss: str, settings: list) -> str:
    """The key `method` gives the runs of objective `loss` at `settings` (["key=value", ...], read
    and checked as `make row` reads them: sweep.row_sweep)."""
    import sweep  # the loop's runner: read here only, for the settings' one reader
    grid = sweep.row_sweep(loss, settings)["grid"]
    args = {k.removeprefix("loss_args."): v[0] for k, v in grid.items() if k.startswith("loss_args.")}
    return method({"loss": loss, "cfg": {"loss_args": args}})


def table_rows(block: str) -> tuple:
    """(the header's cells, [each body line's cells]) of a Markdown table (its lines: header,
    separator, body), empty cells kept in place (a row part-way up the ladder has no tier yet)."""
    cells = lambda line: [c.strip() for c in line.strip()[1:-1].split("|")]
    header, _, *body = block.strip().splitlines()
    return cells(header), [cells(line) for line in body]


def row_summary(table: str, key: str) -> list:
    """The lines of a generated leaderboard table (its .md) about one row (key as `method`
    makes it): every column of its line, its seed-paired differences, and the same-tier pairs it
    is in that differ unadjusted; what `make row` prints at its end."""
    label = row_label(key)
    with open(table) as f:
        text = f.read()
    columns, body = table_rows(text.split("\n\n")[1])
    mine = [cells for cells in body if cells[1] == label]
    if not mine:
        return [f"{label} ({key}) has no line in {table} yet: its runs have not landed there"]
    cells = mine[0]
    out = [f"{label} ({key}), from {table}:"] + [f"  {c}: {v}" for c, v in zip(columns, cells) if c != "method"]
    paired = text.split("**A second analysis**")
    if len(paired) > 1:
        section = paired[1].split("\n\n")[1].splitlines()
        out += [f"  seed-paired: {l}" for l in section[2:] if l.startswith(f"| {label} |")]
    within = re.search(r"\*\*Within a tier\*\*.*", text)
    if within:
        out += [f"  within its tier (unadjusted): {p}" for p in within.group(0).split(": ", 1)[-1].split("; ")
                if f"{label} above" in p or f"above {label} (" in p]
    return out


def short_table(result: dict, ranked: list, cells: dict, delays: list, name) -> list:
    """The leaderboard on one screen: per row its tier, rank interval, stale accuracy with its
    95% interval, drop from N = 0, and its mean final accuracy per N (over seeds, %)."""
    lines = ["| row | tier | rank (95%) | score (95%) | drop from N=0 | " + " / ".join(f"N={d}" for d in delays)
             + " |", "| --- | --- | --- | --- | --- | --- |"]
    for m in ranked:
        score, rank, drop = result["score"].get(m), result["rank"].get(m), result["drop"].get(m)
        means = " / ".join(f"{100 * mean(list(cells[m][d].values())):.1f}" if cells[m][d] else "-" for d in delays)
        lines.append(f"| {name(m)} | {result['tiers'].get(m, '')} | {f'{rank[0]}-{rank[1]}' if rank else ''} | "
                     f"{pm(score[0] / 100, score[1] / 100) if score else ''} | "
                     f"{pm(drop[0] / 100, drop[1] / 100) if drop else ''} | {means} |")
    return ["The leaderboard on one screen (generated by `make tables`; every column, the model and both "
            "analyses: the full table beside it). Score: mean over N = 8, 32, 128; tiers: Holm, family-wise "
            "5%; the last column: mean final accuracy per N over seeds (%).", ""] + lines


def ladder_n(bound, delays: list):
    """The smallest stale N of the ladder at or above `bound` (the first stale N for an unbounded
    or zero lag), None past the ladder's largest."""
    if bound == 0:
        return 0 if 0 in delays else None
    stale = [d for d in delays if d > 0]
    return next((d for d in stale if d >= (bound or 1)), None)


def lag_map_lines(frameworks: list, result: dict, cells: dict, delays: list) -> list:
    """The lag map: per framework and row (lab/docs/frameworks.yaml) its staleness knob, the lag a
    batch has under it, the nearest way to hold it exactly, its row, and the leaderboard at the
    ladder's N for its lag bound and at four times that N: the row's tier and stale accuracy
    (the pooled model's, as the leaderboard table prints them) and its final accuracy per N
    (mean (min-max) over seeds, as there)."""
    lines = ["| framework | staleness knob (default) | lag a batch has | held exactly by | row | tier | "
             "stale accuracy (95%) | at its lag's N | at 4x that N |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for fw in frameworks:
        first = ladder_n(fw["bound"], delays)
        later = ladder_n(4 * first, delays) if first else None  # a lag of 0 has no "four times"
        for key, what in fw["rows"].items():
            head = f"| {fw['name']} | {fw['knob']} | {fw['lag']} | {fw['exact']} | {row_label(key)}: {what} | "
            if key not in cells or not any(cells[key].values()):
                lines.append(head + "not on the ladder yet | | | |")
                continue
            score = result["score"].get(key)
            cell = lambda d: (f"N={d}: {fmt(list(cells[key][d].values()))}" if d is not None and cells[key].get(d)
                              else "")
            lines.append(head + f"{result['tiers'].get(key, '')} | "
                         f"{pm(score[0] / 100, score[1] / 100) if score else ''} | {cell(first)} | {cell(later)} |")
    return lines


# preregistration section 3's hypothesis: {a trainer's row: the reference it sits with (level by the
# common rule at lr 2e-4)}: a ratio to the learner recomputed before the update leaves no correction
# at one step per batch (GRPO); a bound against the sampler is PPO against the sampler's
FRAMEWORK_HYPOTHESIS = {"grpo_grpo_agg-seq_mean": "grpo",
                        "k3_rs_k3_rs_threshold-1e+30": "grpo_grpo_anchor-behavior",
                        "grpo_adv_eps-1e-08_adv_std-population_grpo_anchor-behavior": "grpo_grpo_anchor-behavior"}
FRAMEWORK_SEEDS = tuple(range(10))  # the grid's seeds: the reading waits for them


def framework_hypothesis_lines(result: dict, cells: dict) -> list:
    """Preregistration section 3's hypothesis, row by row (FRAMEWORK_HYPOTHESIS): the common
    rule's verdict (common_verdict) of the row against the reference it is said to sit with, with
    both analyses' numbers: "holds" where level, "refuted" where above or below, "undecided"
    where model-dependent; provisional until the row has FRAMEWORK_SEEDS at every stale N.
    `cells`: {method: {N: {seed: final}}}, as the leaderboard's."""
    head = ("**Preregistration section 3's hypothesis** (lab/docs/preregistration.md: a trainer whose "
            "default takes the ratio to the learner recomputed before the update sits with GRPO, one "
            "whose default bounds the update against the sampler sits with PPO against the sampler: "
            "level with it by the common rule; refuted for a row above or below it. AReaL's recipe "
            f"is the GRPO row itself. Read at seeds {FRAMEWORK_SEEDS[0]}-{FRAMEWORK_SEEDS[-1]}; "
            "provisional before):")
    lines = ["", head, ""]
    for row, ref in FRAMEWORK_HYPOTHESIS.items():
        label = f"{row_label(row)} with {row_label(ref)}"
        pooled = result["vs"].get(ref, {}).get(row)
        if pooled is None:
            lines.append(f"- {label}: not scored yet.")
            continue
        paired = result.get("paired", {}).get(ref, {}).get(row)
        verdict = common_verdict(pooled, paired)
        said = {"level": "holds", "above": "refuted (above)", "below": "refuted (below)"}.get(verdict, "undecided")
        seeds = min(len(cells[row].get(n, {})) for n in stats.STALE_DELAYS)
        done = all(set(FRAMEWORK_SEEDS) <= set(cells[row].get(n, {})) for n in stats.STALE_DELAYS)
        lines.append(f"- {label}: {said}{'' if done else f', provisional ({seeds} seeds at the fewest stale N)'}: "
                     f"pooled {signed(pooled[0])} ± {pooled[1]:.1f} (adjusted p {pooled[2]:.2g}), paired "
                     + (f"{signed(paired[0])} ± {paired[1]:.1f} (Holm p {paired[2]:.2g}, {paired[3]} seeds)."
                        if paired else "none (fewer than 3 common seeds)."))
    return lines


def leaderboard_lines(result: dict, ranked: list, cells: dict, groups: dict, delays: list, at_delay: int,
                      runs: list, data: pd.DataFrame) -> list:
    """The leaderboard's table from its fit (stats.fit_leaderboard's `result`), rows in `ranked`
    order: per method its tier letters, stale accuracy, rank interval, drop from N = 0,
    differences to the references (simultaneous 95%), seeds per N, final mean@k per N (`cells`:
    {method: {N: {seed: final}}}) and the diagnostics LEADERBOARD_AT at N = at_delay over the last
    10% of updates (`groups`: {(method, N): runs}); under it the tiers, both analyses, the base
    model, the model (model_lines, on `data`, the model's runs) and the late-evaluation measure."""
    order = list(cells)
    score = result["score"]
    refs = list(result["vs"])
    at = f"N={at_delay}"
    lines = ["| tier | method | stale accuracy (95%) | rank (95%) | drop from N=0 (95%) | "
             + "".join(f"vs {row_label(r)} (simultaneous 95%) | " for r in refs)
             + "seeds per N | " + " | ".join(f"N={d}" for d in delays) + " | "
             + " | ".join(f"{title} at {at}" for _, _, title in LEADERBOARD_AT) + " |",
             "| --- |" + " --- |" * (5 + len(refs) + len(delays) + len(LEADERBOARD_AT))]
    for name in ranked:
        label = row_label(name)
        scored = name in score
        rank = result["rank"].get(name)
        drop = result["drop"].get(name)
        vs = []
        for r in refs:
            d = result["vs"][r].get(name)
            vs.append(f"{signed(d[0])} ± {d[1]:.1f}{' *' if d[2] < stats.ALPHA else ''}" if d else "")
        diag = []
        for key, scale, _ in LEADERBOARD_AT:
            values = [last_fraction(r["rows"], key) for r in groups.get((name, at_delay), [])]
            diag.append(fmt(values, scale) if values and None not in values else "")
        lines.append(f"| {result['tiers'].get(name, '')} | {label} | "
                     f"{pm(score[name][0] / 100, score[name][1] / 100) if scored else ''} | "
                     f"{f'{rank[0]}-{rank[1]}' if rank else ''} | "
                     f"{pm(drop[0] / 100, drop[1] / 100) if drop else ''} | " + "".join(v + " | " for v in vs)
                     + "/".join(str(len(cells[name][d])) for d in delays) + " | "
                     + " | ".join(fmt(list(cells[name][d].values())) if cells[name][d] else ""
                                  for d in delays) + " | " + " | ".join(diag) + " |")
    letters = sorted({c for t in result["tiers"].values() for c in t}, key=stats.LETTERS.index)
    lines += [] if not letters else ["", "Tiers (methods that share a letter cannot be told apart; a method with several letters "
              "sits between tiers): " + "; ".join(
                  f"{c}: " + ", ".join(row_label(m) for m in ranked if c in result["tiers"].get(m, ""))
                  for c in letters) + "."]
    unscored = [row_label(m) for m in ranked if m not in score]
    lines += [] if not unscored else [
        "", f"Not yet scored (runs of fewer than {stats.MIN_SEEDS} seeds at one of N = "
        + ", ".join(map(str, stats.STALE_DELAYS)) + "; their cells are shown and fitted, and they take no "
        "part in the tiers, ranks and comparisons): " + ", ".join(unscored) + "."]
    lines += within_tier_lines(result, row_label) + paired_lines(result, ranked, row_label)
    base = base_accuracy(runs)
    if base:
        lines += ["", f"The base model (toy_base/ before any update: its evaluation at update 0, mean over "
                  f"the {len(base)} seeds' samples): {100 * mean(list(base.values())):.1f} "
                  f"({100 * min(base.values()):.1f}-{100 * max(base.values()):.1f})."]
    return lines + drift_accuracy_lines(groups) + model_lines(result, data, order, delays) + late_measure_lines(runs)


def drift_accuracy_lines(groups: dict) -> list:
    """Per stale N, Spearman's rho between the runs' final accuracy and the drift their batches
    carried (its mean K3, reader.run_mean), over every run at that N that logged one (`groups`: {(method, N): runs})."""
    from scipy.stats import spearmanr
    per_n = defaultdict(list)
    for (_, n), rs in groups.items():
        if n > 0:
            per_n[n] += [(r["final"], k3) for r in rs if (k3 := run_mean(r, "k3")) is not None]
    rho = {n: (spearmanr(*zip(*v)).statistic, len(v)) for n, v in sorted(per_n.items()) if len(v) > 2}
    return [] if not rho else [
        "", "**Drift and accuracy** (a correlation, not a cause: drift is partly an outcome, a learner "
        "that collapses drifts too): Spearman's rho between a run's final accuracy and its mean K3 "
        "between learner and sampler over its updates, over every run at each stale N: "
        + "; ".join(f"N = {n}: {r:+.2f} ({k} runs)" for n, (r, k) in rho.items()) + "."]


def ablation_lines(groups: dict) -> list:
    """An ablation's table (`groups`: {(row, N): runs}, the ablated rows and the objective at its
    defaults at the same N and seeds): per row and N the seeds, the final accuracy, K3, the
    training reward and the masked share (blank where the objective logs none) over the last 10%
    of updates (mean, min-max over seeds); then per row whether
    it is off the floor at every N (the seeds' mean above stats.DRIFT_FLOOR %)."""
    rows, delays = list(dict.fromkeys(m for m, _ in groups)), sorted({n for _, n in groups})
    lines = ["| row | N | seeds | final mean@4 (%) | K3 x1e-3, last 10% | training reward, last 10% | "
             "masked (%), last 10% |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for m in rows:
        for n in delays:
            rs = sorted(groups.get((m, n), []), key=lambda r: r["seed"])
            if rs:
                last = lambda key: [last_fraction(r["rows"], key) for r in rs]
                masked = last("is_masked_frac")
                lines.append(f"| {row_label(m)} | {n} | {', '.join(str(r['seed']) for r in rs)} | "
                             f"{fmt([final_mean(r) for r in rs])} | {fmt(last('k3'), 1e3)} | "
                             f"{fmt(last('reward_mean'), 1)} | {fmt(masked) if None not in masked else ''} |")
    floor = lambda m: [n for n in delays if groups.get((m, n)) and
                       100 * mean([final_mean(r) for r in groups[(m, n)]]) <= stats.DRIFT_FLOOR]
    return lines + ["", f"Off the floor (the seeds' mean above {stats.DRIFT_FLOOR:g}% at every N): " + "; ".join(
        f"{row_label(m)}: " + ("yes" if not floor(m) else "no, at N = " + ", ".join(map(str, floor(m))))
        for m in rows) + "."]


def direction_lines(runs: list, final: dict, bands: list, delays: list) -> list:
    """The direction ablation's differences under its table: per band and N, harmful - both from one
    pooled model of every run (stats.fit_cells) with its 95% t interval and Holm-adjusted p over the
    differences (`final`: {(band, direction, N): {seed: final}}), and the model in words."""
    diffs = []
    arm = lambda band, direction_: f"[{band[0]:g}, {band[1]:g}] {direction_}"
    data = pd.DataFrame([{"method": arm(*direction_arm(r)), "N": r["delay"], "seed": r["seed"],
                          "rounding_path": recorded_path(r), "y": 100 * final_mean(r)} for r in runs])
    fit, sigma = stats.fit_cells(data)
    family = {(band, d): {(arm(band, "harmful"), d): 1, (arm(band, "both"), d): -1} for band in bands
              for d in delays if final.get((band, "both", d)) and final.get((band, "harmful", d))}
    tested = stats.holm_contrasts(fit, family)
    for band in bands:
        diffs.append(f"| [{band[0]:g}, {band[1]:g}] | harmful - both (95% t; Holm p) | " + " | ".join(
            f"{pm(tested[(band, d)][0] / 100, tested[(band, d)][1] / 100)}; p = {tested[(band, d)][3]:.2g}"
            if (band, d) in tested else "" for d in delays) + " |")
    terms = " ".join(fit.params.index)
    blocks = (", a shift per seed and one per seed and N (the design's blocks)" if stats.SEED_BY_N in terms
              else ", a shift per seed (the design's block)" if "C(seed" in terms else "")
    diffs += ["", f"The differences come from one model of the {len(data)} runs (`stats.fit_cells`, statsmodels "
              "WLS: a mean per arm x N" + blocks + ", an error SD per N: " + ", ".join(f"N = {n}: {v:.2f}" for n, v in sigma.items())
              + f"; {fit.df_resid:.0f} residual degrees of freedom, each difference's t on Satterthwaite's "
              "from its N's SD"
              + ("; each N ran on one processor kind, so the cells absorb it" if
                 data.groupby("N")["rounding_path"].nunique().max() == 1 else "; the rounding path a fixed factor")
              + f"), Holm's adjustment over the {len(tested)} differences (family-wise 5%)."]
    return diffs


LAG_MAP_HEAD = ("# What each trainer's default does at a lag\n\nGenerated by `make tables` from "
                "lab/docs/frameworks.yaml (each trainer's knob, lag and default objective, read from its "
                "source: DESIGN.md, \"The frameworks' defaults\") and the leaderboard's runs (the tier, "
                "score and cells are those of lab/figures/leaderboard_toy.md). At its defaults no trainer "
                "holds a lag above 1 exactly: most bound it, a few hold it at 1 (the column \"lag a batch "
                "has\" says which; \"held exactly by\", the setting nearest to an exact lag). \"At its lag's "
                "N\" is the smallest ladder N at or above the most its default allows (N = 0 for none; the "
                "first stale N, 8, for an unbounded lag), and the next column the ladder N at or above four "
                "times that.")


def drift_lines(pred: dict, lr_fit: float, lr_test: float, name) -> list:
    """stats.drift_prediction's result `pred`, fitted at lr_fit and predicting lr_test: per method
    and per cell, with the joint test."""
    head = f"**Fitted at lr {lr_fit:g}, predicting lr {lr_test:g}**"
    inside = sum(c["inside"] for c in pred["cells"])
    if not pred["methods"]:
        return ["", head + ": no method has N = 0 and stale runs at both step sizes (and stale runs at "
                "two N or more where it is fitted) yet."]
    noise = lambda sd: ", ".join(f"N = {n}: {v:.2f}" for n, v in sorted(sd.items()))
    lines = ["", head + f" (`stats.drift_prediction`): each step size's noise, its runs' SD about their "
             f"method x N means (points), at lr {lr_fit:g} {noise(pred['fit_sd'])} (the fit's weights; "
             f"its residual scale against them {pred['scale']:.2f}, 1 where the lines fit the cells), "
             f"at lr {lr_test:g} {noise(pred['test_sd'])} (the errors' noise); "
             f"RMS of the cells' errors {pred['rmse']:.2f} points "
             + (f"({pred['rmse_inside']:.2f} over the {inside} cells whose drift lies inside the fitted "
                f"runs' range, of {len(pred['cells'])}); " if inside else
                f"(each of the {len(pred['cells'])} cells' drift lies outside the fitted runs' range: "
                "every prediction is an extrapolation); ")
             + f"joint test sum z^2 = {pred['chi2']:.1f} on {pred['chi2_df']} methods, p = {pred['chi2_p']:.2g}. "
             + ("Inside the fitted range only (the stale cells whose drift the fit has seen, no "
                f"extrapolation): sum z^2 = {pred['inside']['chi2']:.1f} on {pred['inside']['chi2_df']} "
                f"methods, p = {pred['inside']['chi2_p']:.2g}." if pred["inside"]["methods"] else
                "No method has a stale cell inside its fitted range: no test without extrapolation yet."),
             "", "| method | stale runs | error of the mean drop (points, ± 2 SE) | z | Holm p | the hypothesis "
             "| inside only: runs | error (± 2 SE) | Holm p | the hypothesis |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    verdict = lambda v: "refuted" if v["refuted"] else "holds"
    for m, v in sorted(pred["methods"].items(), key=lambda kv: -abs(kv[1]["z"])):
        w = pred["inside"]["methods"].get(m)
        lines.append(f"| {name(m)} | {v['runs']} | {signed(v['error'])} ± {2 * v['se']:.1f} | {signed(v['z'])} "
                     f"| {v['p_holm']:.2g} | {verdict(v)} | "
                     + (f"{w['runs']} | {signed(w['error'])} ± {2 * w['se']:.1f} | {w['p_holm']:.2g} | {verdict(w)} |"
                        if w else " | | | |"))
    lines += ["", "| method | N | runs | K3 x1e-3 | inside the fitted drift | drop from its N = 0, observed "
              "| predicted | error |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {name(c['method'])} | {c['N']} | {c['runs']} | {1e3 * c['drift']:.3g} "
              f"| {'yes' if c['inside'] else 'no (extrapolated)'} | {signed(c['observed'])} "
              f"| {signed(c['predicted'])} | {signed(c['error'])} |" for c in pred["cells"]]
    return lines


# published drift statistics the toy's cells can be set against: (the entry whose runs log the same
# statistic, the metric, the published value, what it measured)
ANCHOR_DRIFT = [("grpo_grpo_anchor-behavior", "clip_frac", 0.0122,
                 "M2PO (arXiv 2510.01161, abstract): the share of tokens PPO's clip (0.2, against the "
                 "sampler) cuts at staleness 256 (Qwen2.5 7B-32B, lr 1e-6), before M2PO's own mask"),
                ("m2po", "is_masked_frac", 0.0006,
                 "M2PO (the same abstract): the share of tokens M2PO's own mask drops there (its "
                 "project page says 0.006%)")]


def verdict_lines(one_way: dict, other_way: dict, lrs: tuple, name) -> list:
    """stats.drift_verdict of the two directions (fitted at lrs[0] predicting lrs[1], and back)."""
    v = stats.drift_verdict(one_way, other_way)
    word = {None: "not yet (a direction has no stale cell inside its fitted range)", True: "refuted",
            False: "not refuted"}[v["refuted"]]
    parts = []
    for (fit_lr, test_lr), s in zip((lrs, lrs[::-1]), v["sides"]):
        head = f"{'F' if not parts else 'f'}itted at lr {fit_lr:g}, predicting lr {test_lr:g}: "
        if not s["methods"]:
            parts.append(head + "no test yet")
            continue
        beyond = ", ".join(f"{name(m)} {signed(e)} (z {signed(z)})" for m, e, z in s["beyond_2se"])
        parts.append(head + f"joint p = {s['p']:.2g} on {s['methods']} methods; refuted after Holm: "
                     + (", ".join(name(m) for m in s["refuted"]) or "none")
                     + "; beyond 2 SE unadjusted: " + (beyond or "none"))
    return ["", f"**The verdict** (the inside-only tests of both directions, each at 2.5%, Bonferroni "
            f"over the two: family-wise 5%): {word}. " + "; ".join(parts) + "."]


def preregistered_drift_lines(one_way: dict, other_way: dict, lrs: tuple, excluded: list, name,
                              draws: int = stats.DRIFT_DRAWS, head: str = "**The preregistered test**") -> list:
    """The drift test as lab/docs/preregistration.md (section 2) fixed it: stats.drift_bootstrap in
    both directions (fitted at lrs[0] predicting lrs[1], and back), each a family of its methods
    (Holm) at ALPHA / 2, Bonferroni over the two; the rows at the floor excluded. `draws` and
    `head`: the same test at another number of draws (an added analysis)."""
    level = stats.ALPHA / 2
    if not (one_way and other_way):
        word = "not yet (a direction has no stale cell inside its fitted range)"
    else:
        word = "refuted" if any(v["p_holm"] < level for side in (one_way, other_way) for v in side.values()) else "not refuted"
    parts = []
    for (fit_lr, test_lr), side in zip((lrs, lrs[::-1]), (one_way, other_way)):
        where = f"{'f' if parts else 'F'}itted at lr {fit_lr:g}, predicting lr {test_lr:g}: "
        if not side:
            parts.append(where + "no stale cell inside its fitted range")
            continue
        failed = sorted(((m, v) for m, v in side.items() if v["p_holm"] < level), key=lambda t: -abs(t[1]["error"]))
        smallest = min(2 / (v["draws"] + 1) * len(side) for v in side.values())
        parts.append(where + f"{len(side)} methods, refuted after Holm: "
                     + (", ".join(f"{name(m)} {signed(v['error'])} (bootstrap SE {v['se']:.1f}, Holm p {v['p_holm']:.2g})"
                                  for m, v in failed) or "none")
                     + f" (the smallest Holm p its draws allow: {smallest:.2g})")
    return ["", f"{head} (lab/docs/preregistration.md, section 2: the inside-only errors, "
            f"a bootstrap over seeds with every run of a drawn seed at both step sizes, {draws} draws, "
            f"Holm over the methods of a direction at {100 * level:g}%, Bonferroni over the two; excluded at the "
            f"floor, below {stats.DRIFT_FLOOR:g}% at every stale cell at both steps: "
            + (", ".join(name(m) for m in excluded) or "none") + f"): {word}. " + "; ".join(parts) + "."]


def anchor_lines(runs: list, name) -> list:
    """Where each published drift statistic (ANCHOR_DRIFT) falls among the toy's cells: per cell
    (lr x N) of the entry that logs it, the statistic's mean over its runs' updates, and the two
    cells that bracket the published value."""
    lines = []
    for entry, key, value, claim in ANCHOR_DRIFT:
        cells = defaultdict(list)
        for r in runs:
            if method(r) == entry and r["delay"] > 0:
                cells[(r["cfg"]["lr"], r["delay"])].append(mean([row[key] for row in r["rows"]
                                                                  if row.get(key) is not None]))
        if not cells:
            continue
        got = sorted(((mean(v), lr, n, len(v)) for (lr, n), v in cells.items()))
        below = [c for c in got if c[0] <= value]
        above = [c for c in got if c[0] > value]
        where = lambda c: f"lr {c[1]:g}, N = {c[2]} ({100 * c[0]:.2f}%)"
        between = (f"between {where(below[-1])} and {where(above[0])}" if below and above
                   else f"beyond every cell ({where(got[-1])})" if below else f"below every cell ({where(got[0])})")
        lines += ["", f"**An anchor placed**: {claim}: {100 * value:.2f}%. Among the toy's cells of "
                  f"{name(entry)} ({key} over every update, mean over runs) it lies {between}.", "",
                  "| lr | N | runs | " + key + " (%) |", "| --- | --- | --- | --- |"]
        lines += [f"| {lr:g} | {n} | {k} | {100 * v:.2f} |" for v, lr, n, k in sorted(got, key=lambda c: (-c[1], c[2]))]
    return lines


def both_step_fits(runs: dict, order: list) -> dict:
    """{lr: (its leaderboard model's result (stats.fit_leaderboard), its data)}: each step size's
    model fitted to the runs of the rows both step sizes ran (`order`) at N = 0 and the stale N,
    so that both tiers are drawn among the same rows; runs: {folder: runs at one step size}."""
    fits = {}
    for rs in runs.values():
        data = leaderboard_data([r for r in rs if method(r) in order
                                 and r["delay"] in (0, *stats.STALE_DELAYS)])
        if len(data) and data.groupby(["method", "N"]).size().max() >= 2:
            fits[rs[0]["cfg"]["lr"]] = (stats.fit_leaderboard(data), data)
    return fits


def _top_tier(result: dict) -> set:
    """The letters of the best-scoring row's tier."""
    best = max(result["score_at_average"], key=lambda m: result["score_at_average"][m][0])
    return set(result["tiers"][best])


def tier_lines(fits: dict, order: list, name) -> list:
    """Does a row's tier belong to the method or to the step size? Each step size's model
    (both_step_fits): per row and lr the tier letters, the rank interval, the stale accuracy and
    the difference to GRPO+TIS (simultaneous 95%); a row changes when its top-tier membership or
    its standing against GRPO+TIS differs (the pooled model's alone: step_size_lines reads both
    analyses)."""
    results = {lr: result for lr, (result, _) in fits.items()}
    scored = [m for m in order if all(m in res["score"] for res in results.values())]
    head = ("**Tiers at both step sizes** (each step size's leaderboard model fitted to the runs of "
            "the rows both ran, so both tiers are drawn among the same rows; top: shares a letter "
            "with the best row; vs GRPO+TIS: simultaneous 95% over that model's reference family)")
    if len(results) < 2 or not scored:
        return ["", head + ": not yet, a step size has no row with replicated runs at every "
                f"scored N ({', '.join(map(str, stats.STALE_DELAYS))})."]
    lrs = list(results)
    lines = ["", head + ":", "", "| method | " + " | ".join(
        f"lr {lr:g}: tier | rank | score | vs GRPO+TIS" for lr in lrs) + " | changes |",
        "| --- |" + " --- | --- | --- | --- |" * len(lrs) + " --- |"]
    top = {lr: _top_tier(res) for lr, res in results.items()}
    changed = []
    for m in sorted(scored, key=lambda x: -results[lrs[0]]["score"][x][0]):
        cells, places = [], []  # places: (in the top tier, above / below / level with GRPO+TIS)
        for lr in lrs:
            res = results[lr]
            rank, (sc, half) = res["rank"][m], res["score"][m]
            d = res["vs"].get("grpo_tis", {}).get(m)
            vs = "" if d is None else "level" if d[2] >= stats.ALPHA else "above" if d[0] > 0 else "below"
            places.append((bool(set(res["tiers"].get(m, "")) & top[lr]), vs))
            cells.append(f"{res['tiers'][m]} | {rank[0]}-{rank[1]} | {sc:.1f} ± {half:.1f} | "
                         + (f"{signed(d[0])} ± {d[1]:.1f} ({vs})" if d else ""))
        what = []
        if places[0][0] != places[1][0]:
            what.append("joins the top tier" if places[1][0] else "leaves the top tier")
        if places[0][1] != places[1][1] and "" not in (places[0][1], places[1][1]):
            what.append(f"{places[0][1]} -> {places[1][1]} GRPO+TIS")
        if what:
            changed.append(f"{name(m)} ({', '.join(what)})")
        lines.append(f"| {name(m)} | " + " | ".join(cells) + f" | {'; '.join(what)} |")
    lines += ["", f"Going from lr {lrs[0]:g} to lr {lrs[1]:g}, of the {len(scored)} rows scored at both: "
              + (f"{len(changed)} change: " + "; ".join(changed) + "." if changed else "none changes.")]
    return lines


STEP_SIZE_SEEDS = tuple(range(5))  # preregistration section 1 reads the second step size at seeds 0-4
PREREGISTERED_STEP = 5e-5  # the step size section 1 was written for (another pair: an added analysis)


def common_verdict(pooled: tuple, paired: tuple) -> str:
    """The preregistration's common rule for one difference, from the pooled model's (difference,
    half-width, adjusted p) and the seed-paired test's (difference, half-width, Holm p, seeds):
    "above" / "below" where both reject at 5% with that sign, "level" where neither does,
    "model-dependent" otherwise (or where the paired test has fewer than 3 common seeds)."""
    if paired is None:
        return "model-dependent"
    apart = [x[2] < stats.ALPHA for x in (pooled, paired)]
    if not any(apart):
        return "level"
    if all(apart) and (pooled[0] > 0) == (paired[0] > 0):
        return "above" if pooled[0] > 0 else "below"
    return "model-dependent"


def across_steps(first: str, second: str) -> str:
    """A relation's standing across two step sizes from its verdicts at each: "both" (the same
    "above" or "below"), "reversed" (opposite ones), "one" (above or below at one only), or
    "neither"."""
    called = [v in ("above", "below") for v in (first, second)]
    if all(called):
        return "both" if first == second else "reversed"
    return "one" if any(called) else "neither"


def step_size_lines(fits: dict, order: list, name) -> list:
    """Preregistration section 1 (lab/docs/preregistration.md), read from each step size's model
    (both_step_fits) and the seed-paired tests: (a) each row against each reference, the common
    rule's verdict at each step size (common_verdict) and across them (across_steps); (b) each
    pair split by the first step size's tiers, its verdict at each step size (split in an order
    by the pooled model's Holm and by stats.seed_paired_pairs, level in neither, else
    model-dependent) and across them; the rows that change standing (top-tier membership or any
    reference verdict differs). Headed "not yet" with the count of complete rows until every row
    of the second step size has STEP_SIZE_SEEDS at every N; the counts until then are
    provisional, not the reading."""
    lrs = list(fits)
    if len(lrs) < 2:
        return []
    (hi, hi_data), (lo, lo_data) = fits[lrs[0]], fits[lrs[1]]
    rows = [m for m in order if m in hi["score"] and m in lo["score"]]
    if not rows:
        return []
    complete = [m for m in rows if all(set(STEP_SIZE_SEEDS) <= set(lo_data.loc[(lo_data["method"] == m)
                                                                               & (lo_data["N"] == n), "seed"])
                                       for n in (0, *stats.STALE_DELAYS))]
    seeds = f"seeds {STEP_SIZE_SEEDS[0]}-{STEP_SIZE_SEEDS[-1]}"
    what = ("lab/docs/preregistration.md, section 1" if math.isclose(lrs[1], PREREGISTERED_STEP)
            else f"section 1's rule of lab/docs/preregistration.md at another pair of step sizes: an added analysis")
    head = (f"**Relations at both step sizes** ({what}: a relation holds at both where its verdict is the "
            "same above or below at both (the pooled model and the seed-paired test agree), at one only "
            "where it is above or below at one and level or model-dependent at the other, reversed where "
            "the signs are opposite)")
    if len(complete) < len(rows):
        head += (f": not yet, {len(complete)} of the {len(rows)} rows scored at both have {seeds} at every N "
                 f"at lr {lrs[1]:g}. *Provisional, on the runs landed so far (not the reading):*")
    else:
        head += f", every row with {seeds} at every N at lr {lrs[1]:g}:"
    lines = ["", head]
    # (a) against the references
    refs = [r for r in stats.REFERENCES if r in rows]
    verdicts = {}  # (row, reference) -> (verdict at the first step size, at the second)
    for r in refs:
        for m in rows:
            if m != r:
                verdicts[(m, r)] = tuple(common_verdict(res["vs"][r][m], res["paired"].get(r, {}).get(m))
                                         for res in (hi, lo))
    kinds = {k: [key for key, v in verdicts.items() if across_steps(*v) == k]
             for k in ("both", "one", "reversed", "neither")}
    lines += ["", f"(a) The rows against the references ({len(verdicts)} relations): {len(kinds['both'])} hold "
              f"at both, {len(kinds['one'])} at one only, {len(kinds['reversed'])} reversed, "
              f"{len(kinds['neither'])} called at neither (level or model-dependent at both)."]
    for r in refs:
        parts = []
        for v in ("above", "below"):
            at_both = [name(m) for (m, ref), vs in verdicts.items() if ref == r and vs == (v, v)]
            parts.append(f"{v} at both: " + (", ".join(at_both) or "none"))
        one = [f"{name(m)} ({vs[0]} -> {vs[1]})" for (m, ref), vs in verdicts.items()
               if ref == r and across_steps(*vs) in ("one", "reversed")]
        parts.append("at one only or reversed: " + (", ".join(one) or "none"))
        lines.append(f"- vs {name(r)}: " + "; ".join(parts) + ".")
    # (b) the pairs the first step size's tiers split
    paired = {lr: stats.seed_paired_pairs(data, rows) for lr, (_, data) in fits.items()}

    def split(res, lr, a, b):
        pooled_p, pair = res["pairs"].get((a, b), res["pairs"].get((b, a))), paired[lr].get((a, b))
        d = res["score_at_average"][a][0] - res["score_at_average"][b][0]
        return common_verdict((d, None, pooled_p), pair)

    pairs = {}
    for i, a in enumerate(rows):
        for b in rows[i + 1:]:
            if not set(hi["tiers"][a]) & set(hi["tiers"][b]):
                pairs[(a, b)] = (split(hi, lrs[0], a, b), split(lo, lrs[1], a, b))
    count = lambda k: sum(across_steps(*v) == k for v in pairs.values())
    reversed_ = [f"{name(a)} / {name(b)}" for (a, b), v in pairs.items() if across_steps(*v) == "reversed"]
    lines += ["", f"(b) The {len(pairs)} pairs the tiers split at lr {lrs[0]:g}, each judged at each step size by "
              "the pooled model's Holm over all pairs and the seed-paired test of the pair (Holm over all pairs, "
              f"stats.seed_paired_pairs): {count('both')} split in the same order at both, {count('one')} at one "
              f"only, {count('reversed')} reversed" + (f" ({', '.join(reversed_)})" if reversed_ else "")
              + f", {count('neither')} called at neither."]
    # the rows that change standing
    top = [_top_tier(res) for res in (hi, lo)]
    changes = []
    for m in rows:
        what = []
        in_top = [bool(set(res["tiers"][m]) & t) for res, t in zip((hi, lo), top)]
        if in_top[0] != in_top[1]:
            what.append("joins the top tier" if in_top[1] else "leaves the top tier")
        what += [f"{vs[0]} -> {vs[1]} {name(r)}" for (row, r), vs in verdicts.items() if row == m and vs[0] != vs[1]]
        if what:
            changes.append(f"{name(m)} ({', '.join(what)})")
    lines += ["", f"Rows that change standing (top-tier membership or a verdict against a reference): "
              f"{len(changes)} of {len(rows)}" + (": " + "; ".join(changes) if changes else "") + "."]
    return lines


REGIME_ROWS = ("grpo", "grpo_tis", "agro", "ggpo", "grpo_grpo_anchor-behavior")  # the study's four, PPO vs sampler
MILD_DROP = 5.0  # points: "near its on-policy accuracy" at N = 8 (about one seed SD of a cell there)


def regime_lines(frames: list, name) -> list:
    """The regime at N = 8 per step size: for the study's four and PPO against the sampler, the
    final accuracy at N = 8 minus N = 0 from the cell-means model of that step size's runs
    (stats.fit_cells), 95% t; mild where every one of the study's four loses less than MILD_DROP."""
    shown = [m for m in REGIME_ROWS if any((d["method"] == m).any() for d in frames)]
    lines = ["", f"**The regime at N = 8** (final accuracy at N = 8 minus N = 0, points, the cell-means "
             f"model of each step size's runs, 95% t; mild: each of the study's four loses less than "
             f"{MILD_DROP:g}):", "", "| lr | " + " | ".join(name(m) for m in shown) + " | mild |",
             "| --- |" + " --- |" * (len(shown) + 1)]
    for d in frames:
        own = d[d["method"].isin(REGIME_ROWS) & d["N"].isin([0, 8])].assign(rounding_path="one")
        have = [m for m in REGIME_ROWS if {0, 8} <= set(own.loc[own["method"] == m, "N"])]
        own = own[own["method"].isin(have)]
        try:
            fit, _ = stats.fit_cells(own)
            drops = {m: stats.estimate(fit, {(m, 8): 1, (m, 0): -1}) for m in have}
            cell = lambda m: pm(drops[m][0] / 100, drops[m][1] / 100) if m in drops else ""
        except ValueError:  # one run per cell: no residual degrees of freedom yet
            means = own.groupby(["method", "N"])["y"].mean()
            drops = {m: (means[(m, 8)] - means[(m, 0)], None) for m in have}
            cell = lambda m: f"{signed(drops[m][0])} (one seed)" if m in drops else ""
        study = [m for m in REGIME_ROWS[:4] if m in drops]
        mild = ("" if len(study) < 4 else "yes" if all(drops[m][0] > -MILD_DROP for m in study) else "no")
        lines.append(f"| {d['lr'].iloc[0]:g} | " + " | ".join(cell(m) for m in shown) + f" | {mild} |")
    return lines


# ----------------------------------------------------------------------------- the long task's H3

# H3 of the long-answer study (lab/docs/preregistration.md, section 4): its rows, lags, seeds,
# the updates its means cover and its two thresholds, as preregistered.
SEQ_TAIL_ROWS = ("grpo", "grpo_grpo_anchor-behavior", "grpo_tis")
SEQ_TAIL_DELAYS = (8, 32)
SEQ_TAIL_SEEDS = (0, 1, 2)
SEQ_TAIL_UPDATES = 200
SEQ_TAIL_Q90_RATIO = 2.0  # the long task's 90th percentile of |sum_t ell| at least this x the short's
SEQ_TAIL_ESS_RATIO = 0.5  # ... and its sequence ESS at most this x the short's


def seq_tail_means(run: dict) -> dict:
    """{q90, ess}: the run's means over updates 1..SEQ_TAIL_UPDATES of is_seq_log_ratio_q90 and
    is_seq_ess (None where the run logged neither)."""
    rows = [r for r in run["rows"] if 1 <= r.get("update", 0) <= SEQ_TAIL_UPDATES
            and "is_seq_ess" in r]
    if not rows:
        return None
    k3 = [r["k3"] for r in rows if "k3" in r]
    return {"q90": mean([r["is_seq_log_ratio_q90"] for r in rows]),
            "ess": mean([r["is_seq_ess"] for r in rows]), "updates": len(rows),
            "k3": mean(k3) if k3 else None,
            "length": mean([r.get("response_len_mean", 0) for r in rows])}


def seq_tail_pairs(long_runs: list, short_runs: list) -> list:
    """One entry per preregistered (row, N, seed): its long and short means (None: not run yet)
    and whether the pair is heavier on the long task by both thresholds."""
    def index(runs):
        return {(method(r), r["delay"], r["seed"]): seq_tail_means(r) for r in runs}
    long_at, short_at = index(long_runs), index(short_runs)
    pairs = []
    for row in SEQ_TAIL_ROWS:
        for n in SEQ_TAIL_DELAYS:
            for seed in SEQ_TAIL_SEEDS:
                lo, sh = long_at.get((row, n, seed)), short_at.get((row, n, seed))
                heavier = None if lo is None or sh is None else \
                    lo["q90"] >= SEQ_TAIL_Q90_RATIO * sh["q90"] and lo["ess"] <= SEQ_TAIL_ESS_RATIO * sh["ess"]
                pairs.append({"row": row, "N": n, "seed": seed, "long": lo, "short": sh,
                              "heavier": heavier})
    return pairs


def seq_tail_verdict(pairs: list) -> str:
    """holds (every pair in and heavier), refuted (a pair in and not heavier: the test is 'for
    each row, N and seed') or pending."""
    if any(p["heavier"] is False for p in pairs):
        return "refuted"
    return "holds" if all(p["heavier"] for p in pairs) else "pending"


def seq_tail_lines(pairs: list) -> list:
    """H3's table: each preregistered pair's means on both tasks, their ratios and whether the
    pair is heavier on the long task, then the verdict as preregistered."""
    lines = ["| row | N | seed | q90 long | q90 short | ratio | ESS long | ESS short | ratio | heavier |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for p in pairs:
        lo, sh = p["long"], p["short"]
        cells = [row_label(p["row"]), str(p["N"]), str(p["seed"])]
        for key in ("q90", "ess"):
            a = f"{lo[key]:.3g}" if lo else "not run"
            b = f"{sh[key]:.3g}" if sh else "not run"
            ratio = f"{lo[key] / sh[key]:.2f}" if lo and sh else ""
            cells += [a, b, ratio]
        cells.append({None: "", True: "yes", False: "no"}[p["heavier"]])
        lines.append("| " + " | ".join(cells) + " |")
    verdict = seq_tail_verdict(pairs)
    done = sum(p["heavier"] is not None for p in pairs)
    lines += ["", f"**H3: {verdict}** ({done} of {len(pairs)} pairs run; heavier in "
                  f"{sum(bool(p['heavier']) for p in pairs)}). Heavier: the long run's mean 90th "
                  f"percentile of |sum_t ell| at least {SEQ_TAIL_Q90_RATIO:g}x the short run's and "
                  f"its mean sequence ESS at most {SEQ_TAIL_ESS_RATIO:g}x, means over updates 1-"
                  f"{SEQ_TAIL_UPDATES}; H3 holds where every pair is heavier, and one pair that is "
                  f"not refutes it (lab/docs/preregistration.md, section 4)."]
    return lines + seq_tail_drift_lines(pairs)


def seq_tail_drift_lines(pairs: list) -> list:
    """Added after the first pairs, not preregistered: the per-token drift each pair carried (the
    mean K3 learner vs sampler over the same updates), long against short, and the tail per unit of
    it, so that a pair whose tail is not heavier can be told apart from one whose objective kept
    its per-token drift small."""
    done = [p for p in pairs if p["heavier"] is not None and p["long"]["k3"] and p["short"]["k3"]]
    if not done:
        return []
    lines = ["", "*Added analysis (not preregistered):* the per-token drift each pair carried, mean K3 "
                 "(x1e-3) over the same updates, and the tail per unit of it (q90 / sqrt(K3)).", "",
             "| row | N | seed | K3 long | K3 short | ratio | q90/sqrt(K3) long | short | ratio | "
             "sqrt(length ratio) |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for p in done:
        lo, sh = p["long"], p["short"]
        per = [x["q90"] / math.sqrt(x["k3"]) for x in (lo, sh)]
        lines.append(f"| {row_label(p['row'])} | {p['N']} | {p['seed']} | {1e3 * lo['k3']:.3g} | "
                     f"{1e3 * sh['k3']:.3g} | {lo['k3'] / sh['k3']:.2f} | {per[0]:.3g} | {per[1]:.3g} | "
                     f"{per[0] / per[1]:.2f} | {math.sqrt(lo['length'] / sh['length']):.2f} |")
    return lines + ["", "With independent token log-ratios, |sum_t ell| grows as sqrt(length x K3): the "
                        "tail per unit of per-token drift would then move with the square root of the "
                        "responses' length ratio (the last column; mean response length over the same "
                        "updates)."]
