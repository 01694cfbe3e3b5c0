"""The committed tables (lab/figures/) are what `make tables` makes from the kept results
(results/), and the readings the docs state hold in them."""
import math
import os
import re
import statistics

import yaml

from lab import plot, reader, report
from lab.tests.conftest import ROOT

FIGURES = os.path.join(ROOT, "lab", "figures")

NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:e[-+]\d+)?")  # Python's g format: 1.2e-05


def same_table(made: str, committed: str) -> str:
    """'' where two generated tables agree up to the last printed digit of their numbers, else
    the first difference. The text between the numbers must be equal, and each number within one
    unit of its last printed digit of the other: the model's fit, its Monte Carlo draws (through
    LAPACK) and values that sit on a rounding boundary round differently on another processor
    kind's BLAS kernels; on the kind that made the tables the two are equal byte for byte."""
    text_a, text_b = NUMBER.split(made), NUMBER.split(committed)
    if text_a != text_b:
        a, b = next((a, b) for a, b in zip(text_a + [""], text_b + [""]) if a != b)
        return f"the text differs: {a[:80]!r} against {b[:80]!r}"
    for a, b in zip(NUMBER.findall(made), NUMBER.findall(committed)):
        digits = max(len(x.split("e")[0].partition(".")[2]) for x in (a, b))
        exponent = max(int(x.split("e")[1]) if "e" in x else 0 for x in (a, b))
        if abs(float(a) - float(b)) > 1.000001 * 10.0 ** (exponent - digits):
            return f"{a} against {b}: more than the last printed digit apart"
    return ""


def test_same_table_allows_the_last_digit_and_nothing_more():
    assert same_table("| a | 58.2 ± 1.9 | 3-9 | p = 0.06404 |", "| a | 58.3 ± 1.9 | 3-8 | p = 0.06405 |") == ""
    assert same_table("-0.0 ± 0.5, 1.2e-05", "+0.1 ± 0.5, 1.3e-05") == ""
    assert "apart" in same_table("58.1 ± 1.9", "58.3 ± 1.9")
    assert "apart" in same_table("745 runs", "747 runs")
    assert "text differs" in same_table("| ab | GRPO |", "| a | GRPO |")


def test_committed_tables_are_what_make_tables_makes_from_results(tmp_path):
    """Every table `make tables` writes (the Makefile's lines) is remade from the committed
    results/ into a temporary folder and agrees with the committed one (same_table: byte for
    byte on the processor kind that made them, to the last printed digit elsewhere; the .md: the
    PNG's bytes depend on the matplotlib version, which is not pinned)."""
    with open(os.path.join(ROOT, "Makefile")) as f:
        joined = f.read().replace("\\\n", " ")  # continued lines as one
    lines = [l.split("|| ")[1].split() for l in joined.splitlines()
             if "lab/plot.py" in l and " results/" in l and "$$grid" not in l]  # the tidy tables: below
    assert [(l[2], l[3]) for l in lines] == [("leaderboard", "results/leaderboard_toy"),
                                            ("leaderboard", "results/leaderboard_toy_lr5e-5"),
                                            ("drift", "results/leaderboard_toy,results/drift_toy_n2,results/drift_toy_small_n"),
                                            ("leaderboard", "results/leaderboard_toy_lr1.25e-5"),
                                            ("drift", "results/leaderboard_toy"),
                                            ("direction", "results/direction_toy"),
                                            ("ablation", "results/oapl_baseline_toy"),
                                            ("ablation", "results/flash_gate_toy"),
                                            ("processors", "results/processor_toy"),
                                            ("processors", "results/processor_intel_toy"),
                                            ("processors", "results/processor_zen4_toy"),
                                            ("seq-tail", "results/leaderboard_long_toy")]
    for line in lines:
        figure, results, out = line[2], line[3], line[line.index("--out") + 1]
        # a comma-separated side: its first folder must exist, the others may not yet (drift)
        if not all(os.path.isdir(os.path.join(ROOT, a.split(",")[0])) for a in line[3:] if a.startswith("results/")):
            continue  # the Makefile's `test ! -d` guards: a folder not made yet
        remade = str(tmp_path / os.path.basename(out))
        here = lambda a: ",".join(os.path.join(ROOT, f) for f in a.split(","))
        more = [here(a) if a.startswith("results/") else a
                for a in line[4:line.index("--out")]]  # processors' and drift's --against
        extra, made = [], [(remade, os.path.join(ROOT, out))]
        if figure == "leaderboard":  # its one-screen table beside it
            made.append((os.path.splitext(remade)[0] + "_short.png", os.path.splitext(os.path.join(ROOT, out))[0] + "_short.png"))
        if "--lag-map" in line:  # the leaderboard's lag map beside it
            lag_map = line[line.index("--lag-map") + 1]
            extra = ["--frameworks", os.path.join(ROOT, line[line.index("--frameworks") + 1]),
                     "--lag-map", str(tmp_path / os.path.basename(lag_map))]
            made.append((extra[-1], os.path.join(ROOT, lag_map)))
        plot.main([figure, here(results), *more, "--out", remade, *extra])
        for new, old in made:
            committed = os.path.splitext(old)[0] + ".md"
            differs = same_table(open(os.path.splitext(new)[0] + ".md").read(), open(committed).read())
            assert not differs, f"{committed} is not what `make tables` makes from {results} ({differs}): run make tables"


def test_the_leaderboard_readings_hold_in_the_generated_table():
    """The readings lab/docs/leaderboard.md and the README state about the leaderboard, checked
    against the committed table (lab/figures/leaderboard_toy.md, which the test above checks is
    what `make tables` makes): a reading that stops holding as seeds land fails here."""
    text, rows = leaderboard_rows("leaderboard_toy.md")
    ppo = rows["PPO vs sampler (GRPO, behavior anchor)"]
    assert above(ppo[VS_TIS]) and above(ppo[VS_GRPO])
    # the top tier's rows with their ten seeds at every N; a row still climbing the ladder can
    # share letter a on an interval too wide to place it (the docs say so)
    top_all = [name for name, row in rows.items() if "a" in row["tier"]]
    top = [m for m in top_all if set(rows[m]["seeds per N"].split("/")) == {"10"}]
    assert top and all(above(rows[m][VS_TIS]) and above(rows[m][VS_GRPO]) for m in top)
    assert above(rows["GRPO+TIS"][VS_GRPO])
    # the same readings by the second analysis (seed-paired, Holm): the README states them as
    # holding in both
    paired, ppo_label = paired_rows("leaderboard_toy.md"), "PPO vs sampler (GRPO, behavior anchor)"
    assert paired_above(paired, ppo_label, "GRPO+TIS") and paired_above(paired, ppo_label, "GRPO")
    assert all(paired_above(paired, m, "GRPO+TIS") and paired_above(paired, m, "GRPO") for m in top)
    # GRPO+TIS above GRPO: model-dependent (docs): the paired difference's unadjusted 95% interval
    # excludes zero, its Holm p over the whole family does not reach 5%
    cell = re.search(r"\n\| GRPO\+TIS \|  \| \+([\d.]+) ± ([\d.]+) \(([\d.e-]+)\)",
                     text.split("**A second analysis**")[1]).groups()
    assert float(cell[0]) > float(cell[1]) and float(cell[2]) >= 0.05
    assert paired_above(paired, "REC-OneSide-NoIS", ppo_label) and paired_above(paired, "AsymRE", ppo_label)
    assert not any(paired_above(paired, m, ppo_label) for m in ("TRM", "PPO+outlier RS (SkyRL's mask)", "BAPO", "DPPO-KL"))
    # the newest corrections: REC one-side and AsymRE above PPO's clip against the sampler; the
    # masks and searches on top of that clip not above it; AsymRE's drop's estimate above zero;
    # OAPL and FlashREINFORCE below the base model at every N > 0 in every seed (a cell's last
    # number is its largest seed)
    assert above(rows["REC-OneSide-NoIS"][VS_PPO]) and above(rows["AsymRE"][VS_PPO])
    assert not any(above(rows[m][VS_PPO]) for m in ("TRM", "PPO+outlier RS (SkyRL's mask)", "BAPO", "DPPO-KL"))
    assert float(rows["AsymRE"]["drop from N=0 (95%)"].split(" ± ")[0]) > 0
    base = base_model(text)
    assert all(float(re.findall(r"[\d.]+", rows[m][f"N={n}"])[-1]) < base
               for m in ("OAPL", "FlashREINFORCE") for n in (8, 32, 128))
    levene = re.search(r"Levene across N: W = [\d.]+, p = ([\d.e-]+); across methods within each N: (.*)\.", text)
    assert float(levene.group(1)) < 0.05
    within = dict(re.findall(r"N = (\d+): p = ([\d.e-]+)", levene.group(2)))
    assert float(within["128"]) < 0.05  # the SD differs between methods at N = 128 (the docs say so)
    assert re.search(r"prior df [\d.]+\)", text)  # finite: the spreads per method are fitted
    # the processor kind's and the seed's shifts are small (a moment SD under a point), whether
    # or not their F tests reject
    path = re.search(r"\*\*Rounding path effects\*\* .*?; variance component \(moments\) SD ([\d.]+) points", text)
    seed = re.search(r"\*\*The seed\*\* .*?; variance component \(moments\) SD ([\d.]+) points", text)
    assert float(path.group(1)) < 1 and float(seed.group(1)) < 1
    # the shift per method and path: its test is printed with the verdict its p gives (the docs
    # name no side: its p sits near 5%)
    alike = re.search(r"a shift per method and rounding path on top of the one per path, F = [\d.]+ on \d+ df, "
                      r"p = ([\d.e-]+) \(one test of every row at once: (below|not below) 5%", text)
    assert (float(alike.group(1)) < 0.05) == (alike.group(2) == "below")
    # the late mean is the quieter measure, by a margin worth a few seeds at ten, about the three
    # new seeds that remaking seeds 0-2 with it would cost (docs)
    late = re.search(r"\| all \| \d+ \| \d+ \| [\d.]+ \| [\d.]+ \| ([\d.]+) \|", text)
    worth = re.search(r"a run measured by it is worth ([\d.]+) measured by the final evaluation", text)
    assert float(late.group(1)) < 1 and 1.5 <= 10 * (float(worth.group(1)) - 1) <= 6


VS_TIS, VS_GRPO = "vs GRPO+TIS (simultaneous 95%)", "vs GRPO (simultaneous 95%)"
VS_PPO = "vs PPO vs sampler (GRPO, behavior anchor) (simultaneous 95%)"


def above(cell):
    """A reference difference whose simultaneous interval lies above zero."""
    return cell.startswith("+") and cell.endswith("*")


def below(cell):
    return cell.startswith("-") and cell.endswith("*")


def paired_rows(name):
    """{method: {reference label: (difference, Holm p)}} of a leaderboard table's second analysis
    (the seed-paired table under "A second analysis")."""
    with open(os.path.join(FIGURES, name)) as f:
        section = f.read().split("**A second analysis**")[1].split("\n\n")[1]
    header, body = report.table_rows(section)
    refs = [c.split(" (paired")[0][3:] for c in header[1:-1]]
    out = {}
    for cells in body:
        out[cells[0]] = {r: (float(c.split(" ± ")[0]), float(c.split("(")[-1].rstrip(")")))
                         for r, c in zip(refs, cells[1:-1]) if c}
    return out


def paired_above(rows, m, ref):
    """The second analysis puts m above the reference (Holm, family-wise 5%)."""
    d, p = rows[m][ref]
    return d > 0 and p < 0.05


def base_model(text):
    """The base model's accuracy (%) a leaderboard table prints under it."""
    return float(re.search(r"The base model .*?: ([\d.]+) \(", text).group(1))


def leaderboard_rows(name):
    """(the text, {method: {column: cell}}) of a committed leaderboard table under lab/figures/."""
    with open(os.path.join(FIGURES, name)) as f:
        text = f.read()
    columns, body = report.table_rows(text.split("\n\n")[1])
    return text, {cells[1]: dict(zip(columns, cells)) for cells in body}


def test_the_anchor_reading_holds_in_the_generated_drift_table():
    """lab/docs/leaderboard.md places M2PO's published shares at staleness 256 (PPO's clip cuts 1.22%
    of tokens, M2PO's mask 0.06%) among the toy's cells: each above its N = 8 at lr 5e-5 and below
    its N = 32 there, and the clip's below N = 8 at lr 2e-4. Checked against the committed
    lab/figures/drift_toy.md, which `make tables` makes."""
    with open(os.path.join(FIGURES, "drift_toy.md")) as f:
        sections = f.read().split("**An anchor placed**")[1:]
    assert len(sections) == 2
    for section, published in zip(sections, (1.22, 0.06)):
        share = {(lr, int(n)): float(v)
                 for lr, n, v in re.findall(r"\| ([\d.e-]+) \| (\d+) \| \d+ \| ([\d.]+) \|", section)}
        assert float(re.search(r": ([\d.]+)%\. Among", section).group(1)) == published
        assert share[("5e-05", 8)] < published < share[("5e-05", 32)]
    assert 1.22 < share_clip_2e4_n8(sections[0])


def test_the_drift_verdict_and_regime_readings_hold_in_the_generated_tables():
    """lab/docs/leaderboard.md's verdict on the drift hypothesis and its default-lr decision: refuted
    jointly in both directions and for single methods after Holm, each a truncated or gated weight,
    AsymRE or OAPL; fitting lr 2e-4, every method refuted upward a truncated, masked or gated weight,
    by more than 5 points; AsymRE the other way in both directions, about 2 SE, its N = 0 cell at lr 2e-4 4+
    points below most rows'; OAPL the other way in both, by the same distance each way (its stale
    cells 0 at both steps); FlashREINFORCE the other way too fitting lr 5e-5; at lr 5e-5 every row of the
    second step's fifteen but AGRO and GRPO within 5 points of GRPO+TIS (DESIGN.md too); N = 8 mild at lr 1.25e-5 alone, whose five rows
    end within 3 points of one another and of their own N = 0.
    Checked against the committed lab/figures/drift_toy.md and drift_lr1.25e-5_toy.md."""
    with open(os.path.join(FIGURES, "drift_toy.md")) as f:
        text = f.read()
    verdict = re.search(r"\*\*The verdict\*\* .*", text).group(0)
    assert "family-wise 5%): refuted." in verdict
    one_way, other_way = verdict.split("; fitted at lr 5e-05")
    beyond, refuted = {}, {}  # per direction: {method: (error, z)} beyond 2 SE; those refuted after Holm
    for way in (one_way, other_way):
        assert float(re.search(r"joint p = ([\d.e-]+) on", way).group(1)) < 0.025
        names = re.search(r"refuted after Holm: (.*?); beyond", way).group(1)
        refuted[way] = set() if names == "none" else set(names.split(", "))
        beyond[way] = {m: (float(e), float(z)) for m, e, z in re.findall(
            r" ?([^,]+?) ([+-][\d.]+) \(z ([+-][\d.]+)\)", way.split("beyond 2 SE unadjusted: ")[1])}
    gated = ("GRPO+TIS", "GRPO+seq-TIS", "GRPO+seq-MIS", "IcePop (prime-rl form)", "FlashREINFORCE")  # truncated, masked or gated
    assert set().union(*refuted.values()) and set().union(*refuted.values()) <= set(gated) | {"AsymRE", "OAPL"}
    # OAPL refuted the other way in both directions, as AsymRE: its stale cells are 0 at both steps
    # (N = 2 included), so each direction misses by the distance between its two N = 0 cells
    assert "OAPL" in refuted[one_way] & refuted[other_way]
    oapl = {lr: (float(n0), [float(c) for c in re.findall(r"([\d.]+) \(", stale)])
            for lr, n0, stale in re.findall(r"^\| OAPL \| ([\d.e-]+) \| ([\d.]+) \([^)]*\) \|(.*)\|$", text, re.M)}
    assert set(oapl) == {"0.0002", "5e-05"} and all(c == 0.0 for _, cells in oapl.values() for c in cells)
    distance = oapl["5e-05"][0] - oapl["0.0002"][0]
    assert abs(beyond[one_way]["OAPL"][0] + distance) < 0.5 and abs(beyond[other_way]["OAPL"][0] - distance) < 0.5
    upward = {m: beyond[one_way][m][0] for m in refuted[one_way] if beyond[one_way][m][0] > 0}
    assert upward and set(upward) <= set(gated) and all(e > 5 for e in upward.values())
    # AsymRE the other way in both (about 2 SE: listed beyond 2 SE in one direction at least)
    assert beyond[one_way].get("AsymRE", (-1.0, 0.0))[0] < 0 < beyond[other_way].get("AsymRE", (1.0, 0.0))[0]
    assert "AsymRE" in beyond[one_way] or "AsymRE" in beyond[other_way]
    _, lr2e4 = leaderboard_rows("leaderboard_toy.md")  # AsymRE's own N = 0: 4+ points below most rows'
    on_policy = {m: float(r["N=0"].split()[0]) for m, r in lr2e4.items() if r["N=0"]}  # rows with an N = 0 cell
    assert on_policy["AsymRE"] < statistics.median(on_policy.values()) - 4
    assert beyond[other_way].get("FlashREINFORCE", (-1.0, 0.0))[0] < 0
    lr5e5 = smaller_step_rows(text)
    with open(os.path.join(ROOT, "lab", "sweeps", "leaderboard_lr5e-5_toy.yaml")) as f:
        names = yaml.safe_load(f)["grid"]["loss"] + ["grpo_grpo_anchor-behavior"]  # + grpo's `only` anchor
    # the second step's fifteen rows (the newest corrections join that table as they land)
    ladder = {reader.row_label(m) for m in names}
    assert len(ladder) == 15
    assert ladder <= set(lr5e5)
    vs_tis = {m: cells[9] for m, cells in lr5e5.items()}  # every row of the fifteen but AGRO (and GRPO) within 5 points of GRPO+TIS
    far = {m for m in ladder - {"GRPO+TIS"} if abs(float(vs_tis[m].split(" ± ")[0])) >= 5}
    assert far == {"AGRO", "GRPO"} and all(float(vs_tis[m].split(" ± ")[0]) < -15 for m in far)
    regime = lambda t: dict(re.findall(r"^\| ([\d.e-]+) \| [^\n]* \| (yes|no) \|$", t, re.M))
    assert regime(text) == {"0.0002": "no", "5e-05": "no"}
    with open(os.path.join(FIGURES, "drift_lr1.25e-5_toy.md")) as f:
        small = f.read()
    assert regime(small) == {"0.0002": "no", "1.25e-05": "yes"}
    scores = {m: float(cells[8].split("±")[0]) for m, cells in smaller_step_rows(small).items()}
    assert len(scores) == 5 and max(scores.values()) - min(scores.values()) < 3  # within 3 points
    # each within 3 points of its own N = 0 (the drop column of the lr 1.25e-5 leaderboard)
    _, rows = leaderboard_rows("leaderboard_lr1.25e-5_toy.md")
    drops = [float(row["drop from N=0 (95%)"].split(" ± ")[0]) for row in rows.values()]
    assert len(drops) == 5 and all(-3 < d <= 0.5 for d in drops)


def test_the_preregistered_drift_reading_holds_in_the_generated_table():
    """lab/docs/leaderboard-studies.md on the preregistered drift test: refuted, OAPL excluded at
    the floor; fitted at lr 5e-5 it refutes FlashREINFORCE and geometric rows (GSPO, GMPO, GGPO)
    that the model-based test ("The verdict") leaves; fitted at lr 2e-4 it refutes nothing, its
    smallest attainable Holm p not below 2.5%. The added analysis at more draws refutes in that
    direction too, the refuted rows that miss by the most truncated or gated weights, geometric
    rows among the refuted in both directions."""
    with open(os.path.join(FIGURES, "drift_toy.md")) as f:
        text = f.read()
    gated = {"GRPO+TIS", "GRPO+seq-TIS", "GRPO+seq-MIS", "IcePop (prime-rl form)", "IcePop (Ring-1T)", "FlashREINFORCE"}
    geometric = {"GSPO", "GMPO", "GGPO"}

    def sides(head):
        line = re.search(head + r".*", text).group(0)
        assert "steps: OAPL): refuted." in line
        ways = line.split("; fitted at lr 5e-05")
        refuted = [{m: float(e) for m, e in re.findall(
            r"(?:: |, )([^,:]+?) ([+-][\d.]+) \(bootstrap SE [\d.]+, Holm p [\d.e-]+\)", way)} for way in ways]
        floors = [float(re.search(r"the smallest Holm p its draws allow: ([\d.e-]+)\)", way).group(1)) for way in ways]
        return refuted, floors
    (at_2e4, at_5e5), (floor_2e4, _) = sides(r"\*\*The preregistered test\*\*")
    assert not at_2e4 and floor_2e4 >= 0.025
    assert "FlashREINFORCE" in at_5e5 and geometric & set(at_5e5)
    model = re.search(r"\*\*The verdict\*\* .*", text).group(0)
    model_refuted = set().union(*(set(re.search(r"refuted after Holm: (.*?);", w).group(1).split(", "))
                                  for w in model.split("; fitted at lr 5e-05")))
    assert not geometric & model_refuted
    (more_2e4, more_5e5), floors = sides(r"\*Added analysis \(not preregistered\)")
    assert max(floors) < 0.025 and geometric & set(more_2e4) and geometric & set(more_5e5)
    assert set(sorted(more_2e4, key=lambda m: -abs(more_2e4[m]))[:3]) <= gated


def test_at_matched_drift_the_gated_rows_lose_more_at_the_larger_step():
    """lab/docs/leaderboard-studies.md: at the K3 of lr 5e-5's stale cells, GRPO+TIS, GRPO+seq-TIS
    and FlashREINFORCE at lr 2e-4 lose more from their own N = 0 (every lr 5e-5 stale cell
    against the lr 2e-4 cell nearest in K3, within a factor 2), by more than 10 points at the
    larger K3, and IcePop (Ring-1T) loses less. From the first table of lab/figures/drift_toy.md."""
    with open(os.path.join(FIGURES, "drift_toy.md")) as f:
        _, body = report.table_rows(f.read().split("\n\n")[1])
    cells = {}
    for parts in body:
        found = [re.match(r"([\d.]+) \(([\d.e+-]+)\)", c) for c in parts[2:]]
        values = [(float(m.group(1)), float(m.group(2))) for m in found if m]
        cells[(parts[0], parts[1])] = (values[0][0], values[1:])  # (N = 0, [(final, K3) of stale cells])

    def losses_at_matched_drift(row):
        base_hi, hi = cells[(row, "0.0002")]
        base_lo, lo = cells[(row, "5e-05")]
        out = []
        for final, k3 in lo:
            near = min(hi, key=lambda c: abs(math.log(c[1] / k3)))
            if abs(math.log(near[1] / k3)) < math.log(2):
                out.append((near[0] - base_hi) - (final - base_lo))
        return out
    for row in ("GRPO+TIS", "GRPO+seq-TIS", "FlashREINFORCE"):
        more = losses_at_matched_drift(row)
        assert more and all(d < 0 for d in more) and min(more) < -10
    assert all(d > 0 for d in losses_at_matched_drift("IcePop (Ring-1T)"))


def smaller_step_rows(text):
    """{method: its cells} of a drift file's "Tiers at both step sizes" (cells[6] the smaller step's
    tier, cells[8] its score, cells[9] its difference to GRPO+TIS)."""
    rows = text.split("**Tiers at both step sizes**")[1].split("\n\n")[1].splitlines()[2:]
    return {cells[1].strip(): [c.strip() for c in cells] for cells in (row.split("|") for row in rows)}


def share_clip_2e4_n8(section):
    return float(re.search(r"\| 0\.0002 \| 8 \| \d+ \| ([\d.]+) \|", section).group(1))


def test_the_direction_differences_in_the_docs_are_the_generated_ones():
    """lab/docs/leaderboard-studies.md's direction table quotes the pooled model's differences: each
    is in lab/figures/direction_toy.md, which `make tables` makes."""
    with open(os.path.join(ROOT, "lab", "docs", "leaderboard-studies.md")) as f:
        quoted = re.findall(r"\| \+([\d.]+ ± [\d.]+; p = [\d.e-]+) \|", f.read())
    with open(os.path.join(FIGURES, "direction_toy.md")) as f:
        generated = f.read()
    assert len(quoted) == 4 and all(q in generated for q in quoted)


def test_the_seed_readings_hold_in_the_generated_tables():
    """lab/docs/leaderboard.md's seed: every table keeps the seed and the seed x N blocks; at lr 2e-4
    its moment SD is under a quarter of the error SD (the smallest SD per N), whatever its F test
    says (it crosses the 5% line as seeds land), and the blocks move the scores by under
    two points, the rows apart from the common shift by under half a point on average; at lr
    5e-5 and 1.25e-5 the test rejects by far (F above 50) and the seed's SD is two to three
    points (1.5-3.5)."""
    def seed_line(name):
        with open(os.path.join(FIGURES, name)) as f:
            return re.search(r"\*\*The seed\*\* .*", f.read()).group(0)
    for name, f_range in (("leaderboard_toy.md", (0, math.inf)), ("leaderboard_lr5e-5_toy.md", (50, math.inf)),
                          ("leaderboard_lr1.25e-5_toy.md", (50, math.inf))):
        line = seed_line(name)
        assert line.startswith("**The seed** (kept as the design's block") and "One shift per seed and N" in line
        assert f_range[0] < float(re.search(r"F = ([\d.]+)", line).group(1)) < f_range[1]
        tau = float(re.search(r"variance component \(moments\) SD (\d+\.\d+)", line).group(1))
        with open(os.path.join(FIGURES, name)) as f:
            sigma = [float(v) for v in re.search(r"error SD per N: ([^;]*);", f.read()).group(1).split(", ")
                     for v in [v.split(": ")[1]]]
        assert tau < 0.25 * min(sigma) if f_range[0] == 0 else 1.5 < tau < 3.5
    moves = re.search(r"move by ([-+][\d.]+) points on average and, apart from that common shift, by "
                      r"(\d+\.\d+) on average, at most (\d+\.\d+)", seed_line("leaderboard_toy.md"))
    mean, mean_apart, max_apart = map(float, moves.groups())
    assert abs(mean) < 2 and mean_apart < 0.5 and max_apart < 2


def test_the_newest_readings_at_the_second_step_hold_in_the_generated_table():
    """lab/docs/leaderboard.md's readings of the nine newest corrections at lr 5e-5: TRM, DPPO-KL, REC
    one-side, AsymRE and BAPO in the top tier and level with GRPO+TIS; they and the outlier mask
    level with PPO against the sampler and DPPO-KL not below it (its interval sits at zero: above
    or level as seeds land, so the test bets on neither); REC ring below both references;
    AGRO's and GRPO's spreads the largest, above twice any other held row's; FlashREINFORCE below
    both and above GRPO, its gate rejecting more than half of the responses at N = 32; OAPL at
    0% at every N > 0 in every seed (a cell's last number is its largest seed)."""
    text, rows = leaderboard_rows("leaderboard_lr5e-5_toy.md")
    score = lambda m: float(rows[m]["stale accuracy (95%)"].split(" ± ")[0])
    scored = [m for m in rows if rows[m]["stale accuracy (95%)"]]  # rows still landing have none yet
    top = set(rows[max(scored, key=score)]["tier"])
    level = lambda cell: not above(cell) and not below(cell)
    for m in ("TRM", "DPPO-KL", "REC-OneSide-NoIS", "AsymRE", "BAPO"):
        assert top & set(rows[m]["tier"]) and level(rows[m][VS_TIS]), m
    for m in ("TRM", "PPO+outlier RS (SkyRL's mask)", "REC-OneSide-NoIS", "AsymRE", "BAPO"):
        assert level(rows[m][VS_PPO]), m
    assert not below(rows["DPPO-KL"][VS_PPO])
    paired = paired_rows("leaderboard_lr5e-5_toy.md")  # leaderboard-studies.md's: level in both analyses
    for m in ("REC-OneSide-NoIS", "AsymRE"):
        assert paired[m]["PPO vs sampler (GRPO, behavior anchor)"][1] >= 0.05, m
    assert below(rows["REC-Ring-NoIS"][VS_PPO]) and below(rows["REC-Ring-NoIS"][VS_TIS])
    listed = re.search(r"prior df [\d.]+\): (.*?)\. (?:The intervals|Every)", text).group(1)
    spreads = {m: float(v) for m, v in re.findall(r"(?:^|, )([^,]+?) (\d+\.\d\d)(?=, |$)", listed)}
    held = [v for m, v in spreads.items() if m not in ("AGRO", "GRPO", "OAPL")]
    assert len(spreads) == len(scored) and min(spreads["AGRO"], spreads["GRPO"]) > 2 * max(held)
    assert rows["PPO+outlier RS (SkyRL's mask)"]["is_masked_frac (%) at N=32"].startswith("0.0 ")
    flash = rows["FlashREINFORCE"]
    assert below(flash[VS_TIS]) and below(flash[VS_PPO]) and above(flash[VS_GRPO])
    assert not top & set(flash["tier"]) and float(flash["is_masked_frac (%) at N=32"].split()[0]) > 50
    assert all(float(re.findall(r"[\d.]+", rows["OAPL"][f"N={n}"])[-1]) < 0.5 for n in (8, 32, 128))
    assert float(re.findall(r"[\d.]+", rows["OAPL"]["N=0"])[0]) > 50


def test_the_lr_2e4_readings_say_what_the_lr_5e5_table_says_beside_them():
    """lab/docs/leaderboard.md's readings at lr 2e-4 and, beside each, lr 5e-5's so far (and the
    README's sentence on it): PPO against the sampler above GRPO and level with GRPO+TIS; GRPO+TIS
    in the top row's tier and above GRPO; each in the pooled model alone, the paired test on three
    seeds rejecting fewer than a tenth of the reference differences."""
    text, rows = leaderboard_rows("leaderboard_lr5e-5_toy.md")
    ppo, tis, level = "PPO vs sampler (GRPO, behavior anchor)", rows["GRPO+TIS"], lambda c: not above(c) and not below(c)
    scored = [m for m in rows if rows[m]["stale accuracy (95%)"]]
    best = max(scored, key=lambda m: float(rows[m]["stale accuracy (95%)"].split(" ± ")[0]))
    assert above(rows[ppo][VS_GRPO]) and level(rows[ppo][VS_TIS])
    assert set(rows[best]["tier"]) & set(tis["tier"]) and above(tis[VS_GRPO])
    paired = paired_rows("leaderboard_lr5e-5_toy.md")
    assert not paired_above(paired, "GRPO+TIS", "GRPO") and not paired_above(paired, ppo, "GRPO")
    both = re.search(r"of the (\d+) reference differences, (\d+) are apart from 0 in both", text)
    assert int(both.group(2)) < 0.1 * int(both.group(1))


def test_the_lag_map_reads_the_leaderboard_for_each_frameworks_row():
    """lab/figures/lag_map_toy.md (make tables): one line per framework and row of
    lab/docs/frameworks.yaml, each row a real one (its key names a registered objective at
    settings it registers); where the row has runs its tier, score and the cells at its lag's N
    and at four times that are the leaderboard table's, else it says it is not on the ladder yet."""
    with open(os.path.join(ROOT, "lab", "docs", "frameworks.yaml")) as f:
        frameworks = yaml.safe_load(f)["frameworks"]
    with open(os.path.join(FIGURES, "lag_map_toy.md")) as f:
        _, body = report.table_rows(f.read().split("\n\n")[2])
    _, table = leaderboard_rows("leaderboard_toy.md")
    listed = [(fw, key) for fw in frameworks for key in fw["rows"]]
    assert len(body) == len(listed)
    for (fw, key), cells in zip(listed, body):
        assert cells[0] == fw["name"] and cells[4].startswith(reader.row_label(key) + ": ")
        assert reader.row_label(key) != key  # parsed into an objective and settings it registers
        label = reader.row_label(key)
        if label not in table:
            assert cells[5] == "not on the ladder yet", key
            continue
        row = table[label]
        first = report.ladder_n(fw["bound"], [0, 8, 32, 128])
        later = report.ladder_n(4 * first, [0, 8, 32, 128]) if first else None
        assert cells[5:7] == [row["tier"], row["stale accuracy (95%)"]], key
        # a row part-way up the ladder: the cells it has so far, blanks for the rest
        assert cells[7] == (f"N={first}: {row[f'N={first}']}" if row[f"N={first}"] else ""), key
        assert cells[8] == (f"N={later}: {row[f'N={later}']}" if later and row[f"N={later}"] else ""), key
    assert {key for _, key in listed} >= {"primerl", "primerl_ipo", "pipelinerl", "skyrl_geo", "nemorl", "tinker"}
    # the head's reading: at its defaults no trainer holds a lag above 1 exactly, a few hold it at 1
    exact = [int(re.match(r"exactly (\d+)", fw["lag"]).group(1)) for fw in frameworks if fw["lag"].startswith("exactly")]
    assert exact and max(exact) == 1


def test_the_within_tier_line_counts_the_same_tier_pairs():
    """Each leaderboard table's "Within a tier" line counts the pairs whose tier letters
    overlap in its own table, and lists as many pairs as it says differ."""
    for name in ("leaderboard_toy.md", "leaderboard_lr5e-5_toy.md", "leaderboard_lr1.25e-5_toy.md"):
        text, rows = leaderboard_rows(name)
        found = re.search(r"of the (\d+) pairs that share a letter, (\d+) differ individually(?:: (.*))?\.$",
                          text, re.M)
        tiers = {m: set(r["tier"]) for m, r in rows.items() if re.fullmatch(r"[a-z]+", r["tier"])}  # untiered rows parse shifted
        shared = sum(1 for a in tiers for b in tiers if a < b and tiers[a] & tiers[b])
        assert found and int(found.group(1)) == shared, name
        listed = found.group(3).split("; ") if found.group(3) else []
        assert len(listed) == int(found.group(2)) and all(" above " in p for p in listed)


def test_the_tidy_tables_are_what_make_tables_makes(tmp_path):
    """make tables writes one tidy table per grid (lab/figures/runs_<grid>.csv, one row per kept run):
    each committed one is what lab/plot.py tidy makes from the committed results, byte for byte (its
    numbers are the runs' logged values and their means), and pandas reads it in one line."""
    import pandas as pd
    with open(os.path.join(ROOT, "Makefile")) as f:
        grids = re.search(r"for grid in ([^;]+); do", f.read()).group(1).split()
    made = 0
    for grid in grids:
        if not os.path.isdir(os.path.join(ROOT, "results", grid)):
            continue
        committed = os.path.join(FIGURES, f"runs_{grid}.csv")
        remade = str(tmp_path / f"runs_{grid}.csv")
        plot.main(["tidy", os.path.join(ROOT, "results", grid), "--out", remade])
        assert open(remade).read() == open(committed).read(), f"{committed}: run make tables"
        frame = pd.read_csv(committed)
        assert len(frame) == len(os.listdir(os.path.join(ROOT, "results", grid)))
        assert {"row", "settings", "N", "seed", "rounding_path", "final", "late_mean", "k3"} <= set(frame.columns)
        made += 1
    assert made >= 3


def test_the_long_answer_reading_is_the_generated_h3_verdict():
    """lab/docs/leaderboard.md states H3's verdict on the kept runs; it is the one
    lab/figures/seq_tail_toy.md (make tables) prints, and the rows whose pairs the page names as
    not heavier are those its table marks so (the README says the same)."""
    page = open(os.path.join(ROOT, "lab", "docs", "leaderboard.md")).read()
    table = open(os.path.join(ROOT, "lab", "figures", "seq_tail_toy.md")).read()
    verdict = re.search(r"\*\*H3: (\w+)\*\*", table).group(1)
    assert f"**H3 is {verdict}**" in " ".join(page.split())
    if verdict == "refuted":
        assert "pairs of PPO against the sampler and of GRPO+TIS are not heavier" in " ".join(page.split())
        _, body = report.table_rows(table.split("\n\n")[1])
        assert {cells[0] for cells in body if cells[-1] == "no"} == {"PPO vs sampler (GRPO, behavior anchor)", "GRPO+TIS"}


def test_the_oapl_baseline_reading_is_the_generated_verdict():
    """lab/docs/leaderboard-studies.md reads preregistration section 5 from
    lab/figures/oapl_baseline_toy.md (make tables): OAPL with the group mean as baseline off the
    floor at N = 8 and 32, at its defaults on it, and the ablated row below the base model at both."""
    page = " ".join(open(os.path.join(ROOT, "lab", "docs", "leaderboard-studies.md")).read().split())
    table = open(os.path.join(FIGURES, "oapl_baseline_toy.md")).read()
    off = re.search(r"^Off the floor \(the seeds' mean above 5% at every N\): (.*)\.$", table, re.M).group(1)
    assert off == "OAPL: no, at N = 8, 32; OAPL (oapl_beta1 100): yes"
    assert "It survives: with the mean as baseline OAPL ends off the floor at both N" in page
    base = base_model(leaderboard_rows("leaderboard_toy.md")[0])
    _, body = report.table_rows(table.split("\n\n")[1])
    ablated = [float(cells[3].split()[0]) for cells in body if cells[0] == "OAPL (oapl_beta1 100)"]
    assert len(ablated) == 2 and max(ablated) < base


def test_the_flash_gate_reading_is_the_preregistered_rule_on_the_generated_table():
    """lab/docs/leaderboard-studies.md reads preregistration section 6 from
    lab/figures/flash_gate_toy.md (make tables): a gated threshold above the default survives if
    its seeds' mean at N = 32 is 10 points or more above both the default's and the ungated row's;
    only flash_delta 0.1 does, by under a point beyond the rule; every gated row masks most of
    the tokens (last 10%) and ends below the base model."""
    page = " ".join(open(os.path.join(ROOT, "lab", "docs", "leaderboard-studies.md")).read().split())
    table = open(os.path.join(FIGURES, "flash_gate_toy.md")).read()
    _, body = report.table_rows(table.split("\n\n")[1])
    rows = {cells[0]: (float(cells[3].split()[0]), float(cells[6].split()[0])) for cells in body}
    default, ungated = rows.pop("FlashREINFORCE")[0], rows.pop("FlashREINFORCE (flash_delta 14)")[0]
    margin = {m: mean - max(default, ungated) for m, (mean, _) in rows.items()}
    assert len(rows) == 5 and {m for m, d in margin.items() if d >= 10} == {"FlashREINFORCE (flash_delta 0.1)"}
    assert margin["FlashREINFORCE (flash_delta 0.1)"] < 11
    assert "It survives by the preregistered rule, narrowly: at flash_delta 0.1" in page
    base = base_model(leaderboard_rows("leaderboard_toy.md")[0])
    assert all(masked > 50 and mean < base for mean, masked in rows.values())
