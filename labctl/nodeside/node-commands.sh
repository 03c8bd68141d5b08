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
[ -d /usr/local/bin ] || mkdir -p /usr/local/bin || exit 1
for tool in devinfo devices asyncwatch; do
    while IFS= read -r line; do printf '%s\n' "$line"; done > "/usr/local/bin/labctl-$tool" \
        <<EOF_TOOL || exit 1
#!/bin/sh
# labctl's Python ibv_$tool (pyverbs): the same output as the C tool. Started lean: -S
# (site costs ~0.3 s under TCG; labctl.verbs loads it when it needs pyverbs) and -c
# instead of -m (runpy costs 0.1-0.25 s).
PYTHONPATH="$code\${PYTHONPATH:+:\$PYTHONPATH}" \\
    exec python3 -S -c 'from labctl.verbs.__main__ import cli; cli()' $tool "\$@"
EOF_TOOL
done
chmod 0755 /usr/local/bin/labctl-devinfo /usr/local/bin/labctl-devices \
    /usr/local/bin/labctl-asyncwatch || exit 1
