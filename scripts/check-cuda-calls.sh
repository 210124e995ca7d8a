#!/bin/sh
# check-cuda-calls.sh — every CUDA runtime call and kernel launch in the
# CUDA plugin has its error checked (issue 20, "Failure injection on the
# GPU"). Lists each site with its verdict; exits 1 when one is unchecked.
#
# usage: scripts/check-cuda-calls.sh [SOURCE_DIR] [-q]   (-q: print only failures)
#
# Rules (line-based over backends/cuda/**/*.{c,h,cu,cuh}, comments and string
# literals stripped first):
# - a runtime call (cudaXxx(...); cudaGetErrorString/Name are pure and not
#   counted) is checked when its result is used: assigned, compared,
#   returned, passed on, or tested in an if/while; a call that starts a
#   statement throws its result away and is UNCHECKED, unless the line
#   carries a comment "unchecked: <reason>" (teardown with nothing to
#   report to, the pre-launch latch clear). A bare "cudaGetLastError();"
#   is itself the check-and-clear of the latch and passes.
# - a kernel launch (<<<...>>>) must be the one inside KLAUNCH in
#   kernels/common.cuh, which reads the launch error before and after.
# - a launcher call (an int k_<name>(struct kctx *...) of kernels/kernels.h)
#   outside kernels/ must be wrapped in LAUNCH(...), tested in an if, or
#   have its result assigned or returned.
set -u
src=${1:-$(dirname "$0")/..}
quiet=0
[ "${2:-}" = "-q" ] && quiet=1
cd "$src/backends/cuda" 2>/dev/null || { echo "check-cuda-calls: no backends/cuda under $src" >&2; exit 2; }

launchers=$(sed -n 's/^int \(k_[a-z0-9_]*\)(struct kctx \*.*/\1/p' kernels/kernels.h | sort -u | tr '\n' ' ')

find . -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' | sort |
awk -v quiet="$quiet" -v launchers="$launchers" '
function strip(s,    out) {
    # string literals and comments (a block comment may span lines)
    gsub(/\\"/, "", s)
    gsub(/"[^"]*"/, "\"\"", s)
    out = ""
    while (length(s)) {
        if (in_comment) {
            e = index(s, "*/")
            if (!e) return out
            s = substr(s, e + 2); in_comment = 0; continue
        }
        b = index(s, "/*"); l = index(s, "//")
        if (l && (!b || l < b)) return out substr(s, 1, l - 1)
        if (!b) return out s
        out = out substr(s, 1, b - 1) " "; s = substr(s, b + 2); in_comment = 1
    }
    return out
}
function report(file, n, what, ok, line) {
    sites++
    if (!ok) bad++
    if (!ok || !quiet)
        printf "%s %s:%d: %s: %s\n", ok ? "ok       " : "UNCHECKED", file, n, what, line
}
BEGIN { split(launchers, L, " "); for (i in L) isl[L[i]] = 1 }
{
    file = $0; sub(/^\.\//, "", file); path = $0
    n = 0; in_comment = 0; prev = ";"
    while ((getline raw < path) > 0) {
        n++
        marker = raw ~ /unchecked: [^ ]/
        s = strip(raw)
        t = s; sub(/^[ \t]+/, "", t); sub(/[ \t]+$/, "", t)
        # a statement starts here unless the previous code line left one open
        starts = prev ~ /[;{}]$/ || prev ~ /^#/ || prev ~ /\)$/ || prev ~ /else$/ || prev ~ /:$/
        rest = s
        while (match(rest, /cuda[A-Z][A-Za-z0-9]*\(/)) {
            name = substr(rest, RSTART, RLENGTH - 1)
            before = substr(rest, 1, RSTART - 1)
            rest = substr(rest, RSTART + RLENGTH)
            if (name == "cudaGetErrorString" || name == "cudaGetErrorName") continue
            lead = before; gsub(/[ \t]/, "", lead)
            bare = starts && (lead == "" || lead == "(void)")
            if (bare && name == "cudaGetLastError" && t ~ /^cudaGetLastError\(\);$/) { report(file, n, name, 1, t); continue }
            report(file, n, name, !bare || marker, t)
        }
        if (s ~ /KLAUNCH\(/ && s !~ /define/)
            report(file, n, "kernel launch (KLAUNCH reads its error)", 1, t)
        if (s ~ /<<</ && !(file == "kernels/common.cuh" && s ~ /kern<<</))
            report(file, n, "raw kernel launch", 0, t)
        if (file !~ /^kernels\//) {
            rest = s
            while (match(rest, /(^|[^A-Za-z0-9_])k_[a-z0-9_]+\(/)) {
                name = substr(rest, RSTART, RLENGTH - 1)
                before = substr(rest, 1, RSTART - 1)
                if (name !~ /^k_/) { before = before substr(name, 1, 1); name = substr(name, 2) }
                rest = substr(rest, RSTART + RLENGTH)
                if (!(name in isl)) continue
                lead = before; gsub(/[ \t]/, "", lead)
                ok = lead ~ /LAUNCH\($/ || lead ~ /(if|while)\(!?$/ ||
                     lead ~ /(=|return|\|\||&&|\(|,|!|\?|:)$/ || (!starts && lead == "")
                report(file, n, "launcher " name, ok || marker, t)
            }
        }
        if (t != "") prev = t
    }
    close(path)
}
END {
    printf "check-cuda-calls: %d sites, %d unchecked\n", sites, bad
    exit bad ? 1 : 0
}'
