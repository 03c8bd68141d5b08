#!/usr/bin/env bash
# Install what labctl needs on a Debian machine (run as root): system packages for
# building node images and running qemu nodes, and a virtualenv (.venv) with labctl.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
    echo "setup.sh: run as root (labctl makes network namespaces and taps)" >&2
    exit 1
fi
packages=(qemu-system-x86 qemu-utils mmdebstrap e2fsprogs zstd cpio openssh-client iproute2
          debian-archive-keyring ca-certificates python3 python3-venv python3-pip
          libpcap0.8)  # scapy compiles `labctl capture --filter` expressions with libpcap
# Optional: Debian's vagrant lets the tests run `vagrant validate` (not every release has it);
# with vagrant-libvirt and libvirt (daemon, qemu driver, virsh, dnsmasq-base for the
# management network's DHCP, iptables for libvirt's isolated networks) labctl boots vagrant
# labs here, starting libvirtd itself (docs/vagrant.md; no service is enabled);
# tshark checks labctl's RDMA decoder against Wireshark's (bookworm: 21 MB, 121 MiB, ~50 s);
# gcc and libc6-dev let the unit tests build the nodes' compiled inspector client
# (labctl/images/verbs-client.c; node images build it themselves, in their own chroot).
optional=(vagrant vagrant-libvirt libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients
          dnsmasq-base iptables tshark gcc libc6-dev)
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
for pkg in "${optional[@]}"; do
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
.venv/bin/python -m pip install -q -e '.[dev]'
echo "setup.sh: ready (.venv/bin/labctl)"
