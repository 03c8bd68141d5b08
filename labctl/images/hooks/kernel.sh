#!/bin/sh
# mmdebstrap customize hook: install the kernel (image + modules) of SUITE into ROOT.
# The binary and modules packages are installed directly, without the linux-image
# meta package, so that no initramfs generator runs: lab nodes boot our own tiny one.
set -eu
root="$1"
suite="$2"
if ! grep -rqs " $suite " "$root/etc/apt/sources.list" "$root/etc/apt/sources.list.d/"; then
    # Same mirror as the base suite, other suite name (e.g. trixie -> trixie-backports).
    base="${suite%%-*}"
    sed -n "s/^\(deb .*\) $base \(.*\)\$/\1 $suite \2/p" "$root/etc/apt/sources.list" \
        > "$root/etc/apt/sources.list.d/labctl-kernel.list"
fi
chroot "$root" apt-get update -qq
abi=$(chroot "$root" apt-cache depends "linux-image-amd64/$suite" \
    | sed -n 's/^ *Depends: linux-image-\([0-9].*\)$/\1/p' | head -n 1)
if [ -z "$abi" ]; then
    echo "labctl: no linux-image-amd64 found in suite $suite" >&2
    exit 1
fi
echo "labctl: kernel $abi from $suite"
if chroot "$root" apt-cache show "linux-binary-$abi" >/dev/null 2>&1; then
    pkgs="linux-binary-$abi linux-modules-$abi"   # split packaging (7.x)
else
    pkgs="linux-image-$abi"                       # classic packaging (6.x)
    mkdir -p "$root/etc/kernel"                   # keep its postinst from building an initramfs
fi
chroot "$root" env DEBIAN_FRONTEND=noninteractive INITRD=No \
    apt-get install -y -qq --no-install-recommends -t "$suite" $pkgs
echo "$abi" > "$root/etc/labctl-kernel"
# Debian keeps the running kernel's config at /boot/config-RELEASE, where tools and test
# suites look (blktests, scripts/extract-ikconfig users); the split packaging (7.x) ships
# it in the modules directory only.
if [ -f "$root/usr/lib/modules/$abi/config" ] && [ ! -e "$root/boot/config-$abi" ]; then
    mkdir -p "$root/boot"
    ln -s "../usr/lib/modules/$abi/config" "$root/boot/config-$abi"
fi
