#!/bin/sh
# install-test.sh BUILD_DIR SOURCE_DIR — installs the build into a temporary
# prefix, builds plugins/template out of tree with only pkg-config and the
# installed headers, loads it through MINFER_PLUGIN_PATH with the installed
# CLI, and builds two tiny applications against the install: one through
# pkg-config, one through find_package(minfer); then makes the .deb
# packages with cpack and checks what each holds. Exits non-zero on the
# first failure, saying which step failed.
set -eu
build=$1
src=$2
tmp=$(mktemp -d /tmp/minfer-install-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
step() { echo "== $*"; }
die() { echo "install-test: FAILED: $*" >&2; exit 1; }

step "install into $prefix"
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; die "cmake --install"; }
[ -s "$prefix/share/bash-completion/completions/minfer" ] || die "no bash completion installed"
bash -n "$prefix/share/bash-completion/completions/minfer" || die "the installed bash completion does not parse"
pcdir=$(dirname "$(find "$prefix" -name minfer.pc | head -n 1)")
[ -f "$pcdir/minfer.pc" ] || die "no minfer.pc installed"
export PKG_CONFIG_PATH="$pcdir"
# Sanitizer builds: uninstrumented consumers load an instrumented libminfer.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0:detect_leaks=0"

step "plugin template: copy out of the tree and build with pkg-config only"
cp -r "$src/plugins/template" "$tmp/template"
cmake -S "$tmp/template" -B "$tmp/template-build" -G Ninja >"$tmp/t.log" 2>&1 || { cat "$tmp/t.log"; die "configure template"; }
grep -q "minfer_DIR:PATH=minfer_DIR-NOTFOUND" "$tmp/template-build/CMakeCache.txt" || die "template found a CMake package where only pkg-config was offered"
cmake --build "$tmp/template-build" >"$tmp/t.log" 2>&1 || { cat "$tmp/t.log"; die "build template"; }
so=$tmp/template-build/libminfer-template.so
[ -f "$so" ] || die "template did not produce libminfer-template.so"
if nm -D --undefined-only "$so" | grep -q ' minfer_'; then die "template needs libminfer symbols"; fi

step "plugin template: the same copy through find_package(minfer) (CMAKE_PREFIX_PATH)"
cmake -S "$tmp/template" -B "$tmp/template-fp" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
    >"$tmp/t.log" 2>&1 || { cat "$tmp/t.log"; die "configure template (find_package)"; }
grep -q "minfer_DIR:PATH=$prefix" "$tmp/template-fp/CMakeCache.txt" || die "template did not use find_package(minfer)"
cmake --build "$tmp/template-fp" >"$tmp/t.log" 2>&1 || { cat "$tmp/t.log"; die "build template (find_package)"; }
[ -f "$tmp/template-fp/libminfer-template.so" ] || die "find_package template did not produce the .so"

step "installed CLI loads the template via MINFER_PLUGIN_PATH"
out=$(MINFER_PLUGIN_PATH="$so" "$prefix/bin/minfer" backends 2>&1) || true
echo "$out"
echo "$out" | grep -q "^template 0.1.0: loaded" || die "template plugin not loaded"
echo "$out" | grep -qF "$so (env)" || die "template not found through MINFER_PLUGIN_PATH"
echo "$out" | grep -q "template host device" || die "template device not listed"
echo "$out" | grep -q "^  libdir   $prefix/" || die "libdir search not relative to the installed libminfer.so"

step "application through pkg-config"
cat >"$tmp/app.c" <<'APP'
#include <minfer/minfer.h>
#include <stdio.h>
int main(void) { puts(minfer_version()); return 0; }
APP
cc -std=c11 $(pkg-config --cflags minfer) "$tmp/app.c" -o "$tmp/app" $(pkg-config --libs minfer) \
    -Wl,-rpath,"$(pkg-config --variable=libdir minfer)" || die "pkg-config app build"
"$tmp/app" | grep -q "$(pkg-config --modversion minfer)" || die "pkg-config app run"

step "application through find_package(minfer)"
mkdir -p "$tmp/cm"
cp "$tmp/app.c" "$tmp/cm/app.c"
cat >"$tmp/cm/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.16)
project(app C)
find_package(minfer 99 QUIET)  # SameMajorVersion: another major must not match
if(minfer_FOUND)
  message(FATAL_ERROR "find_package(minfer 99) accepted version ${minfer_VERSION}")
endif()
find_package(minfer 0.1 REQUIRED)
add_executable(app app.c)
target_link_libraries(app PRIVATE minfer::minfer)
if(NOT EXISTS "${MINFER_PLUGIN_DIR}")
  message(FATAL_ERROR "MINFER_PLUGIN_DIR ${MINFER_PLUGIN_DIR} does not exist")
endif()
CM
cmake -S "$tmp/cm" -B "$tmp/cm-build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/c.log" 2>&1 || { cat "$tmp/c.log"; die "find_package(minfer)"; }
cmake --build "$tmp/cm-build" >"$tmp/c.log" 2>&1 || { cat "$tmp/c.log"; die "find_package app build"; }
"$tmp/cm-build/app" >/dev/null || die "find_package app run"
step "Debian packages (cpack -G DEB)"
abi=minfer-abi-$(sed -n 's/^#define MINFER_ABI_MAJOR \([0-9]*\).*/\1/p' "$src/include/minfer/backend.h")
if command -v dpkg-deb >/dev/null && command -v dpkg-shlibdeps >/dev/null; then
    cpack --config "$build/CPackConfig.cmake" -G DEB -B "$tmp/pkg" >"$tmp/p.log" 2>&1 || { cat "$tmp/p.log"; die "cpack"; }
    for d in "$tmp/pkg/"*.deb; do dpkg-deb -c "$d" >"${d%%_*}.list"; done
    has() { grep -q "$2" "$tmp/pkg/$1.list" || die "package $1 lacks $2"; }
    lacks() { if grep -q "$2" "$tmp/pkg/$1.list"; then die "package $1 holds $2"; fi; }
    has minfer 'libminfer\.so\.0'
    has minfer 'minfer/backends/libminfer-cpu\.so'
    has minfer 'bin/minfer$'
    has minfer 'share/bash-completion/completions/minfer$'
    lacks minfer 'libminfer-cuda\.so'
    lacks minfer 'include/minfer'
    has minfer-dev 'include/minfer/backend\.h'
    has minfer-dev 'pkgconfig/minfer\.pc'
    has minfer-dev 'cmake/minfer/minferConfigVersion\.cmake'
    dpkg-deb -f "$tmp/pkg/"minfer-dev_*.deb Depends | grep -q "minfer (= " || die "minfer-dev does not depend on minfer"
    dpkg-deb -f "$tmp/pkg/"minfer_*.deb Provides | grep -q "$abi" || die "minfer does not provide $abi"
    if [ -f "$build/lib/minfer/backends/libminfer-cuda.so" ]; then
        has minfer-cuda 'minfer/backends/libminfer-cuda\.so'
        lacks minfer-cuda 'libminfer-cpu\.so'
        # the plugin ABI, not one core build; what the .so needs; the driver suggested
        deps=$(dpkg-deb -f "$tmp/pkg/"minfer-cuda_*.deb Depends)
        echo "minfer-cuda Depends: $deps"
        echo "$deps" | grep -q "$abi" || die "minfer-cuda does not depend on $abi"
        if echo "$deps" | grep -q "minfer (= "; then die "minfer-cuda pins one core build"; fi
        for lib in libc6 libstdc++6 libgcc-s1; do
            echo "$deps" | grep -q "$lib" || die "minfer-cuda does not declare $lib"
        done
        dpkg-deb -f "$tmp/pkg/"minfer-cuda_*.deb Suggests | grep -q "libcuda1" || die "minfer-cuda does not suggest the driver"
    fi
    ls "$tmp/pkg/"*.deb
else
    echo "skipped: dpkg-deb or dpkg-shlibdeps not installed"
fi
echo "install-test: OK"
