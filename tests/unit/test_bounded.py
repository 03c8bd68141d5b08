"""labctl/bounded.py: what labctl reads from nodes and state files is bounded."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from labctl import bounded
from labctl.bounded import BoundedError


def test_read_regular_refuses_fifo_device_symlink_and_large_files(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(BoundedError, match="named pipe"):
        bounded.read_regular(fifo)
    with pytest.raises(BoundedError, match="character device"):
        bounded.read_regular(Path("/dev/zero"), follow_symlinks=True)
    target = tmp_path / "target"
    target.write_text("secret")
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(BoundedError, match="symbolic link"):
        bounded.read_regular(link)
    assert bounded.read_regular(link, follow_symlinks=True) == b"secret"
    big = tmp_path / "big"
    big.write_bytes(b"x" * 101)
    with pytest.raises(BoundedError, match="too large"):
        bounded.read_regular(big, 100)
    assert bounded.read_regular(big, 101) == b"x" * 101
    with pytest.raises(FileNotFoundError):
        bounded.read_regular(tmp_path / "missing")


def test_read_tail_reads_the_end_only(tmp_path: Path) -> None:
    log = tmp_path / "console.log"
    with log.open("wb") as handle:
        handle.truncate(50 << 20)  # a sparse 50 MiB log costs nothing to make
        handle.seek(0, os.SEEK_END)
        handle.write(b"\nlast line\n")
    assert bounded.read_tail(log, 1024).endswith("last line\n")
    assert len(bounded.read_tail(log, 1024)) <= 1024


@pytest.mark.parametrize(("text", "why"), [
    ("[" * 100_000 + "]" * 100_000, "deeper than"),
    ('{"a": NaN}', "NaN is not JSON"),
    ('{"a": -Infinity}', "Infinity is not JSON"),
    ("not json", "not JSON"),
    (b"\xff\xfe", "not"),
])
def test_loads_refuses_what_is_not_bounded_json(text: str | bytes, why: str) -> None:
    with pytest.raises(BoundedError, match=why):
        bounded.loads(text)


def test_loads_counts_brackets_inside_strings_as_text() -> None:
    assert bounded.loads('{"a": "' + "[" * 1000 + '"}') == {"a": "[" * 1000}
    assert bounded.loads("[" * 64 + "]" * 64) is not None
    with pytest.raises(BoundedError):
        bounded.loads("[" * 65 + "]" * 65)


def test_load_object_names_what_it_got() -> None:
    with pytest.raises(BoundedError, match="a JSON list, not an object"):
        bounded.load_object("[1, 2]")
    with pytest.raises(BoundedError, match="bytes of JSON"):
        bounded.load_object("{}" + " " * 100, limit=50)


