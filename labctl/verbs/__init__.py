"""Node-side device inspector: ibv_devices, ibv_devinfo and ibv_asyncwatch in Python.

Runs inside lab nodes (or on any host with rdma-core's libibverbs and pyverbs) with the
standard library and pyverbs only: `python3 -m labctl.verbs devices|devinfo|asyncwatch`.
Output and exit codes match the C tools of rdma-core 56.1 byte for byte; `--json` is ours.
Keep this file free of imports: pyverbs is loaded only by the code that needs it.
"""
