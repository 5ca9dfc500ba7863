#!/usr/bin/env bash
# The installed library used as an application would: `meson install` into a scratch DESTDIR, then
# the embedding example compiled out of tree with `pkg-config --cflags --libs sift` (against
# libsift.so) and with `--static` (against libsift.a, and whatever Libs.private names), each run
# on a model. Skips (77) without pkg-config or a C compiler.
#   pkgconfig_test.sh BUILD_DIR EXAMPLE.c MODEL.gguf
set -u
build=$1 example=$2 model=$3
command -v pkg-config >/dev/null || { echo "skipped: no pkg-config"; exit 77; }
cc=${CC:-cc}
command -v "$cc" >/dev/null || { echo "skipped: no C compiler ($cc)"; exit 77; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

meson install -C "$build" --destdir "$T/root" --no-rebuild --quiet >"$T/install.log" 2>&1 ||
  { cat "$T/install.log"; echo "FAIL: meson install"; exit 1; }
pc=$(find "$T/root" -name sift.pc | head -1)
[ -n "$pc" ] || { echo "FAIL: no sift.pc installed"; exit 1; }
prefix=$(sed -n 's/^prefix=//p' "$pc")
export PKG_CONFIG_PATH
PKG_CONFIG_PATH=$(dirname "$pc")
pcq() { pkg-config --define-variable=prefix="$T/root$prefix" "$@" sift; }
libdir=$(pcq --variable=libdir)
echo "sift.pc: $(pcq --modversion); cflags: $(pcq --cflags); libs: $(pcq --libs); static: $(pcq --static --libs)"

# shared
if $cc "$example" $(pcq --cflags) $(pcq --libs) -o "$T/embed-shared" 2>"$T/cc.log"; then
  out=$(LD_LIBRARY_PATH="$libdir" "$T/embed-shared" "$model" '#GMQ:726;' 4 2>&1) || fail "shared example: $out"
  [ -n "$out" ] || fail "shared example printed nothing"
  LD_LIBRARY_PATH="$libdir" ldd "$T/embed-shared" | grep -q "libsift.so.0" || fail "shared example does not load libsift.so.0"
else
  fail "shared build: $(head -c 800 "$T/cc.log")"
fi
# static: -lsift as the archive, then Libs.private
static_libs=$(pcq --static --libs | sed 's/-lsift\b/-l:libsift.a/')
if $cc "$example" $(pcq --cflags) $static_libs -o "$T/embed-static" 2>"$T/cc.log"; then
  out=$("$T/embed-static" "$model" '#GMQ:726;' 4 2>&1) || fail "static example: $out"
  [ -n "$out" ] || fail "static example printed nothing"
  ldd "$T/embed-static" | grep -q libsift && fail "static example loads a libsift"
else
  fail "static build ($static_libs): $(head -c 800 "$T/cc.log")"
fi
echo "summary: pkg-config: $fails failures"
[ "$fails" -eq 0 ]
