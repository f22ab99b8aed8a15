#!/bin/sh
# memcheck_smoke.sh TEST_ALLOC CONFORMANCE - a few tests under valgrind's
# memcheck, the errors AddressSanitizer does not see: uninitialised bytes
# in a condition or handed to the kernel (a sockaddr, an iocb, a msghdr),
# an operation record used after it went back to the allocator (the
# allocator marks free records as freed for memcheck: proactor/
# allocator.c), and descriptors left open (--track-fds).
#
# The whole per-engine suite under memcheck is a manual job (TESTING.md,
# "valgrind's memcheck"); this runs the allocator's own check that the
# annotations work, and one accept/connect and one datagram exchange on
# the readiness and Linux AIO engines.  io_uring under memcheck is
# bench_smoke_valgrind@uring.
#
# Exit: 0 passed, 1 memcheck found an error or a test failed, 77 valgrind
# is missing.
set -u
alloc=${1:?usage: memcheck_smoke.sh TEST_ALLOC CONFORMANCE}
conf=${2:?usage: memcheck_smoke.sh TEST_ALLOC CONFORMANCE}
command -v valgrind >/dev/null 2>&1 || { echo "skip: valgrind is not installed"; exit 77; }
fail=0
vg() {
	PX_ENGINE= timeout 60 valgrind -q --error-exitcode=9 --track-origins=yes "$@"
	rc=$?
	case $rc in
	0|77) echo "ok: $* under memcheck (exit $rc)" ;;
	9) echo "FAIL: memcheck reported errors for $*"; fail=1 ;;
	*) echo "FAIL: $* under memcheck exited $rc"; fail=1 ;;
	esac
}
vg "$alloc"
vg "$conf" epoll accept_and_connect_tcp
vg "$conf" linux-aio dgram_udp_loopback
exit $fail
