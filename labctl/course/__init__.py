"""`labctl lesson`: RDMA exercises a learner writes, judged from outside the program (its
exit and output, the packets on the wire, the devices' counters)."""
