"""The docs as a newcomer reads them: README opens with its title, one line and the two
commands; every link leads somewhere; no page names a lab only the authors had or talks
about the project's own process; the environment page names every LABCTL_* variable the
code reads; the troubleshooting page quotes error texts the code really prints.
(tests/unit/test_docs.py checks every command line against the CLI.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
README = ROOT / "README.md"
FENCE = re.compile(r"^\s*```")


def _rel(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _code_blocks(text: str) -> list[list[str]]:
    blocks: list[list[str]] = []
    current: list[str] | None = None
    for line in text.splitlines():
        if FENCE.match(line):
            if current is None:
                current = []
            else:
                blocks.append(current)
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def test_readme_opens_with_title_one_line_and_the_two_commands() -> None:
    lines = README.read_text().splitlines()
    assert lines[0].startswith("# ") and lines[1] == ""
    assert lines[2] and lines[3] == "", "one line saying what it is, after the title"
    first = _code_blocks(README.read_text())[0]
    commands = [re.split(r"\s+#", line)[0].strip() for line in first]
    assert commands == ["./scripts/demo.sh", "./scripts/test.sh"]
    before = "\n".join(lines[:lines.index("```sh")])
    assert "labctl " not in before.replace("`labctl`", "") and "./scripts" not in before
    assert (ROOT / "scripts" / "demo.sh").exists() and (ROOT / "scripts" / "test.sh").exists()


def test_readme_is_short_and_says_what_a_newcomer_needs() -> None:
    text = README.read_text()
    assert len(text.splitlines()) < 120
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert headings == ["What it is", "What you need", "How long it takes", "A session",
                        "What next", "Links"]
    need = text.split("## What you need", 1)[1].split("\n## ", 1)[0]
    for word in ("amd64", "root", "KVM", "Memory", "Disk", "Network"):
        assert word in need, word


def test_readme_session_is_readme_session_sh_output() -> None:
    """The session block's commands are the ones scripts/readme-session.sh runs, in order."""
    block = next(b for b in _code_blocks(README.read_text()) if b and b[0].startswith("# "))
    shown = [line[2:] for line in block if line.startswith("# labctl ")]
    script = (ROOT / "scripts" / "readme-session.sh").read_text()
    run = re.findall(r'^\s*show (labctl .*)$', script, re.M)
    expanded = [c.replace('"$topology"', "topologies/two-node.yaml")
                 .replace('"${lab_args[@]}"', "--lab two-node") for c in run]
    assert shown == expanded


_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_every_relative_link_leads_somewhere(page: Path) -> None:
    broken = []
    for target in _LINK.findall(page.read_text()):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve()
        if not where.exists():
            broken.append(target)
        elif anchor and where.suffix == ".md":
            anchors = {_slug(h) for h in re.findall(r"^#+ (.+)$", where.read_text(), re.M)}
            if anchor not in anchors:
                broken.append(target)
    assert broken == []


SHIPPED_LABS = {re.search(r"^name: (\S+)", p.read_text(), re.M).group(1)  # type: ignore[union-attr]
                for p in (ROOT / "topologies").glob("*.yaml")}
# Lab names a page makes itself: what the benchmarks name their lab, examples/verbs-send's,
# `--name green` / `--name blue` on docs/lifecycle.md, a wrong name shown for its error,
# the test suite's own, the blktests recipe's topology (docs/workloads.md).
PAGE_LABS = {"bench", "verbs-send", "green", "blue", "nosuch", "itest-rel", "blk"}
AUTHORS_LABS = ("h6-flt", "h7-flt", "h6-siw", "wlm-three", "wlp-two", "wls-two", "wls-siw",
                "wlt-rxe", "rs-bench", "dprof", "flks", "cfail")


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_no_page_names_a_lab_only_the_authors_had(page: Path) -> None:
    text = page.read_text()
    named = set(re.findall(r"--lab ([a-z0-9][a-z0-9-]*)(?![/\w])", text))  # not --lab a/b
    assert named - SHIPPED_LABS - PAGE_LABS == set()
    assert [name for name in AUTHORS_LABS if name in text] == []


PROCESS = re.compile(r"\bissues? \d+|\bthe issue\b|\bissue's\b|: met\b|\btarget[^.\n]{0,30} met\b"
                     r"|\bengineers?\b|\bthis round\b|\bthe lead\b", re.I)


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_no_page_talks_about_the_projects_own_process(page: Path) -> None:
    assert PROCESS.findall(page.read_text()) == []


def test_the_process_check_catches_what_it_is_for() -> None:
    for text in ("issue 16's target", "The issue's 30 minutes: met", "other engineers' labs",
                 "(the target 3 s: met)"):
        assert PROCESS.search(text), text


# LABCTL_* words that are not variables a user sets: heredoc markers in the Vagrantfile's
# provisioning script, a constant's name.
NOT_VARIABLES = {"LABCTL_EOF", "LABCTL_B64", "LABCTL_BOX_PREFIX"}


def test_environment_page_names_every_variable_the_code_reads() -> None:
    sources = [*(ROOT / "labctl").rglob("*.py"), *(ROOT / "labctl").rglob("*.sh"),
               ROOT / "labctl" / "data" / "Vagrantfile",
               *(ROOT / "tests" / "integration").rglob("*.py"),
               *(ROOT / "benchmarks").glob("*.py"), *(ROOT / "scripts").glob("*.sh")]
    used = set()
    for source in sources:
        used |= set(re.findall(r"(?<![A-Z_])LABCTL_[A-Z0-9_]+", source.read_text()))
    page = (ROOT / "docs" / "environment.md").read_text()
    documented = set(re.findall(r"`(LABCTL_[A-Z0-9_]+)`", page))
    assert used - NOT_VARIABLES - documented == set()
    assert documented - used == set(), "the page names a variable nothing reads"


def _source_text() -> str:
    """labctl's Python source with adjacent string literals joined, as they print."""
    text = "\n".join(p.read_text() for p in (ROOT / "labctl").rglob("*.py"))
    return re.sub(r"""["']\s*\n\s*f?["']""", "", text)


def _fragments(error: str) -> list[str]:
    """The literal parts of an error text as the page quotes it: words in capitals (NODE,
    LAB, PATH...), `...` and quotes stand for what the error names."""
    parts = re.split(r"\.\.\.|\b[A-Z][A-Z0-9_]*\b|'[^']*'", error)
    return [p.strip(" :,()") for p in parts if len(p.strip(" :,()")) >= 8]


def test_troubleshooting_quotes_errors_the_code_prints() -> None:
    page = (ROOT / "docs" / "troubleshooting.md").read_text()
    errors = re.findall(r"\*\*``?(.+?)``?\*\*", page)
    assert len(errors) >= 20
    source = _source_text()
    missing = {error: f for error in errors for f in _fragments(error) if f not in source}
    assert missing == {}
