"""bench/bench_learner.py runs end to end (at a smoke-test size: 1 layer, a 1,000-token vocabulary)."""
import json
import os
import re
import subprocess
import sys

from bench import bench_learner

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(*args):
    out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "bench_learner.py"), *args],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_memory_mode_compares_chunked_and_whole_output_layers():
    out = run("memory", "--layers", "1", "--vocab", "1000", "--max-tokens", "600",
              "--chunk-mib", "1", "--cpu-autocast", "none")
    results = json.loads(out.strip().splitlines()[-1])
    assert results["0"]["chunk_tokens"] == 0 and results["1"]["chunk_tokens"] == 262
    assert results["0"]["response_tokens"] == results["1"]["response_tokens"] > 262
    assert results["0"]["surrogate"] == results["1"]["surrogate"]
    logp_diff = float(re.search(r"token log-probs differ by at most (\S+) ", out).group(1))
    grad_diff = float(re.search(r"gradients by at most (\S+) ", out).group(1))
    assert logp_diff < 1e-5 and grad_diff < 1e-5, out


def test_update_mode_runs_the_objectives_it_is_given():
    """GRPO+TIS and AGRO, each in its own process (the check mode's test runs GRPO and GGPO, so
    the two tests run the study's four). float32: bfloat16 autocast is emulated without AVX-512
    (a 2-core AVX2 EPYC took > 4 minutes per objective with it, against seconds); the bfloat16
    path is the benchmark's, not this test's."""
    out = run("update", "--layers", "1", "--vocab", "1000", "--groups", "1", "--max-tokens", "64",
              "--cpu-autocast", "none", "--losses", "grpo_tis,agro")
    ran = [line.split()[0] for line in out.splitlines() if " peak " in line]
    assert ran == ["grpo_tis", "agro"], out


def test_loop_mode_trains_checkpoints_and_resumes_without_vllm():
    """The GPU check of train.py's whole loop with the transformers sampler, at 1 layer and a
    1,000-token vocabulary on the CPU: 3 updates at N = 1, stopped after update 2, resumed for
    update 3 from its checkpoint (the mode asserts the resumed update's staleness itself)."""
    out = run("loop", "--layers", "1", "--vocab", "1000", "--prompts", "2", "--group-size", "2",
              "--max-tokens", "8", "--cpu-autocast", "none")
    assert "run: updates [1, 2] in " in out and "resume: updates [3] in " in out, out
    assert "peak process memory" in out and "update 3: generate" not in out  # 3 samples nothing
    assert re.search(r"update 2: generate \d+\.\d+ .* behavior \d+\.\d+ .* learn \d+\.\d+", out), out
    assert "resumed from the update-2 checkpoint" in out


def hidden_env(tmp_path) -> dict:
    """The environment of a process (and its children) where vllm, datasets and math_verify are
    not installed, as on the GPU box: a sitecustomize.py sets sys.modules[name] = None, so
    `import name` fails and importlib.util.find_spec(name) is None."""
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\nfor name in ('vllm', 'datasets', 'math_verify'):\n    sys.modules[name] = None\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), ROOT])}


def test_check_mode_runs_the_gpu_box_checks_without_vllm_datasets_or_math_verify(tmp_path):
    """bench/bench_learner.py check at 1 layer, a 1,000-token vocabulary and fp32 on the CPU, in
    processes without vllm, datasets and math_verify: one PASS line per check, the numbers as
    a JSON line, exit 0; and a check that cannot pass (a disk budget too small) fails, exit 1."""
    args = [sys.executable, os.path.join(ROOT, "bench", "bench_learner.py"), "check", "--layers", "1",
            "--loop-layers", "1", "--vocab", "1000", "--groups", "1", "--group-size", "2",
            "--max-tokens", "32", "--prompts", "2", "--loop-max-tokens", "4", "--cpu-autocast", "none"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=ROOT,
                         env=hidden_env(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    lines = out.stdout.splitlines()
    verdicts = [l.split(":")[0] for l in lines if l.startswith(("PASS", "FAIL"))]
    assert verdicts == ["PASS filesystem", "PASS learn grpo", "PASS learn ggpo", "PASS loop",
                        "PASS disk", "PASS time", "PASS imports"], out.stdout
    assert "PASS imports: vllm, datasets, math_verify: none imported" in lines
    record = json.loads(next(l for l in lines if l.startswith("RECORD "))[7:])
    folders = bench_learner.writable_folders()
    assert record["folder"] == folders[0][1] and record["free_GB"] >= folders[-1][0] / 1e9
    # the loop's model (1 layer: 52.4 M parameters, 4 bytes each) and two checkpoints (12 bytes)
    assert record["need_GB"] == 28 * bench_learner.n_params(1, 1000) / 1e9
    assert 0.8 * record["need_GB"] < record["disk_peak_GB"] < 1.1 * record["need_GB"]
    assert record["learn_ggpo"]["ref"] > 1e-3 > record["learn_grpo"]["ref"]  # GRPO reads no reference
    assert sorted(record["loop"]["updates"]) == ["1", "2", "3"]
    assert lines[-1] == "7 of 7 checks passed"
    failed = subprocess.run(args + ["--disk-budget-gb", "0.1"], capture_output=True, text=True,
                            timeout=120, cwd=ROOT)
    assert failed.returncode == 1 and "FAIL filesystem: " in failed.stdout, failed.stdout
    assert "PASS loop" not in failed.stdout  # nothing built after a failed first check
