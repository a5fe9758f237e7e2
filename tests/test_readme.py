"""The README cannot drift silently: its length, and its Commands usage block against the real parsers.

The parsers are built as `swarm` builds them (cli.build_parser), without running any command. A flag in
the usage block that no parser has, or a flag of a command that the block leaves out, fails here.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from swarm_app.cli import build_parser

README = Path(__file__).resolve().parents[1] / "README.md"
MOST_LINES = 150
EVERY_COMMAND = {"-h", "--help", "-v", "--verbose", "--log-level", "--config"}
"""Flags every command takes: help, and the logging flags the block shows once on its last line; `--config`
is said once below the block, for the commands that take it (test_the_config_claim_...)."""
UNLISTED: dict[str, set[str]] = {}
"""Hidden or internal flags a command may leave out of the block (none today), each with a comment why."""


def usage_block() -> dict[str, set[str]]:
    """Each command in the Commands block (`identity export` for subcommands) -> the flags its lines name."""
    text = README.read_text()
    block = text.split("## Commands", 1)[1].split("```", 2)[1]
    flags: dict[str, set[str]] = {}
    command = ""
    for line in block.splitlines():
        start = re.match(r"swarm (\S+)", line)
        if start:
            command = "" if start.group(1).startswith("-") else start.group(1)  # "": the top-level line
        flags.setdefault(command, set()).update(re.findall(r"(?<![\w-])--?[a-z][a-z-]*", line))
    return flags


def real_flags() -> dict[str, list[set[str]]]:
    """Each command -> its arguments' option strings (one set per argument), subcommands' merged in."""
    found: dict[str, list[set[str]]] = {}

    def walk(parser: argparse.ArgumentParser, command: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, command or name)
            elif action.option_strings and command:
                found.setdefault(command, []).append(set(action.option_strings))

    walk(build_parser(), "")
    return found


def test_the_readme_stays_a_short_guide():
    lines = README.read_text().splitlines()
    assert len(lines) < MOST_LINES, f"README.md has {len(lines)} lines: cut it under {MOST_LINES}"
    text = README.read_text()
    assert 'pip install torch==2.13.0 -e . && swarm run --no-ui --rounds 20' in text  # the two quick starts
    assert 'pip install torch==2.13.0 -e ".[test]" && python -m pytest' in text


def test_every_flag_in_the_usage_block_exists_and_every_command_flag_is_in_it():
    shown, real = usage_block(), real_flags()
    assert set(real) <= set(shown), f"commands missing from the README: {set(real) - set(shown)}"
    for command, arguments in real.items():
        known = set().union(*arguments)
        assert shown[command] <= known, f"swarm {command}: the README names {shown[command] - known}, which it lacks"
        missing = [sorted(a) for a in arguments if not a & (shown[command] | EVERY_COMMAND | UNLISTED.get(command, set()))]
        assert not missing, f"swarm {command}: the README's usage leaves out {missing}"
    assert {"--version", "-v", "--log-level"} <= shown[""]


def test_the_config_claim_names_the_commands_without_config():
    claim = re.search(r"Every command but (.+?) takes `--config FILE`", README.read_text())
    assert claim, "the README says which commands take --config"
    without = set(re.findall(r"`(\w+)`", claim.group(1)))
    assert without == {c for c, arguments in real_flags().items() if not any("--config" in a for a in arguments)}


CITED_RESULT = re.compile(r"(?:benchmarks/)?results/[A-Za-z0-9_./-]+\.(?:json|png|md|log|txt|jsonl)")


def test_every_result_file_the_docs_cite_exists():
    """benchmarks/results holds the files the docs cite (history stays in git): a figure's file that was
    pruned, renamed or never written fails here. Names with placeholders (NAME, FILE) are commands' outputs."""
    root = README.parent
    docs = [README, root / "benchmarks" / "README.md", *sorted((root / "docs").glob("*.md"))]
    missing = []
    for doc in docs:
        for cited in CITED_RESULT.findall(doc.read_text()):
            if "NAME" in cited or "FILE" in cited:
                continue
            path = root / (cited if cited.startswith("benchmarks/") else f"benchmarks/{cited}")
            if not path.exists():
                missing.append(f"{doc.relative_to(root)}: {cited}")
    assert not missing, missing


MARKDOWN_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_every_relative_link_in_the_docs_resolves():
    """A link in README.md, docs/ or benchmarks/README.md to a file of this repository points at one that exists,
    relative to the page (a page that moved, or a `results/...` link written from docs/, fails here)."""
    root = README.parent
    pages = [README, root / "benchmarks" / "README.md", *sorted((root / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in MARKDOWN_LINK.findall(page.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(root)}: {target}")
    assert not broken, broken
