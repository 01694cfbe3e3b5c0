"""bench/toy_long.py refuses a run too short to time before it starts one."""
import pytest

from bench import toy_long


def test_too_few_sampling_updates_is_refused_before_any_run(capsys):
    with pytest.raises(SystemExit) as e:
        toy_long.main(["--updates", "4", "--delay", "8"])
    assert e.value.code == 2
    assert "leaves 0 updates that sample; the timing needs at least 3 (--updates 11 or more)" in capsys.readouterr().err
