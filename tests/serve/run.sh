#!/bin/sh
# Runs one serve test script with node, or exits 77 (ctest: skipped) saying
# what is missing. test-page.mjs also needs chromium.
script=$1
dir=$(dirname "$0")
if ! command -v node >/dev/null 2>&1; then
    echo "SKIP: node is not installed (apt-get install nodejs)"; exit 77
fi
case $script in
*openai*|*page*)
    if [ ! -d "$dir/node_modules/openai" ] || [ ! -d "$dir/node_modules/puppeteer-core" ]; then
        echo "SKIP: tests/serve/node_modules is missing (npm ci --prefix tests/serve)"; exit 77
    fi ;;
esac
case $script in
*page*)
    if ! command -v chromium >/dev/null 2>&1; then
        echo "SKIP: chromium is not installed (apt-get install chromium)"; exit 77
    fi ;;
esac
exec node --test-reporter=spec "$script"
