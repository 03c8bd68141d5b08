#!/bin/sh
# Start the inspector's helper (labctl/verbs/helper.py) in the background and return.
# A container node runs this at the end of its node-init.sh; labctl runs it in VM nodes
# once every node of the lab is ready: its import of pyverbs is about a second of CPU
# under TCG, which would otherwise slow the nodes still booting (four-node `up` 1.3 s).
# At the lowest priority; a second start exits at once (the helper holds a lock).
setsid -f nice -n 19 python3 -m labctl.verbs helper </dev/null >>/run/labctl-verbs-helper.log 2>&1
