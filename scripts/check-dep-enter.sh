#!/bin/sh
# check-dep-enter.sh — every CUDA kernel keeps the rule of programmatic
# dependent launch (backends/cuda/kernels/common.cuh): KLAUNCH may start a
# kernel while the one before it still runs, so each __global__ function
# must call k_dep_enter() (wait for the predecessor, then let the
# successor launch) in its own body, before any return; a kernel that
# waits late (k_dep_enter(late)) must also call k_dep_late_wait(late). A kernel that
# forgot it would read its inputs before they were written; one that
# returned first could end before its predecessor, and the next kernel's
# wait would then cover neither. Lists each kernel with its verdict;
# exits 1 when one breaks the rule.
#
# usage: scripts/check-dep-enter.sh [SOURCE_DIR] [-q]   (-q: print only failures)
set -u
src=${1:-$(dirname "$0")/..}
quiet=0
[ "${2:-}" = "-q" ] && quiet=1
cd "$src/backends/cuda/kernels" 2>/dev/null ||
  { echo "check-dep-enter: no backends/cuda/kernels under $src" >&2; exit 2; }

# comments stripped; each file is read whole, then every __global__
# function's body (up to the brace that closes its first) is checked
awk -v quiet="$quiet" '
function check(file, text,    rest, p, b, name, depth, body, i, c, e, r, why) {
  gsub(/\/\*([^*]|\*+[^*\/])*\*+\//, " ", text)
  rest = text
  while ((p = index(rest, "__global__")) > 0) {
    rest = substr(rest, p + 10)
    b = index(rest, "{")
    name = substr(rest, 1, b - 1)
    gsub(/__launch_bounds__\([^)]*\)/, "", name)
    sub(/\(.*/, "", name); gsub(/[ \t\n]+/, " ", name)
    sub(/^ *void */, "", name); sub(/ +$/, "", name)
    depth = 0; body = ""
    for (i = b; i <= length(rest); i++) {
      c = substr(rest, i, 1)
      body = body c
      if (c == "{") depth++
      else if (c == "}" && --depth == 0) break
    }
    e = index(body, "k_dep_enter(")
    r = match(body, /(^|[^A-Za-z0-9_])return[^A-Za-z0-9_]/)
    why = ""
    if (!e) why = "no k_dep_enter() in its body"
    else if (r && RSTART < e) why = "returns before k_dep_enter()"
    else if (!index(body, "k_dep_enter()") && !index(body, "k_dep_late_wait("))
      why = "k_dep_enter(late) without k_dep_late_wait(late)"
    kernels++
    if (why != "") { bad++; printf "BROKEN %s: %s: %s\n", file, name, why }
    else if (!quiet) printf "ok     %s: %s\n", file, name
  }
}
FNR == 1 && NR > 1 { check(prev, text); text = "" }
{ sub(/\/\/.*$/, ""); text = text $0 "\n"; prev = FILENAME }
END {
  check(prev, text)
  printf "check-dep-enter: %d kernels, %d breaking the rule\n", kernels, bad
  exit (kernels > 0 && bad == 0) ? 0 : 1
}' $(ls *.cu *.cuh | sort)
