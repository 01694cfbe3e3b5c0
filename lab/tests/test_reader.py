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
