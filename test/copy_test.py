#!/usr/bin/env python3
"""examples/copy copies files exactly.

    copy_test.py PATH_OF_COPY DIR 'ENGINE CONFIG TEXT' (or '') [--direct]

In a temporary directory below DIR: a ~20 MiB file of random bytes whose
length is not a multiple of the block (a short last block) is copied with
several depths and block sizes and checked by SHA-256; so are an empty
file and one smaller than a block.  A missing source, and a destination
that cannot be created, must give a non-zero exit status.  With --direct
the copies use O_DIRECT; the test is skipped (77) when DIR's file system
refuses O_DIRECT, or when the engine is not available here.
"""
import errno
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time


def fail(msg):
    print("copy_test: FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def block_device_check(run, tmp):
    """--direct onto a block device (a loop device: root only) whose copy
    ends inside an alignment unit: SRC's bytes land, the device's bytes
    after them stay as they were, and the exit status is 0.  (The last
    block used to be written padded with zeros over the next bytes of the
    device, and the ftruncate meant to cut the padding failed with
    EINVAL: exit 1, also when there was no padding.)"""
    if os.geteuid() != 0 or not shutil.which("losetup"):
        print("copy_test: not root or no losetup: block device check skipped")
        return
    img = os.path.join(tmp, "loop.img")
    with open(img, "wb") as f:
        f.write(b"\xff" * 65536)
    p = subprocess.run(["losetup", "-f", "--show", img], capture_output=True,
                       text=True)
    if p.returncode != 0:
        print("copy_test: losetup: %s: block device check skipped"
              % p.stderr.strip())
        return
    dev = p.stdout.strip()
    try:
        src = os.path.join(tmp, "tail5000")
        data = os.urandom(5000)
        with open(src, "wb") as f:
            f.write(data)
        run([src, dev])     # exit 0, or a failure
        with open(dev, "rb") as f:
            got = f.read(8192)
        if got[:5000] != data:
            fail("--direct onto %s: the copy differs" % dev)
        if got[5000:] != b"\xff" * 3192:
            fail("--direct onto %s: %d of the 3192 bytes after the copy were "
                 "overwritten" % (dev, sum(b != 0xff for b in got[5000:])))
        # A whole number of alignment units goes with O_DIRECT, and needs
        # no ftruncate (which a device refuses).
        whole = os.urandom(8192)
        with open(src, "wb") as f:
            f.write(whole)
        p = run([src, dev])
        if "O_DIRECT" not in p.stdout:
            fail("--direct onto %s, 8192 bytes: not O_DIRECT: %r"
                 % (dev, p.stdout))
        with open(dev, "rb") as f:
            if f.read(8192) != whole:
                fail("--direct onto %s, 8192 bytes: the copy differs" % dev)
    finally:
        subprocess.run(["losetup", "-d", dev])
    print("copy_test: --direct onto a block device (%s) checked" % dev)


def interrupt_check(copy, engine, direct, env, src, tmp):
    """SIGINT during a copy: the blocks in flight are finished, DST holds
    exactly the first bytes of SRC (a whole number of blocks), a message
    says how many, and copy ends by SIGINT.  (It used to die at once:
    blocks written out of order left holes of zeros below DST's end.)"""
    dst = os.path.join(tmp, "interrupted")
    cmd = [copy] + (["-e", engine] if engine else []) + \
        (["--direct"] if direct else []) + ["-d", "2", "-b", "4096", src, dst]
    for _ in range(3):
        # A copy that finished before the signal left DST whole: gone
        # first, or the next round saw its bytes at once and signalled
        # the new copy before its handler was installed (ASan in CI,
        # ci104: "exit -2, ''").
        try:
            os.unlink(dst)
        except FileNotFoundError:
            pass
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
        # Once a block is in DST the copy has begun (the handler is
        # installed just before it).
        t0 = time.monotonic()
        while p.poll() is None and time.monotonic() - t0 < 10:
            try:
                if os.path.getsize(dst) > 0:
                    break
            except OSError:
                pass
            time.sleep(0.001)
        p.send_signal(signal.SIGINT)
        try:
            out, err = p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            fail("SIGINT: copy still running 10 s after it")
        if p.returncode == 0:
            continue        # finished before the signal: again
        m = re.search(r"interrupted by SIGINT: .* holds the first (\d+) of",
                      err)
        if p.returncode != -signal.SIGINT or not m:
            fail("SIGINT during a copy: exit %d, %r (expected the end by "
                 "SIGINT after a message)" % (p.returncode, err))
        size = os.path.getsize(dst)
        with open(src, "rb") as f:
            want = f.read(size)
        with open(dst, "rb") as f:
            got = f.read()
        if int(m.group(1)) != size or size % 4096 or got != want:
            fail("SIGINT during a copy: DST (%d bytes, said %s) is not the "
                 "first bytes of SRC" % (size, m.group(1)))
        os.unlink(dst)
        return
    fail("three copies finished before SIGINT reached them")


def stdout_dst_check(copy, engine, direct, env, tmp):
    """DST that is copy's own standard output (copy SRC /dev/stdout >
    FILE, or >> FILE, or a descriptor left open on it): the report that
    ends a copy goes to stderr instead, so that FILE is exactly SRC.  (It
    was printed to stdout, over the start of the copy, or after its end
    with >>, and copy said success.)"""
    src = os.path.join(tmp, "small5000")
    out = os.path.join(tmp, "stdout-dst")
    with open(src, "rb") as f:
        want = f.read()
    cmd = [copy] + (["-e", engine] if engine else []) + \
        (["--direct"] if direct else []) + [src, "/dev/stdout"]
    for mode in ("wb", "ab"):
        with open(out, mode) as f:
            p = subprocess.run(cmd, stdout=f, stderr=subprocess.PIPE,
                               text=True, env=env, timeout=60)
        with open(out, "rb") as f:
            got = f.read()
        if p.returncode != 0 or "MB/s" not in p.stderr or got != want:
            fail("copy to /dev/stdout, a file opened %r: exit %d, %r; "
                 "the file holds %d bytes, %s SRC's %d"
                 % (mode, p.returncode, p.stderr, len(got),
                    "equal to" if got == want else "not", len(want)))
        os.unlink(out)


def main():
    copy, base, engine = sys.argv[1], sys.argv[2], sys.argv[3]
    direct = len(sys.argv) > 4 and sys.argv[4] == "--direct"
    env = dict(os.environ, PX_ENGINE="")
    os.makedirs(base, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=base) as tmp:
        src = os.path.join(tmp, "src")
        with open(src, "wb") as f:
            f.write(os.urandom(20 * 1024 * 1024 + 12345))
        if direct:
            try:
                os.close(os.open(src, os.O_RDONLY | os.O_DIRECT))
            except OSError as e:
                if e.errno == errno.EINVAL:
                    print("copy_test: %s refuses O_DIRECT; skipping" % base)
                    sys.exit(77)
                raise

        def run(args, want_ok=True, timeout=60):
            cmd = [copy] + (["-e", engine] if engine else []) + \
                (["--direct"] if direct else []) + args
            try:
                p = subprocess.run(cmd, capture_output=True, text=True,
                                   env=env, timeout=timeout)
            except subprocess.TimeoutExpired:
                fail("%s: still running after %d s" % (cmd, timeout))
            if want_ok and p.returncode != 0:
                if "cannot create the proactor" in p.stderr and (
                        "not implemented" in p.stderr.lower()
                        or "not supported" in p.stderr.lower()):
                    print("copy_test: engine %r not available: %s"
                          % (engine, p.stderr.strip()))
                    sys.exit(77)
                fail("%s: exit %d: %s" % (cmd, p.returncode, p.stderr))
            if not want_ok and p.returncode == 0:
                fail("%s: exit 0 where an error was expected" % cmd)
            return p

        want = sha(src)
        for args in ([], ["-d", "1", "-b", "64K"], ["-d", "32", "-b", "128K"],
                     ["-d", "3", "-b", "4096"]):
            dst = os.path.join(tmp, "dst")
            p = run(args + [src, dst])
            if not re.search(r"MB/s", p.stdout):
                fail("no rate printed: %r" % p.stdout)
            if direct and "O_DIRECT" not in p.stdout:
                fail("--direct copy did not use O_DIRECT: %r %r"
                     % (p.stdout, p.stderr))
            if p.stderr:
                fail("unexpected message on stderr (not a terminal): %r"
                     % p.stderr)
            if os.path.getsize(dst) != os.path.getsize(src) or sha(dst) != want:
                fail("copy with %s differs from the source" % args)
            os.unlink(dst)

        interrupt_check(copy, engine, direct, env, src, tmp)

        # Small files: empty, and less than one alignment unit.
        for size in (0, 1, 5000):
            s = os.path.join(tmp, "small%d" % size)
            with open(s, "wb") as f:
                f.write(os.urandom(size))
            d = s + ".copy"
            run([s, d])
            if sha(d) != sha(s) or os.path.getsize(d) != size:
                fail("copy of a %d-byte file differs" % size)

        if direct:
            block_device_check(run, tmp)

        stdout_dst_check(copy, engine, direct, env, tmp)

        # Errors.
        run([os.path.join(tmp, "missing"), os.path.join(tmp, "x")], want_ok=False)
        run([src, os.path.join(tmp, "no-such-dir", "x")], want_ok=False)
        run([src, src], want_ok=False)
        if sha(src) != want:
            fail("copying a file onto itself changed it")
        # A mistyped engine leaves an existing destination as it was: the
        # proactor is made before DST is opened, and truncated (it used to
        # be made after, and the copy exited 1 with DST emptied).
        keep = os.path.join(tmp, "keep")
        with open(keep, "wb") as f:
            f.write(b"precious\n")
        p = run(["-e", "no-such-engine", src, keep], want_ok=False)
        if p.returncode != 1 or "cannot create the proactor" not in p.stderr:
            fail("bad -e: exit %d, %r" % (p.returncode, p.stderr))
        with open(keep, "rb") as f:
            if f.read() != b"precious\n":
                fail("a bad -e truncated the destination")
        # So does an engine that is made but cannot read files: DST is
        # cut only before the first write (it used to be cut at the
        # open, and the first read's EOPNOTSUPP left it empty).
        p = run(["-e", "epoll ops=stream", src, keep], want_ok=False)
        if p.returncode != 1 or "not supported" not in p.stderr:
            fail("-e 'epoll ops=stream': exit %d, %r"
                 % (p.returncode, p.stderr))
        with open(keep, "rb") as f:
            if f.read() != b"precious\n":
                fail("an engine that cannot read files emptied the "
                     "destination")
        # SRC again under another name (the same path, a hard link, a
        # symbolic link) is refused and left whole: DST is opened
        # without O_TRUNC and cut only after it is compared with SRC.
        same = os.path.join(tmp, "same")
        with open(same, "wb") as f:
            f.write(b"the only copy\n")
        os.link(same, os.path.join(tmp, "same-hard"))
        os.symlink(same, os.path.join(tmp, "same-sym"))
        for other in (same, os.path.join(tmp, "same-hard"),
                      os.path.join(tmp, "same-sym")):
            p = run([same, other], want_ok=False)
            if p.returncode != 1 or "are the same file" not in p.stderr:
                fail("SRC onto %s: exit %d, %r" % (os.path.basename(other),
                                                   p.returncode, p.stderr))
            with open(same, "rb") as f:
                if f.read() != b"the only copy\n":
                    fail("SRC onto %s changed SRC" % os.path.basename(other))
        # A FIFO as the source is refused at once (its open used to wait
        # for a writer), and so is a block size too large to hold.
        fifo = os.path.join(tmp, "fifo")
        os.mkfifo(fifo)
        p = run([fifo, os.path.join(tmp, "x")], want_ok=False, timeout=10)
        if p.returncode != 1 or "not a regular file" not in p.stderr:
            fail("FIFO source: exit %d, %r" % (p.returncode, p.stderr))
        # A FIFO as the destination: refused at once whether or not a
        # reader has it open (the open used to wait for a reader, and
        # with one, io_uring wrote the blocks as a stream, out of order,
        # and said success); so is a socket's name.
        p = run([src, fifo], want_ok=False, timeout=10)
        if p.returncode != 1 or "needs a file" not in p.stderr:
            fail("FIFO destination: exit %d, %r" % (p.returncode, p.stderr))
        rd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        try:
            p = run([src, fifo], want_ok=False, timeout=10)
        finally:
            os.close(rd)
        if p.returncode != 1 or "needs a file" not in p.stderr:
            fail("FIFO destination with a reader: exit %d, %r"
                 % (p.returncode, p.stderr))
        # A file whose size says 0 but which has data (/proc) is refused,
        # not copied empty with success.
        if os.path.exists("/proc/self/status"):
            out = os.path.join(tmp, "status")
            p = run(["/proc/self/status", out], want_ok=False)
            if p.returncode != 1 or "size says 0" not in p.stderr:
                fail("/proc source: exit %d, %r" % (p.returncode, p.stderr))
            if os.path.exists(out):
                fail("/proc source: the destination was created")
        p = run(["-b", "17592186044417M", src, os.path.join(tmp, "x")],
                want_ok=False)
        if p.returncode != 2 or "bad block size" not in p.stderr:
            fail("huge -b: exit %d, %r" % (p.returncode, p.stderr))
    print("copy_test: engine %r%s: all copies identical"
          % (engine or "default", " with O_DIRECT" if direct else ""))


if __name__ == "__main__":
    main()
