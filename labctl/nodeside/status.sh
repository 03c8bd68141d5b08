#!/bin/sh
# Print this node's RDMA and data-interface state as one reply line (runs inside a node;
# `labctl status` asks every node at once): labctl's reply format (nodeside/reply.py),
# {"labctl_reply": 1, "ok": true, "data": STATUS}, spelled out in the awk below.
#
# The shell and one awk, not Python: under TCG a node's `python3 -c pass` alone takes about
# a second of its CPU on a busy host, and a sixteen-node `status` started sixteen of them
# on two host cores (docs/performance.md, "Lab size"). Few programs, too: each start costs
# tens of milliseconds there, so the sysfs files (a device's GID table has hundreds of
# entries) are read by awk itself, and the lists are made by the shell's builtins. `ibv_devinfo` gives the active MTU, which sysfs does
# not expose; `ip` the IPv4 addresses. The host checks every field of the reply
# (labctl/node/replies.py); what is printed here is restricted to the characters those
# fields can hold.
#
# STATUS: {"devices": [{"name", "node_type", "netdev", "port_state", "link_layer", "active_mtu",
#   "gid_index", "gid_ipv4"}], "interfaces": [{"name", "state", "mtu", "mac", "ipv4"}],
#  "kernel"}: devices sorted by name, interfaces by index without lo and eth0 (management).

IB=/sys/class/infiniband
NET=/sys/class/net

devices=""
if [ -d "$IB" ]; then
    devices=$(cd "$IB" && echo *)  # sorted, as the shell expands a pattern
    [ "$devices" = "*" ] && devices=""
    # Container nodes share one kernel and see every lab's devices: report our own.
    if [ -n "${LABCTL_RDMA_DEV:-}" ] && [ -e "$IB/$LABCTL_RDMA_DEV" ]; then
        devices=$LABCTL_RDMA_DEV
    fi
fi

# What awk reads: one line per fact ("dev NAME MTU", "net NAME",
# "addr NAME A.B.C.D/P"), made with the shell's builtins (no program started but
# ibv_devinfo, ip and awk); awk reads sysfs itself.
{
    for dev in $devices; do
        mtu=-
        while read -r key value _rest; do
            [ "$key" = "active_mtu:" ] && mtu=$value
        done <<EOF_IBV
$(ibv_devinfo -d "$dev" -i 1 2>/dev/null)
EOF_IBV
        echo "dev $dev $mtu"
    done
    for path in "$NET"/*; do
        echo "net ${path##*/}"  # no test per name: each stat costs a TCG node
    done
    ip -o -4 addr show 2>/dev/null | while read -r _index name family address _rest; do
        [ "$family" = inet ] && echo "addr $name $address"
    done
} | awk -v ib="$IB" -v net="$NET" '
function clean(s, chars) { gsub("[^" chars "]", "", s); return s }
function first(path,  line, got) {  # a file'"'"'s first line, "" when unreadable
    line = ""
    got = (getline line < path)
    close(path)
    if (got < 0) missing = 1
    return got > 0 ? clean(line, "A-Za-z0-9:./_@ -") : ""
}
function hex(h,  i, n) {
    n = 0
    for (i = 1; i <= length(h); i++) n = n * 16 + index("0123456789abcdef", substr(h, i, 1)) - 1
    return n
}
function q(s) { return "\"" s "\"" }
function name_ok(s) { return s != "" && s == clean(s, "A-Za-z0-9._@-") }
$1 == "dev" && name_ok($2) { devs[++ndev] = $2; mtu[$2] = clean($3, "0-9") }
$1 == "net" && name_ok($2) && $2 != "lo" && $2 != "eth0" {
    missing = 0
    idx = clean(first(net "/" $2 "/ifindex"), "0-9")
    if (missing) next  # no such interface (an empty directory: the pattern itself)
    nets[++nnet] = (idx == "" ? 0 : idx) " " $2
}
$1 == "addr" { addrs[$2] = addrs[$2] (addrs[$2] == "" ? "" : ", ") q(clean($3, "0-9./")) }
END {
    printf "{\"labctl_reply\": 1, \"ok\": true, \"data\": {\"devices\": ["
    for (d = 1; d <= ndev; d++) {
        dev = devs[d]; port = ib "/" dev "/ports/1"
        # the first RoCE v2 GID that maps an IPv4 address (::ffff:a.b.c.d), by index: the
        # table has hundreds of entries (0 to N-1), and those of the addresses come first
        best = -1; ipv4 = ""
        missing = 0
        for (k = 0; k < 65536 && best < 0; k++) {
            gid = first(port "/gids/" k)
            if (missing) break  # past the end of the table
            if (gid !~ /^0000:0000:0000:0000:0000:ffff:[0-9a-f][0-9a-f][0-9a-f][0-9a-f]:[0-9a-f][0-9a-f][0-9a-f][0-9a-f]$/) continue
            if (first(port "/gid_attrs/types/" k) != "RoCE v2") continue
            split(gid, g, ":")
            best = k
            ipv4 = hex(substr(g[7], 1, 2)) "." hex(substr(g[7], 3, 2)) "." \
                hex(substr(g[8], 1, 2)) "." hex(substr(g[8], 3, 2))
        }
        state = first(port "/state"); sub(/^.*: /, "", state)
        printf "%s{\"name\": %s, \"node_type\": %s, \"netdev\": %s, \"port_state\": %s, ", \
            (d > 1 ? ", " : ""), q(dev), q(first(ib "/" dev "/node_type")),
            q(first(port "/gid_attrs/ndevs/0")), q(state)
        printf "\"link_layer\": %s, \"active_mtu\": %s, \"gid_index\": %s, \"gid_ipv4\": %s}", \
            q(first(port "/link_layer")), q(mtu[dev]), (best >= 0 ? best : "null"), q(ipv4)
    }
    printf "], \"interfaces\": ["
    # by interface index, as `ip` lists them
    for (i = 2; i <= nnet; i++)
        for (j = i; j > 1; j--) {
            split(nets[j - 1], a, " "); split(nets[j], b, " ")
            if (a[1] + 0 <= b[1] + 0) break
            t = nets[j]; nets[j] = nets[j - 1]; nets[j - 1] = t
        }
    for (i = 1; i <= nnet; i++) {
        split(nets[i], a, " "); name = a[2]; dir = net "/" name
        mtu_ = clean(first(dir "/mtu"), "0-9"); mac = first(dir "/address")
        state = toupper(first(dir "/operstate"))
        printf "%s{\"name\": %s, \"state\": %s, \"mtu\": %s, \"mac\": %s, \"ipv4\": [%s]}", \
            (i > 1 ? ", " : ""), q(name), q(state), (mtu_ == "" ? "null" : mtu_),
            (mac == "" ? "null" : q(mac)), addrs[name]
    }
    kernel = ""
    if ((getline kernel < "/proc/sys/kernel/osrelease") <= 0) kernel = ""
    printf "], \"kernel\": %s}}\n", q(clean(kernel, "A-Za-z0-9._+~-"))
}'
