#!/usr/bin/env bash
# Install what labctl needs on a Debian machine (bookworm or trixie; run as root): system
# packages and a virtualenv (.venv) with labctl.
#   scripts/setup.sh --minimal   what a qemu lab needs (./scripts/demo.sh): build the node
#                                image, boot qemu nodes, capture; labctl alone in .venv
#   scripts/setup.sh             that, plus what the tests need (./scripts/test.sh), the
#                                docker CLI and the vagrant provider on libvirt; labctl[dev]
# When everything is installed it reaches no network: apt-get runs only for a missing
# package, pip only when .venv lacks what this pyproject.toml asks for.
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
# A word A|B is one package under a name per release (trixie's first): either one
# installed is enough, else the first one this release has is installed.
# A qemu lab: qemu and its disk tool, the image build (mmdebstrap, mkfs.ext4, Debian's
# keyring; zstd uncompresses the node kernel for a faster direct boot), ssh to the nodes,
# libpcap for `labctl capture --filter` (scapy compiles the expression with it; trixie
# renamed the package), kmod for nodes on a kernel of your own (depmod, modprobe), and
# Python.
lab=(qemu-system-x86 qemu-utils mmdebstrap e2fsprogs debian-archive-keyring zstd kmod
     openssh-client ca-certificates 'libpcap0.8t64|libpcap0.8' python3 python3-venv python3-pip)
# The tests besides: iproute2 (`ip netns` in capture tests; also docker labs with
# `--engine local`), cpio (GNU cpio reads back labctl's initramfs: tests/unit/test_cpio.py),
# the docker CLI (the docker provider runs `docker exec`; its tests and the multi-host
# ones use it): trixie's docker-cli is the client alone, bookworm's docker.io also brings
# the engine, which Debian starts (labctl does not need it: docs/install.md). A `docker`
# command already there (Docker's own docker-ce-cli, say) is enough.
tests=(iproute2 cpio 'docker-cli|docker.io')
# Installed where the release has them: Debian's vagrant lets the tests run `vagrant
# validate`; with vagrant-libvirt and libvirt (daemon, qemu driver, virsh, dnsmasq-base for
# the management network's DHCP, iptables for libvirt's isolated networks) labctl boots
# vagrant labs here, starting libvirtd itself (docs/vagrant.md; no service is enabled);
# tshark checks labctl's RDMA decoder against Wireshark's (bookworm: 21 MB, 121 MiB,
# ~50 s); gcc and libc6-dev let the unit tests build the nodes' compiled inspector client
# (labctl/images/verbs-client.c; node images build it themselves, in their chroot).
optional=(vagrant vagrant-libvirt libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients
          dnsmasq-base iptables tshark gcc libc6-dev)
# What a machine without an optional package loses. In CI (CI set, as root) a skipped
# integration test is a failure (tests/integration/conftest.py): the live vagrant test
# then fails unless LABCTL_TEST_VAGRANT=0 leaves it out.
vagrant_loss="no vagrant labs here, and the live vagrant test is skipped (a failure under CI=true; LABCTL_TEST_VAGRANT=0 leaves it out)"
declare -A loses=(
    [vagrant]=$vagrant_loss [vagrant-libvirt]=$vagrant_loss [libvirt-daemon]=$vagrant_loss
    [libvirt-daemon-driver-qemu]=$vagrant_loss [libvirt-clients]=$vagrant_loss
    [dnsmasq-base]=$vagrant_loss [iptables]=$vagrant_loss
    [tshark]="the unit test that checks labctl's decoder against Wireshark is skipped"
    [gcc]="the unit test that builds the nodes' inspector client is skipped"
    [libc6-dev]="the unit test that builds the nodes' inspector client is skipped"
)
packages=("${lab[@]}")
extras=()
if [ "$minimal" -eq 0 ]; then
    packages+=("${tests[@]}")
    extras=("${optional[@]}")
fi
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
satisfied() {  # WORD: any of its names installed (for the docker CLI: a docker command)
    local name
    if [[ $1 == docker-cli\|* ]] && command -v docker >/dev/null; then
        return 0
    fi
    for name in ${1//|/ }; do
        installed "$name" && return 0
    done
    return 1
}
pick() {  # WORD: the first of its names this release has (else the first: apt says why)
    local name
    for name in ${1//|/ }; do
        if available "$name"; then echo "$name"; return 0; fi
    done
    echo "${1%%|*}"
}
missing=()
for word in "${packages[@]}"; do
    satisfied "$word" || missing+=("$word")
done
for word in "${extras[@]}"; do
    satisfied "$word" || missing+=("$word?")
done
if [ "${#missing[@]}" -gt 0 ]; then
    shown=()
    for word in "${missing[@]}"; do
        [[ $word == *\? ]] || shown+=("${word//|/ or }")
    done
    echo "setup.sh: missing ${shown[*]:-no required package}; the release's package lists first (apt-get update)"
    apt-get update -qq
    required=()
    for word in "${missing[@]}"; do
        case "$word" in
            *\?) name=${word%\?}
                  if available "$name"; then
                      required+=("$name")
                  else
                      echo "setup.sh: $name is not in this release's packages: ${loses[$name]}"
                  fi ;;
            *) required+=("$(pick "$word")") ;;
        esac
    done
    echo "setup.sh: installing ${required[*]}"
    # bookworm's docker.io is the client and the engine, which Debian starts and enables at
    # once; labctl needs the client only (its docker labs use the Docker host VM's engine),
    # and a running dockerd rewrites the host's iptables (FORWARD: DROP). The engine is kept
    # from starting (policy-rc.d) and left disabled.
    # (SETUP_SYSROOT: tests/unit/test_setup.py runs this with stubs, never on the host's /usr.)
    policy_rc=${SETUP_SYSROOT:-}/usr/sbin/policy-rc.d
    engine=0 policy_made=0
    if [[ " ${required[*]} " == *" docker.io "* ]]; then
        engine=1
        if [ ! -e "$policy_rc" ]; then
            printf '#!/bin/sh\nexit 101\n' > "$policy_rc"
            chmod 755 "$policy_rc"
            policy_made=1
        fi
    fi
    rc=0
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${required[@]}" >/dev/null || rc=$?
    if [ "$policy_made" -eq 1 ]; then rm -f "$policy_rc"; fi
    if [ "$engine" -eq 1 ]; then
        systemctl disable docker.service docker.socket >/dev/null 2>&1 || true
        echo "setup.sh: docker.io's engine is installed but not started or enabled (labctl uses its client only)"
    fi
    [ "$rc" -eq 0 ] || exit "$rc"
fi
# .venv: made and filled by pip only when it lacks what is asked: a stamp records which
# install (labctl alone or labctl[dev]) ran against which pyproject.toml.
extra=dev
spec='.[dev]'
if [ "$minimal" -eq 1 ]; then
    extra=base
    spec=.
fi
stamp=.venv/.setup-stamp
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
have=$(cat "$stamp" 2>/dev/null || true)
if [ -x .venv/bin/labctl ] && { [ "$have" = "dev $want" ] || [ "$have" = "$extra $want" ]; } &&
        .venv/bin/python -c 'import labctl' 2>/dev/null; then
    echo "setup.sh: ready (.venv/bin/labctl; nothing to install)"
    exit 0
fi
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
rm -f "$stamp"
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e "$spec"
echo "$extra $want" > "$stamp"
echo "setup.sh: ready (.venv/bin/labctl)"
