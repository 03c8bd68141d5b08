"""A qemu machine: its command line, accelerator and QMP; used by the
qemu provider and the Docker host VM.
"""
