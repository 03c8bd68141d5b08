"""Lab state: the lab directory, its lock, and access to running nodes."""
