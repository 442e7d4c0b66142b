#!/usr/bin/env bash
# Usage: tools/find-python312.sh   (PYTHON=/path/to/python3.12 to choose; `make setup` runs it)
# Prints the path of a Python 3.12 interpreter, or explains how to get one and exits 1.
# Order: $PYTHON, python3.12 and python3 on PATH, pyenv's installed 3.12.x, uv's managed 3.12.
set -u
is_312() { "$1" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 12) else 1)' >/dev/null 2>&1; }
for candidate in "${PYTHON:-}" python3.12 python3; do
    [ -n "$candidate" ] || continue
    path=$(command -v "$candidate" 2>/dev/null) || continue
    if is_312 "$path"; then echo "$path"; exit 0; fi
done
if command -v pyenv >/dev/null 2>&1; then
    for path in "$(pyenv root)"/versions/3.12*/bin/python3.12; do
        if [ -x "$path" ] && is_312 "$path"; then echo "$path"; exit 0; fi
    done
fi
if command -v uv >/dev/null 2>&1; then
    path=$(uv python find 3.12 2>/dev/null) && is_312 "$path" && { echo "$path"; exit 0; }
fi
echo "error: Python 3.12 not found. Install it (e.g. 'pyenv install 3.12' or 'uv python install 3.12')" \
     "or point PYTHON at it: make PYTHON=/path/to/python3.12 ..." >&2
exit 1
