#!/usr/bin/env python3
"""Write docs/cli.md, the command reference, from the CLI itself: one section per command
(its help, usage line, every argument and option) with one example taken from the other
docs pages (the first full command line of that command in a code block), so the reference
never says what `--help` does not.

    .venv/bin/python scripts/cli-reference.py            # rewrite docs/cli.md
    .venv/bin/python scripts/cli-reference.py --check    # exit 1 if docs/cli.md is stale

tests/unit/test_cli_reference.py fails when docs/cli.md is not what this writes: after
adding or changing a command or an option, run it and commit docs/cli.md.
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "docs" / "cli.md"
FENCE = re.compile(r"^\s*```")
PROMPT = re.compile(r"^\s*[#$] ")
UPPER = re.compile(r"[A-Z]{2,}")  # NODE, TOPOLOGY...: a synopsis, not an example


def root_command() -> Any:
    """labctl's click command tree (typer may bring its own copy of click: duck typing)."""
    import typer

    from labctl.cli.app import app

    return typer.main.get_command(app)


def walk(command: Any, path: tuple[str, ...] = ("labctl",)) -> Iterator[tuple[tuple[str, ...],
                                                                          Any]]:
    """Every command, groups before their commands, in name order; hidden ones left out."""
    yield path, command
    for name in sorted(getattr(command, "commands", {}) or {}):
        sub = command.commands[name]
        if not getattr(sub, "hidden", False):
            yield from walk(sub, (*path, name))


def usage(path: tuple[str, ...], command: Any) -> str:
    ctx = command.context_class(command, info_name=path[-1])
    return " ".join([*path, *command.collect_usage_pieces(ctx)])


def _one_line(text: str | None) -> str:
    return " ".join((text or "").split())


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _default(param: Any) -> str:
    if getattr(param, "is_flag", False) or getattr(param, "count", False):
        return ""
    default = param.default
    if default is None or default == () or callable(default) or repr(default).startswith(
            "<typer"):
        return ""
    if hasattr(default, "value"):  # an Enum member
        default = default.value
    return f"`{default}`"


def parameters(command: Any) -> list[str]:
    rows = []
    for param in command.params:
        if getattr(param, "hidden", False):
            continue
        metavar = param.metavar or param.name.upper()
        if param.param_type_name == "argument":
            name = f"`{metavar}`"
            if param.nargs < 0:
                name = f"`{metavar}...`" if not metavar.endswith("...") else name
            default = "required" if param.required else "optional"
        else:
            opts = sorted((*param.opts, *param.secondary_opts),
                          key=lambda o: (not o.startswith("--"), 0))  # the long one first
            takes_value = not (getattr(param, "is_flag", False) or getattr(param, "count",
                                                                               False))
            first = f"`{opts[0]} {metavar}`" if takes_value else f"`{opts[0]}`"
            name = first + (f" (also {', '.join(f'`{o}`' for o in opts[1:])})"
                            if opts[1:] else "")
            default = _default(param)
            if getattr(param, "multiple", False):
                default = (default + " " if default else "") + "(repeatable)"
        rows.append(f"| {_cell(name)} | {_cell(_one_line(param.help))} | {_cell(default)} |")
    rows.append("| `-h`, `--help` | Show the help and exit. | |")
    return ["| argument or option | what it does | default |", "|---|---|---|", *rows]


# Commands no docs page shows with real values: an example each (tests/unit/test_docs.py
# checks these lines against the CLI like every other page's).
FALLBACK_EXAMPLES = {
    ("labctl", "counters"): "labctl counters node1 --json",
    ("labctl", "docker-host", "exec"): "labctl docker-host exec -- docker ps",
    ("labctl", "image", "list"): "labctl image list",
    ("labctl", "image", "prune"): "labctl image prune --dry-run",
    ("labctl", "image", "rm"): "labctl image rm trixie-dev",
    ("labctl", "version"): "labctl version --json",
    ("labctl", "link", "show"): "labctl link show --lab two-node",
    ("labctl", "logs"): "labctl logs node1 --lines 20 --lab two-node",
    ("labctl", "run", "cmtime"): "labctl run cmtime --lab two-node",
    ("labctl", "run", "riostream"): "labctl run riostream --lab two-node",
    ("labctl", "run", "rstream"): "labctl run rstream --lab two-node",
    ("labctl", "run", "udaddy"): "labctl run udaddy --lab two-node",
}


def doc_examples() -> dict[tuple[str, ...], str]:
    """Command path -> the first full example of it in README.md and docs/*.md code blocks
    (not this page): a line without placeholders, not one shown for its error."""
    from labctl.cli.app import app  # noqa: F401  (the tree below is the same app's)

    root = root_command()
    examples: dict[tuple[str, ...], str] = {}
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        if page == OUTPUT:
            continue
        in_block = False
        page_lines = page.read_text().splitlines()
        for number, line in enumerate(page_lines):
            if FENCE.match(line):
                in_block = not in_block
                continue
            if not in_block:
                continue
            text = re.split(r"\s#(\s|$)", PROMPT.sub("", line), maxsplit=1)[0].strip()
            try:
                words = shlex.split(text)
            except ValueError:
                continue
            while words and (words[0] in ("sudo", "time") or re.match(r"^[A-Z_]+=", words[0])):
                words = words[1:]
            if not words or not re.match(r"^(\S*/bin/)?labctl$", words[0]):
                continue
            following = page_lines[number + 1] if number + 1 < len(page_lines) else ""
            if following.startswith("error:"):  # a wrong command, shown for its error
                continue
            if any(UPPER.fullmatch(w.split(":")[0].strip("[].")) for w in words[1:]
                   if not w.startswith("-")) or "..." in text or "[" in text:
                continue
            for end, word in enumerate(words):  # the shell's part is not labctl's
                if word in (">", ">>", "|", "&&", "||", ";", "2>&1", "2>"):
                    words = words[:end]
                    break
            path: tuple[str, ...] = ("labctl",)
            command = root
            for word in words[1:]:
                sub = (getattr(command, "commands", None) or {}).get(word)
                if sub is None:
                    break
                path, command = (*path, word), sub
            examples.setdefault(path, shlex.join(["labctl", *words[1:]]))
    return examples


def render() -> str:
    root = root_command()
    examples = doc_examples()
    lines = [
        "# Command reference",
        "",
        "Every `labctl` command with its usage, arguments and options, as `labctl COMMAND",
        "--help` gives them, and an example from these docs. Generated by",
        "`scripts/cli-reference.py` from the CLI itself; do not edit by hand.",
        "",
        "Options shared by every lab command: `--lab NAME` picks a lab when several are up,",
        "`--json` prints the documented shape ([json.md](json.md)). Errors print `error:` and",
        "`hint:` and exit 2 for bad input, 1 for a failed operation.",
        "",
    ]
    commands = list(walk(root))
    lines += ["Commands: " + ", ".join(
        f"[{' '.join(p[1:])}](#{'-'.join(p)})" for p, c in commands[1:]
        if not getattr(c, "commands", None)) + ".", ""]
    for path, command in commands:
        is_group = bool(getattr(command, "commands", None))
        lines += [f"## {' '.join(path)}", ""]
        help_text = (command.help or "").strip()
        if help_text:
            lines += [help_text.split("\n\n")[0].strip(), ""]
        lines += ["```", "Usage: " + usage(path, command), "```", ""]
        if is_group:
            subs = [f"`{name}`" for name, sub in sorted(command.commands.items())
                    if not getattr(sub, "hidden", False)]
            lines += ["Commands: " + ", ".join(subs) + ".", ""]
            if path != ("labctl",):
                continue
        lines += [*parameters(command), ""]
        if not is_group:
            example = examples.get(path) or FALLBACK_EXAMPLES.get(path) or \
                f"{' '.join(path)} --help"
            lines += ["Example:", "", "```sh", example, "```", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if argv[1:] == ["--check"]:
        if OUTPUT.read_text() != text:
            print("docs/cli.md is stale: run scripts/cli-reference.py", file=sys.stderr)
            return 1
        return 0
    if argv[1:]:
        print("usage: scripts/cli-reference.py [--check]", file=sys.stderr)
        return 2
    OUTPUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv))
