"""A node is the Debian machine it claims to be: what a Debian system of the node's release
(trixie) gives every program, checked inside a live node of any provider.

`node_fidelity(handle, node, own_kernel=...)` runs one POSIX sh script in the node that prints
`name<TAB>value` lines, and returns the list of differences from DEBIAN (empty when the node
matches). The script leaves nothing behind: its loop device and files go in a trap, which
node_fidelity checks.
"""

from __future__ import annotations

from labctl.lab.handle import LabHandle

# Commands of Debian's `required` priority (minbase: coreutils, findutils, diffutils,
# util-linux, mount, mawk as awk, sed, grep, gzip, tar, bash, dash, debianutils,
# procps-ng's ps from `important`) and of `important` that the node image keeps
# (labctl/images/node-packages.txt), each found on PATH.
REQUIRED_TOOLS = (
    "awk", "mawk", "sed", "grep", "find", "xargs", "diff", "cmp", "tar", "gzip", "bash",
    "dash", "sh", "sort", "uniq", "cut", "tr", "od", "head", "tail", "stat", "mktemp",
    "timeout", "sha256sum", "getopt", "flock", "setsid", "nsenter", "unshare", "mount",
    "umount", "losetup", "blkid", "lsblk", "findmnt", "which", "perl", "hostname", "ps",
    "kill", "ip", "ping", "modprobe", "mkfs.ext4", "e2fsck", "fdisk", "sfdisk", "cpio",
    "less", "nano", "vi", "nft", "dmidecode",
)

# What the script prints on a Debian trixie machine.
DEBIAN: dict[str, str] = {
    "link /dev/fd": "/proc/self/fd",
    "link /dev/stdin": "/proc/self/fd/0",
    "link /dev/stdout": "/proc/self/fd/1",
    "link /dev/stderr": "/proc/self/fd/2",
    "link /dev/core": "/proc/kcore",  # where the kernel has /proc/kcore, else no link
    "mount /dev/pts": "devpts",
    "mount /dev/shm": "tmpfs",
    "mount /dev/mqueue": "mqueue",
    "mount /proc": "proc",
    "mount /sys": "sysfs",
    "mount /sys/kernel/config": "configfs",  # a node's own kernel only (not a container's)
    "mount /sys/kernel/debug": "debugfs",
    "mount /sys/kernel/tracing": "tracefs",
    "dir /run/lock": "1777",
    "dir /tmp": "1777",
    "missing tools": "none",
    "awk prints": "b",
    "bash version >= 4.3": "yes",
    "bash process substitution": "same",
    "bash writes /dev/stdout": "out",
    "bash writes /dev/stderr": "err",
    "sh writes /dev/stdout": "out",
    "sh writes /dev/stderr": "err",
    "loop-control": "char",
    "loop usable": "mkfs mount write read",
    "kernel config": "/boot/config-RELEASE",
    "interface names": "ethN",  # udev keeps the kernel's names (net.ifnames=0)
    "udevd": "answers",  # `udevadm control --ping`
    # the root disk's links in /dev/disk (by-id from the virtio disk's serial)
    "root disk links": "by-id by-path by-uuid",
    "loop udev links": "by-loop-inode by-uuid",  # what udev made for the loop device
}

_SCRIPT = r"""
export LC_ALL=C
say() { printf '%s\t%s\n' "$1" "$2"; }
for l in fd stdin stdout stderr core; do
  if [ "$l" = core ] && [ ! -e /proc/kcore ]; then  # no kcore: no link either
    if [ -L /dev/core ]; then say "link /dev/core" "$(readlink /dev/core), without kcore"
    else say "link /dev/core" /proc/kcore; fi
    continue
  fi
  say "link /dev/$l" "$(readlink "/dev/$l" || echo none)"
done
for m in /dev/pts /dev/shm /dev/mqueue /proc /sys /sys/kernel/config /sys/kernel/debug \
    /sys/kernel/tracing; do
  say "mount $m" "$(awk -v m="$m" '$2 == m {t = $3} END {print t ? t : "none"}' /proc/mounts)"
done
for d in /run/lock /tmp; do say "dir $d" "$(stat -c %a "$d" 2>/dev/null || echo none)"; done
missing=
for t in TOOLS; do command -v "$t" >/dev/null 2>&1 || missing="${missing:+$missing }$t"; done
say "missing tools" "${missing:-none}"
say "awk prints" "$(echo 'a b' | awk '{print $2}')"
say "bash version >= 4.3" "$(bash -c '[ "${BASH_VERSINFO[0]}${BASH_VERSINFO[1]}" -ge 43 ] \
  && echo yes || echo "no: $BASH_VERSION"')"
say "bash process substitution" "$(bash -c 'diff <(echo a) <(echo a) >/dev/null 2>&1 \
  && echo same || echo failed')"
say "bash writes /dev/stdout" "$(bash -c 'echo out > /dev/stdout' 2>&1)"
say "bash writes /dev/stderr" "$(bash -c 'echo err > /dev/stderr' 2>&1 >/dev/null)"
say "sh writes /dev/stdout" "$(sh -c 'echo out > /dev/stdout' 2>&1)"
say "sh writes /dev/stderr" "$(sh -c 'echo err > /dev/stderr' 2>&1 >/dev/null)"
if [ -c /dev/loop-control ]; then say loop-control char; else say loop-control none; fi
odd=
for d in /sys/class/net/*; do  # the kernel's fallback tunnels appear in every namespace
  case "${d##*/}" in
    lo|eth[0-9]*|tunl0|sit0|ip6tnl0|gre0|gretap0|erspan0|ip_vti0|ip6_vti0|ip6gre0) ;;
    *) odd="${odd:+$odd }${d##*/}" ;;
  esac
done
say "interface names" "${odd:-ethN}"
[ "$OWN_KERNEL" = 1 ] || exit 0
if udevadm control --ping >/dev/null 2>&1; then say udevd answers; else say udevd none; fi
links_to() {  # links_to DEVICE KIND...: the KINDs of /dev/disk/by-KIND with a link to DEVICE
  target=$1; shift
  found=
  for kind in "$@"; do
    for l in /dev/disk/by-$kind/*; do
      if [ -L "$l" ] && [ "$(readlink -f "$l")" = "$target" ]; then
        found="${found:+$found }by-$kind"; break
      fi
    done
  done
  echo "${found:-none}"
}
root=$(findmnt -n -o SOURCE /)
say "root disk links" "$(links_to "$root" id path uuid)"
config="/boot/config-$(uname -r)"
if [ -r "$config" ] && grep -q '^CONFIG_INFINIBAND=' "$config"; then
  say "kernel config" "/boot/config-RELEASE"
else
  say "kernel config" "$(ls /boot 2>/dev/null | tr '\n' ' ')(no readable $config)"
fi
dir=$(mktemp -d /tmp/fidelity.XXXXXX) || exit 1
dev=
cleanup() {
  umount "$dir/mnt" 2>/dev/null
  [ -n "$dev" ] && losetup -d "$dev" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
steps=
loop() {  # in this shell, not a subshell: the trap must see $dev
  truncate -s 16M "$dir/disk" || return 1
  dev=$(losetup -f --show "$dir/disk") || return 1
  # as a careful script does: udev sets its inotify watch on the device when it handles
  # the event of losetup; a mkfs before that goes unseen
  udevadm settle --timeout=30
  mkfs.ext4 -q -F "$dev" || return 1; steps=mkfs
  # mkfs closing the device makes udev (its watch) send a change event, which settle
  # cannot wait for until udev has queued it: wait for the links, bounded
  tries=0
  until links=$(links_to "$dev" loop-inode uuid) && [ "$links" = "by-loop-inode by-uuid" ] \
      || [ "$tries" -ge 20 ]; do
    udevadm settle --timeout=10; sleep 0.5; tries=$((tries + 1))
  done
  echo "$links" > "$dir/links"
  mkdir "$dir/mnt" && mount "$dev" "$dir/mnt" || return 1; steps="$steps mount"
  echo fidelity > "$dir/mnt/file" && sync || return 1; steps="$steps write"
  umount "$dir/mnt" && mount -o ro "$dev" "$dir/mnt" || return 1
  [ "$(cat "$dir/mnt/file")" = fidelity ] || return 1; steps="$steps read"
}
if loop > "$dir/log" 2>&1; then
  say "loop usable" "$steps"
else
  say "loop usable" "$steps, then failed: $(tail -n 3 "$dir/log" | tr '\n' ' ')"
fi
say "loop udev links" "$(cat "$dir/links" 2>/dev/null || echo 'not reached')"
"""


def fidelity_script(own_kernel: bool) -> str:
    return _SCRIPT.replace("TOOLS", " ".join(REQUIRED_TOOLS)).replace(
        "[ \"$OWN_KERNEL\" = 1 ]", "true" if own_kernel else "false")


# A container shares the engine's kernel (docs/docker.md): no loop devices, and the kernel's
# own file systems (configfs, debugfs, tracefs) are not mounted in it.
# Nor udev: a Debian container runs none either, and the engine host's udev manages the
# devices (docs/nodes.md).
OWN_KERNEL_ONLY = ("loop usable", "mount /sys/kernel/config", "mount /sys/kernel/debug",
                   "mount /sys/kernel/tracing", "kernel config", "udevd", "root disk links",
                   "loop udev links")


def node_fidelity(handle: LabHandle, node: str, *, own_kernel: bool = True) -> list[str]:
    """How `node` differs from DEBIAN, one line per difference (empty: none). `own_kernel`:
    a VM, with loop devices (used through losetup, mkfs.ext4 and mount) and the kernel's
    file systems mounted, and udev running; a container node has none of them."""
    done = handle.run(node, ["sh", "-c", fidelity_script(own_kernel)], timeout=300)
    assert done.returncode == 0, f"{node}: exit {done.returncode}\n{done.stdout}{done.stderr}"
    if own_kernel:  # the script's trap detached its loop device and removed its files
        left = handle.run(node, ["sh", "-c", "losetup -a; for d in /tmp/fidelity.*; do "
                                 '[ -e "$d" ] && echo "$d"; done; true'], timeout=60)
        assert left.returncode == 0 and "/tmp/fidelity." not in left.stdout, left.stdout
    seen = dict(line.split("\t", 1) for line in done.stdout.splitlines() if "\t" in line)
    expected = dict(DEBIAN)
    if not own_kernel:
        for key in OWN_KERNEL_ONLY:
            expected.pop(key)
        expected["loop-control"] = "none"
    return [f"{node}: {key}: {seen.get(key, '(not printed)')!r}, Debian: {value!r}"
            for key, value in expected.items() if seen.get(key) != value]

