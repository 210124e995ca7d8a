#!/bin/sh
# check-layering.sh — the include rules the tree's layout promises
# (docs/architecture.md, docs/decisions/core-folders.md), checked by ctest.
#
# usage: scripts/check-layering.sh SOURCE_DIR
#
# Fails, naming each offending line, when
#   1. a core/ subsystem includes a header of a subsystem above it. The
#      order, lowest first: runtime gguf graph text model modeltools; a
#      folder may include its own headers and those of folders before it
#      (graph/ may use runtime/, never model/);
#   2. the CLI (tools/) includes the plugin ABI header minfer/backend.h:
#      an application needs minfer.h alone;
#   3. a plugin's CMake names core/: plugins build against the SDK only.
set -u

src=${1:?usage: check-layering.sh SOURCE_DIR}
cd "$src" || exit 2
bad=0
order="runtime gguf graph text model modeltools"

allowed=""
for dir in $order; do
    allowed="$allowed $dir"
    for other in $order; do
        case " $allowed " in *" $other "*) continue ;; esac
        hits=$(grep -rn "#include \"$other/" "core/$dir" 2>/dev/null)
        if [ -n "$hits" ]; then
            echo "check-layering: core/$dir/ includes core/$other/ (above it):" >&2
            echo "$hits" >&2
            bad=1
        fi
    done
done

hits=$(grep -rn '#include [<"]minfer/backend\.h[">]' tools 2>/dev/null)
if [ -n "$hits" ]; then
    echo "check-layering: tools/ includes the plugin ABI header:" >&2
    echo "$hits" >&2
    bad=1
fi

hits=$(grep -rn --include=CMakeLists.txt --include='*.cmake' -E '(SOURCE_DIR\}|\.\.)/core(/|\b)' \
       backends plugins 2>/dev/null)
if [ -n "$hits" ]; then
    echo "check-layering: a plugin's CMake names core/:" >&2
    echo "$hits" >&2
    bad=1
fi

[ $bad -eq 0 ] && echo "check-layering: ok"
exit $bad
