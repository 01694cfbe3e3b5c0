"""lab/plot.py on synthetic run folders: every figure draws, and its table holds the right numbers."""
import json
import math
import os
import re

import pandas as pd
import pytest

import losses
import run_info
from lab import plot, reader, report, stats
from lab.tests.conftest import ROOT, write_run


def _table(path):
    return open(os.path.splitext(path)[0] + ".md").read()


def test_fig1_fig3_fig2_fig5_fig7_from_a_ladder(tmp_path):
    runs = tmp_path / "runs"
    for loss in ("grpo", "ggpo"):
        for delay, final in ((0, 0.5), (8, 0.25)):
            for seed in (0, 1):
                write_run(runs, final + 0.1 * seed, loss, delay, seed, k3=0.001 * (1 + delay))
    out = {f: str(tmp_path / f"{f}.png") for f in ("fig1", "fig2", "fig3", "fig5", "fig7")}
    for figure, path in out.items():
        plot.main([figure, str(runs), "--out", path, "--delay", "8"])
        assert os.path.getsize(path) > 10_000
    # Fig. 3: mean over seeds of 0.5/0.6 and 0.25/0.35, with the min-max spread
    assert "| GRPO | 55.0 (50.0-60.0) | 30.0 (25.0-35.0) |" in _table(out["fig3"])
    assert "| GGPO | 55.0 (50.0-60.0) | 30.0 (25.0-35.0) |" in _table(out["fig3"])
    # and K3 over the last 10% of 10 updates (update 10): 0.001 * (1 + N) * 10, x1e-3
    assert _table(out["fig3"]).count("| GRPO | 10 (10-10) | 90 (90-90) |") == 1
    # Fig. 1 draws the N = 8 runs only: K3 = 0.001 * 9 * 10 at the last update
    assert "| GRPO | 90 (90-90) | 0.2 (0.2-0.2) | 50.0 (45.0-55.0) | 30.0 (25.0-35.0) |" \
        in _table(out["fig1"])
    # Fig. 2: N warm-up batches before the first update; T batches in all
    assert "| 8 | 64 | 80 |" in _table(out["fig2"]) and "| 0 | 0 | 80 |" in _table(out["fig2"])
    # Fig. 5 at N = 8: partial mean = the final accuracy, unsolved solved = half of it
    assert "| GRPO | 30.0 (25.0-35.0) | 15.0 (12.5-17.5) |" in _table(out["fig5"])
    assert "partial mean (%, of 50 problems) | final unsolved solved (%, of 20) |" in _table(out["fig5"])
    # Fig. 7: the last 10% of 10 updates is update 10 alone: K3 = 0.001 * (1 + N) * 10
    assert "| GGPO | 8 | 90 | 0.2 | 0.05 |  | 0.5 | 1 | 0.2 | 9 |" in _table(out["fig7"])
    assert reader.eval_key([{"eval/toy/mean@4": 1, "eval/avg/mean@4": 1}], "mean@") == "eval/toy/mean@4"
    two = [{"eval/math500/mean@4": 1, "eval/aime24/mean@4": 1, "eval/avg/mean@4": 1}]
    assert reader.eval_key(two, "mean@") == "eval/math500/mean@4"
    assert reader.eval_key(two, "mean@", average=True) == "eval/avg/mean@4"
    with pytest.raises(ValueError, match="eval_every"):
        reader.eval_key([{"update": 1}], "mean@")


def test_fig4_fig8_fig9_fig10_from_their_grids(tmp_path):
    for seed in (0, 1, 2):
        for loss, final in (("grpo", 0.2), ("ggpo", 0.4)):
            write_run(tmp_path / "fig4", final + 0.01 * seed, loss, 0, seed,
                 **{"offline_pool.path": "pool.jsonl", "offline_pool.batches": 10})
    for beta in (0.01, 0.1):
        for refresh in (0, 5):
            write_run(tmp_path / "fig8", 0.3 + beta + refresh / 100, "ggpo", 8, 0,
                 name=f"ggpo_N8_s0_beta-{beta}_ref_refresh_every-{refresh}",
                 **{"loss_args.beta": beta, "ref_refresh_every": refresh})
    for variant, final in (("original", 0.1), ("detached", 0.4)):
        for seed in (0, 1):
            write_run(tmp_path / "fig10", final, "ggpo", 8, seed, name=f"ggpo_N8_s{seed}_v-{variant}",
                 **{"loss_args.ggpo_variant": variant})
    paths = {}
    for figure, root in (("fig4", "fig4"), ("fig8", "fig8"), ("fig9", "fig8"), ("fig10", "fig10")):
        paths[figure] = str(tmp_path / f"{figure}.png")
        plot.main([figure, str(tmp_path / root), "--out", paths[figure]])
        assert os.path.getsize(paths[figure]) > 10_000
    assert "| GGPO | 30.0 (30.0-30.0) | 41.0 (40.0-42.0) | 10 (10-10) |" in _table(paths["fig4"])  # K3 at update 10
    assert "pool of 10 batches" in _table(paths["fig4"])
    assert _table(paths["fig8"]).startswith("GGPO: beta and reference refresh at N = 8 (1 seed)")
    assert "| β=0.1, T_ref=5 | 45.0 | 0.2 | 10 |" in _table(paths["fig8"])
    assert "| β=0.01, fixed reference | 0.5 |" in _table(paths["fig9"])
    # reward 0.1 + 0.01 t: 0.155 over all 10 updates, 0.2 at the last; clipped 5% of tokens
    assert "| original | 0.155 (0.155-0.155) | 0.2 (0.2-0.2) | 10.0 (10.0-10.0) | 5.0 (5.0-5.0) |" \
        in _table(paths["fig10"])


def test_leaderboard_table_from_the_pooled_model(tmp_path):
    """Four entries, finals by hand. GRPO+TIS, seeds 0-2: N = 0, 8, 32, 128 finals [0.50] x 3,
    [0.40, 0.42, 0.44], [0.30, 0.33, 0.36], [0.20, 0.21, 0.22]; M2PO: each cell + 0.1 + 0.01 seed.
    Both rows have every seed at every N, so the model's cell means are their raw means (the
    sum-to-zero seed effects average out): scores 32.0 and 43.0, drops -18.0 and -18.0 (N = 0:
    50.0 and 61.0). PPO vs the sampler (grpo, behavior anchor: its own row), seed 0 only, 0.5 at
    every stale N, and GRPO, no N = 128: fewer than stats.MIN_SEEDS seeds, so no score, no
    comparison column, listed as not yet scored, last, by their mean final accuracy
    (report.partial_score: GRPO 90.0, PPO 50.0)."""
    runs = tmp_path / "runs"
    tis = {0: [0.5] * 3, 8: [0.40, 0.42, 0.44], 32: [0.30, 0.33, 0.36], 128: [0.20, 0.21, 0.22]}
    for seed in (0, 1, 2):
        for delay, finals in tis.items():
            write_run(runs, finals[seed], "grpo_tis", delay, seed, logged={"is_chi2_token": 0.2})
            write_run(runs, finals[seed] + 0.1 + 0.01 * seed, "m2po", delay, seed, k3=0.002,
                 logged={"is_chi2_token": 0.5, "is_masked_frac": 0.25 + 0.1 * seed})
    for delay in (8, 32, 128):
        write_run(runs, 0.5, "grpo", delay, 0, name=f"grpo_N{delay}_s0_grpo_anchor-behavior",
             logged={"clip_frac": 0.1, "is_chi2_token": 0.3}, **{"loss_args.grpo_anchor": "behavior"})
    for delay in (8, 32):
        write_run(runs, 0.9, "grpo", delay, 0, logged={"is_chi2_token": 0.2})
    out = str(tmp_path / "leaderboard.png")
    plot.main(["leaderboard", str(runs), "--out", out])
    assert os.path.getsize(out) > 10_000 and os.path.getsize(str(tmp_path / "leaderboard_k3.png")) > 10_000
    table = _table(out)
    assert ("| tier | method | stale accuracy (95%) | rank (95%) | drop from N=0 (95%) | "
            "vs GRPO+TIS (simultaneous 95%) | seeds per N | N=0 | N=8 | N=32 | N=128 | K3 x1e-3 at N=32 | is_chi2_token at N=32 | "
            "is_masked_frac (%) at N=32 |") in table
    first = table.split("\n\n")[1].splitlines()[2:]  # the leaderboard's own rows, in order
    rows = {l.split(" | ")[1]: l.split(" | ") for l in first}
    tis_row, m2po_row = rows["GRPO+TIS"], rows["M2PO"]
    assert tis_row[2].startswith("32.0 ± ") and tis_row[4].startswith("-18.0 ± ")
    assert m2po_row[2].startswith("43.0 ± ") and m2po_row[4].startswith("-18.0 ± ")
    assert m2po_row[5].startswith("+11.0 ± ") and tis_row[5] == ""
    assert m2po_row[6:] == ["3/3/3/3", "61.0 (60.0-62.0)", "53.0 (50.0-56.0)", "44.0 (40.0-48.0)",
                            "32.0 (30.0-34.0)", "20 (20-20)", "0.5 (0.5-0.5)", "35.0 (25.0-45.0) |"]
    assert rows["GRPO"][2:5] == ["", "", ""] and rows["GRPO"][6] == "0/1/1/0"
    ppo = rows["PPO vs sampler (GRPO, behavior anchor)"]
    assert ppo[2:5] == ["", "", ""] and ppo[6] == "0/1/1/1"
    assert list(rows) == ["M2PO", "GRPO+TIS", "GRPO", "PPO vs sampler (GRPO, behavior anchor)"]
    assert (f"Not yet scored (runs of fewer than {stats.MIN_SEEDS} seeds at one of N = 8, 32, 128; their cells are shown "
            "and fitted, and they take no part in the tiers, ranks and comparisons): GRPO, PPO vs "
            "sampler (GRPO, behavior anchor).") in table
    assert "**The model** (`lab/stats.py`; statsmodels WLS" in table
    assert "**Seeds a comparison needs**" in table
    assert "At N = 0 the" not in table  # M2PO's N = 0 runs end elsewhere than GRPO+TIS's: no copies


def test_leaderboard_says_how_many_on_policy_runs_are_copies(tmp_path):
    """Two methods that are the same computation on-policy: at N = 0, seeds 0-2, the same training
    rewards and the same final accuracy, so 6 runs hold 3 distinct ones; their stale cells differ."""
    runs = tmp_path / "runs"
    for seed in (0, 1, 2):
        for loss, shift in (("grpo_tis", 0.0), ("m2po", 0.1)):
            write_run(runs, 0.5 + 0.01 * seed, loss, 0, seed)
            for delay in (8, 32, 128):
                write_run(runs, 0.3 + shift + 0.02 * seed - delay / 1000, loss, delay, seed)
    out = str(tmp_path / "leaderboard.png")
    plot.main(["leaderboard", str(runs), "--out", out])
    assert "At N = 0 the 6 runs hold 3 distinct ones" in _table(out)


def test_late_evaluation_measure_uses_the_same_runs(tmp_path):
    """Two seeds of one cell, evaluated at updates 0, 17, 18, 19, 20 of 20 (the last three in the
    last 15%): finals 0.42 and 0.50 (SD 5.66 points), late means (0.40 + 0.44 + 0.42) / 3 = 0.42
    and (0.46 + 0.44 + 0.50) / 3 = 0.4667 (SD 3.30 points): ratio 0.58. A run evaluated only at
    0 and 20 is left out of both."""
    runs = tmp_path / "runs"
    for seed, evals in ((0, {17: 0.3, 18: 0.40, 19: 0.44, 20: 0.42}), (1, {17: 0.2, 18: 0.46, 19: 0.44, 20: 0.50})):
        write_run(runs, 0.0, "grpo_tis", 8, seed, updates=20)
        path = runs / f"grpo_tis_N8_s{seed}" / "metrics.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        for row in rows:
            if row["update"] in evals:
                row["eval/toy/mean@4"] = evals[row["update"]]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    write_run(runs, 0.45, "grpo_tis", 8, 2, updates=20)
    lines = report.late_measure_lines(reader.load_runs(str(runs)))
    finals_sd, late_sd = 100 * 0.08 / math.sqrt(2), 100 * (0.4666667 - 0.42) / math.sqrt(2)
    assert f"| 8 | 1 | 2 | {finals_sd:.2f} | {late_sd:.2f} | {late_sd / finals_sd:.2f} |" in lines


def test_direction_ablation_table(tmp_path):
    """The 2 x 2 of lab/sweeps/direction_toy.yaml: wide and narrow band x both and harmful,
    N = 32, seeds 0 and 1; only wide-harmful varies (30, 40). The pooled model takes a shift per
    seed (the design's block: seed 1 is 10 / 4 = 2.5 above seed 0), so the residuals are -+3.75
    for wide-harmful and +-1.25 for the six other runs, and its residual variance is
    (2 x 3.75^2 + 6 x 1.25^2) / (8 runs - 4 cells - 1 seed shift) = 12.5. Balanced, so
    harmful - both is 15 (wide) and 0 (narrow), each with SE sqrt(12.5 (1/2 + 1/2)) and 95%
    half-width t(0.975, 3) x SE = 11.3; Holm over the two: wide 2 x p(|t| = 15 / sqrt 12.5, 3 df)
    = 0.048, narrow 1."""
    runs = tmp_path / "runs"
    for seed in (0, 1):
        for band, low, high in (("wide", 0.0, 5.0), ("narrow", 0.8, 1.2)):
            for direction_, final in (("both", 0.2), ("harmful", 0.3 + 0.1 * seed if band == "wide" else 0.2)):
                write_run(runs, final, "grpo_mis", 32, seed, name=f"{band}_{direction_}_s{seed}",
                          k3=0.001 * (1 + (band == "narrow")), logged={"is_masked_frac": 0.01 * (seed + 1)},
                     **{"loss_args.mis_low": low, "loss_args.mis_high": high,
                        "loss_args.mis_direction": direction_})
    out = str(tmp_path / "direction.png")
    plot.main(["direction", str(runs), "--out", out])
    table = _table(out)
    for line in ("| [0, 5] | both | 20.0 (20.0-20.0) |", "| [0, 5] | harmful | 35.0 (30.0-40.0) |",
                 "| [0.8, 1.2] | both | 20.0 (20.0-20.0) |", "| [0.8, 1.2] | harmful | 20.0 (20.0-20.0) |",
                 "| [0, 5] | harmful - both (95% t; Holm p) | 15.0 ± 11.3; p = 0.048 |",
                 "| [0.8, 1.2] | harmful - both (95% t; Holm p) | 0.0 ± 11.3; p = 1 |"):
        assert line in table, line
    assert table.index("[0, 5] | both") < table.index("[0.8, 1.2] | both")  # the published band first
    # masks and drift, each run's mean over its updates (K3 = k3 x update, updates 1-10: 5.5 k3), min-max
    # over the seeds' masked shares 1% and 2%
    assert "| [0, 5] | harmful | 1-2 | 5.5-5.5 |" in table and "| [0.8, 1.2] | both | 1-2 | 11-11 |" in table


def test_processors_table_pairs_runs_by_name(tmp_path):
    """lab/plot.py processors: each run against the run of the same name in --against; final
    mean@k on each and the difference; the last update with the same training rewards (here the
    rerun's reward parts from update 6 on, so 5); mean and max |difference|; a run only one
    folder has is left out, and a config that differs is refused."""
    ref, rerun = tmp_path / "leaderboard", tmp_path / "rerun"
    for loss, final in (("grpo_tis", 0.2), ("gspo", 0.5)):
        write_run(ref, final, loss, 8, 0)
        _session(ref / f"{loss}_N8_s0")
    write_run(ref, 0.4, "ggpo", 8, 0)  # in one folder only
    write_run(rerun, 0.25, "grpo_tis", 8, 0)
    write_run(rerun, 0.45, "gspo", 8, 0)
    _session(rerun / "grpo_tis_N8_s0", isa=("avx2", "avx512f"))
    _session(rerun / "gspo_N8_s0", isa=("avx2", "avx512f"))
    metrics = rerun / "gspo_N8_s0" / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    for row in rows[6:]:
        row["reward_mean"] += 0.001
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = str(tmp_path / "processors.png")
    plot.main(["processors", str(rerun), "--against", str(ref), "--out", out])
    table = _table(out)
    for line in ("| gspo_N8_s0 | AMD EPYC (avx2) | AMD EPYC (avx2, avx512f) | 50.0 | 45.0 | -5.0 | 5 of 10 |",
                 "| grpo_tis_N8_s0 | AMD EPYC (avx2) | AMD EPYC (avx2, avx512f) | 20.0 | 25.0 | +5.0 | 10 of 10 |",
                 "| mean (max) abs difference, 2 runs | | | | | 5.0 (5.0) | |"):
        assert line in table, line
    assert "ggpo" not in table
    with pytest.raises(ValueError, match="needs --against"):
        plot.main(["processors", str(rerun), "--out", out])
    write_run(tmp_path / "other", 0.2, "grpo_tis", 8, 0, lr=1e-3)
    with pytest.raises(ValueError, match=r"grpo_tis_N8_s0: its config differs .* in \['lr'\]"):
        plot.main(["processors", str(tmp_path / "other"), "--against", str(ref), "--out", out])


def test_fig7_fig10_without_clip_frac(tmp_path):
    runs = tmp_path / "runs"
    for seed in (0, 1):
        for delay in (0, 32):
            write_run(runs, 0.5, "grpo", delay, seed)
            write_run(runs, 0.6, "m2po", delay, seed, logged={"is_masked_frac": 0.25})
    # fig. 7 and fig. 10 with clip_frac absent for some objectives
    plot.main(["fig7", str(runs), "--out", str(tmp_path / "fig7.png")])
    for variant, logged in (("original", {}), ("detached", None)):
        write_run(tmp_path / "fig10", 0.3, "ggpo", 8, 0, name=f"ggpo_N8_s0_v-{variant}", logged=logged,
             **{"loss_args.ggpo_variant": variant})
    plot.main(["fig10", str(tmp_path / "fig10"), "--out", str(tmp_path / "fig10.png")])
    assert "| original | 0.155 | 0.2 | 30.0 | no clip |" in _table(str(tmp_path / "fig10.png"))
    assert "| detached | 0.155 | 0.2 | 30.0 | 5.0 |" in _table(str(tmp_path / "fig10.png"))


def test_numerics_table(tmp_path):
    """Two settings of lab/sweeps/numerics_toy.yaml: k3 over updates 1-10 and 31-60, engine_k3
    and engine_logp_diff_max averaged over all updates, one row per run, ordered by N."""
    runs = tmp_path / "runs"
    write_run(runs, 0.3, "grpo", 8, 0, updates=60, name="grpo_N8_s0_bl-engine",
         logged={"engine_k3": 2e-4, "engine_logp_diff_max": 0.3})
    write_run(runs, 0.3, "grpo", 0, 0, updates=60, name="grpo_N0_s0_bl-learner_sd-bfloat16", k3=0.0,
         logged={"engine_k3": 1e-4, "engine_logp_diff_max": 0.25}, behavior_logp="learner",
         sampler_dtype="bfloat16")
    out = str(tmp_path / "numerics.png")
    plot.main(["numerics", str(runs), "--out", out])
    rows = [l for l in _table(out).splitlines() if l.startswith("| 0") or l.startswith("| 8")]
    # k3 = 0.001 t: mean over t = 1..10 is 5.5e-3, over 31..60 45.5e-3
    assert rows == ["| 0 | bfloat16 | float32 | learner | 0 | 0 | 0.1 | 0.25 |",
                    "| 8 | float32 | float32 | engine | 5.5 | 45.5 | 0.2 | 0.3 |"]


def _session(folder, model="AMD EPYC", isa=("avx", "avx2", "fma"), start=0, **kw):
    """Add a session to a synthetic run's run_info.json, as train.py records it."""
    session = run_info.session_info(start, "onednn", "vllm")
    session["cpu"].update(model=model, isa=list(isa), torch_capability="AVX2")
    session["torch_threads"] = 1  # as a pinned sweep job records it, whatever this process has
    session["versions"].update(torch="2.13.0", vllm="0.32.0", transformers="5.19.0")
    session.update(**{"gpu": None, "git": {"commit": "abc1234def", "dirty": False}, **kw})
    path = folder / "run_info.json"
    old = json.loads(path.read_text())["sessions"] if path.exists() else []
    path.write_text(json.dumps({"sessions": old + [session]}))


def test_tables_name_their_machines_and_warn_when_processors_mix(tmp_path, capsys):
    """A line under the table counts runs per processor kind (an old run, without run_info.json,
    on an unknown machine) and names versions, backends and commits; runs on two processor
    kinds add a warning to the table and to stderr."""
    runs = tmp_path / "runs"
    for seed in (0, 1):
        write_run(runs, 0.5, "grpo", 0, seed)
        _session(runs / f"grpo_N0_s{seed}")
    out = str(tmp_path / "fig3.png")
    plot.main(["fig3", str(runs), "--out", out])
    # the K3 table under the accuracies: write_run's k3 is 0.001 x update, so 10e-3 at update 10 (the
    # last 10% of 10 updates)
    assert "| GRPO | 50.0 (50.0-50.0) |\n\nK3 x1e-3 between learner and sampler" in _table(out)
    assert _table(out).endswith("| GRPO | 10 (10-10) |\n\nruns: 2 on AMD EPYC (avx2); torch 2.13.0; "
                                "vllm 0.32.0; transformers 5.19.0; matmul onednn; sampler vllm; threads 1; "
                                "code at 1 commit(s) (each run's in its run_info.json)\n")
    assert "warning" not in capsys.readouterr().err
    # a third run resumed on an Intel machine with AVX-512 and AMX, the transformers sampler, and
    # a dirty tree; a fourth from before run_info.json
    write_run(runs, 0.5, "grpo", 0, 2)
    _session(runs / "grpo_N0_s2")
    _session(runs / "grpo_N0_s2", "Intel(R) Xeon(R) Platinum 8481C", ("avx2", "avx512f", "avx512_bf16",
             "amx_tile", "amx_bf16"), start=5, sampler="transformers",
             git={"commit": "fedcba9876", "dirty": True})
    write_run(runs, 0.5, "grpo", 0, 3)
    plot.main(["fig3", str(runs), "--out", out])
    notes = _table(out).split("|\n\n")[-1].splitlines()
    intel = "Intel(R) Xeon(R) Platinum 8481C (avx2, avx512f, avx512_bf16, amx_tile)"
    assert notes == [
        f"runs: 3 on AMD EPYC (avx2), 1 on {intel}, 1 on unknown machine (no run_info.json); torch "
        "2.13.0; vllm 0.32.0; transformers 5.19.0; matmul onednn; sampler transformers, vllm; threads 1; "
        "code at 2 commit(s), 1 with local changes (each run's in its run_info.json)", "",
        f"warning: this table mixes 2 processor kinds (AMD EPYC (avx2); {intel}): runs on different "
        "processors agree only within the seed spread"]
    assert f"lab/plot.py: {out}: {notes[2]}" in capsys.readouterr().err


def test_drift_table_regime_prediction_and_anchor(tmp_path):
    """lab/plot.py drift on two step sizes: the study's four and PPO against the sampler, N in
    {0, 8, 32}, seeds 0 and 1 (final 0.5 and 0.6 at N = 0, the higher seed alternating between
    cells; at lr 2e-4 20 points lower at every stale N, at lr 5e-5 2 lower). The model keeps the
    seed blocks: at each N three of the five cells have one seed high and two the other, so the
    blocks sit 1 point off each cell's mean and the residuals are +-4 in three cells and +-6 in
    two, variance (3 x 2 x 16 + 2 x 2 x 36) / (10 runs - 5 cells - 1 block shift) = 60 per N on
    4 df. The regime at N = 8: a drop of 20 (2), SE sqrt(60 / 2 + 60 / 2) = 7.75 on
    Satterthwaite's 8 df, 95% half-width t(0.975, 8) x 7.75 = 17.9; mild at 5e-5 only. PPO's
    clip fraction (2% at lr 2e-4, 0.5% at 5e-5) brackets M2PO's 1.22%."""
    hi, lo = tmp_path / "hi", tmp_path / "lo"
    for root, lr, drop, clip in ((hi, 2e-4, 0.2, 0.02), (lo, 5e-5, 0.02, 0.005)):
        for i, loss in enumerate(("grpo", "grpo_tis", "agro", "ggpo", "behavior")):
            for j, delay in enumerate((0, 8, 32)):
                for seed in (0, 1):
                    anchor = {"loss_args.grpo_anchor": "behavior"} if loss == "behavior" else {}
                    high = seed if (i + j) % 2 else 1 - seed  # which seed is 0.1 up alternates by cell
                    write_run(root, 0.5 + 0.1 * high - (drop if delay else 0.0), "grpo" if loss == "behavior" else loss,
                         delay, seed, name=f"{loss}_N{delay}_s{seed}", k3=1e-3 * (1 + delay) * lr / 2e-4,
                         logged={"clip_frac": clip if delay else 0.0}, lr=lr, **anchor)
    out = str(tmp_path / "drift.png")
    plot.main(["drift", str(hi), "--against", str(lo), "--out", out])
    table = _table(out)
    # K3 x1e-3 of a run: k3 x mean update (5.5); final over seeds (50, 60) at N = 0
    assert "| GRPO | 0.0002 | 55.0 (5.5) | 35.0 (49.5) | 35.0 (182) |" in table
    half = 17.9
    assert f"| 0.0002 | -20.0 ± {half} | -20.0 ± {half} | -20.0 ± {half} | -20.0 ± {half} | -20.0 ± {half} | no |" in table
    assert f"| 5e-05 | -2.0 ± {half} | -2.0 ± {half} | -2.0 ± {half} | -2.0 ± {half} | -2.0 ± {half} | yes |" in table
    # at lr 2e-4 the drop is 20 at every drift, so the fit predicts 20 where lr 5e-5 drops 2: each
    # method's error 18 (z 1.6 alone), jointly refuted (sum z^2 12.3 on 5, p 0.031)
    assert "**Fitted at lr 0.0002, predicting lr 5e-05** (`stats.drift_prediction`)" in table
    assert "RMS of the cells' errors 18.00 points" in table and "sum z^2 = 12.3 on 5 methods, p = 0.031" in table
    assert "**Fitted at lr 5e-05, predicting lr 0.0002** (`stats.drift_prediction`)" in table
    assert "it lies between lr 5e-05, N = 32 (0.50%) and lr 0.0002, N = 8 (2.00%)" in table  # ties: larger N
    assert os.path.getsize(out) > 10_000
    with pytest.raises(ValueError, match="needs --against"):
        plot.main(["drift", str(hi), "--out", out])


def test_drift_sets_the_tiers_of_both_step_sizes_side_by_side(tmp_path, capsys, monkeypatch):
    """Three rows, N in {0, 8, 32, 128}, seeds 0 and 1 at +-1 point (scored at two seeds here:
    stats.MIN_SEEDS set to 2). At lr 2e-4 TOPR ends at 60,
    GRPO+TIS at 30 and GRPO at 10 at every N (three tiers, TOPR above GRPO+TIS and GRPO below);
    at lr 5e-5 all three end at 60: one tier, all level. Each row's change is named. lr 2e-4 also
    has N = 2 runs in a folder of their own (at 0 %: they would move the tiers if counted): the
    drift table pools them as one step size's, the tiers leave them out."""
    monkeypatch.setattr(stats, "MIN_SEEDS", 2)
    hi, hi_n2, lo = tmp_path / "hi", tmp_path / "hi_n2", tmp_path / "lo"
    for root, lr, finals, delays in (
            (hi, 2e-4, {"topr": 0.6, "grpo_tis": 0.3, "grpo": 0.1}, (0, 8, 32, 128)),
            (hi_n2, 2e-4, {"topr": 0.0, "grpo_tis": 0.0, "grpo": 0.0}, (2,)),
            (lo, 5e-5, {"topr": 0.6, "grpo_tis": 0.6, "grpo": 0.6}, (0, 8, 32, 128))):
        for i, (loss, final) in enumerate(finals.items()):
            for j, delay in enumerate(delays):
                for seed in (0, 1):  # the higher seed alternates by cell
                    write_run(root, final + (0.01 if (seed + i + j) % 2 else -0.01), loss, delay, seed, lr=lr)
    out = str(tmp_path / "drift.png")
    plot.main(["drift", f"{hi},{hi_n2},{tmp_path / 'not_yet'}", "--against", str(lo), "--out", out])
    assert f"{tmp_path / 'not_yet'} does not exist yet: left out" in capsys.readouterr().err
    table = _table(out)
    assert "| N=0: final % (K3 x1e-3) | N=2: final % (K3 x1e-3) | N=8:" in table
    assert "| TOPR | 0.0002 | 60.0 (5.5) | 0.0 (5.5) | 60.0 (5.5) |" in table  # k3 1e-3 x mean update 5.5
    assert "**Tiers at both step sizes**" in table
    # scores 60 / 30 / 10 at lr 2e-4 (each row's own tier), 60 for all at 5e-5 (one tier). Each
    # cell's two runs at +-1; at each N two cells have one seed high and one the other, so the
    # seed blocks (kept) sit 1/3 off and the residuals are +-2/3 in two cells and +-4/3 in one:
    # variance (4 x 4/9 + 2 x 16/9) / (6 runs - 3 cells - 1 block shift) = 8/3 on 2 df per N; a
    # score's SE sqrt(3 x 8/3 / 2 / 9) = 0.667 on Satterthwaite's (3 v)^2 / (3 v^2 / 2) = 6 df,
    # 95% half-width t(0.975, 6) x 0.667 = 1.63. GRPO+TIS's are the +-4/3 residuals at every N:
    # its own variance (s2 = 2 sigma^2 on its own d = 2) is above the model's (one spread: three
    # variances on 2 df each spread no more than chance), so its intervals take it: SE 0.943 on
    # 1 / (3 (1/3)^2 / 2 + 1 / 2) = 1.5 df, t(0.975, 1.5) x 0.943 = 5.67; its differences
    # (SE sqrt(4/9 + 8/9) = 1.15 on 2.6 df, simultaneous) wider still
    assert "| TOPR | a | 1-1 | 60.0 ± 1.6 | +30.0 ± 5.4 (above) | a | 1-3 | 60.0 ± 1.6 | +0.0 ± 5.4 (level) |" in table
    assert "| GRPO+TIS | b | 2-2 | 30.0 ± 5.7 |  | a | 1-3 | 60.0 ± 5.7 |  | joins the top tier |" in table
    assert "| GRPO | c | 3-3 | 10.0 ± 1.6 | -20.0 ± 5.4 (below) | a | 1-3 | 60.0 ± 1.6 |" in table
    assert ("of the 3 rows scored at both: 3 change: TOPR (above -> level GRPO+TIS); GRPO+TIS (joins "
            "the top tier); GRPO (joins the top tier, below -> level GRPO+TIS).") in table


def test_leaderboard_with_one_run_per_cell_shows_the_cells(tmp_path):
    """A step size's first blocks (seed 0 only): no replicate for the model, so the table is the
    cells alone and says why."""
    runs = tmp_path / "runs"
    for loss, final in (("grpo", 0.5), ("grpo_tis", 0.55)):
        for delay in (0, 8):
            write_run(runs, final - 0.1 * (delay > 0), loss, delay, 0)
    out = str(tmp_path / "lb.png")
    plot.main(["leaderboard", str(runs), "--out", out])
    table = _table(out)
    assert "| GRPO+TIS | 55.0 | 45.0 |" in table and "| GRPO | 50.0 | 40.0 |" in table
    assert "One run per cell so far" in table and os.path.getsize(out) > 10_000


def test_a_row_is_an_objective_with_its_settings(tmp_path):
    """GRPO+TIS runs at tis_cap 5 beside runs at its default 2 are a row of their own, labelled by
    what differs; PPO against the sampler is such a row (grpo at grpo_anchor behavior), named."""
    runs = tmp_path / "runs"
    for seed in (0, 1, 2):
        for delay in (0, 8, 32, 128):
            write_run(runs, 0.4 + 0.01 * seed, "grpo_tis", delay, seed)
            write_run(runs, 0.2 + 0.01 * seed, "grpo_tis", delay, seed, name=f"grpo_tis_N{delay}_s{seed}_tis_cap-5.0",
                 **{"loss_args.tis_cap": 5.0})
            write_run(runs, 0.3 + 0.01 * seed, "grpo", delay, seed, name=f"grpo_N{delay}_s{seed}_grpo_anchor-behavior",
                 **{"loss_args.grpo_anchor": "behavior"})
    loaded = reader.load_runs(str(runs))
    assert set(reader.row_order(loaded)) == {"grpo_tis", "grpo_tis_tis_cap-5.0", "grpo_grpo_anchor-behavior"}
    assert reader.row_order(loaded)[0] == "grpo_grpo_anchor-behavior"  # grpo before grpo_tis, as registered
    assert reader.row_label("grpo_tis_tis_cap-5.0") == "GRPO+TIS (tis_cap 5)"
    assert reader.row_label("grpo_grpo_anchor-behavior") == "PPO vs sampler (GRPO, behavior anchor)"
    assert reader.row_label("grpo_mis_mis_direction-harmful_mis_low-0.8") == "GRPO+MIS (mis_direction harmful, mis_low 0.8)"
    out = str(tmp_path / "leaderboard.png")
    plot.main(["leaderboard", str(runs), "--out", out])
    rows = {l.split(" | ")[1]: l.split(" | ") for l in _table(out).split("\n\n")[1].splitlines()[2:]}
    assert rows["GRPO+TIS"][9:11] == ["41.0 (40.0-42.0)", "41.0 (40.0-42.0)"]
    assert rows["GRPO+TIS (tis_cap 5)"][9:11] == ["21.0 (20.0-22.0)", "21.0 (20.0-22.0)"]


def test_the_statistics_refuse_to_pool_settings_or_designs(tmp_path):
    """stats.fit_leaderboard refuses one method whose runs differ in an objective setting, naming
    the key; a table whose runs differ in a training setting (lr) is refused, naming it."""
    import pandas as pd
    data = pd.DataFrame([{"method": "grpo_tis", "N": n, "seed": s, "rounding_path": "P1", "y": 40.0 + s,
                          "trajectory": f"{n}{s}", "settings": json.dumps({"tis_cap": 2.0 if s else 5.0})}
                         for n in (0, 8, 32, 128) for s in (0, 1)])
    with pytest.raises(ValueError, match="differ in tis_cap"):
        stats.fit_leaderboard(data)
    runs = tmp_path / "runs"
    for delay in (0, 8):
        write_run(runs, 0.4, "grpo_tis", delay, 0)
        write_run(runs, 0.4, "grpo_tis", delay, 1, lr=5e-5)
    with pytest.raises(ValueError, match="differ in lr"):
        plot.main(["leaderboard", str(runs), "--out", str(tmp_path / "l.png")])


def test_within_a_tier_the_pairs_that_differ_unadjusted_are_listed():
    """Same-tier pairs: a, b, c share x and b, d share y; a-b (p 0.01), b-d (0.02) and b-c (0.04)
    differ at the unadjusted 5% and are listed, by p, the higher first; a-c (0.3) does not; a-d
    and c-d share no letter, whatever their p."""
    result = {"tiers": {"a": "x", "b": "xy", "c": "x", "d": "y"}, "score_at_average": {"a": (50.0, 1), "b": (52.5, 1),
              "c": (49.0, 1), "d": (40.0, 1)},
              "pairs_raw": {("a", "b"): 0.01, ("a", "c"): 0.3, ("b", "c"): 0.04, ("a", "d"): 0.001,
                            ("b", "d"): 0.02, ("c", "d"): 0.002}}
    line = report.within_tier_lines(result, str.upper)[1]
    assert line.endswith("of the 4 pairs that share a letter, 3 differ individually: B above A (+2.5, p 0.01); "
                         "B above D (+12.5, p 0.02); B above C (+3.5, p 0.04).")


def test_the_common_rule_and_a_relation_across_step_sizes():
    """Above / below where the pooled interval and the seed-paired Holm test both reject with one
    sign; level where neither does; model-dependent otherwise or without a paired test. Across
    two step sizes: both (the same call), reversed, one (called at one), neither."""
    v = report.common_verdict
    assert v((3.0, 1.0, 0.001), (2.5, 1.0, 0.01, 5)) == "above"
    assert v((-3.0, 1.0, 0.001), (-2.5, 1.0, 0.01, 5)) == "below"
    assert v((3.0, 1.0, 0.2), (2.5, 1.0, 0.3, 5)) == "level"
    assert v((3.0, 1.0, 0.001), (2.5, 1.0, 0.3, 5)) == v((3.0, 1.0, 0.2), (2.5, 1.0, 0.01, 5)) == "model-dependent"
    assert v((3.0, 1.0, 0.001), (-2.5, 1.0, 0.01, 5)) == v((3.0, 1.0, 0.001), None) == "model-dependent"
    a = report.across_steps
    assert (a("above", "above"), a("below", "above"), a("above", "level"), a("model-dependent", "below"),
            a("level", "model-dependent")) == ("both", "reversed", "one", "one", "neither")


def _step_fit(scores, tiers, seeds=range(5), drop=None):
    """A hand-made both_step_fits entry for rows scoring `scores` at every N: the pooled model's
    reference differences and pairs significant (p 0.001) where the scores differ by more than 5
    points, else not (p 0.9); runs at each seed at +0.1 x ((seed + row index) % 3 - 1) (the rows'
    per-seed noise, so paired differences vary); `drop`: a (method, N, seed) left out."""
    rows = list(scores)
    p = lambda a, b: 0.001 if abs(scores[a] - scores[b]) > 5 else 0.9
    result = {"score": {m: (scores[m], 1.0) for m in rows}, "score_at_average": {m: (scores[m], 1.0) for m in rows},
              "tiers": tiers, "vs": {r: {m: (scores[m] - scores[r], 1.0, p(m, r)) for m in rows if m != r}
                                     for r in stats.REFERENCES},
              "pairs": {(a, b): p(a, b) for i, a in enumerate(rows) for b in rows[i + 1:]}}
    data = pd.DataFrame([{"method": m, "N": n, "seed": s, "y": scores[m] + 0.1 * ((s + i) % 3 - 1)}
                         for i, m in enumerate(rows) for n in (0, *stats.STALE_DELAYS) for s in seeds
                         if (m, n, s) != drop])
    result["paired"] = stats.seed_paired(data, rows)
    return result, data


def test_relations_at_both_step_sizes_as_preregistered():
    """Four rows. lr 2e-4: TOPR 60, PPO against the sampler 40, GRPO+TIS 30, GRPO 10, four tiers;
    lr 5e-5: TOPR, PPO and GRPO+TIS at 60 (one tier), GRPO 20. (a) 9 relations: GRPO below
    GRPO+TIS and PPO, and TOPR, GRPO+TIS and PPO above GRPO, at both (5); TOPR and PPO above
    GRPO+TIS, TOPR above PPO and GRPO+TIS below PPO at lr 2e-4 only (4). (b) the 6 pairs split at
    lr 2e-4: GRPO's 3 at both, the others at one only. Standing: TOPR (its two verdicts), GRPO+TIS
    and PPO (join the top tier, one verdict each) change, GRPO does not. With one run of seed 4
    missing at lr 5e-5 the section says not yet, 3 of 4 rows complete, and its counts are
    provisional."""
    ppo, order = "grpo_grpo_anchor-behavior", ["topr", "grpo_grpo_anchor-behavior", "grpo_tis", "grpo"]
    hi = _step_fit({"topr": 60.0, ppo: 40.0, "grpo_tis": 30.0, "grpo": 10.0},
                   {"topr": "a", ppo: "b", "grpo_tis": "c", "grpo": "d"})
    lo = _step_fit({"topr": 60.0, ppo: 60.0, "grpo_tis": 60.0, "grpo": 20.0},
                   {"topr": "a", ppo: "a", "grpo_tis": "a", "grpo": "b"})
    text = "\n".join(report.step_size_lines({2e-4: hi, 5e-5: lo}, order, str.upper))
    assert "preregistration.md, section 1" in text and "every row with seeds 0-4 at every N at lr 5e-05:" in text
    assert "(a) The rows against the references (9 relations): 5 hold at both, 4 at one only, 0 reversed, 0 called at neither" in text
    assert (f"- vs GRPO_TIS: above at both: none; below at both: GRPO; at one only or reversed: TOPR (above -> level), "
            f"{ppo.upper()} (above -> level).") in text
    assert "- vs GRPO: above at both: TOPR, GRPO_GRPO_ANCHOR-BEHAVIOR, GRPO_TIS; below at both: none;" in text
    assert "(b) The 6 pairs the tiers split at lr 0.0002" in text
    assert "3 split in the same order at both, 3 at one only, 0 reversed, 0 called at neither." in text
    assert ("Rows that change standing (top-tier membership or a verdict against a reference): 3 of 4: TOPR (above -> "
            f"level GRPO_TIS, above -> level {ppo.upper()}); {ppo.upper()} (joins the top tier, above -> level GRPO_TIS); "
            f"GRPO_TIS (joins the top tier, below -> level {ppo.upper()}).") in text
    short = _step_fit({"topr": 60.0, ppo: 60.0, "grpo_tis": 60.0, "grpo": 20.0},
                      {"topr": "a", ppo: "a", "grpo_tis": "a", "grpo": "b"}, drop=("grpo", 128, 4))
    text = "\n".join(report.step_size_lines({2e-4: hi, 5e-5: short}, order, str.upper))
    assert "not yet, 3 of the 4 rows scored at both have seeds 0-4 at every N at lr 5e-05. *Provisional" in text
    assert "an added analysis" in "\n".join(report.step_size_lines({2e-4: hi, 1.25e-5: lo}, order, str.upper))


def test_the_frameworks_hypothesis_is_read_row_by_row():
    """Section 3: slime / ROLL's row level with GRPO in both analyses holds; verl's above PPO
    against the sampler in both is refuted; TRL AsyncGRPO's, apart in the pooled model only, is
    undecided. With 3 seeds at N = 128 each is provisional; with seeds 0-9 at every stale N it
    is not; a row not scored says so."""
    slime, verl, trl = report.FRAMEWORK_HYPOTHESIS
    ppo = "grpo_grpo_anchor-behavior"
    result = {"vs": {"grpo": {slime: (1.0, 2.0, 0.9)}, ppo: {verl: (8.0, 3.0, 0.001), trl: (5.0, 4.0, 0.01)}},
              "paired": {"grpo": {slime: (0.5, 2.5, 1.0, 3)}, ppo: {verl: (7.0, 2.0, 0.002, 3), trl: (4.0, 6.0, 0.4, 3)}}}
    every = {n: dict.fromkeys(range(10), 0.5) for n in (0, *stats.STALE_DELAYS)}
    cells = {slime: {**every, 128: dict.fromkeys((0, 3, 4), 0.5)}, verl: every, trl: every}
    text = "\n".join(report.framework_hypothesis_lines(result, cells))
    assert "with GRPO: holds, provisional (3 seeds at the fewest stale N): pooled +1.0 ± 2.0 (adjusted p 0.9), " \
           "paired +0.5 ± 2.5 (Holm p 1, 3 seeds)." in text
    assert "with PPO vs sampler (GRPO, behavior anchor): refuted (above): pooled +8.0" in text
    assert f"- {reader.row_label(trl)} with PPO vs sampler (GRPO, behavior anchor): undecided: pooled +5.0" in text
    del result["vs"]["grpo"][slime]
    assert "with GRPO: not scored yet." in "\n".join(report.framework_hypothesis_lines(result, cells))


def test_make_row_names_the_row_and_reads_its_line(tmp_path):
    """sweep.row_sweep builds one row's grid on the ladder's runs (its settings among those the
    objective registers, else refused naming them); report.row_key gives the key its runs will have
    (5 and 5.0: one row), and report.row_summary reads the row's line from a generated table, or
    says its runs have not landed."""
    import sweep
    grid = sweep.row_sweep("grpo_tis", ["tis_cap=5"])["grid"]
    assert grid == {"loss": ["grpo_tis"], "delay": [8, 32, 128, 0], "seed": list(range(10)),
                    "loss_args.tis_cap": [5]}
    with pytest.raises(ValueError, match="a key grpo_tis registers .clip_high, clip_low, tis_cap."):
        sweep.row_sweep("grpo_tis", ["beta=1"])
    assert report.row_key("grpo_tis", ["tis_cap=5"]) == report.row_key("grpo_tis", ["tis_cap=5.0"]) == "grpo_tis_tis_cap-5.0"
    assert report.row_key("grpo", ["grpo_anchor=behavior"]) == "grpo_grpo_anchor-behavior"
    runs = tmp_path / "runs"
    for seed in (0, 1, 2):
        for delay in (0, 8, 32, 128):
            write_run(runs, 0.4 + 0.01 * seed, "grpo_tis", delay, seed)
            write_run(runs, 0.5 + 0.01 * seed, "m2po", delay, seed)
    out = str(tmp_path / "leaderboard.png")
    plot.main(["leaderboard", str(runs), "--out", out])
    lines = report.row_summary(str(tmp_path / "leaderboard.md"), "m2po")
    assert lines[0].startswith("M2PO (m2po), from") and "  stale accuracy (95%): 51.0 ± " in "\n".join(lines)
    assert "has no line" in report.row_summary(str(tmp_path / "leaderboard.md"), "grpo_tis_tis_cap-5.0")[0]


def test_what_the_paths_confound_is_counted_per_block():
    """Rows a and b beside the references: a's two runs share seed, N and path with every
    reference; b's seed-1 run sits on path Q where no reference ran at seed 1: 2 of 4 runs
    inside, and b has none."""
    import pandas as pd
    rows = [(m, 8, s, "P") for m in ("grpo_tis", "grpo", "grpo_grpo_anchor-behavior") for s in (0, 1)]
    rows += [("a", 8, 0, "P"), ("a", 8, 1, "P"), ("b", 8, 0, "Q"), ("b", 8, 1, "Q")]
    data = pd.DataFrame(rows, columns=["method", "N", "seed", "rounding_path"])
    line = report.confounding_lines(data, str.upper)[1]
    assert "2 of the other rows' 4 runs share" in line and line.endswith("Rows with no run inside such a block: B.")


def test_figures_live_in_figures():
    """Nothing generated at the root; every figure a make target draws goes into lab/figures/ and is
    there, with its table; lab/plot.py without --out and lab/plot_fig6.py write there too."""
    figures_at_root = [f for f in os.listdir(ROOT)
                       if f.endswith(".png") or re.match(r"(fig\d|leaderboard|numerics).*\.md$", f)]
    assert figures_at_root == []
    with open(os.path.join(ROOT, "Makefile")) as f:
        outs = re.findall(r"--out (\S+)", f.read())
    assert outs and [o for o in outs if not o.startswith("lab/figures/")] == []
    for out in outs:
        if out.endswith(".csv"):  # a tidy table per grid (test_tables checks each)
            continue
        assert os.path.exists(os.path.join(ROOT, out)), out
        assert os.path.exists(os.path.join(ROOT, os.path.splitext(out)[0] + ".md")), out
    with open(os.path.join(ROOT, "lab", "plot_fig6.py")) as f:
        assert '"figures", "fig6.png"' in f.read()


def test_plot_writes_into_figures_by_default(monkeypatch):
    drawn = []
    monkeypatch.setitem(plot.FIGURES, "fig3", lambda root, out, **_: drawn.append(out))
    plot.main(["fig3", "runs/anything"])
    assert drawn == [os.path.join(ROOT, "lab", "figures", "fig3.png")]


def test_every_registered_objective_has_its_own_plot_style(monkeypatch):
    monkeypatch.setattr(losses, "LOSSES", dict(losses.LOSSES))
    losses.register("fifth", needs_ref=False, label="Fifth")(losses.LOSSES["grpo"].fn)
    styles = {name: plot.loss_style(name) for name in losses.LOSSES}
    k = len(losses.LOSSES)
    assert len(styles) == k and len({s[1:] for s in styles.values()}) == k  # color + line style
    assert [s[0] for s in styles.values()][:4] + [styles["fifth"][0]] == \
        ["GRPO", "GRPO+TIS", "AGRO", "GGPO", "Fifth"]
    runs = [{"loss": name} for name in ("ggpo", "fifth", "unregistered")]
    assert list(reader.by_loss(runs)) == ["ggpo", "fifth", "unregistered"]


def test_a_fifth_objective_is_drawn_with_its_label(tmp_path, monkeypatch):
    """An objective registered in losses.py (here in the test, as tests/test_layout.py trains one)
    is drawn in Fig. 1 with its label, from run folders as train.py writes them."""
    monkeypatch.setattr(losses, "LOSSES", dict(losses.LOSSES))
    losses.register("reinforce_mean", needs_ref=False, label="REINFORCE (group mean)")(losses.LOSSES["grpo"].fn)
    for seed in (0, 1):
        write_run(tmp_path / "runs", 0.4 + 0.1 * seed, "reinforce_mean", 8, seed)
    out = str(tmp_path / "fig1.png")
    plot.fig1(str(tmp_path / "runs"), out, delay=8, window=0)
    assert "| REINFORCE (group mean) |" in _table(out) and os.path.getsize(out) > 0


def test_drift_and_accuracy_rank_correlate_per_stale_n_over_runs_with_a_drift():
    """report.drift_accuracy_lines: Spearman's rho of final accuracy against the run's mean K3,
    per stale N; N = 0 and runs that logged no K3 left out."""
    def run(final, k3s):
        return {"final": final, "rows": [{"update": 0}] + [{"update": t, "k3": k} for t, k in enumerate(k3s, 1)]}
    groups = {("a", 8): [run(0.1, [4.0, 4.2]), run(0.3, [2.0])], ("b", 8): [run(0.2, [3.0]), run(0.4, [1.0]),
                                                                             run(0.9, [])],
              ("a", 32): [run(0.5, [1.0]), run(0.2, [2.0]), run(0.6, [3.0])], ("a", 0): [run(0.5, [1e-9])] * 3}
    line = report.drift_accuracy_lines(groups)[1]
    # N = 8: finals 0.1, 0.3, 0.2, 0.4 against K3 4.1, 2, 3, 1: ranks reversed, rho -1; N = 32: finals
    # ranked 2, 1, 3 against K3 1, 2, 3: rho = 1 - 6 * (1 + 1 + 0) / (3 * 8) = 0.5
    assert line.endswith("over every run at each stale N: N = 8: -1.00 (4 runs); N = 32: +0.50 (3 runs).")


def test_ablation_table_sets_the_ablated_row_beside_the_default_at_its_n_and_seeds(tmp_path):
    """lab/plot.py ablation: OAPL at oapl_beta1 100 (root) beside OAPL at its defaults (--against)
    at the same N and seeds only (the default's seed 5 is left out); final accuracy, K3 and reward
    over the last 10% of 10 updates (update 10: k3 0.001 x 10, reward 0.1 + 0.01 x 10); off the
    floor where the seeds' mean is above 5% at every N."""
    ablated, default = tmp_path / "ablation", tmp_path / "leaderboard"
    for seed in (0, 1):
        for delay, final in ((8, 0.30 + 0.1 * seed), (32, 0.02 + 0.04 * seed)):
            write_run(ablated, final, "oapl", delay, seed, name=f"oapl_N{delay}_s{seed}_oapl_beta1-100.0",
                      logged={"is_masked_frac": 0.5}, **{"loss_args.oapl_beta1": 100.0})
            write_run(default, 0.0, "oapl", delay, seed)
    write_run(default, 0.5, "oapl", 8, 5)
    out = str(tmp_path / "ablation.png")
    plot.main(["ablation", str(ablated), "--against", str(default), "--out", out])
    table = _table(out)
    assert "| OAPL | 8 | 0, 1 | 0.0 (0.0-0.0) | 10 (10-10) | 0.2 (0.2-0.2) |  |" in table  # no mask logged
    assert "| OAPL (oapl_beta1 100) | 8 | 0, 1 | 35.0 (30.0-40.0) | 10 (10-10) | 0.2 (0.2-0.2) | 50.0 (50.0-50.0) |" \
        in table
    assert "| OAPL (oapl_beta1 100) | 32 | 0, 1 | 4.0 (2.0-6.0) |" in table
    assert "Off the floor (the seeds' mean above 5% at every N): OAPL: no, at N = 8, 32; " \
           "OAPL (oapl_beta1 100): no, at N = 32." in table
