#!/bin/sh
# mmdebstrap customize hook: rdma-core's own pyverbs test suite (`tests/` of its source
# tree) at exactly the version installed in this chroot, unpacked to
# /usr/share/rdma-core-tests (`labctl run rdma-core-tests` runs it in a node). The source
# comes from Debian's source package through apt (a deb-src line for the image's suite,
# removed afterwards); only the upstream tarball's tests/ is kept.
set -eu
root="$1"
dest=/usr/share/rdma-core-tests
version=$(chroot "$root" dpkg-query -W -f '${Version}' rdma-core)
echo "labctl: rdma-core tests for $version"
# Same mirror and suite as the base image's own "deb" line, as a "deb-src" line.
sed -n 's/^deb \(.*\)$/deb-src \1/p' "$root/etc/apt/sources.list" \
    > "$root/etc/apt/sources.list.d/labctl-src.list"
chroot "$root" apt-get update -qq
mkdir -p "$root/tmp/rdma-core-src"
chroot "$root" sh -c "cd /tmp/rdma-core-src && apt-get source -qq --download-only \
    rdma-core=$version" 2>&1 | grep -v unsandboxed || true
upstream=$(echo "$version" | sed 's/^[0-9]*://; s/-[^-]*$//')
orig=$(ls "$root"/tmp/rdma-core-src/rdma-core_"$upstream".orig.tar.* 2>/dev/null | head -n 1)
if [ -z "$orig" ]; then
    echo "labctl: no source tarball of rdma-core $version was downloaded" >&2
    exit 1
fi
mkdir -p "$root$dest"
tar -xf "$orig" -C "$root$dest" --strip-components=1 --wildcards "rdma-core-$upstream/tests/*"
echo "$version" > "$root$dest/VERSION"
# Compiled now: every run imports all ~50 modules of the suite, and compiling them in a
# node under emulation took ~30 s (the first run of a module: 36 s, the next ones: 4 s).
chroot "$root" python3 -m compileall -q "$dest/tests" > /dev/null
# (the deb-src lists apt fetched go with the others in trim.sh)
rm -rf "$root/tmp/rdma-core-src" "$root/etc/apt/sources.list.d/labctl-src.list"
count=$(find "$root$dest/tests" -name 'test_*.py' | wc -l)
echo "labctl: rdma-core tests unpacked to $dest ($count test modules)"
