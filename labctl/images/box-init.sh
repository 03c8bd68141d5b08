#!/bin/sh
# Stage 2 of a node booted from labctl's Vagrant box (under tini, after the image's stage 1
# mounted the root disk). The box has no systemd: this script is its whole boot.
#   - mounts, hostname (labctl.node= on the kernel command line, set by the Vagrantfile);
#   - the management NIC (labctl.mgmt=MAC, else eth0) gets its address by DHCP from
#     libvirt's dnsmasq on the isolated management network; no default route is set, the
#     node has nowhere to route to;
#   - sshd (root, keys only; the box key's public half comes with the initrd payload);
#   - once Vagrant has provisioned the node (/etc/labctl/node.env exists), the lab's
#     bring-up (labctl-node-up start: data NICs and the RDMA device) at every boot.
# udhcpc calls this same file with bound|renew|deconfig to apply a lease.
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH

say() { echo "labctl-box: $*" > /dev/ttyS0; }

case "${1:-}" in
    deconfig)
        ip -4 addr flush dev "$interface"
        ip link set "$interface" up
        exit 0 ;;
    bound|renew)
        ip -4 addr flush dev "$interface"
        ip addr add "$ip/${mask:-24}" dev "$interface"
        say "dhcp $interface $ip/${mask:-24}"
        exit 0 ;;
    leasefail|nak)
        exit 0 ;;
esac

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mkdir -p /dev/pts /dev/shm /dev/mqueue /run /tmp
mount -t devpts devpts /dev/pts
for dir in /run /tmp /dev/shm; do mount -t tmpfs tmpfs "$dir"; done
mount -t mqueue mqueue /dev/mqueue
# the kernel's own file systems, as systemd mounts them on Debian
mount -t debugfs debugfs /sys/kernel/debug
mount -t tracefs tracefs /sys/kernel/tracing
modprobe configfs && mount -t configfs configfs /sys/kernel/config
mkdir -m 1777 /run/lock  # what a Debian machine has (stage 1 made /dev's links)

arg() {  # the value of labctl.NAME= on the kernel command line
    for word in $(cat /proc/cmdline); do
        case "$word" in "labctl.$1="*) echo "${word#*=}"; return 0 ;; esac
    done
    return 1
}
name=$(arg node) || name=labctl-box
hostname "$name"
echo "$name" > /etc/hostname
printf '127.0.0.1 localhost\n127.0.1.1 %s\n' "$name" > /etc/hosts
ip link set lo up
modprobe virtio_net
modprobe virtio_rng 2>/dev/null || true  # host entropy: sshd does not wait for the CRNG

mgmt=eth0
if mac=$(arg mgmt); then
    tries=0
    until found=$(grep -l -x "$mac" /sys/class/net/*/address 2>/dev/null | head -n 1) &&
            [ -n "$found" ]; do
        tries=$((tries + 1))
        [ "$tries" -gt 500 ] && { say "fail management NIC $mac not found"; break; }
        sleep 0.02
    done
    if [ -n "${found:-}" ]; then mgmt=$(basename "$(dirname "$found")"); fi
fi
ip link set "$mgmt" up
# -b: keep the lease renewed in the background; -R: release it at exit.
busybox udhcpc -i "$mgmt" -s /usr/local/sbin/labctl-box-init -b -R -t 20 -T 1 -A 2 -x hostname:"$name" \
    >/dev/null 2>&1 || say "fail udhcpc on $mgmt"

mkdir -p /run/sshd /etc/ssh/sshd_config.d
if [ ! -s /etc/ssh/ssh_host_ed25519_key ]; then  # made once per node, kept on its disk
    ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key
fi
printf '%s\n' 'PasswordAuthentication no' 'KbdInteractiveAuthentication no' \
    'PermitRootLogin prohibit-password' 'UseDNS no' \
    'HostKey /etc/ssh/ssh_host_ed25519_key' > /etc/ssh/sshd_config.d/00-labctl-box.conf
/usr/sbin/sshd || say "fail sshd"
say "sshd up on $mgmt"

if [ -r /etc/labctl/node.env ] && [ -x /usr/local/sbin/labctl-node-up ]; then
    /usr/local/sbin/labctl-node-up start > /dev/ttyS0 2>&1 || say "fail labctl-node-up"
fi
while :; do sleep 3600; done
