"""The lab's tests: the repository root (lab/ and lab/tests/ are packages, so pytest puts the root
on the path: the loop's modules and the lab's import as they do in the lab), and synthetic run
folders as train.py writes them."""
import json
import os

import yaml

import config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

BATCH = 8  # responses per rollout batch of the synthetic runs


def write_run(root, final, loss="grpo", delay=0, seed=0, updates=10, name=None, k3=0.001, logged=None,
              **cfg):
    """A run folder as train.py writes it: config.yaml, and metrics.jsonl whose eval rows (update
    0 and the last) hold the difficulty split; k3 = k3 * update, reward = 0.1 + 0.01 * update;
    `logged`: more per-update metrics (their values), replacing clip_frac."""
    run_cfg = config.load_config(None, [f"loss={loss}", f"delay={delay}", f"seed={seed}",
                                        f"updates={updates}"])
    for key, value in cfg.items():
        section, _, sub = key.partition(".")
        if sub:
            run_cfg[section][sub] = value
        else:
            run_cfg[key] = value
    folder = root / (name or f"{loss}_N{delay}_s{seed}")
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(run_cfg))
    evals = lambda acc: {"eval/toy/mean@4": acc, "eval/toy/best@4": acc + 0.2, "eval/toy/partial_mean@4": acc,
                         "eval/toy/unsolved_solved_frac": acc / 2, "eval/toy/partial_count": 50,
                         "eval/toy/unsolved_count": 20}
    rows = [{"update": 0, "responses_total": 0, **evals(0.3)}]
    rows += [{"update": t, "k3": k3 * t, "entropy": 0.2, "reward_mean": 0.1 + 0.01 * t,
              **({"clip_frac": 0.05} if logged is None else logged), "ggpo_ess_success": 0.5,
              "grad_norm": 1.0, "response_len_mean": 9,
              "responses_total": (min(t + delay, updates)) * BATCH} for t in range(1, updates + 1)]
    rows[-1].update(evals(final))
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
