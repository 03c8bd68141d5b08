#!/bin/sh
# mmdebstrap customize hook: drop what a lab node never reads, to shrink the image.
set -eu
root="$1"
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old \
    "$root"/var/log/*.log "$root"/usr/share/doc "$root"/usr/share/man "$root"/usr/share/info
find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name 'locale.alias' -exec rm -rf {} +
find "$root/usr/lib/python3" -name '__pycache__' -prune -exec rm -rf {} + 2>/dev/null || true
# ssh host keys are made per node at boot; the image must not carry shared ones.
rm -f "$root"/etc/ssh/ssh_host_*
