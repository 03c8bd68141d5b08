"""The lab directory and its one typed state: what every layer above
reads and the lifecycle writes.
"""
