# Sourced by scripts/setup.sh and scripts/setup-simgrid.sh (which set $sudo
# and log): starpu_source WORK unpacks Debian's source package of StarPU, the
# newest 1.4.x of sid, else trixie, fetched with apt-get source from the
# archive this machine already uses, into WORK, and sets `upstream` (its
# version), `ver` (the Debian version) and `src` (the unpacked folder), with
# scripts/starpu-patches/*.patch applied: changes every hyfi build of StarPU
# takes, real or simulated (each patch's header says what it changes).
# starpu_patches_sum prints a checksum of those patches, for the recipes.
starpu_patches_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/starpu-patches"
starpu_patches_sum() { cat "$starpu_patches_dir"/*.patch | md5sum | cut -c1-8; }
starpu_source() {
  local work=$1 srcfile=/etc/apt/sources.list.d/hyfi-src.sources uri tarball
  # Source entries for trixie and sid, from the archive this machine already uses.
  if [ ! -f "$srcfile" ]; then
    uri=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
    [ -n "$uri" ] || uri=$(awk '$1=="deb"{for(i=2;i<=NF;i++) if($i ~ /^[a-z]+:\/\//){print $i; exit}}' /etc/apt/sources.list)
    [ -n "$uri" ] || { echo "setup: cannot find the Debian archive address in /etc/apt/sources.list*" >&2; exit 1; }
    printf 'Types: deb-src\nURIs: %s\nSuites: sid trixie\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' "$uri" | $sudo tee "$srcfile" >/dev/null
    $sudo apt-get update -qq
  fi
  # Newest 1.4.x among the source versions apt knows.
  ver=$(apt-cache showsrc starpu 2>/dev/null | awk '/^Version:/{print $2}' | grep '^1\.4\.' | sort -V | tail -1)
  [ -n "$ver" ] || { echo "setup: no StarPU 1.4 source package found (apt-cache showsrc starpu)" >&2; exit 1; }
  upstream="${ver%-*}"; upstream="${upstream#*:}"
  (cd "$work" && apt-get source --download-only -qq "starpu=$ver" >/dev/null)
  tarball=$(ls "$work"/starpu_"$upstream".orig.tar.* | head -1)
  tar -xf "$tarball" -C "$work"
  src=$(find "$work" -maxdepth 1 -type d -name "starpu-*" | head -1)
  local p
  for p in "$starpu_patches_dir"/*.patch; do
    (cd "$src" && patch -s -p1 <"$p") || { echo "setup: $p does not apply to StarPU $upstream" >&2; exit 1; }
  done
}
