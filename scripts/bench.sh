#!/usr/bin/env bash
# The main job: build an optimised library and run the headline comparison,
# proactor_test (default engine, "auto") against tp_reactor_test, over the
# source document's grid, interleaved, median of 3 runs per cell.
#   scripts/bench.sh            default engine vs TP_Reactor (~4 minutes)
#   scripts/bench.sh --full     every engine this kernel offers, raw_limit,
#                               and the file table against fio (~15 minutes)
#   scripts/bench.sh ARGS...    anything else is passed to bench/compare
# Installs missing Debian packages first (as root).  Results (table, CSV,
# chart) go to results/DATE/.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/scripts/deps.sh"
build="$here/build-release"
if [ ! -f "$build/build.ninja" ]; then
	meson setup "$build" "$here" -Dbuildtype=release -Db_ndebug=true -Dtests=true >/dev/null
fi
ninja -C "$build" >/dev/null
cd "$here"
if [ "${1:-}" = "--full" ]; then
	shift
	exec python3 bench/compare --build "$build" --files "$@"
elif [ $# -eq 0 ]; then
	exec python3 bench/compare --build "$build" --engines auto --no-raw
else
	exec python3 bench/compare --build "$build" "$@"
fi
