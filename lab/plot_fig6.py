"""Fig. 6: analytic coefficient sum for correct responses in a mixed-reward group.

For m = 8 and k = 1..7 correct responses, with learner = behavior = reference, reads
W_correct = sum_{i: r_i = 1} c_i from losses.compute_loss (metrics["coef_correct_sum"]) and
plots it normalized to its value at k = 7. Usage: python lab/plot_fig6.py  -> lab/figures/fig6.png
"""
import os
import sys

if not __package__:  # run as `python lab/plot_fig6.py`: the loop and the lab import from the root
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

import losses  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "figures", "fig6.png")
M, KS = 8, range(1, 8)
CURVES = [("GRPO", "grpo", {}, "o-"), ("AGRO", "agro", {"beta": 0.01}, "s-"),
          ("GGPO β=0.1", "ggpo", {"beta": 0.1}, "D-"), ("GGPO β=0.01", "ggpo", {"beta": 0.01}, "x--")]


def w_correct(name, k, **hp):
    logp = torch.full((M, 4), -1.0, dtype=torch.float64)  # learner = behavior = reference
    rewards = torch.tensor([1.0] * k + [0.0] * (M - k), dtype=torch.float64)
    _, met = losses.compute_loss(name, logp=logp, behavior_logp=logp, ref_logp=logp,
                                 mask=torch.ones_like(logp), rewards=rewards, group_size=M, **hp)
    return met["coef_correct_sum"]


fig, ax = plt.subplots(figsize=(5, 3.5))
for label, name, hp, style in CURVES:
    W = [w_correct(name, k, **hp) for k in KS]
    ax.plot(list(KS), [w / W[-1] for w in W], style, mfc="none", ms=8, label=label)
    print(label, " ".join(f"{w / W[-1]:.3f}" for w in W))
ax.set_xlabel("k (correct responses of m = 8)")
ax.set_ylabel("W_correct(k) / W_correct(7)")
ax.set_title("Coefficient sum on correct responses (m = 8)")
ax.legend()
fig.tight_layout()
fig.savefig(OUT, dpi=100)
print(f"wrote {OUT}")
