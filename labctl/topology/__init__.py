"""Topology files: read, validate, resolve into a Lab with addresses and names."""
