#!/bin/sh
# Entry of a container node (the image's CMD, under tini): the one node bring-up script.
LABCTL_NODE_KIND=container exec /bin/sh /opt/labctl/labctl/nodeside/node-init.sh
