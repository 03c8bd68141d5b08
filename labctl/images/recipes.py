"""Image recipes: which Debian suite, kernel suite and packages make a node image."""

from __future__ import annotations

from dataclasses import dataclass, replace
from importlib import resources

from labctl.errors import UsageError


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


DOCKER_HOST_PACKAGES = ("docker.io", "docker-cli", "containerd", "runc")
# The development image (`image: trixie-dev`): build and debug RDMA code in the nodes.
# libc6-dev: gcc only recommends it (crt files, libc headers) and images get no recommends.
DEV_PACKAGES = ("gcc", "libc6-dev", "make", "pkg-config", "libibverbs-dev", "librdmacm-dev",
                "python3-pyverbs", "gdb", "strace")

# trixie userland (rdma-core 56.1) with the trixie-backports 7.x kernel, whose rxe works
# per network namespace (needed by the Docker provider, see docs/docker.md).
RECIPES: dict[str, Recipe] = {
    "trixie": Recipe("trixie", "trixie", "trixie-backports", node_packages()),
    "trixie-dev": Recipe("trixie-dev", "trixie", "trixie-backports",
                         (*node_packages(), *DEV_PACKAGES)),
    "sid": Recipe("sid", "sid", "sid", node_packages()),
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
