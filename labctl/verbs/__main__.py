"""python3 -m labctl.verbs devices|devinfo|asyncwatch|capture|helper [args]; see cli()."""

from __future__ import annotations

import os
import sys

USAGE = (
    "usage: python3 -m labctl.verbs COMMAND [ARGS]\n"
    "commands:\n"
    "  devices      like ibv_devices\n"
    "  devinfo      like ibv_devinfo [-d DEV] [-i PORT] [-l] [-v]\n"
    "  asyncwatch   like ibv_asyncwatch [-d DEV]\n"
    "  capture      write the attribute records of all devices as JSON\n"
    "  helper       keep pyverbs imported and serve the others from a unix socket\n"
    "each takes --json (ours) for machine-readable output\n"
)


def dispatch(argv: list[str]) -> int:
    """Run one command in this process; argv[0] is the command."""
    command = argv[0]
    if command == "devices":
        from labctl.verbs import devices

        return devices.main(argv)
    if command == "devinfo":
        from labctl.verbs import devinfo

        return devinfo.main(argv)
    if command == "asyncwatch":
        from labctl.verbs import asyncwatch

        return asyncwatch.main(argv)
    if command == "capture":
        from labctl.verbs import devinfo

        snap = devinfo.capture(verbose=True)
        sys.stdout.write(snap.to_json() + "\n")
        return 0
    if command == "helper":
        from labctl.verbs import helper

        return helper.main(argv, dispatch)
    sys.stderr.write(f"unknown command {command!r}\n{USAGE}")
    return 2


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        sys.stdout.write(USAGE)
        return 0 if len(argv) >= 2 else 2
    rest = argv[1:]
    from labctl.verbs import helper

    if rest[0] in helper.COMMANDS and os.environ.get(helper.DIRECT_ENV) != "1":
        status = helper.call(rest)  # pyverbs already imported there: much faster
        if status is not None:
            return status
    if sys.flags.no_site:
        # `python3 -S` (labctl's own calls: site costs ~0.3 s under TCG) serves the helper
        # path; running here needs pyverbs from dist-packages, which site adds.
        import site

        site.main()
    return dispatch(rest)


def cli() -> None:
    """`python3 -S -c 'from labctl.verbs.__main__ import cli; cli()' COMMAND [ARGS]`: the
    same as `python3 -m labctl.verbs`, without runpy and importlib.util (0.1-0.25 s of a
    run under TCG). labctl's own calls and the labctl-* node commands use it."""
    sys.exit(main(sys.argv))  # argv[0] is "-c"


if __name__ == "__main__":
    sys.exit(main(sys.argv))
