"""What one image build leaves for the next: the packages it downloaded and what build.sh
compiled (siw.ko per kernel, the inspector client). A cold CI builds five images of one
suite; each used to download the kernel's whole source and a compiler again."""

from __future__ import annotations

import os
import stat
import subprocess
import time
from pathlib import Path

import pytest

from labctl.data.recipes import RECIPES
from labctl.errors import LabctlError
from labctl.images import builder

BUILD_HOOK = Path(builder.__file__).parent / "hooks" / "build.sh"
ABI = "7.3.4+deb13-amd64"
KVER = "7.3.4-1~bpo13+1"


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("LABCTL_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_the_artifacts_are_kept_per_suite_and_per_build_script(
        cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trixie = builder.built_artifacts_dir(RECIPES["trixie"])
    assert trixie == builder.built_artifacts_dir(RECIPES["trixie-workloads"])  # one suite
    assert trixie != builder.built_artifacts_dir(RECIPES["sid"])  # another libc, gcc
    assert trixie.parent == cache / "images" / ".built"
    real = builder._resource_text
    monkeypatch.setattr(builder, "_resource_text",
                        lambda *parts: real(*parts) + ("\n# changed" if "build.sh" in parts
                                                       else ""))
    assert builder.built_artifacts_dir(RECIPES["trixie"]) != trixie


def test_mmdebstrap_shares_the_downloads_and_the_artifacts(
        cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: list[list[str]] = []
    monkeypatch.setattr(builder, "_run_streamed", lambda argv, progress, log: seen.append(argv))
    builder._mmdebstrap(RECIPES["trixie"], tmp_path / "root", None, lambda _m: None,
                        tmp_path / "log")
    argv = seen[0]
    debs = str(builder.debs_dir())
    assert "--skip=essential/unlink" in argv
    sync_in = argv.index(f"--setup-hook=sync-in {debs} /var/cache/apt/archives/")
    sync_out = argv.index(f"--customize-hook=sync-out /var/cache/apt/archives {debs}")
    trim = next(i for i, a in enumerate(argv) if "trim.sh" in a)
    build = next(a for a in argv if "build.sh" in a)
    assert sync_in < sync_out < trim  # out before trim.sh empties the apt cache
    assert build.endswith(" " + str(builder.built_artifacts_dir(RECIPES["trixie"])))
    assert builder.debs_dir().is_dir() and builder.built_artifacts_dir(RECIPES["trixie"]).is_dir()


@pytest.mark.parametrize("planted", ["images/.debs", "images"])
def test_a_planted_link_in_place_of_a_shared_directory_is_refused(
        cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, planted: str) -> None:
    """A link where the shared `.debs` folder goes, or where any folder on the way from
    the cache root does: refused, naming the link, and nothing made through it."""
    decoy = tmp_path / "decoy"
    decoy.mkdir()
    (cache / planted).parent.mkdir(parents=True, exist_ok=True)
    (cache / planted).symlink_to(decoy)
    monkeypatch.setattr(builder, "_run_streamed",
                        lambda *a: pytest.fail("mmdebstrap ran"))  # pragma: no cover
    with pytest.raises(LabctlError) as info:
        builder._mmdebstrap(RECIPES["trixie"], tmp_path / "root", None, lambda _m: None,
                            tmp_path / "log")
    assert info.value.message.startswith(f"{cache / planted}: a symbolic link")
    assert "remove it" in (info.value.hint or "")
    assert list(decoy.iterdir()) == []


def test_a_shared_directory_of_another_user_is_refused(
        cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (cache / "images" / ".debs").mkdir(parents=True)
    monkeypatch.setattr(builder.os, "geteuid", lambda: 4242)
    monkeypatch.setattr(builder, "_run_streamed",
                        lambda *a: pytest.fail("mmdebstrap ran"))  # pragma: no cover
    with pytest.raises(LabctlError) as info:
        builder._mmdebstrap(RECIPES["trixie"], tmp_path / "root", None, lambda _m: None,
                            tmp_path / "log")
    assert "is not a directory labctl made" in info.value.message
    assert "rm -rf" in (info.value.hint or "")


def test_packages_no_build_read_for_two_weeks_are_dropped(tmp_path: Path) -> None:
    debs = tmp_path / "debs"
    debs.mkdir()
    old, fresh, other = debs / "old_1_amd64.deb", debs / "new_2_amd64.deb", debs / "x"
    for path in (old, fresh, other):
        path.write_bytes(b"!")
    weeks_ago = time.time() - 15 * 86400
    for path in (old, other):
        os.utime(path, (weeks_ago, weeks_ago))
    target = tmp_path / "target.deb"
    target.write_bytes(b"kept")
    os.utime(target, (weeks_ago, weeks_ago))
    (debs / "link.deb").symlink_to(target)
    builder.prune_debs(debs)
    assert not old.exists() and fresh.exists() and other.exists()
    assert target.read_bytes() == b"kept"  # a link is not followed


# --- build.sh itself, with a fake chroot: the kept slot is installed, nothing downloaded ----

def _fake_root(tmp_path: Path) -> tuple[Path, Path, Path]:
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "tmp").mkdir()
    (root / "etc" / "labctl-kernel").write_text(ABI + "\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    # chroot ROOT CMD...: answers dpkg-query for the kernel package and depmod; anything
    # else (apt-get, gcc, make) is a download or a build the slot should have saved.
    fake = bin_dir / "chroot"
    fake.write_text(f"""#!/bin/sh
shift
echo "$*" >> {calls}
case "$1 $5" in
  "dpkg-query linux-binary-{ABI}") printf '%s' '{KVER}' ;;
  depmod*) ;;
  *) exit 99 ;;
esac
""")
    fake.chmod(0o755)
    return root, bin_dir, calls


def _run_hook(
        root: Path, bin_dir: Path, built: Path, tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    client = tmp_path / "verbs-client.c"
    client.write_text("int main(void) { return 0; }\n")
    return subprocess.run(
        ["sh", str(BUILD_HOOK), str(root), "trixie-backports", str(client), str(built)],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})


def test_build_sh_installs_a_kept_slot_without_building(tmp_path: Path) -> None:
    root, bin_dir, calls = _fake_root(tmp_path)
    built = tmp_path / "built"
    slot = built / f"{ABI}_{KVER}"
    slot.mkdir(parents=True)
    (slot / "siw.ko").write_bytes(b"siw module")
    (slot / "labctl-verbs-client").write_bytes(b"client")
    result = _run_hook(root, bin_dir, built, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "taken from an earlier build" in result.stdout
    assert (root / f"usr/lib/modules/{ABI}/updates/siw.ko").read_bytes() == b"siw module"
    client = root / "usr/local/lib/labctl/labctl-verbs-client"
    assert client.read_bytes() == b"client" and client.stat().st_mode & stat.S_IXUSR
    assert os.readlink(root / "usr/local/bin/labctl-devinfo") == "../lib/labctl/labctl-verbs-client"
    assert [line.split()[0] for line in calls.read_text().splitlines()] == ["dpkg-query", "depmod"]


@pytest.mark.parametrize("plant", ["slot-link", "file-link", "missing-client"])
def test_build_sh_builds_when_the_slot_is_not_two_real_files(tmp_path: Path, plant: str) -> None:
    """A linked or half slot is not used: the hook goes on to build (here: the fake chroot
    refuses apt-get, so it fails there, having installed nothing from the slot)."""
    root, bin_dir, calls = _fake_root(tmp_path)
    built = tmp_path / "built"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "siw.ko").write_bytes(b"planted")
    (elsewhere / "labctl-verbs-client").write_bytes(b"planted")
    built.mkdir()
    slot = built / f"{ABI}_{KVER}"
    if plant == "slot-link":
        slot.symlink_to(elsewhere)
    else:
        slot.mkdir()
        if plant == "file-link":
            (slot / "siw.ko").symlink_to(elsewhere / "siw.ko")
        else:
            (slot / "siw.ko").write_bytes(b"siw")
        (slot / "labctl-verbs-client").write_bytes(b"c") if plant == "file-link" else None
    result = _run_hook(root, bin_dir, built, tmp_path)
    assert result.returncode != 0
    assert "building siw" in result.stdout
    assert not (root / f"usr/lib/modules/{ABI}/updates/siw.ko").exists()
    assert any(line.startswith("env ") or "apt-get" in line
               for line in calls.read_text().splitlines())
