# Sourced by the scripts: use .venv (created on first use) with ridecast installed.
# RIDECAST_EXTRAS (set by the caller before sourcing) picks the extras: "" for the demo
# (runtime dependencies only), "dev" for the tests and checks. Versions are pinned by
# constraints.txt (regenerate it with scripts/lock); a package it does not list installs
# unpinned, so a new dependency never makes this fail.
#
# The installer is uv, with pip as the fallback: see scripts/_uv.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
extras="${RIDECAST_EXTRAS-dev}"
. scripts/_uv.sh

stamp=".venv/.ridecast-installed${extras:+-$extras}"
devstamp=.venv/.ridecast-installed-dev
fresh() { [ -f "$1" ] && [ ! pyproject.toml -nt "$1" ] && [ ! constraints.txt -nt "$1" ]; }
if [ ! -x .venv/bin/python ] || { ! fresh "$stamp" && ! fresh "$devstamp"; }; then
  started=$SECONDS
  uv="$(find_uv)" || { uv=""; say "uv is not available: installing with pip (slower)"; }
  if [ ! -x .venv/bin/python ]; then
    say "creating .venv (first run only)"
    if [ -n "$uv" ]; then
      "$uv" venv -q --python "$(command -v python3)" .venv
    else
      python3 -m venv .venv
    fi
  fi
  target="."
  [ -n "$extras" ] && target=".[$extras]"
  pins=(); [ -f constraints.txt ] && pins=(-c constraints.txt)
  say "installing ridecast${extras:+ with its $extras extras} into .venv with" \
      "$([ -n "$uv" ] && echo uv || echo pip) (pinned by constraints.txt)"
  if [ -z "$uv" ] || ! "$uv" pip install -q --python .venv/bin/python "${pins[@]}" -e "$target"
  then
    [ -n "$uv" ] && say "uv failed: installing with pip instead"
    # A venv made by uv has no pip of its own: give it one (from the standard library).
    .venv/bin/python -m pip --version >/dev/null 2>&1 \
      || .venv/bin/python -m ensurepip --default-pip >/dev/null
    quiet_pip .venv/bin/python -m pip install "${pins[@]}" -e "$target"
  fi
  # uv writes no bytecode. The demo is better off without (Python compiles what it imports,
  # about a third of the files, on its first start); the dev install compiles everything up
  # front, as pip does, so that the suite's many processes never compile from source (with
  # PYTHONDONTWRITEBYTECODE set, each of them would, every time). Up-to-date files are skipped.
  if [ -n "$extras" ]; then
    say "compiling .venv's Python files to bytecode"
    .venv/bin/python -m compileall -q -j 0 \
      "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" \
      >/dev/null || true
  fi
  say "installed in $((SECONDS - started)) s"
  touch "$stamp"
fi
export PATH="$PWD/.venv/bin:$PATH"
export VIRTUAL_ENV="$PWD/.venv"
