#!/usr/bin/env bash
# Install the Debian packages the build, tests and benchmarks need, if missing.
# Safe to run repeatedly; does nothing when everything is present.
set -eu
pkgs="meson ninja-build pkg-config gcc clang libc6-dev liburing-dev libaio-dev libcmocka-dev libuv1-dev python3 fio gnuplot-nox netcat-openbsd strace valgrind"
# clang's sanitizer and libFuzzer runtimes are only a recommendation of
# clang in Debian: name the package of the clang version the distribution
# ships (Debian 12: 14).
rt_ver=$(apt-cache policy clang 2>/dev/null | sed -n 's/^ *Candidate: 1:\([0-9]*\).*/\1/p' | head -n 1)
[ -n "$rt_ver" ] || rt_ver=14
pkgs="$pkgs libclang-rt-$rt_ver-dev"
missing=""
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
	echo "deps: missing packages:$missing (run as root to install them)" >&2
	exit 1
fi
echo "deps: installing$missing" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends $missing >/dev/null
