"""python3 -m labctl.verbs devices|devinfo|asyncwatch|capture [args]"""

from __future__ import annotations

import sys

USAGE = (
    "usage: python3 -m labctl.verbs COMMAND [ARGS]\n"
    "commands:\n"
    "  devices      like ibv_devices\n"
    "  devinfo      like ibv_devinfo [-d DEV] [-i PORT] [-l] [-v]\n"
    "  asyncwatch   like ibv_asyncwatch [-d DEV]\n"
    "  capture      write the attribute records of all devices as JSON\n"
    "each takes --json (ours) for machine-readable output\n"
)


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        sys.stdout.write(USAGE)
        return 0 if len(argv) >= 2 else 2
    command, rest = argv[1], argv[1:]
    if command == "devices":
        from labctl.verbs import devices

        return devices.main(rest)
    if command == "devinfo":
        from labctl.verbs import devinfo

        return devinfo.main(rest)
    if command == "asyncwatch":
        from labctl.verbs import asyncwatch

        return asyncwatch.main(rest)
    if command == "capture":
        from labctl.verbs import devinfo

        snap = devinfo.capture(verbose=True)
        sys.stdout.write(snap.to_json() + "\n")
        return 0
    sys.stderr.write(f"unknown command {command!r}\n{USAGE}")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
