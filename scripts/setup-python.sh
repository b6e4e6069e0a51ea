#!/usr/bin/env bash
# Installs the real Python clients our users run, pinned in test/python/requirements*.txt, into
# virtualenvs in the repository's ignored build area (.build/), for the tests that drive
# slotpool with them. The clients cannot share one environment (their pins conflict: OpenEnv's
# client needs mcp < 2, verifiers 0.4 pins mcp 2.0.0, NeMo Gym 0.7 needs Python 3.13), so each
# group has its own:
#   .build/python           requirements.txt             OpenEnv's client, E2B's SDK (system python3)
#   .build/python-mcp       requirements-mcp.txt         the MCP SDK 2.3 (2026-07-28 and 2025-11-25 clients)
#   .build/python-trainers  requirements-trainers.txt    verifiers 0.4, SkyRL-gym 0.4 and python/ (the adapters)
#   .build/python-nemo-gym  requirements-nemo-gym*.txt   NeMo Gym 0.7's pydantic models (Python 3.13)
#   .build/python-harbor    requirements-harbor.txt      Harbor with its E2B environment (Python >= 3.12)
# Never fatal: where Python or the package index cannot be reached it says so, writes the reason
# to .build/<venv>.unavailable, and the tests that need that venv skip with the reason.
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p .build

# install_venv NAME PYTHON REQ [NODEPS_REQ] [EDITABLE_DIR]
install_venv() {
  local name=$1 python=$2 req=$3 nodeps=${4:-} editable=${5:-}
  local venv=.build/$name reason_file=.build/$name.unavailable
  rm -f "$reason_file"
  unavailable() { echo "setup-python: $name: $1 (the tests that need it will skip)" >&2; echo "$1" >"$reason_file"; }
  # Only requirement lines count (comments and blanks do not).
  grep -qvE '^\s*(#|$)' "$req" 2>/dev/null || return 0
  if [ -z "$python" ] || ! command -v "$python" >/dev/null 2>&1; then unavailable "no suitable python found for $req"; return 0; fi
  local stamp="$venv/.requirements.sha256" want
  want=$(cat "$req" ${nodeps:+"$nodeps"} ${editable:+"$editable/pyproject.toml"} 2>/dev/null | sha256sum | cut -d' ' -f1)
  if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then return 0; fi
  if [ ! -x "$venv/bin/python" ]; then
    if ! "$python" -m venv "$venv" >/dev/null 2>&1; then
      rm -rf "$venv"
      if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && [ "$python" = python3 ]; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null 2>&1
        "$python" -m venv "$venv" >/dev/null 2>&1 || { unavailable "python3 -m venv failed (install python3-venv)"; return 0; }
      else
        unavailable "$python -m venv failed (install python3-venv)"; return 0
      fi
    fi
  fi
  local log=.build/$name-pip.log pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
  # pip is quiet for a minute or more: say what is happening and how it ended, never a silent wait.
  local count started=$SECONDS
  count=$(cat "$req" ${nodeps:+"$nodeps"} | grep -cvE '^\s*(#|$)')
  echo "setup-python: $name: installing $count pinned packages ($req${nodeps:+, $nodeps}) into $venv with pip; this takes a minute or two (log: $log)…" >&2
  if ! timeout 900 "${pip[@]}" -r "$req" >"$log" 2>&1; then unavailable "pip could not install $req from the package index after $((SECONDS - started)) s (see $log)"; return 0; fi
  # Packages whose own dependency lists are far more than what the tests import (see the file's comments).
  if [ -n "$nodeps" ] && ! timeout 900 "${pip[@]}" --no-deps --ignore-requires-python -r "$nodeps" >>"$log" 2>&1; then unavailable "pip could not install $nodeps (see $log)"; return 0; fi
  if [ -n "$editable" ] && ! timeout 900 "${pip[@]}" --no-deps -e "$editable" >>"$log" 2>&1; then unavailable "pip could not install $editable from the checkout (see $log)"; return 0; fi
  echo "$want" >"$stamp"
  echo "setup-python: $name: done in $((SECONDS - started)) s" >&2
}

# NeMo Gym 0.7 declares Python >= 3.13: the newest 3.13 pyenv has, else one on PATH.
python313() {
  local p
  for p in "$HOME"/.pyenv/versions/3.13*/bin/python3; do [ -x "$p" ] && { echo "$p"; return; }; done
  command -v python3.13 || true
}

# Harbor declares Python >= 3.12: a 3.12 or 3.13 of pyenv, else one on PATH.
python312plus() {
  local p
  for p in "$HOME"/.pyenv/versions/3.12*/bin/python3 "$HOME"/.pyenv/versions/3.13*/bin/python3; do [ -x "$p" ] && { echo "$p"; return; }; done
  command -v python3.12 || command -v python3.13 || true
}

py3=$(command -v python3 || true)
install_venv python "$py3" test/python/requirements.txt
install_venv python-mcp "$py3" test/python/requirements-mcp.txt
install_venv python-trainers "$py3" test/python/requirements-trainers.txt "" python
py313=$(python313)
if [ -z "$py313" ]; then
  echo "NeMo Gym 0.7 needs Python 3.13, and none was found (pyenv install 3.13)" >.build/python-nemo-gym.unavailable
else
  install_venv python-nemo-gym "$py313" test/python/requirements-nemo-gym.txt test/python/requirements-nemo-gym-nodeps.txt
fi
py312=$(python312plus)
if [ -z "$py312" ]; then
  echo "Harbor needs Python >= 3.12, and none was found (pyenv install 3.12)" >.build/python-harbor.unavailable
else
  install_venv python-harbor "$py312" test/python/requirements-harbor.txt
fi
exit 0
