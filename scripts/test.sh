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
# Four test programs per CPU: most of them spend their time waiting (for
# peers, timers, the idle check), and each is written to pass on a loaded
# machine.  On 2 CPUs (Zen 5, 2026-12-05) two per CPU kept the CPUs about
# half busy (the plain suite took 393 s of wall time for 401 s of CPU);
# four per CPU took 257 s, and the TSan suite 403 s instead of 526 s at
# 1.8 CPUs busy.
jobs=$(( $(nproc) * 4 ))
meson test -C "$build" --print-errorlogs --num-processes "$jobs" ${PX_TEST_ARGS:-}
