"""rdma-lab: lab controller and device inspector for software RDMA."""

__version__ = "0.1.0"
