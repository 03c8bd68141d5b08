"""The image builder stores the modules a node loads at boot without Debian's appended
signature (checking it cost 0.1-0.2 s per module under TCG): the layout the kernel's
module_sig_check() reads, [module][signature][struct module_signature][magic]."""

from __future__ import annotations

import pytest

from labctl.images.builder import MODULE_SIG_MAGIC, unsigned_module

BODY = b"\x7fELF" + bytes(range(256)) * 4


def _signed(body: bytes, signature: bytes) -> bytes:
    # algo, hash, id_type, signer_len, key_id_len, pad[3], then sig_len big-endian
    info = bytes([0, 0, 2, 0, 0, 0, 0, 0]) + len(signature).to_bytes(4, "big")
    return body + signature + info + MODULE_SIG_MAGIC


def test_a_signed_module_loses_exactly_its_signature() -> None:
    assert unsigned_module(_signed(BODY, b"\x30" * 262)) == BODY


def test_an_unsigned_module_is_left_alone() -> None:
    assert unsigned_module(BODY) == BODY  # siw, built here, has no signature


def test_a_signature_longer_than_the_file_is_refused() -> None:
    data = BODY + bytes(8) + (10**6).to_bytes(4, "big") + MODULE_SIG_MAGIC
    with pytest.raises(ValueError, match="malformed module signature"):
        unsigned_module(data)
