"""A ladder (sequence) diagram: one lifeline per IP address, one arrow per packet.

matplotlib is optional (the `plot` extra): it is imported only to draw, and its absence
is a usage error with the install hint.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from labctl.errors import LabctlError, UsageError

if TYPE_CHECKING:  # annotations only: a --ladder file name is checked without scapy
    from labctl.wire.decode import Frame

MAX_LADDER = 2000  # arrows in one ladder (a row each: 2000 make a 720-inch image)
SUFFIXES = (".png", ".svg")  # matplotlib draws by the file name's suffix


def check_ladder_file(path: Path) -> Path:
    """`--ladder FILE`: a .png or .svg file name, else UsageError (exit 2)."""
    if path.suffix.lower() not in SUFFIXES:
        raise UsageError(f"--ladder {path}: use a .png or .svg file name",
                         hint="e.g. --ladder ladder.svg")
    return path


_COLORS = {"RoCEv2": "#1f77b4", "CM": "#2ca02c", "MAD": "#2ca02c", "iWARP": "#9467bd",
           "TCP": "#7f7f7f", "UDP": "#7f7f7f", "ARP": "#bcbd22"}
_ACK_COLOR = "#d62728"
_RECOVERY_COLOR = "#ff7f0e"  # NAKs, gaps, packets sent again (labctl.wire.recovery)


def lifelines(frames: list[Frame]) -> list[str]:
    """The two (or more) endpoints by first appearance; frames without IPs are left out."""
    order: list[str] = []
    for frame in frames:
        for address in (frame.src, frame.dst):
            if address not in order:
                order.append(address)
    return order


def arrow_label(frame: Frame) -> str:
    """Opcode and PSN, AckReq, and what the packet shows of RC recovery."""
    label = frame.label + (" (ackreq)" if frame.ackreq and frame.proto == "RoCEv2" else "")
    return label + (f" [{frame.recovery}]" if frame.recovery else "")


def arrow_color(frame: Frame) -> str:
    """Recovery (a NAK, a gap, a packet sent again) first; then responses; then by protocol."""
    if frame.recovery:
        return _RECOVERY_COLOR
    if any("ACKNOWLEDGE" in op or "RESPONSE" in op for op in frame.ops):
        return _ACK_COLOR
    return _COLORS.get(frame.proto, "#7f7f7f")


def draw(frames: list[Frame], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only, no display
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise UsageError("drawing a ladder needs matplotlib",
                         hint="pip install 'labctl[plot]' (or matplotlib)") from exc
    frames = [f for f in frames if f.proto != "other"]
    if not frames:
        raise UsageError("no IP packets to draw", hint="is this a capture of a lab link?")
    lanes = lifelines(frames)
    x = {address: i * 6.0 for i, address in enumerate(lanes)}
    rows = len(frames)
    fig, ax = plt.subplots(figsize=(4.5 + 3.2 * len(lanes), 1.2 + 0.36 * rows))
    t0 = frames[0].time
    for address in lanes:
        ax.plot([x[address]] * 2, [-0.5, rows + 0.2], color="black", linewidth=1.2)
        ax.text(x[address], -0.9, address, ha="center", va="bottom", fontsize=10,
                fontweight="bold")
    for row, frame in enumerate(frames):
        y = row + 0.5
        src, dst = x[frame.src], x[frame.dst]
        color = arrow_color(frame)
        ax.annotate("", xy=(dst, y + 0.25), xytext=(src, y - 0.25),
                    arrowprops={"arrowstyle": "-|>", "color": color,
                                "linewidth": 2.0 if frame.recovery else 1.2})
        ax.text((src + dst) / 2, y - 0.12, arrow_label(frame), ha="center", va="bottom",
                fontsize=7.5, color=color,
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5})
        ax.text(min(x.values()) - 0.4, y, f"{frame.index}  +{(frame.time - t0) * 1e3:.1f} ms",
                ha="right", va="center", fontsize=7, color="#555555")
    ax.set_xlim(min(x.values()) - 2.6, max(x.values()) + 1.0)
    ax.set_ylim(rows + 0.4, -1.3)
    ax.axis("off")
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise LabctlError(f"cannot write {path}: {exc}") from exc
    finally:
        plt.close(fig)
