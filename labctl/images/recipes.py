"""Image recipes: which Debian suite, kernel suite and packages make a node image."""

from __future__ import annotations

from dataclasses import dataclass
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

# trixie userland (rdma-core 56.1) with the trixie-backports 7.x kernel, whose rxe works
# per network namespace (needed by the Docker provider, see docs/docker.md).
RECIPES: dict[str, Recipe] = {
    "trixie": Recipe("trixie", "trixie", "trixie-backports", node_packages()),
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


def recipe(name: str) -> Recipe:
    try:
        return RECIPES[name]
    except KeyError:
        raise UsageError(
            f"unknown image {name!r}", hint=f"known images: {', '.join(sorted(RECIPES))}"
        ) from None
