"""See RDMA on the wire: capture a lab link, decode RoCE v2 / RDMA CM / iWARP, draw a ladder.

Modules, one job each: `target` (NODE:IF -> namespace and tap), `worker` (the capture
child process), `process` (start/stop that child, `capturing()` for runs), `pcapfile`
(reading captures), `roce`, `cm`, `iwarp` (decoders), `decode` (one frame -> one record),
`summary` (lines and counts), `ladder` (the sequence picture).
"""
