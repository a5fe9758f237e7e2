"""Windows and macOS are the main targets but cannot run here, so the sources are read instead.

An AST scan of swarm_app/, backends/ and tools/installer.py for POSIX-only calls (fork, fcntl, uid
calls, signals other than SIGINT/SIGTERM/SIGBREAK, POSIX-only modules, symlinks, shell=True,
hard-coded system paths) and for text-mode file I/O that leaves the encoding to the locale (cp1252 on
most Windows machines). A finding passes only if REVIEWED lists it with the reason it is safe; a
REVIEWED entry that no longer matches anything fails too, so the list stays true.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCANNED = [*sorted((ROOT / "swarm_app").rglob("*.py")), *sorted((ROOT / "backends").rglob("*.py")),
           ROOT / "tools" / "installer.py"]

POSIX_ATTRIBUTES = {
    "os": {"fork", "forkpty", "getuid", "geteuid", "getgid", "getegid", "setsid", "killpg", "getpgid",
           "symlink", "mkfifo", "pipe2", "sched_getaffinity"},
    "signal": {"SIGKILL", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGCHLD", "SIGPIPE", "SIGQUIT",
               "SIGSTOP", "SIGCONT", "alarm", "pause", "setitimer"},
    "shutil": {"chown"},
}
POSIX_MODULES = {"fcntl", "pwd", "grp", "termios", "tty", "resource", "pty", "posix"}
POSIX_PATH_PREFIXES = ("/tmp", "/var/", "/etc/", "/usr/", "/home/", "/dev/", "/proc/")
TEXT_IO_METHODS = {"read_text", "write_text"}

REVIEWED: dict[tuple[str, str], str] = {
    ("swarm_app/kernel/runlock.py", "import fcntl"):
        "the POSIX branch of _try_lock; Windows takes the msvcrt.locking branch beside it",
    ("swarm_app/net/gate.py", "import resource"):
        "inside try/except ImportError; Windows has no RLIMIT_NOFILE and gets FALLBACK_BUDGET (256)",
    ("tools/installer.py", "os.symlink"):
        "Path.symlink_to only for the ~/.local/bin launcher, which plan_install sets on POSIX only "
        "(Windows uses the venv's Scripts\\swarm.exe: symlinks need a privilege there)",
    ("swarm_app/kernel/hardware.py", "hard-coded path '/proc/cpuinfo'"):
        "Linux's CPU flags; an OSError (macOS, Windows) gives \"\" and sysctl/platform answer instead",
    ("swarm_app/kernel/hardware.py", "hard-coded path '/proc/driver/nvidia'"):
        "only tested with Path.exists() before the torch probe; absent elsewhere, so no probe",
}


def findings(path: Path) -> list[tuple[str, int]]:
    """(what, line) for every POSIX-only use and every text-mode open without encoding= in one file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    docstrings = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.attr in POSIX_ATTRIBUTES.get(node.value.id, ()):
                found.append((f"{node.value.id}.{node.attr}", node.lineno))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found += [(f"import {name}", node.lineno) for name in names if name.split(".")[0] in POSIX_MODULES]
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
              and node.value.startswith(POSIX_PATH_PREFIXES)):
            found.append((f"hard-coded path {node.value.split()[0]!r}", node.lineno))
        elif isinstance(node, ast.Call):
            found += call_findings(node)
    return found


def call_findings(call: ast.Call) -> list[tuple[str, int]]:
    keywords = {kw.arg: kw.value for kw in call.keywords}
    found = []
    shell = keywords.get("shell")
    if isinstance(shell, ast.Constant) and shell.value is True:
        found.append(("shell=True", call.lineno))
    if isinstance(call.func, ast.Attribute) and call.func.attr == "symlink_to":
        found.append(("os.symlink", call.lineno))
    if "encoding" in keywords:
        return found
    if isinstance(call.func, ast.Name) and call.func.id == "open" and is_text_mode(call, keywords):
        found.append(("open() without encoding=", call.lineno))
    elif isinstance(call.func, ast.Attribute) and call.func.attr in TEXT_IO_METHODS:
        found.append((f".{call.func.attr}() without encoding=", call.lineno))
    elif isinstance(call.func, ast.Attribute) and call.func.attr == "open" and is_path_open(call, keywords):
        found.append(("Path.open() without encoding=", call.lineno))
    return found


def is_text_mode(call: ast.Call, keywords: dict) -> bool:
    mode = keywords.get("mode", call.args[1] if len(call.args) > 1 else None)
    if mode is None:
        return True
    return not (isinstance(mode, ast.Constant) and isinstance(mode.value, str) and "b" in mode.value)


def is_path_open(call: ast.Call, keywords: dict) -> bool:
    """`x.open("r")` / `x.open(mode="w")`: a Path opened in text mode (os.open and friends take a path first)."""
    mode = keywords.get("mode", call.args[0] if call.args else None)
    is_mode = isinstance(mode, ast.Constant) and isinstance(mode.value, str) and set(mode.value) <= set("rwxat+")
    return is_mode and bool(mode.value)


def scan() -> dict[tuple[str, str], list[int]]:
    result: dict[tuple[str, str], list[int]] = {}
    for path in SCANNED:
        for what, line in findings(path):
            result.setdefault((path.relative_to(ROOT).as_posix(), what), []).append(line)
    return result


def test_no_posix_only_call_or_locale_encoded_io_outside_the_reviewed_places():
    unreviewed = {f"{file}:{lines[0]} {what}" + (f" (+{len(lines) - 1} more)" if len(lines) > 1 else "")
                  for (file, what), lines in scan().items() if (file, what) not in REVIEWED}
    assert sorted(unreviewed) == []


def test_every_reviewed_entry_still_matches_something():
    assert sorted(set(REVIEWED) - set(scan())) == []


def test_the_scan_finds_what_it_looks_for(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""/tmp/in-a-docstring is not a path."""\n'
        "import os, signal, fcntl, subprocess\n"
        "os.fork()\nos.kill(1, signal.SIGKILL)\nsubprocess.run('ls', shell=True)\n"
        "open('/tmp/x')\nopen('a', 'rb')\nopen('a', 'w', encoding='utf-8')\n"
        "p.read_text()\np.write_text('x', encoding='utf-8')\np.open('w')\nos.open('f', 0)\n",
        encoding="utf-8")
    assert sorted(findings(sample)) == sorted([
        ("import fcntl", 2), ("os.fork", 3), ("signal.SIGKILL", 4), ("shell=True", 5),
        ("hard-coded path '/tmp/x'", 6), ("open() without encoding=", 6),
        (".read_text() without encoding=", 9), ("Path.open() without encoding=", 11),
    ])
