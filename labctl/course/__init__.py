"""`labctl lesson`: RDMA exercises a learner writes, judged from outside the program (its
exit and output, the packets on the wire, the devices' counters)."""

# The learner's program in each language it may be written in (cheap to import: the CLI's
# options name them before any lesson is read).
LANGS = ("c", "python")
SOURCE = {"c": "lesson.c", "python": "lesson.py"}
