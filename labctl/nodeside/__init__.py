"""Code that runs inside lab nodes (stdlib only: nodes have no pip packages), installed in
every node under NODE_CODE."""

# Where every node has labctl's node-side code (labctl/__init__.py, nodeside/, verbs/): the
# PYTHONPATH of what labctl runs there. Its shell scripts (and the image's stage 1,
# images/initramfs-init.sh) spell the path out, as they cannot import it.
NODE_CODE = "/opt/labctl"
# The one bring-up script (node-init.sh): the image's stage 1 starts it (its argument says
# the node kind).
NODE_INIT = f"{NODE_CODE}/labctl/nodeside/node-init.sh"
# What a node answers `labctl status` with (the shell's: no Python start per status).
STATUS_COMMAND = ["sh", f"{NODE_CODE}/labctl/nodeside/status.sh"]
