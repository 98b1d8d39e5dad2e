# Sourced by scripts/setup.sh and scripts/setup-simgrid.sh (which set $sudo
# and log): apt_install_missing PKG... installs those of the Debian packages
# that are not installed (an apt-get update first only if the install fails:
# stale lists), and returns 1 when all were installed already. HYFI_SKIP_APT=1:
# installs nothing. A failed install ends the script.
apt_install_missing() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -gt 0 ] || return 1
  [ "${HYFI_SKIP_APT:-0}" != 1 ] || return 0
  log "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
    { $sudo apt-get update -qq &&
      $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; } ||
    { echo "setup: apt-get could not install ${missing[*]}" >&2; exit 1; }
}
