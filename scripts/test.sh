#!/usr/bin/env bash
# Build the library and run the test suite.
#   scripts/test.sh [BUILD_DIR [extra meson setup options...]]
# Installs missing Debian packages first (as root).  Exit status is meson
# test's: 0 when every test passed or was skipped.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/scripts/deps.sh"
build=${1:-"$here/build"}
[ $# -gt 0 ] && shift
if [ ! -f "$build/build.ninja" ]; then
	meson setup "$build" "$here" --werror "$@" >/dev/null
fi
ninja -C "$build" >/dev/null
# Two test programs per CPU: most of them spend their time waiting (for
# peers, timers, the idle check), and each is written to pass on a loaded
# machine.
jobs=$(( $(nproc) * 2 ))
meson test -C "$build" --print-errorlogs --num-processes "$jobs" ${PX_TEST_ARGS:-}
