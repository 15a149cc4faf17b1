"""README.md as a newcomer reads it: the two set-up commands first (CONTRACT "Set-up"), every generated block the
output it quotes, every link to a file that exists."""

import importlib.util
import re
from pathlib import Path

import pytest

from birder.cli import main

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS_OF_OTHER_TASKS: set[str] = set()  # every doc the README links is in the tree


def block(name: str) -> str:
    """The text between ``<!-- name: ... -->`` and ``<!-- end name -->``, without a code fence."""
    found = re.search(rf"<!-- {name}:[^>]*-->\n(.*?)\n<!-- end {name} -->", README.read_text(), re.DOTALL)
    assert found, f"README.md has no generated block {name!r}"
    return found.group(1).removeprefix("```\n").removesuffix("\n```")


def test_the_readme_starts_with_the_two_setup_commands():
    lines = README.read_text().splitlines()
    assert lines[:6] == ["# Birder toolkit", "", "```",
                         "make run    # creates .venv, installs the project (no torch), runs `birder report` on the "
                         "defaults into report/",
                         "make test   # creates .venv, installs the project with its test extras (torch==2.13.0), "
                         "runs the whole test suite", "```"]


def test_the_reports_time_and_example_answer_are_the_stored_measurement():
    """benchmarks/report_time.py's blocks, rendered from the run it stored (it times `make run`'s report and runs the
    README's question)."""
    spec = importlib.util.spec_from_file_location("report_time", ROOT / "benchmarks" / "report_time.py")
    report_time = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report_time)
    stored = report_time.blocks(__import__("json").loads(report_time.STORED.read_text()))
    assert block("time") == stored["time"]
    assert block("question") == stored["question"]
    assert stored["question"].startswith("$ birder report --model bert-large --nodes 64 --prices "
                                         "docs/prices_example.toml\n## The answer: BERT-large on 64 nodes")
    assert len(stored["question"].splitlines()) <= 30


@pytest.mark.parametrize("name", ["predict", "collective", "doctor"])
def test_the_quoted_command_prints_what_the_readme_shows(name, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    command, *shown = block(name).splitlines()
    assert main(command.removeprefix("$ birder ").split()) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[-len(shown):] == shown


def test_every_link_of_the_readme_reaches_a_file():
    links = re.findall(r"\]\(([^)#:]+)\)", README.read_text())
    assert len(links) >= 10
    missing = [link for link in links if not (ROOT / link).exists() and link not in DOCS_OF_OTHER_TASKS]
    assert missing == []
