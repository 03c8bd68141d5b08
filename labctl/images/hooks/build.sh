#!/bin/sh
# mmdebstrap customize hook: build what a node needs and Debian does not ship, inside this
# chroot (the kbuild helpers and the client need this suite's libc). Build packages are
# purged afterwards.
# - soft-iWARP (siw.ko) for the image's kernel: Debian's kernels do not enable
#   CONFIG_RDMA_SIW; the driver builds out of tree from Debian's linux-source package
#   against the matching headers.
# - labctl's compiled inspector client ($3, labctl/images/verbs-client.c): labctl-devinfo
#   and labctl-devices, links to it, start in milliseconds where python3 takes 0.3-0.5 s.
# Both are kept in BUILT (per kernel ABI and package version) and installed from there by
# the next image of the same suite: the build downloads the kernel's whole source.
set -eu
root="$1"
suite="$2"
client_src="$3"
built="$4"
abi=$(cat "$root/etc/labctl-kernel")
series=$(echo "$abi" | cut -d. -f1,2)
kver=$(chroot "$root" dpkg-query -W -f '${Version}' "linux-binary-$abi" 2>/dev/null \
    || chroot "$root" dpkg-query -W -f '${Version}' "linux-image-$abi")
slot="$built/${abi}_${kver}"
install_client() {  # $1: the compiled client
    mkdir -p "$root/usr/local/lib/labctl" "$root/usr/local/bin"
    install -m 755 "$1" "$root/usr/local/lib/labctl/labctl-verbs-client"
    for tool in devinfo devices; do
        ln -sf ../lib/labctl/labctl-verbs-client "$root/usr/local/bin/labctl-$tool"
    done
}
# A slot is used only when it is a real directory of two regular files (no links).
if [ -d "$slot" ] && [ ! -L "$slot" ] && [ -f "$slot/siw.ko" ] && [ ! -L "$slot/siw.ko" ] \
        && [ -f "$slot/labctl-verbs-client" ] && [ ! -L "$slot/labctl-verbs-client" ]; then
    install -D -m 644 "$slot/siw.ko" "$root/usr/lib/modules/$abi/updates/siw.ko"
    install_client "$slot/labctl-verbs-client"
    chroot "$root" depmod "$abi"
    echo "labctl: siw and the inspector client for $abi taken from an earlier build"
    exit 0
fi
echo "labctl: building siw for $abi"
chroot "$root" dpkg-query -W -f '${Package}\n' | sort > "$root/tmp/pkgs-before"
chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends -t "$suite" "linux-headers-$abi" make binutils
chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends gcc libc6-dev
chroot "$root" sh -c "cd /tmp && apt-get download -qq -t $suite linux-source-$series" 2>&1 \
    | grep -v unsandboxed || true
mkdir -p "$root/tmp/siw"
dpkg-deb --fsys-tarfile "$root"/tmp/linux-source-"$series"_*.deb \
    | tar -xO "./usr/src/linux-source-$series.tar.xz" \
    | tar -xJ -C "$root/tmp/siw" --strip-components=5 \
        --wildcards "linux-source-$series/drivers/infiniband/sw/siw/*"
rm -f "$root"/tmp/linux-source-*.deb
if ! chroot "$root" make -s -C "/usr/src/linux-headers-$abi" M=/tmp/siw CONFIG_RDMA_SIW=m \
        modules > "$root/tmp/siw-build.log" 2>&1; then
    echo "labctl: siw build failed; compiler output tail:" >&2
    tail -n 30 "$root/tmp/siw-build.log" >&2
    exit 1
fi
install -D -m 644 "$root/tmp/siw/siw.ko" "$root/usr/lib/modules/$abi/updates/siw.ko"
cp "$client_src" "$root/tmp/verbs-client.c"
chroot "$root" gcc -O2 -Wall -o /tmp/labctl-verbs-client /tmp/verbs-client.c
install_client "$root/tmp/labctl-verbs-client"
echo "labctl: inspector client built"
# Kept for the next image: made beside the slot, then renamed into place in one step.
mkdir -p "$built"
keep=$(mktemp -d "$built/.new.XXXXXX")
cp "$root/tmp/siw/siw.ko" "$root/tmp/labctl-verbs-client" "$keep/"
mv -T "$keep" "$slot" 2>/dev/null || rm -rf "$keep"  # another build kept it first
chroot "$root" dpkg-query -W -f '${Package}\n' | sort > "$root/tmp/pkgs-after"
added=$(comm -13 "$root/tmp/pkgs-before" "$root/tmp/pkgs-after" | tr '\n' ' ')
chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq $added > /dev/null
rm -rf "$root/tmp/siw" "$root/tmp/verbs-client.c" "$root/tmp/labctl-verbs-client" "$root"/tmp/pkgs-* "$root/tmp/siw-build.log" "$root"/usr/src/linux-*
chroot "$root" depmod "$abi"
echo "labctl: siw built for $abi"
