"""The docs match the CLI: every `labctl ...` command line in README.md and docs/*.md names a
command that exists and only options that command has; every shipped topology is named.

The commands are checked against the live typer app (its click command tree, read by duck
typing: typer may bring its own copy of click), so commands and options added later are
known without changing this test.
"""

from __future__ import annotations

import enum
import re
import shlex
import subprocess
import tomllib
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer

from labctl.cli.app import app
from tests.unit.test_doctor import SETUP_LISTS, setup_lists

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "labctl" / "data" / "lessons").glob("*/lesson.md"))]

# Words before `labctl` that still make the line a labctl command line.
_PREFIX_WORDS = {"sudo", "python", "python3", "-m", "exec", "time"}
_ENV_ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=\S*$")
_LABCTL = re.compile(r"^(\S*/bin/)?labctl$")  # not /opt/labctl, ~/.cache/labctl
_PROMPT = re.compile(r"^\s*[#$] ")
_SHELL_END = {">", ">>", "2>", "2>&1", "&&", "||", ";", "&", "<", "|&"}
# A placeholder: NODE, FILE.png, NODE:IF, S, URL, `...`, NODE... (upper case, no option).
_PLACEHOLDER = re.compile(r"^(\.\.\.|[A-Z][A-Z0-9_]*(:[A-Z0-9_]+)?(\.[a-z]+)?(\.\.\.)?)$")
_CODE_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
_FENCE = re.compile(r"^\s*```")


@dataclass(frozen=True)
class DocCommand:
    where: str  # file:line
    text: str  # the command line as written


def _labctl_start(words: list[str]) -> int | None:
    """Index of the `labctl` word if the words are a labctl command line, else None."""
    for i, word in enumerate(words):
        if _LABCTL.match(word):
            return i
        if word in _PREFIX_WORDS or _ENV_ASSIGNMENT.match(word):
            continue
        return None
    return None


def _words(text: str) -> list[str]:
    text = text.replace("\\|", "|")  # Markdown tables escape the pipe
    try:
        return shlex.split(text, comments=False)
    except ValueError:  # an unbalanced quote in prose: plain words are enough
        return text.split()


def extract(path: Path, root: Path = ROOT) -> list[DocCommand]:
    """Every labctl command line of a Markdown file: in code blocks and in inline code."""
    found: list[DocCommand] = []
    in_block = False
    rel = path.relative_to(root)
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if _FENCE.match(line):
            in_block = not in_block
            continue
        candidates = [line] if in_block else _CODE_SPAN.findall(line)
        for text in candidates:
            if in_block:  # a prompt ("# " as root, "$ "), the command, maybe a comment
                text = _PROMPT.sub("", text)
                text = re.split(r"\s#(\s|$)", text, maxsplit=1)[0].strip()
            words = _words(text)
            start = _labctl_start(words)
            if start is not None:
                found.append(DocCommand(f"{rel}:{number}", shlex.join(words[start:])))
    return found


def _strip(word: str) -> str:
    """A synopsis word without its brackets: `[--lab` -> `--lab`, `P]` -> `P`."""
    return word.strip("[](){},")


def _is_placeholder(word: str) -> bool:
    return bool(_PLACEHOLDER.match(word)) or "..." in word or "{" in word


def _is_group(command: Any) -> bool:
    return isinstance(getattr(command, "commands", None), dict)


def _options(command: Any) -> dict[str, Any]:
    names: dict[str, Any] = {"--help": None, "-h": None}  # on every command (HELP_SETTINGS)
    for param in command.params:
        if param.param_type_name == "option":
            for opt in (*param.opts, *param.secondary_opts):
                names[opt] = param
    return names


def _positional_room(command: Any) -> float:
    room = 0.0
    for param in command.params:
        if param.param_type_name == "argument":
            room += float("inf") if param.nargs < 0 else param.nargs
    return room


def check(words: list[str], root: Any) -> list[str]:
    """Problems of one command line (after `labctl`), [] when it matches the CLI."""
    command = root
    path = ["labctl"]
    rest = words
    # Walk the groups: `image list`, `docker-host up|down|status`, `run perftest ...`.
    while _is_group(command) and rest:
        word = _strip(rest[0])
        if _is_placeholder(word):
            return []  # `labctl run EXAMPLE ...`: which command's options is unknown
        if word.startswith("-"):
            break
        names = [w for w in word.split("|") if w]
        unknown = [n for n in names if n not in command.commands]
        if unknown:
            return [f"{' '.join(path)} has no command {', '.join(unknown)}"]
        problems = []
        for name in names[1:]:  # alternatives: each with the same remaining words
            problems += check([name, *rest[1:]], command)
        if problems:
            return problems
        command = command.commands[names[0]]
        path.append(names[0])
        rest = rest[1:]
    options = _options(command)
    positional = 0
    index = 0
    while index < len(rest):
        raw = rest[index]
        index += 1
        word = _strip(raw)
        if raw == "--" or word in _SHELL_END:
            break  # a command for the node, or the shell's business
        if word == "|" and index < len(rest) and positional >= _positional_room(command) \
                and not _strip(rest[index]).startswith("-") \
                and not _is_placeholder(_strip(rest[index])):
            break  # a shell pipe (`-w - | tcpdump -r -`): no argument could come next
        if word in ("|", ""):
            continue  # alternatives in a synopsis
        if word.startswith("-") and len(word) > 1 and not re.match(r"^-\d", word):
            for alternative in word.split("/"):  # --verbose/--quiet
                name = alternative.split("=", 1)[0]
                if name.startswith("--") or len(name) == 2:
                    flags = [name]
                else:  # clustered short flags: -vl
                    flags = [f"-{c}" for c in name[1:]]
                for flag in flags:
                    if flag not in options:
                        return [f"{' '.join(path)} has no option {flag}"]
                    param = options[flag]
                    takes_value = param is not None and not (param.is_flag or param.count)
                    if takes_value and "=" not in alternative and flag == flags[-1]:
                        index = _check_value(param, rest, index, path, flag)
            continue
        if positional >= _positional_room(command) and not _is_placeholder(word):
            return [f"{' '.join(path)} takes no argument {word!r} here"]
        positional += 1
    return []


def _choices(param: Any) -> list[str]:
    """The values an option accepts when its type says (an Enum, a Literal or click.Choice)."""
    choices = getattr(getattr(param, "type", None), "choices", None)
    if choices:
        return [str(c) for c in choices]
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return [str(m.value) for m in annotation]
    if typing.get_origin(annotation) is typing.Literal:
        return [str(a) for a in typing.get_args(annotation)]
    return []


def _check_value(param: Any, rest: list[str], index: int, path: list[str],
                 flag: str) -> int:
    """Consume an option's value (if written) and check it against the option's choices."""
    if index >= len(rest):
        return index
    value = _strip(rest[index])
    # "-" is a value: stdin or stdout (`capture -w -`)
    if value.startswith("-") and value != "-" and not re.match(r"^-\d", value):
        return index  # `[-v -d -i -l]`: a list of options, values not written
    choices = _choices(param)
    if choices and not _is_placeholder(value):
        for choice in value.split("|"):
            assert choice in choices, f"{' '.join(path)} {flag}: {choice!r} not in {choices}"
    return index + 1


ROOT_COMMAND = typer.main.get_command(app)
COMMANDS = [c for doc in DOCS for c in extract(doc)]


def test_the_docs_have_commands_to_check() -> None:
    # Guards the extractor itself: README's table and docs' examples are found.
    assert len(COMMANDS) > 80
    assert {c.where.split(":")[0] for c in COMMANDS} >= {
        "README.md", "docs/topology.md", "docs/examples.md", "docs/inspector.md",
        "docs/docker.md", "docs/vagrant.md", "docs/install.md", "docs/usage.md",
        "docs/troubleshooting.md", "docs/cli.md", "docs/faults.md"}


@pytest.mark.parametrize("command", COMMANDS, ids=[c.where for c in COMMANDS])
def test_documented_command_exists(command: DocCommand) -> None:
    problems = check(_words(command.text)[1:], ROOT_COMMAND)
    assert not problems, f"{command.where}: `{command.text}`: {'; '.join(problems)}"


@pytest.mark.parametrize(("line", "problem"), [
    ("labctl up --engin vm topologies/two-node.yaml", "labctl up has no option --engin"),
    ("labctl stauts", "labctl has no command stauts"),
    ("labctl image lst", "labctl image has no command lst"),
    ("labctl docker-host up|dwn", "labctl docker-host has no command dwn"),
    ("labctl status node1", "labctl status takes no argument 'node1' here"),
    ("labctl devinfo -vx", "labctl devinfo has no option -x"),
    ("labctl run rping --verbose/--quite", "labctl run rping has no option --quite"),
    ("labctl capture node1:eth1 - | tcpdump -r -", "labctl capture takes no argument '-' here"),
])
def test_the_checker_catches_typos(line: str, problem: str) -> None:
    assert check(_words(line)[1:], ROOT_COMMAND) == [problem]


@pytest.mark.parametrize("line", [
    "labctl up TOPOLOGY [--provider P] [--accel auto|kvm|tcg] [--timeout S]",
    "labctl exec NODE -- CMD...",
    "labctl devinfo [NODE...] [-v -d -i -l] [--json]",
    "labctl down [--lab NAME | TOPOLOGY | --all]",
    "labctl schema > topologies/schema.json",
    "labctl run perftest ib_{send,write,read}_{lat,bw}",
    "labctl capture node1:eth1 -w - | tcpdump -n -r -",  # "-" a value, then a shell pipe
    "labctl capture NODE:IF [-w FILE.pcap | -w -] [--absolute]",
])
def test_the_checker_accepts_synopses(line: str) -> None:
    assert check(_words(line)[1:], ROOT_COMMAND) == []


def test_extractor_reads_blocks_and_inline_code(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text("Use `labctl up --engine vm FILE` or `labctl/cli/up.py`.\n"
                   "```console\n# labctl status --json      # all labs\n{\"labs\": []}\n"
                   "$ LABCTL_DOCKER_ENGINE=local .venv/bin/labctl up FILE\n```\n")
    texts = [c.text for c in extract(doc, tmp_path)]
    assert texts == ["labctl up --engine vm FILE", "labctl status --json",
                     ".venv/bin/labctl up FILE"]


SHIPPED = sorted(p.name for p in (ROOT / "topologies").glob("*.yaml"))


@pytest.mark.parametrize("doc", ["docs/usage.md", "docs/topology.md"])
def test_every_shipped_topology_is_documented(doc: str) -> None:
    text = (ROOT / doc).read_text()
    assert SHIPPED, "no topologies found"
    missing = [name for name in SHIPPED if name not in text]
    assert missing == [], f"{doc} does not mention {missing}"


INSTALL = ROOT / "docs" / "install.md"


def test_install_page_names_each_setup_list_word_for_word() -> None:
    """docs/install.md gives scripts/setup.sh's package lists as they are, one code span
    each: what `--minimal` (demo.sh) installs, what the tests add, the optional ones. A
    package moved from one list to another in setup.sh must move there too."""
    readme = INSTALL.read_text()
    spans = set(_CODE_SPAN.findall(readme))
    lists = setup_lists()
    assert {name: " ".join(packages) for name, packages in lists.items()
            if " ".join(packages) not in spans} == {}
    opening = readme[:readme.index("## What it costs")]
    # each list is said to belong to its command, in this order
    order = [opening.index(f"`{' '.join(lists[name])}`") for name in SETUP_LISTS]
    assert order == sorted(order)
    assert opening.index("`./scripts/demo.sh` runs `scripts/setup.sh --minimal`") < order[0]
    assert order[0] < opening.index("`./scripts/test.sh` runs `scripts/setup.sh`") < order[1]


def test_install_page_says_cpio_is_only_for_the_tests() -> None:
    """labctl writes its initramfs itself (labctl/images/cpio.py); only a unit test runs
    GNU cpio. README said qemu nodes need it."""
    lists = setup_lists()
    assert "cpio" in lists["tests"] and "cpio" not in lists["lab"]
    runs_cpio = [p for p in (ROOT / "labctl").rglob("*.py")  # an argv that starts with it
                 if re.search(r"""\[\s*["']cpio["']""", p.read_text())]
    assert runs_cpio == []
    readme = INSTALL.read_text()
    assert "zstd cpio" not in readme and "GNU cpio reads back labctl's initramfs" in readme


def _parenthesised(text: str, start: int) -> str:
    """The text inside the parentheses that open at text[start], nested ones included."""
    depth = 0
    for end in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[end], 0)
        if depth == 0:
            return text[start + 1:end]
    raise AssertionError(f"unbalanced parentheses after {text[start:start + 40]!r}")


def _requirement_names(requirements: list[str]) -> list[str]:
    """pyproject's requirement strings as README names them: the distribution's name, or
    `extra` in backticks for labctl's own extras."""
    names = []
    for requirement in requirements:
        own = re.fullmatch(r"labctl\[([\w,]+)\]", requirement)
        if own:
            names += [f"`{extra}`" for extra in own.group(1).split(",")]
        else:
            names.append(re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0])
    return names


def test_install_page_describes_every_extra_with_what_it_holds() -> None:
    """"Extras: `plot` (matplotlib), ..." in docs/install.md names each of pyproject.toml's
    extras and every requirement in it (it once left jsonschema, types-PyYAML and
    setuptools out)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    readme = " ".join(INSTALL.read_text().split())
    described = readme[readme.index("Extras: "):]
    missing = {}
    for extra, requirements in extras.items():
        at = described.find(f"`{extra}` (")
        assert at >= 0, f"README does not describe the {extra!r} extra"
        said = _parenthesised(described, at + len(f"`{extra}` "))
        left_out = [n for n in _requirement_names(requirements)
                    if not re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", said, re.I)]
        if left_out:
            missing[extra] = left_out
    assert missing == {}


def _undocumented(command: Any, path: tuple[str, ...] = ("labctl",)) -> Iterator[str]:
    for name, sub in getattr(command, "commands", {}).items():
        yield from _undocumented(sub, (*path, name))
    if not command.help:
        yield " ".join(path)
    for param in command.params:
        if not getattr(param, "help", None):
            yield f"{' '.join(path)} {param.name}"


def test_every_command_and_parameter_has_help() -> None:
    # `--help` is the reference the docs are checked against: nothing in it may be blank.
    assert list(_undocumented(ROOT_COMMAND)) == []


# --- docs truth (issue 34, item 7): each claim derived from the code it describes ----------

def _paragraph(text: str, start: str) -> str:
    """The Markdown paragraph or list item that begins with `start`, on one line."""
    at = text.index(start)
    ends = [i for i in (text.find("\n\n", at), text.find("\n- ", at + 1)) if i >= 0]
    return " ".join(text[at:min(ends, default=len(text))].split())


def _link_changers() -> dict[str, bool]:
    """Provider name -> whether its class changes a link (overrides set_link_state)."""
    from labctl.providers.base import Provider
    from labctl.providers.docker import DockerProvider
    from labctl.providers.qemu import QemuProvider
    from labctl.providers.vagrant import VagrantProvider

    return {name: cls.set_link_state is not Provider.set_link_state for name, cls in (
        ("qemu", QemuProvider), ("docker", DockerProvider), ("vagrant", VagrantProvider))}


def test_usage_says_which_providers_link_set_works_for() -> None:
    """README said `link set` was for qemu labs; docker labs have it too (the veth's bridge
    end), multi-host docker labs and vagrant labs refuse it (exit 2)."""
    from labctl.providers.base import Provider
    from labctl.providers.docker_swarm import SwarmProvider

    changers = _link_changers()
    assert changers == {"qemu": True, "docker": True, "vagrant": False}
    assert SwarmProvider.set_link_state is Provider.set_link_state  # multi-host: refused
    readme = " ".join((ROOT / "docs" / "usage.md").read_text().split())
    row = next(line for line in readme.split("| `labctl ") if line.startswith("link set"))
    said = row.split(" | ")[1]  # the row's second cell: what the commands do
    refused = said[said.rindex("("):]  # "(vagrant and multi-host labs: exit 2)"
    for provider, changes in changers.items():
        assert provider in said, f"README's link row does not name {provider}"
        assert (provider in refused) is not changes, provider
    assert "single-host docker" in said and "multi-host" in refused and "exit 2" in refused


def test_examples_md_says_what_siw_runs() -> None:
    """docs/examples.md said siw runs "rping and perftest only": the specs say more."""
    from labctl.runners.examples import EXAMPLES

    siw = {name for (name, _), spec in EXAMPLES.items() if spec.supports("siw")}
    assert {"rping", "perftest", "rdma-server", "riostream"} <= siw  # the specs, as read
    item = _paragraph((ROOT / "docs" / "examples.md").read_text(), "- **siw (soft-iWARP)**:")
    claimed = item[:item.index(". ")]  # the first sentence lists what runs
    names = set(re.findall(r"`([a-z-]+)`", claimed))
    assert names == siw
    assert "only" not in claimed


def test_examples_table_says_which_devices_run_each_row() -> None:
    from labctl.runners.examples import EXAMPLES

    doc = (ROOT / "docs" / "examples.md").read_text()
    rows = [r for r in doc.splitlines() if r.startswith("| `labctl run ")
            and r.split("`")[1].split()[2] in {name for name, _ in EXAMPLES}]
    assert len(rows) >= 12
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split(" | ")]
        name = cells[0].split("`")[1].split()[2]
        atomics = "atomic" in cells[0]
        variants = [spec for (n, variant), spec in EXAMPLES.items() if n == name
                    and ("atomic" in variant) == atomics]
        devices = cells[3].split("(")[0]  # "rxe (siw: atomic_cap ATOMIC_NONE)": rxe only
        for device in ("rxe", "siw"):
            runs = any(spec.supports(device) for spec in variants)
            assert (device in devices) == runs, f"{cells[0]}: {device} {runs}"


def _detail_keys(module: str) -> set[str]:
    """The keys of every `details = {...}` dict a provider module writes (ast)."""
    import ast

    tree = ast.parse((ROOT / "labctl" / "providers" / f"{module}.py").read_text())
    keys: set[str] = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
                and any(isinstance(t, ast.Name) and t.id == "details" for t in node.targets)):
            keys |= {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
        if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
                and node.value.id == "details" and isinstance(node.slice, ast.Constant)):
            keys.add(node.slice.value)
    return keys - {"ssh"}  # status moves it to `management`


def test_json_md_names_each_providers_status_details() -> None:
    """docs/json.md put `engine` where multi-host records have `container` and `host`."""
    item = _paragraph((ROOT / "docs" / "json.md").read_text(), "- `management`:")
    said = item[item.index("`details`"):]
    for provider in ("qemu", "docker", "vagrant"):
        keys = _detail_keys(provider)
        assert keys, provider
        missing = {k for k in keys if f"`{k}`" not in said}
        assert missing == set(), f"docs/json.md does not name {provider}'s {missing}"
    assert "multi-host" in said and "`host`" in said


def test_json_md_names_every_node_state() -> None:
    from labctl.store.state import NodeStatus

    item = _paragraph((ROOT / "docs" / "json.md").read_text(), "- `state`:")
    assert [s.value for s in NodeStatus if f"`{s.value}`" not in item] == []


def test_json_md_says_asyncwatch_prints_one_object_per_line() -> None:
    """docs/json.md said every --json prints one JSON document; asyncwatch streams."""
    source = (ROOT / "labctl" / "verbs" / "asyncwatch.py").read_text()
    assert re.search(r'out\.write\(json\.dumps\(record\) \+ "\\n"\)', source)
    opening = _paragraph((ROOT / "docs" / "json.md").read_text(), "Every command with")
    assert "except `asyncwatch --json`" in opening and "one JSON object per line" in opening


def test_vagrant_md_names_the_vagrant_cwd_labctl_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/vagrant.md said VAGRANT_CWD is the source tree: it is labctl's data directory."""
    from labctl.data import data_path
    from labctl.providers.vagrant import vagrantfile_dir

    monkeypatch.delenv("LABCTL_VAGRANTFILE_DIR", raising=False)
    assert vagrantfile_dir() == data_path()
    text = (ROOT / "docs" / "vagrant.md").read_text()
    mentions = [m.start() for m in re.finditer("VAGRANT_CWD", text)]
    assert mentions
    for at in mentions:
        near = text[at:at + 200]
        assert "labctl/data" in near or "data_path()" in near, near
    assert "/path/to/rdma-lab " not in text and "is the source tree" not in text


def test_workbench_lists_the_dev_images_packages() -> None:
    """docs/workbench.md's trixie-dev list left libc6-dev out (gcc only recommends it)."""
    from labctl.data.recipes import DEV_PACKAGES

    item = _paragraph((ROOT / "docs" / "workbench.md").read_text(),
                      "The node image `trixie-dev` is the node image plus")
    listed = item.split(" plus ", 1)[1].split(".", 1)[0]
    assert re.split(r", | and ", listed) == list(DEV_PACKAGES)


def test_workbench_says_how_docker_copies_travel() -> None:
    """docs/workbench.md said docker copies go through "the container API": they are a
    tar stream through `docker exec -i` (labctl/lab/transfer.py, the provider's exec)."""
    docker = (ROOT / "labctl" / "providers" / "docker.py").read_text()
    assert re.search(r'"docker", "-H", [^\n]*"exec", "-i"\]', docker)
    assert "`docker exec -i`" in (ROOT / "labctl" / "lab" / "transfer.py").read_text()
    text = " ".join((ROOT / "docs" / "workbench.md").read_text().split())
    assert "container API" not in text and "`docker exec -i` for docker nodes" in text


CI_SCRIPT = ROOT / "examples" / "ci" / "rdma-tests.sh"


def _run_ci_script(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str],
                                                        list[list[str]]]:
    """The CI script with a stand-in `sudo` that records each command instead of running
    it: everything the script does unprivileged runs for real."""
    stub = tmp_path / "bin"
    stub.mkdir()
    log = tmp_path / "sudo.log"
    (stub / "sudo").write_text('#!/bin/sh\nprintf "%s\\0" "$@" >> "$SUDO_LOG"\n'
                               'printf "\\n" >> "$SUDO_LOG"\n')
    (stub / "sudo").chmod(0o755)
    env = {"PATH": f"{stub}:/usr/bin:/bin", "SUDO_LOG": str(log), "GITHUB_RUN_ID": "4242",
           "HOME": str(tmp_path)}
    result = subprocess.run(["bash", str(CI_SCRIPT), *args], capture_output=True, text=True,
                            env=env, cwd=tmp_path, timeout=60)
    lines = log.read_text().splitlines() if log.exists() else []
    return result, [line.rstrip("\0").split("\0") for line in lines]


def test_the_ci_recipe_script_runs_doctor_and_the_tests_as_root(tmp_path: Path) -> None:
    """docs/workbench.md's CI recipe ran `labctl doctor` as the runner's user (it fails
    without root). The recipe is now examples/ci/rdma-tests.sh, which the doc runs."""
    subprocess.run(["bash", "-n", str(CI_SCRIPT)], check=True)
    result, commands = _run_ci_script(tmp_path, str(ROOT), "tests/rdma", "-x")
    assert result.returncode == 0, result.stderr
    venv = f"{ROOT}/.venv/bin"
    assert commands == [
        [f"{ROOT}/scripts/setup.sh", "--minimal"],
        [f"{venv}/python", "-m", "pip", "install", "-q", "-e", f"{ROOT}[pytest]"],
        ["--preserve-env=LABCTL_CACHE_DIR", f"{venv}/labctl", "doctor"],
        ["--preserve-env=LABCTL_CACHE_DIR", f"{venv}/python", "-m", "pytest", "-v",
         "tests/rdma", "-x", "--rdma-lab-name", "ci-4242"],
    ]
    # What it runs exists: setup.sh's option, the extra, the labctl command, the plugin's
    # option; and the lab's name is one labctl takes.
    assert "--minimal)" in (ROOT / "scripts" / "setup.sh").read_text()
    assert "pytest" in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert check(commands[2][2:], ROOT_COMMAND) == []
    plugin = (ROOT / "labctl" / "pytest_plugin" / "__init__.py").read_text()
    assert 'addoption("--rdma-lab-name"' in plugin
    from labctl.store.labdir import check_lab_name

    check_lab_name(commands[3][-1])


def test_the_ci_recipe_script_refuses_a_wrong_checkout(tmp_path: Path) -> None:
    result, commands = _run_ci_script(tmp_path, str(tmp_path))
    assert result.returncode == 2 and commands == []
    assert "must be an rdma-lab checkout" in result.stderr and "usage:" in result.stderr


def test_workbench_runs_the_ci_script_and_no_unprivileged_doctor() -> None:
    text = (ROOT / "docs" / "workbench.md").read_text()
    section = text[text.index("## 5. In CI"):]
    assert "run: rdma-lab/examples/ci/rdma-tests.sh rdma-lab tests/rdma" in section
    assert "(../examples/ci/rdma-tests.sh)" in section
    doctor_lines = [line for line in section.splitlines() if re.search(r"labctl doctor\s*$",
                                                                       line)]
    assert doctor_lines == []  # only the script runs it, under sudo
