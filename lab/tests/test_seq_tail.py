"""H3 of the long-answer study (lab/docs/preregistration.md, section 4): a run's two tail means,
the preregistered pairs and their verdict, by hand."""
import pytest

import config
from lab import report


def run(loss="grpo", delay=8, seed=0, anchor=None, q90=(), ess=()):
    cfg = config.load_config(None, [f"loss={loss}", f"delay={delay}", f"seed={seed}"])
    if anchor:
        cfg["loss_args"]["grpo_anchor"] = anchor
    rows = [{"update": 0, "eval/toy/mean@4": 0.4}]  # update 0 logs no update: left out
    rows += [{"update": t, "is_seq_log_ratio_q90": q, "is_seq_ess": e}
             for t, (q, e) in enumerate(zip(q90, ess), 1)]
    return {"name": "r", "cfg": cfg, "loss": loss, "delay": delay, "seed": seed, "rows": rows}


def test_the_means_cover_updates_1_to_200_only():
    r = run(q90=[1.0, 3.0] + [0.0] * 198 + [1000.0], ess=[0.5, 0.7] + [0.6] * 198 + [0.0])
    means = report.seq_tail_means(r)
    assert means["updates"] == 200
    assert means["q90"] == pytest.approx(4.0 / 200)  # update 201's 1000 is past the window
    assert means["ess"] == pytest.approx((0.5 + 0.7 + 0.6 * 198) / 200)
    assert report.seq_tail_means(run()) is None  # a run that logged neither metric


def test_a_pair_is_heavier_only_by_both_thresholds():
    short = [run(q90=[1.0] * 10, ess=[0.8] * 10)]
    for q, e, heavier in [(2.0, 0.4, True),    # exactly 2x and exactly 0.5x: both met
                          (1.99, 0.1, False),  # the tail short of 2x
                          (9.0, 0.41, False)]:  # the ESS above half
        pairs = report.seq_tail_pairs([run(q90=[q] * 10, ess=[e] * 10)], short)
        first = pairs[0]
        assert (first["row"], first["N"], first["seed"]) == ("grpo", 8, 0)
        assert first["heavier"] is heavier
        assert all(p["heavier"] is None for p in pairs[1:])  # the other 17 not run


def test_the_verdict_holds_only_when_every_pair_is_heavier_and_one_miss_refutes():
    assert len(report.seq_tail_pairs([], [])) == 18  # 3 rows x N 8, 32 x seeds 0-2
    pending = [{"heavier": True}] * 17 + [{"heavier": None}]
    assert report.seq_tail_verdict(pending) == "pending"
    assert report.seq_tail_verdict([{"heavier": True}] * 18) == "holds"
    assert report.seq_tail_verdict([{"heavier": False}] + [{"heavier": None}] * 17) == "refuted"
    # PPO against the sampler is its own row: GRPO with the behavior anchor
    ppo = run(anchor="behavior", delay=32, seed=2, q90=[5.0], ess=[0.1])
    pairs = report.seq_tail_pairs([ppo], [run(anchor="behavior", delay=32, seed=2, q90=[1.0], ess=[0.9])])
    hit = [p for p in pairs if p["heavier"] is not None]
    assert [(p["row"], p["N"], p["seed"], p["heavier"]) for p in hit] == \
        [("grpo_grpo_anchor-behavior", 32, 2, True)]


def test_the_added_drift_table_divides_the_tail_by_the_per_token_drift():
    """Added analysis: K3 long / short, q90 / sqrt(K3) on each task and their ratio, beside the
    square root of the length ratio (what independent token log-ratios would give)."""
    def with_drift(r, k3, length):
        for row in r["rows"][1:]:
            row.update(k3=k3, response_len_mean=length)
        return r
    lo = with_drift(run(q90=[4.0] * 5, ess=[0.5] * 5), 0.004, 100.0)
    sh = with_drift(run(q90=[1.0] * 5, ess=[0.9] * 5), 0.001, 25.0)
    lines = report.seq_tail_drift_lines(report.seq_tail_pairs([lo], [sh]))
    row = [l for l in lines if l.startswith("| GRPO | 8 | 0 |")]
    # K3 4 vs 1 (x1e-3): ratio 4; q90/sqrt(K3): 4/sqrt(0.004) = 63.2, 1/sqrt(0.001) = 31.6: ratio 2;
    # sqrt(100 / 25) = 2
    assert row == ["| GRPO | 8 | 0 | 4 | 1 | 4.00 | 63.2 | 31.6 | 2.00 | 2.00 |"]
    assert report.seq_tail_drift_lines(report.seq_tail_pairs([], [sh])) == []
