"""lab/reader.py: importing it loads neither torch nor matplotlib; it reads kept results as their
run folders, names an unfinished run and a damaged one."""
import subprocess
import sys

import pytest
import yaml

from lab import reader
from lab.tests.conftest import ROOT, write_run


def test_importing_the_reader_loads_neither_torch_nor_matplotlib():
    """In a fresh process: the reader (run folders -> tidy tables) is light to import; the loop's
    modules that import torch come in only where a function needs them."""
    code = "import sys; from lab import reader; print(sorted({'torch', 'matplotlib'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_kept_results_read_as_their_run_folder(tmp_path):
    """sweep.keep_results's compact copy of a finished run (results/<sweep>/<run>) reads as the run
    folder it was made from."""
    import sweep
    write_run(tmp_path / "runs", 0.5)
    sweep.keep_results(str(tmp_path / "runs" / "grpo_N0_s0"), str(tmp_path / "results" / "grpo_N0_s0"))
    from_run, from_results = (reader.load_runs(str(tmp_path / folder)) for folder in ("runs", "results"))
    assert reader.final_accuracy(from_run) == reader.final_accuracy(from_results) == {("grpo", 0): [0.5]}


def test_unfinished_runs_are_named(tmp_path, capsys):
    """A stopped sweep's unfinished run is drawn with its latest evaluation as its final one, so
    the reader names it (and only it) on stderr."""
    runs = tmp_path / "runs"
    write_run(runs, 0.5, "grpo", 0, 0)
    write_run(runs, 0.4, "grpo", 0, 1, updates=4, name="grpo_N0_s1")
    config_path = runs / "grpo_N0_s1" / "config.yaml"  # 4 updates logged of 10 configured
    config_path.write_text(yaml.safe_dump({**yaml.safe_load(config_path.read_text()), "updates": 10}))
    reader.load_runs(str(runs))
    err = capsys.readouterr().err
    assert "1 of 2 runs" in err and "grpo_N0_s1 (update 4 of 10)" in err
    assert "grpo_N0_s0" not in err


def test_a_damaged_kept_run_is_named_with_what_to_do(tmp_path):
    """A kept run whose metrics.jsonl.gz was cut short (a damaged gzip) stops the reader with the
    folder's name and the remedy, not gzip's EOFError alone."""
    import gzip
    runs = tmp_path / "results"
    write_run(runs, 0.4, "grpo_tis", 8, 0)
    folder = runs / "grpo_tis_N8_s0"
    data = gzip.compress((folder / "metrics.jsonl").read_bytes())
    (folder / "metrics.jsonl").unlink()
    (folder / "metrics.jsonl.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"grpo_tis_N8_s0: its metrics file metrics.jsonl.gz is damaged "
                                         r"\(EOFError.*Remove the folder and rerun its sweep"):
        reader.load_runs(str(runs))


def test_recorded_paths_whose_runs_are_bit_identical_are_measured_as_one():
    """Kinds A and B each ran seed 0 at N = 0, once with the same reward at every update (the same
    computation: one path); C never matches anyone (its own path), nor do runs at other seeds or
    N, nor a run with A's rewards whose final evaluation differs."""
    session = lambda kind: {"cpu": {"model": kind, "isa": ["avx2"], "torch_capability": "AVX2"}, "gpu": None,
                            "torch_threads": 1, "matmul": "onednn"}
    run = lambda name, kind, seed, delay, rewards, final=0.5: {
        "name": name, "seed": seed, "delay": delay, "sessions": [session(kind)],
        "rows": [{"update": t + 1, "reward_mean": r} for t, r in enumerate(rewards)]
        + [{"update": len(rewards), "eval/toy/mean@4": final}]}
    same, other = [0.1, 0.2, 0.3], [0.1, 0.2, 0.31]
    runs = [run("a", "A", 0, 0, same), run("b", "B", 0, 0, same), run("c", "C", 0, 0, other),
            run("d", "C", 1, 0, same), run("e", "A", 0, 8, other), run("f", "C", 0, 8, [0.2, 0.2, 0.2]),
            run("g", "C", 0, 0, same, final=0.6)]  # the same rewards, another evaluation: not one path
    paths, evidence = reader.measured_paths(runs)
    ab = "A (avx2); 1 thread(s), onednn = B (avx2); 1 thread(s), onednn"
    assert paths == {"A (avx2); 1 thread(s), onednn": ab, "B (avx2); 1 thread(s), onednn": ab,
                     "C (avx2); 1 thread(s), onednn": "C (avx2); 1 thread(s), onednn"}
    assert evidence == {ab: 1, "C (avx2); 1 thread(s), onednn": 0}
    one = run("h", "C", 0, 0, [0.5])  # one logged reward: no evidence either way
    assert reader.measured_paths([one, run("i", "A", 0, 0, [0.5])])[1] == {
        "A (avx2); 1 thread(s), onednn": 0, "C (avx2); 1 thread(s), onednn": 0}
