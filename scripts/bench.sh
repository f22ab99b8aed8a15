#!/usr/bin/env bash
# The main job: build an optimised library and run the headline comparison,
# proactor_test (default engine, "auto") against tp_reactor_test over the
# source document's grid, the thread-scaling row, the system calls per
# round trip (strace), then examples/echo_server against the epoll and
# libuv echo peers (bench/peers): every performance goal of the project,
# each with its verdict.  7 rounds per grid row and scaling row, 5 per echo
# cell, the programs of a row in rotating order; ratios are medians of
# per-round ratios, with CPU seconds per GB beside throughput.
#   scripts/bench.sh            default engine and epoll vs TP_Reactor, scaling,
#                               system calls, and the echo servers, the example
#                               on both engines (~25 minutes on 2 cores)
#   scripts/bench.sh --full     every engine this kernel offers, raw_limit,
#                               the echo servers and the file table against
#                               fio (~47 minutes; add --runs 3 for ~23)
#   scripts/bench.sh --scaling  20/8192/8192 at 1 and 2 threads, default engine
#                               and TP_Reactor: scaling, CPUs busy, context
#                               switches (~1 minute; passed to bench/compare)
#   scripts/bench.sh ARGS...    anything else is passed to bench/compare
# Installs missing Debian packages first (as root).  Results (tables, CSV,
# charts) go to results/DATE/.
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
	exec python3 bench/compare --build "$build" --grid --echo --files "$@"
elif [ $# -eq 0 ]; then
	exec python3 bench/compare --build "$build" --engines auto,epoll --no-raw --grid \
		--scaling --syscalls --echo --echo-also epoll
else
	exec python3 bench/compare --build "$build" "$@"
fi
