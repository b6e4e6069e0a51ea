#!/usr/bin/env bash
# Installs the real Python clients our users run (test/python/requirements.txt, pinned)
# into a virtualenv in the repository's ignored build area, .build/python, for the tests
# that drive slotpool with them. Never fatal: where Python or the package index cannot be
# reached it says so, writes the reason to .build/python.unavailable, and those tests skip
# with that reason.
set -uo pipefail
cd "$(dirname "$0")/.."
venv=.build/python
reason_file=.build/python.unavailable
req=test/python/requirements.txt
mkdir -p .build
rm -f "$reason_file"
unavailable() { echo "setup-python: $1 (the tests that need the Python clients will skip)" >&2; echo "$1" >"$reason_file"; exit 0; }

# Only requirement lines count (comments and blanks do not).
if ! grep -qvE '^\s*(#|$)' "$req" 2>/dev/null; then exit 0; fi
command -v python3 >/dev/null 2>&1 || unavailable "python3 is not installed"
stamp="$venv/.requirements.sha256"
want=$(sha256sum "$req" | cut -d' ' -f1)
if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then exit 0; fi
if [ ! -x "$venv/bin/python" ]; then
  if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    rm -rf "$venv"
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null 2>&1
      python3 -m venv "$venv" >/dev/null 2>&1 || unavailable "python3 -m venv failed (install python3-venv)"
    else
      unavailable "python3 -m venv failed (install python3-venv)"
    fi
  fi
fi
# pip is quiet for a minute or more: say what is happening and how it ended, never a silent wait.
count=$(grep -cvE '^\s*(#|$)' "$req")
echo "setup-python: installing the tests' $count pinned Python clients ($req) into $venv with pip; this takes a minute or two (log: .build/python-pip.log)…" >&2
started=$SECONDS
if ! timeout 900 "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req" >.build/python-pip.log 2>&1; then
  unavailable "pip could not install $req from the package index after $((SECONDS - started)) s (see .build/python-pip.log)"
fi
echo "$want" >"$stamp"
echo "setup-python: done in $((SECONDS - started)) s" >&2
