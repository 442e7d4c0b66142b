"""``python -m compare.kernels.ncu_target``'s argument errors, raised before any input is built or device touched."""

import dataclasses

import pytest

from compare.kernels import ncu_target


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--op", "selective_scan", "--shape", "nosuch"], "neither one of"),
        (["--op", "selective_scan", "--shape", "x=1,2"], "5 positive integers"),
        (["--shape", "130m", "--torch", "--pallas-config", "segments=2"], "not to --torch"),
        (["--shape", "130m", "--pallas-config", "nosuch=1"], "unknown field 'nosuch'"),
    ],
)
def test_ncu_target_refuses_bad_arguments_by_name(argv, message, capsys, monkeypatch):
    def no_inputs(*args, **kwargs):
        raise AssertionError("inputs built before the arguments were checked")

    op = dataclasses.replace(ncu_target.OPS["selective_scan"], inputs=no_inputs)
    monkeypatch.setitem(ncu_target.OPS, "selective_scan", op)
    with pytest.raises(SystemExit) as stopped:
        ncu_target.main(argv)
    assert stopped.value.code not in (0, None)
    assert message in capsys.readouterr().err + str(stopped.value)
