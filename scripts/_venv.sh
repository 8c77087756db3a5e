# Sourced by the scripts: use .venv (created on first use) with ridecast installed.
# RIDECAST_EXTRAS (set by the caller before sourcing) picks the extras: "" for the demo
# (runtime dependencies only), "dev" for the tests and checks. Versions are pinned by
# constraints.txt (regenerate it with scripts/lock); a package it does not list installs
# unpinned, so a new dependency never makes this fail.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
extras="${RIDECAST_EXTRAS-dev}"
say() { printf 'ridecast: %s\n' "$*" >&2; }
if [ ! -x .venv/bin/python ]; then
  say "creating .venv (first run only)"
  python3 -m venv .venv
fi
stamp=".venv/.ridecast-installed${extras:+-$extras}"
devstamp=.venv/.ridecast-installed-dev
fresh() { [ -f "$1" ] && [ ! pyproject.toml -nt "$1" ] && [ ! constraints.txt -nt "$1" ]; }
if ! fresh "$stamp" && ! fresh "$devstamp"; then
  started=$SECONDS
  target="."
  [ -n "$extras" ] && target=".[$extras]"
  say "installing ridecast${extras:+ with its $extras extras} into .venv (pinned by constraints.txt)"
  pins=(); [ -f constraints.txt ] && pins=(-c constraints.txt)
  # (pip notes about absent local index folders are noise for a new user: dropped)
  .venv/bin/python -m pip install -q --disable-pip-version-check "${pins[@]}" -e "$target" \
    2> >(grep -v "^WARNING: Location '" >&2)
  say "installed in $((SECONDS - started)) s"
  touch "$stamp"
fi
export PATH="$PWD/.venv/bin:$PATH"
export VIRTUAL_ENV="$PWD/.venv"
