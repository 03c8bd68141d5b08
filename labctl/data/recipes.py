"""Image recipes: which Debian suite, kernel suite and packages make a node image."""

from __future__ import annotations

from dataclasses import dataclass, replace
from importlib import resources

from labctl.errors import UsageError, short_repr


def node_packages() -> tuple[str, ...]:
    """The Debian packages every lab node gets (shared with the Vagrantfile)."""
    text = resources.files("labctl.images").joinpath("node-packages.txt").read_text()
    return tuple(
        line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")
    )


@dataclass(frozen=True)
class Recipe:
    name: str
    suite: str  # userland
    kernel_suite: str  # where linux-image-amd64 comes from
    packages: tuple[str, ...]
    # Customize hooks of this recipe alone (labctl/images/hooks/NAME), run after the ones
    # every image gets and before the trim; part of the image's key.
    hooks: tuple[str, ...] = ()


DOCKER_HOST_PACKAGES = ("docker.io", "docker-cli", "containerd", "runc")
# Lab nodes' management ssh server (node-init.sh says why not OpenSSH's sshd, which stays
# for the data-address sshds of the MPI runs). Not in node-packages.txt: the Docker host VM
# keeps OpenSSH's sshd (its engine's socket is forwarded), and Vagrant boxes their own.
VM_NODE_PACKAGES = ("dropbear-bin",)
# The development image (`image: trixie-dev`): build and debug RDMA code in the nodes.
# libc6-dev: gcc only recommends it (crt files, libc headers) and images get no recommends.
DEV_PACKAGES = ("gcc", "libc6-dev", "make", "pkg-config", "libibverbs-dev", "librdmacm-dev",
                "python3-pyverbs", "gdb", "strace")
# The workloads image (`image: trixie-workloads`): the real RDMA stacks `labctl run` drives
# across a lab (docs/workloads.md). An image of its own so the default node stays small.
WORKLOAD_PACKAGES = ("openmpi-bin", "python3-mpi4py", "ucx-utils", "libfabric-bin",
                     "nvme-cli", "fio", "nfs-kernel-server", "qperf")
# rdma-core's own test suite at the nodes' version (`labctl run rdma-core-tests`).
WORKLOAD_HOOKS = ("rdma-core-tests.sh",)

# trixie userland (rdma-core 56.1) with the trixie-backports 7.x kernel, whose rxe works
# per network namespace (needed by the Docker provider, see docs/docker.md).
RECIPES: dict[str, Recipe] = {
    "trixie": Recipe("trixie", "trixie", "trixie-backports",
                     (*node_packages(), *VM_NODE_PACKAGES)),
    "trixie-dev": Recipe("trixie-dev", "trixie", "trixie-backports",
                         (*node_packages(), *VM_NODE_PACKAGES, *DEV_PACKAGES)),
    "trixie-workloads": Recipe("trixie-workloads", "trixie", "trixie-backports",
                               (*node_packages(), *VM_NODE_PACKAGES, *WORKLOAD_PACKAGES),
                               hooks=WORKLOAD_HOOKS),
    "sid": Recipe("sid", "sid", "sid", (*node_packages(), *VM_NODE_PACKAGES)),
    # The Docker host VM (labctl docker-host): a node image plus a Docker engine, for hosts
    # whose kernel cannot give containers their own working rxe (see docs/docker.md).
    # trixie packages the docker client separately from the engine.
    "docker-host": Recipe(
        "docker-host",
        "trixie",
        "trixie-backports",
        (*node_packages(), *DOCKER_HOST_PACKAGES),
    ),
}


def with_packages(base: Recipe, extra: tuple[str, ...]) -> Recipe:
    """`base` plus a topology's `packages:` (names checked by the topology model). The
    packages are part of the image's key, so each list is an image of its own, cached."""
    added = tuple(sorted(set(extra) - set(base.packages)))
    return replace(base, packages=(*base.packages, *added)) if added else base


def node_recipe(image: str, packages: tuple[str, ...] = ()) -> Recipe:
    """The recipe of a node's image: its named recipe plus its extra packages."""
    return with_packages(recipe(image), packages)


def image_label(image: str, packages: tuple[str, ...] = ()) -> str:
    """How progress lines and per-lab image maps name a node's image."""
    return f"{image}+{','.join(sorted(set(packages)))}" if packages else image


def recipe(name: str) -> Recipe:
    try:
        return RECIPES[name]
    except KeyError:
        raise UsageError(
            f"unknown image {name!r}", hint=f"known images: {', '.join(sorted(RECIPES))}"
        ) from None


# --- the Debian mirror -------------------------------------------------------------------
# The mirror becomes an argument of mmdebstrap, which runs as root and takes hooks as
# options (--customize-hook=CMD): it must be a URL and nothing else. Only the characters a
# mirror URL needs: no whitespace (mmdebstrap reads "deb ..." lines as sources.list
# entries), no '#' (a comment there) and no query, which a Debian mirror never uses.
MIRROR_SCHEMES = ("http", "https", "file")
MIRROR_HINT = "give a URL, e.g. --mirror http://mirror.example.org/debian"
_MIRROR_PATH_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                               "0123456789-._~%!$&'()*+,;=:@/")
_MIRROR_HOST_CHARS = _MIRROR_PATH_CHARS | frozenset("[]")  # [::1], an IPv6 literal
MAX_MIRROR = 2048


def check_mirror(value: str | None) -> str | None:
    """`value` if it is a mirror URL (http, https with a host, or file with an absolute
    path), else UsageError (exit 2). None (mmdebstrap's default mirror) stays None."""
    if value is None:
        return None
    scheme, sep, rest = value.partition("://")
    if len(value) > MAX_MIRROR or not sep or scheme.lower() not in MIRROR_SCHEMES:
        raise UsageError(f"--mirror must be an http, https or file URL (got "
                         f"{short_repr(value)})", hint=MIRROR_HINT)
    host, slash, path = rest.partition("/")
    if not set(host) <= _MIRROR_HOST_CHARS or not set(path) <= _MIRROR_PATH_CHARS:
        raise UsageError(f"--mirror {short_repr(value)} holds a character a mirror URL does "
                         "not need (whitespace, a control character, '#', '?', '\"'...)",
                         hint=MIRROR_HINT)
    if scheme.lower() == "file":
        if host or not slash:
            raise UsageError(f"--mirror {short_repr(value)}: a file URL names an absolute "
                             "path and no host", hint="e.g. --mirror file:///srv/debian")
    elif not _host_name(host):
        raise UsageError(f"--mirror {short_repr(value)} names no host", hint=MIRROR_HINT)
    return value


def _host_name(netloc: str) -> str:
    """The host of a URL's netloc, without user and port ("" when there is none)."""
    host = netloc.rpartition("@")[2]
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.partition(":")[0]
