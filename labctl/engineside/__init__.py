"""Code that runs beside a docker lab's engine, on the kernel that runs its containers (the
Docker host VM, or this host as root for a local engine), never inside labctl's process:
each file is sent as text (`python3 -` or `sh -s` on stdin) and run there. Standard
library only, and nothing else of labctl: only the file itself reaches that machine."""
