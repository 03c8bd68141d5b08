"""`labctl link set`'s netem options: the tc argv each builds (netem's own words, as a
live qemu lab's `tc qdisc show` took them: "delay 10ms 2ms loss 0.5% duplicate 1% corrupt
0.1% rate 100Mbit") and bad values refused before the lab is opened (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from labctl.cli.link import netem_args
from labctl.errors import UsageError
from tests.unit.clirun import run_main


@pytest.mark.parametrize(("options", "argv"), [
    ({"delay": "10ms", "jitter": "2ms"}, ["delay", "10ms", "2ms"]),
    ({"delay": "1s", "jitter": "500us"}, ["delay", "1s", "500us"]),
    ({"delay": "5", "jitter": "1"}, ["delay", "5ms", "1ms"]),  # a bare number is ms
    ({"rate": "100mbit"}, ["rate", "100mbit"]),
    ({"rate": "1GBit"}, ["rate", "1gbit"]),
    ({"rate": "2.5"}, ["rate", "2.5mbit"]),  # a bare number is mbit
    ({"duplicate": "1%"}, ["duplicate", "1%"]),
    ({"corrupt": "0.1"}, ["corrupt", "0.1%"]),
    ({"delay": "10ms", "jitter": "2ms", "loss": "0.5%", "duplicate": "1%",
      "corrupt": "0.1%", "rate": "100mbit"},
     ["delay", "10ms", "2ms", "loss", "0.5%", "duplicate", "1%", "corrupt", "0.1%",
      "rate", "100mbit"]),
    ({}, []),
])
def test_netem_argv(options: dict[str, str], argv: list[str]) -> None:
    assert netem_args(options.pop("loss", None), options.pop("delay", None),
                      **options) == argv


@pytest.mark.parametrize(("args", "message"), [
    (["--jitter", "2ms"], "--jitter varies the delay: it needs --delay"),
    (["--delay", "10ms", "--jitter", "61s"], "bad --jitter '61s'"),
    (["--delay", "10ms", "--jitter", "-1ms"], "bad --jitter '-1ms'"),
    (["--delay", "10ms", "--jitter", "2ms\n"], "bad --jitter '2ms\\n'"),
    (["--rate", "fast"], "bad --rate 'fast'"),
    (["--rate", "0"], "bad --rate '0'"),
    (["--rate", "101gbit"], "bad --rate '101gbit'"),
    (["--rate", "10mbps"], "bad --rate '10mbps'"),
    (["--duplicate", "101%"], "bad --duplicate '101%'"),
    (["--duplicate", "x"], "bad --duplicate 'x'"),
    (["--corrupt", "-1%"], "bad --corrupt '-1%'"),
    (["--corrupt", "1%; reboot"], "bad --corrupt '1%; reboot'"),
])
def test_bad_netem_values_exit_2_before_the_lab(
        args: list[str], message: str, state_root: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # no lab exists: the value is refused first, with its own message
    code, out, err = run_main(monkeypatch, capsys, "link", "set", "node1:eth1", *args)
    assert code == 2 and out == ""
    assert err.startswith(f"error: {message}"), err
    assert "\nhint: " in err


def test_netem_args_never_pass_a_bad_value() -> None:
    with pytest.raises(UsageError, match="bad --rate"):
        netem_args(None, None, rate="1e9")
