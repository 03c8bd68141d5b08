"""The lab data plane on the host: one network namespace per lab (pyroute2 only)."""
