#!/usr/bin/env bash
# Install what labctl needs on a Debian machine (run as root): system packages and a
# virtualenv (.venv) with labctl.
#   scripts/setup.sh --minimal   what a qemu lab needs (./scripts/demo.sh): build the node
#                                image, boot qemu nodes, capture; labctl alone in .venv
#   scripts/setup.sh             that, plus what the tests need (./scripts/test.sh) and the
#                                vagrant provider on libvirt; labctl[dev] in .venv
# `labctl doctor` says for each package which provider, feature or tests need it.
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: scripts/setup.sh [--minimal]"
minimal=0
case "${1:-}" in
    "") ;;
    --minimal) minimal=1 ;;
    -h|--help) echo "$usage"; exit 0 ;;
    *) echo "setup.sh: unknown argument '$1'" >&2; echo "$usage" >&2; exit 2 ;;
esac
if [ "$(id -u)" -ne 0 ]; then
    echo "setup.sh: run as root (labctl makes network namespaces and taps)" >&2
    exit 1
fi
# A qemu lab: qemu and its disk tool, the image build (mmdebstrap, mkfs.ext4, Debian's
# keyring; zstd uncompresses the node kernel for a faster direct boot), ssh to the nodes,
# libpcap for `labctl capture --filter` (scapy compiles the expression with it), and Python.
lab=(qemu-system-x86 qemu-utils mmdebstrap e2fsprogs debian-archive-keyring zstd
     openssh-client ca-certificates libpcap0.8 python3 python3-venv python3-pip)
# The tests besides: iproute2 (`ip netns` in capture tests; also docker labs with
# `--engine local`), cpio (GNU cpio reads back labctl's initramfs: tests/unit/test_cpio.py).
tests=(iproute2 cpio)
# Where the release has them (else their tests are skipped): Debian's vagrant lets the tests
# run `vagrant validate`; with vagrant-libvirt and libvirt (daemon, qemu driver, virsh,
# dnsmasq-base for the management network's DHCP, iptables for libvirt's isolated networks)
# labctl boots vagrant labs here, starting libvirtd itself (docs/vagrant.md; no service is
# enabled); tshark checks labctl's RDMA decoder against Wireshark's (bookworm: 21 MB,
# 121 MiB, ~50 s); gcc and libc6-dev let the unit tests build the nodes' compiled inspector
# client (labctl/images/verbs-client.c; node images build it themselves, in their chroot).
optional=(vagrant vagrant-libvirt libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients
          dnsmasq-base iptables tshark gcc libc6-dev)
packages=("${lab[@]}")
extras=()
if [ "$minimal" -eq 0 ]; then
    packages+=("${tests[@]}")
    extras=("${optional[@]}")
fi
missing=()
# Each check captures the command's output first, then tests it: `cmd | grep -q` under
# pipefail fails when grep exits at its first match and cmd then dies of SIGPIPE (that
# once reported an installable vagrant as "not available here").
installed() {
    local status
    status=$(dpkg-query -W -f '${Status}' "$1" 2>/dev/null) || return 1
    [[ $status == *"ok installed"* ]]
}
available() {
    local policy
    policy=$(apt-cache policy "$1" 2>/dev/null) || return 1
    [[ $policy =~ Candidate:\ [0-9] ]]
}
for pkg in "${packages[@]}"; do
    installed "$pkg" || missing+=("$pkg")
done
for pkg in "${extras[@]}"; do
    installed "$pkg" || missing+=("$pkg?")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "setup.sh: installing ${missing[*]}"
    apt-get update -qq
    required=()
    for pkg in "${missing[@]}"; do
        case "$pkg" in
            *\?) name=${pkg%\?}
                  if available "$name"; then
                      required+=("$name")
                  else
                      echo "setup.sh: $name is not available here; its tests will be skipped"
                  fi ;;
            *) required+=("$pkg") ;;
        esac
    done
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${required[@]}" >/dev/null
fi
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
if [ "$minimal" -eq 1 ]; then
    .venv/bin/python -m pip install -q -e .
else
    .venv/bin/python -m pip install -q -e '.[dev]'
fi
echo "setup.sh: ready (.venv/bin/labctl)"
