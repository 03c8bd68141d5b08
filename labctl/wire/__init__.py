"""What the lab's packets are: pcap files, RoCE v2, RDMA CM and iWARP decoding,
summaries and ladder pictures. Pure: bytes in, records out.
"""
