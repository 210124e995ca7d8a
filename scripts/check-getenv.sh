#!/bin/sh
# check-getenv.sh — the library and the plugins read the environment only
# through secure_getenv (issue 20, item 2): in a setuid/setgid process it
# returns NULL, so the caller of a privileged program cannot steer it
# (MINFER_PLUGIN_PATH would make it dlopen the caller's code). Tests, tools
# and fuzz targets are exempt: they are never installed privileged.
#
# usage: scripts/check-getenv.sh [SOURCE_DIR]; exits 1 listing each plain
# getenv call (file:line) in core/, backends/, plugins/, quant/, include/.
set -u
src=${1:-$(dirname "$0")/..}
cd "$src" || exit 2
hits=$(grep -rnE --include='*.c' --include='*.h' --include='*.cu' --include='*.cuh' \
    '(^|[^_[:alnum:]])getenv[[:space:]]*\(' core backends plugins quant include)
if [ -n "$hits" ]; then
    echo "check-getenv: plain getenv in library or plugin code; use secure_getenv:" >&2
    echo "$hits" >&2
    exit 1
fi
echo "check-getenv: every environment read in core/, backends/, plugins/, quant/ is secure_getenv"
