"""Code that runs inside lab nodes (stdlib only: nodes have no pip packages)."""
