"""The Docker host VM and where a docker lab\x27s engine lives."""
