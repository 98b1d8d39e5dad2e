#!/usr/bin/env bash
# 'example_installed': examples/embed.c built as an outside project would,
# against hyfi installed into a temporary prefix (meson install --destdir),
# through the installed pkg-config file, then run.
#   example_installed.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
meson install -C "$build" --no-rebuild --quiet --destdir "$tmp/root" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; echo "FAIL meson install"; exit 1; }
pc=$(find "$tmp/root" -name hyfi.pc | head -1)
[ -n "$pc" ] || { echo "FAIL no hyfi.pc installed"; exit 1; }
# the installed file, its prefix moved under the temporary root (as if
# installed there); the dependencies' files as they are
mkdir -p "$tmp/pc"
prefix=$(sed -n 's/^prefix=//p' "$pc")
sed "s|^prefix=.*|prefix=$tmp/root$prefix|" "$pc" >"$tmp/pc/hyfi.pc"
export PKG_CONFIG_PATH="$tmp/pc${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
flags=$(pkg-config --cflags --libs hyfi)
echo "pkg-config hyfi: $flags"
# shellcheck disable=SC2086
cc -std=c11 -Wall -Wextra -Werror "$src/examples/embed.c" $flags -o "$tmp/embed"
libdir=$(pkg-config --variable=libdir hyfi)
LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$tmp/embed" 2>"$tmp/stderr"
if grep -q '^hyfi:' "$tmp/stderr"; then
  echo "FAIL hyfi wrote to stderr despite the log callback:"; cat "$tmp/stderr"; exit 1
fi
echo "ok   the installed library, linked through pkg-config, trains in the example"
