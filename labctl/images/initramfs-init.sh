#!/bin/busybox sh
# Stage 1 of a lab node (PID 1 in the initramfs): load the block and ext4 drivers,
# mount the node's disk, copy in the per-node payload, hand over to stage 2 (PID 1 is then
# tini, which starts stage 2 and reaps orphans).
/bin/busybox mkdir -p /proc /sys /dev /newroot
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
# /dev/fd, stdin, stdout, stderr and core, as udev makes them on Debian (builder.py DEV_LINKS)
cp -a /devlinks/. /dev/ || echo "labctl: /dev links not made" > /dev/ttyS0
[ -e /proc/kcore ] || rm -f /dev/core
echo "labctl: stage initramfs" > /dev/ttyS0
for module in $(cat /modules/order); do
    insmod "/modules/$module" || echo "labctl: insmod $module failed" > /dev/ttyS0
done
tries=0
until [ -b /dev/vda ]; do
    tries=$((tries + 1))
    [ "$tries" -gt 500 ] && { echo "labctl: fail no root disk /dev/vda" > /dev/ttyS0; poweroff -f; }
    usleep 10000
done
mount -t ext4 -o rw,noatime /dev/vda /newroot || { echo "labctl: fail cannot mount root disk" > /dev/ttyS0; poweroff -f; }
if [ -d /payload ]; then
    cp -a /payload/. /newroot/
fi
umount /proc /sys
mount --move /dev /newroot/dev
exec switch_root /newroot /usr/bin/tini -- /opt/labctl/labctl/nodeside/node-init.sh
