#!/bin/sh
# plugin-standalone-test.sh BUILD_DIR SOURCE_DIR PLUGIN [CMAKE_ARGS...] —
# proves that backends/PLUGIN builds against an installed minfer-dev
# alone: installs the build's runtime and dev components into a temporary
# prefix (without the in-tree PLUGIN), copies backends/PLUGIN out of the
# tree, configures it with only -DCMAKE_PREFIX_PATH=<prefix>
# (find_package(minfer)), builds it, and loads the result with the
# installed CLI through MINFER_PLUGIN_PATH: `minfer backends` must show the
# plugin's own version (its project()) from that file. A CUDA plugin on a
# machine without a GPU is "rejected" with "no CUDA device"; that still
# proves it loads and answers. Exits non-zero on the first failure, saying
# which step failed.
set -eu
build=$1
src=$2
name=$3
shift 3
tmp=$(mktemp -d /tmp/minfer-standalone-$name.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
step() { echo "== $*"; }
die() { echo "plugin-standalone-test ($name): FAILED: $*" >&2; exit 1; }

step "install runtime and dev components into $prefix"
for comp in runtime dev; do
    cmake --install "$build" --prefix "$prefix" --component $comp >>"$tmp/install.log" ||
        { cat "$tmp/install.log"; die "cmake --install --component $comp"; }
done
# The in-tree build of this plugin must not be what gets loaded.
find "$prefix" -name "libminfer-$name.so" -delete
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0:detect_leaks=0"

step "copy backends/$name out of the tree and build it against the install"
cp -r "$src/backends/$name" "$tmp/$name"
version=$(sed -n "s/^project(minfer-$name VERSION \([0-9.]*\).*/\1/p" "$tmp/$name/CMakeLists.txt")
[ -n "$version" ] || die "backends/$name/CMakeLists.txt has no project(minfer-$name VERSION ...)"
cmake -S "$tmp/$name" -B "$tmp/b" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" "$@" \
    >"$tmp/c.log" 2>&1 || { cat "$tmp/c.log"; die "configure"; }
# Nothing in the build may name the source tree it was copied from.
if grep -q -F "$src/" "$tmp/b/build.ninja" "$tmp/b/CMakeCache.txt"; then
    grep -n -F "$src/" "$tmp/b/build.ninja" "$tmp/b/CMakeCache.txt" | head -5
    die "the standalone build refers into the source tree $src"
fi
start=$(date +%s)
cmake --build "$tmp/b" >"$tmp/b.log" 2>&1 || { cat "$tmp/b.log"; die "build"; }
echo "built in $(($(date +%s) - start)) s"
so=$tmp/b/libminfer-$name.so
[ -f "$so" ] || die "no libminfer-$name.so produced"
if nm -D --undefined-only "$so" | grep -q ' minfer_'; then die "the plugin needs libminfer symbols"; fi
nm -D --defined-only "$so" | grep -q ' minfer_plugin_entry$' || die "no minfer_plugin_entry exported"

step "installed CLI loads it through MINFER_PLUGIN_PATH"
out=$(MINFER_PLUGIN_PATH="$so" "$prefix/bin/minfer" backends 2>&1) || true
echo "$out"
echo "$out" | grep -qF "$so (env)" || die "not found through MINFER_PLUGIN_PATH"
if [ "$name" = cuda ]; then
    echo "$out" | grep -Eq "^cuda $version: (loaded|rejected)" || die "cuda $version not listed"
    if echo "$out" | grep -q "^cuda $version: rejected"; then
        echo "$out" | grep -q "no CUDA device" || die "cuda rejected for another reason than no device"
    fi
else
    echo "$out" | grep -q "^$name $version: loaded" || die "$name $version not loaded"
fi
echo "plugin-standalone-test ($name): OK"
