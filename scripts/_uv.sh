# Sourced by scripts/_venv.sh and scripts/lock, from the checkout's root: the installer.
#
# uv, at the version constraints.txt pins, installs the demo's dependencies (numpy and scipy
# among them) in a few seconds from its cache (~/.cache/uv, or $XDG_CACHE_HOME/uv, or
# $UV_CACHE_DIR), where pip takes the best part of a minute. uv itself comes from PyPI
# through pip, once per machine, and is kept beside that cache in
# ~/.cache/ridecast/uv-VERSION. When it cannot be had, the callers install with pip, as
# before; RIDECAST_INSTALLER=pip asks for pip outright.
say() { printf 'ridecast: %s\n' "$*" >&2; }
quiet_pip() {  # pip's notes about absent local index folders are noise for a new user
  "$@" -q --disable-pip-version-check --root-user-action=ignore \
    2> >(grep -v "^WARNING: Location '" >&2)
}

# uv trusts the system's certificate store, as pip (through its settings), curl and git do
# here: behind a proxy that re-signs TLS, its own bundled roots would refuse PyPI.
export UV_SYSTEM_CERTS="${UV_SYSTEM_CERTS:-1}"

uv_pin="$(sed -n 's/^uv==\([^ ;]*\).*/\1/p' constraints.txt 2>/dev/null | head -n 1)"
uv_home="${XDG_CACHE_HOME:-$HOME/.cache}/ridecast/uv-${uv_pin:-latest}"

# Prints the path of the pinned uv, fetching it first if this machine has not got it yet
# (one line of progress). Fails when it cannot be had (no pip, no PyPI, or
# RIDECAST_INSTALLER=pip).
find_uv() {
  [ "${RIDECAST_INSTALLER:-uv}" = uv ] || return 1
  if [ ! -x "$uv_home/bin/uv" ]; then
    say "fetching uv ${uv_pin:-(latest)}, the installer (once per machine, into $uv_home)"
    local tmp="$uv_home.tmp.$$"
    rm -rf "$tmp"
    if ! quiet_pip python3 -m pip install --no-warn-script-location --target "$tmp" \
        "uv${uv_pin:+==$uv_pin}" >&2; then
      rm -rf "$tmp"
      return 1
    fi
    mkdir -p "$(dirname "$uv_home")"
    mv -T "$tmp" "$uv_home" 2>/dev/null || rm -rf "$tmp"  # another run may have won the race
  fi
  "$uv_home/bin/uv" --version >/dev/null 2>&1 && printf '%s\n' "$uv_home/bin/uv"
}
