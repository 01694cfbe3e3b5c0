"""plot.py on synthetic run folders: the Fig. 3 table holds the final accuracies, both PNGs exist."""
import json
import os

import plot


def _run(root, loss, delay, seed, final):
    folder = root / f"{loss}_N{delay}_s{seed}"
    folder.mkdir(parents=True)
    rows = [{"update": 0, "eval/toy/mean@4": 0.3, "eval/toy/best@4": 0.6,
             "eval/avg/mean@4": 0.3, "eval/avg/best@4": 0.6}]
    rows += [{"update": t, "k3": 0.001 * t, "entropy": 0.2} for t in range(1, 11)]
    rows[-1].update({"eval/toy/mean@4": final, "eval/toy/best@4": final + 0.2,
                     "eval/avg/mean@4": final, "eval/avg/best@4": final + 0.2})
    with open(folder / "metrics.jsonl", "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))


def test_fig1_and_fig3_from_run_folders(tmp_path):
    for loss in ("grpo", "ggpo"):
        for delay, final in ((0, 0.5), (8, 0.25)):
            for seed in (0, 1):
                _run(tmp_path / "runs", loss, delay, seed, final + 0.1 * seed)
    plot.fig1(str(tmp_path / "runs"), str(tmp_path / "fig1.png"))
    plot.fig3(str(tmp_path / "runs"), str(tmp_path / "fig3.png"))
    assert os.path.getsize(tmp_path / "fig1.png") > 10_000
    assert os.path.getsize(tmp_path / "fig3.png") > 10_000
    table = open(tmp_path / "fig3.md").read()
    # mean over seeds of 0.5/0.6 and 0.25/0.35, with the min-max spread
    assert "| GRPO | 55.0 (50.0-60.0) | 30.0 (25.0-35.0) |" in table
    assert "| GGPO | 55.0 (50.0-60.0) | 30.0 (25.0-35.0) |" in table
    assert plot.eval_key([{"eval/toy/mean@4": 1, "eval/avg/mean@4": 1}], "mean") == "eval/toy/mean@4"
