#!/bin/sh
# Make labctl's node-side tools commands a student can type in a node shell:
#   labctl-devinfo, labctl-devices, labctl-asyncwatch   (like ibv_devinfo & co)
#   python3 -m labctl.verbs ...                         (without PYTHONPATH)
# Run at every node start (node-init.sh, container-init.sh, the Vagrantfile's
# labctl-node-up) with labctl's code in $1 (default /opt/labctl). It changes /usr: only on
# a lab node, which has /etc/labctl/node.env (never on a host running labctl's tests).
set -u
code=${1:-/opt/labctl}
[ -f /etc/labctl/node.env ] || { echo "node-commands.sh: not a labctl node" >&2; exit 1; }
# Debian's python3 reads .pth files in /usr/lib/python3/dist-packages whatever its version.
site=/usr/lib/python3/dist-packages
if [ -d "$site" ]; then
    echo "$code" > "$site/labctl-node.pth" || exit 1
fi
# Shell builtins write the files: each program started costs a node tens of ms under TCG.
# labctl's node image (qemu, container and its Vagrant box's nodes) has labctl-devinfo and
# labctl-devices as links to a compiled client of the inspector's helper
# (labctl/images/verbs-client.c), which runs the Python wrapper of the same name in $lib
# when the helper cannot answer. Other nodes (a foreign Vagrant box) get the wrapper itself.
lib=/usr/local/lib/labctl
for dir in /usr/local/bin "$lib"; do
    [ -d "$dir" ] || mkdir -p "$dir" || exit 1
done
wrapper() {  # the Python wrapper of labctl-$1
    while IFS= read -r line; do printf '%s\n' "$line"; done <<EOF_TOOL
#!/bin/sh
# labctl's Python ibv_$1 (pyverbs): the same output as the C tool. Started lean: -S
# (site costs ~0.3 s under TCG; labctl.verbs loads it when it needs pyverbs) and -c
# instead of -m (runpy costs 0.1-0.25 s).
PYTHONPATH="$code\${PYTHONPATH:+:\$PYTHONPATH}" \\
    exec python3 -S -c 'from labctl.verbs.__main__ import cli; cli()' $1 "\$@"
EOF_TOOL
}
written=""
for tool in devinfo devices asyncwatch; do
    wrapper "$tool" > "$lib/labctl-$tool" || exit 1
    written="$written $lib/labctl-$tool"
    # -L: the image's link to the compiled client; writing through it would replace the client.
    if [ ! -L "/usr/local/bin/labctl-$tool" ]; then
        wrapper "$tool" > "/usr/local/bin/labctl-$tool" || exit 1
        written="$written /usr/local/bin/labctl-$tool"
    fi
done
chmod 0755 $written || exit 1
