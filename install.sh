#!/bin/sh
# swarm-app installer for Linux and macOS: finds Python 3.11+ and hands every flag to tools/installer.py,
# which makes the venv, picks the torch build and engine, and ends with `swarm doctor`.
# Needs no root and writes only under your home folder. Run from a checkout or an unpacked release it
# installs that; fetched on its own (curl ... | sh) it installs the published package.
# Flags: --cpu, --engine NAME, --from PATH (a .whl, .tar.gz or checkout folder), --torch-spec REQ,
# --dry-run [--table], --yes. Usage: sh install.sh [flags]
set -eu

# Where tools/installer.py is fetched from when this script runs without a checkout (curl ... | sh).
SWARM_INSTALL_BASE_URL="${SWARM_INSTALL_BASE_URL:-https://raw.githubusercontent.com/swarm-app/swarm-app/main}"

find_python() {
    for candidate in python3.13 python3.12 python3.11 python3 python; do
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys, venv; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

if ! PYTHON=$(find_python); then
    echo "swarm-app needs Python 3.11 or newer (with venv), and none was found." >&2
    case "$(uname -s)" in
        Darwin) echo "Install it from https://www.python.org/downloads/macos/ or with 'brew install python@3.12', then run this again." >&2 ;;
        *) echo "Install it with your package manager (Debian/Ubuntu: 'sudo apt install python3.11 python3.11-venv'; Fedora: 'sudo dnf install python3.12') or from https://www.python.org/downloads/, then run this again." >&2 ;;
    esac
    exit 1
fi

HERE=$(cd "$(dirname "$0")" 2>/dev/null && pwd || echo .)
INSTALLER="$HERE/tools/installer.py"
if [ ! -f "$INSTALLER" ]; then
    INSTALLER="${TMPDIR:-$HOME}/swarm-app-installer.py"
    echo "fetching $SWARM_INSTALL_BASE_URL/tools/installer.py"
    if command -v curl >/dev/null 2>&1; then
        curl -fsSL "$SWARM_INSTALL_BASE_URL/tools/installer.py" -o "$INSTALLER"
    elif command -v wget >/dev/null 2>&1; then
        wget -q "$SWARM_INSTALL_BASE_URL/tools/installer.py" -O "$INSTALLER"
    else
        echo "neither curl nor wget found: download tools/installer.py and run '$PYTHON installer.py'" >&2
        exit 1
    fi
fi

echo "using $("$PYTHON" -c 'import sys; print(sys.executable, sys.version.split()[0])')"
exec "$PYTHON" "$INSTALLER" "$@"
