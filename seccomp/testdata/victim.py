"""Workload run under cellblock's seccomp filter by victim_test.go.

Usage: victim.py MODE [ARG]

  workload          exercise what ordinary CPython programs do; all must work
  denied PROBES     call every syscall in PROBES (a JSON file written by the
                    test) and check each fails with the expected errno, plus
                    the argument-filtered rules (clone, socket, mknod, ...)
  foreign-abi       check that i386 (int $0x80) and x32 syscalls kill the
                    caller with SIGSYS
  ia32-available    without the filter: check that int $0x80 works at all

Each mode prints a marker line when everything passed and exits 0; any
failure raises or exits non-zero. x86_64 only. Compatible with CPython 3.8+.
"""

import ctypes
import errno
import json
import os
import sys
import tempfile

MARKER = "CELLBLOCK-SECCOMP-OK"

# x86_64 syscall numbers used directly below.
NR_GETPID = 39
NR_SOCKET = 41
NR_CLONE = 56
NR_PERSONALITY = 135
NR_MKNODAT = 259
NR_PRLIMIT64 = 302

X32_SYSCALL_BIT = 0x40000000

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def raw_syscall(nr, *args):
    """Returns (result, errno) of syscall(nr, *args), args as C longs."""
    ctypes.set_errno(0)
    res = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    return res, ctypes.get_errno()


def log(*a):
    print(*a, flush=True)


# ---------------------------------------------------------------- workload

def _square(x):
    return x * x


def check_threads():
    import threading
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=4) as ex:
        assert list(ex.map(_square, range(20))) == [x * x for x in range(20)]
    lock = threading.Lock()
    cond = threading.Condition(lock)
    done = []

    def worker():
        with cond:
            done.append(1)
            cond.notify()

    t = threading.Thread(target=worker)
    with cond:
        t.start()
        cond.wait_for(lambda: done, timeout=10)
    t.join()
    assert done


def check_multiprocessing():
    import multiprocessing as mp

    for method in ("fork", "spawn", "forkserver"):
        ctx = mp.get_context(method)
        with ctx.Pool(2) as pool:
            assert pool.map(_square, range(10)) == [x * x for x in range(10)], method
        q = ctx.Queue()
        p = ctx.Process(target=q.put, args=(method,))
        p.start()
        assert q.get(timeout=20) == method
        p.join()
        assert p.exitcode == 0, (method, p.exitcode)
    with mp.get_context("spawn").Manager() as m:
        d = m.dict()
        d["k"] = 1
        assert d["k"] == 1


def check_shared_memory():
    from multiprocessing import shared_memory

    shm = shared_memory.SharedMemory(create=True, size=4096)
    try:
        shm.buf[:5] = b"hello"
        other = shared_memory.SharedMemory(name=shm.name)
        assert bytes(other.buf[:5]) == b"hello"
        other.close()
    finally:
        shm.close()
        shm.unlink()
    fd = os.memfd_create("cellblock")
    os.ftruncate(fd, 4096)
    os.close(fd)


def check_subprocess():
    import subprocess

    subprocess.run(["/bin/true"], check=True)
    out = subprocess.run([sys.executable, "-c", "print('child')"],
                         check=True, stdout=subprocess.PIPE).stdout
    assert out.strip() == b"child"
    # close_fds with an extra fd open exercises close_range.
    r, w = os.pipe()
    subprocess.run([sys.executable, "-c", "pass"], check=True, close_fds=True)
    os.close(r)
    os.close(w)
    # glibc's posix_spawn tries clone3 first and must fall back to clone.
    pid = os.posix_spawn("/bin/true", ["/bin/true"], {})
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 7
    if hasattr(os, "pidfd_open"):
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        pidfd = os.pidfd_open(p.pid)
        import signal
        signal.pidfd_send_signal(pidfd, signal.SIGTERM)
        p.wait(timeout=10)
        os.close(pidfd)


def check_asyncio():
    import asyncio

    async def main():
        async def handle(reader, writer):
            data = await reader.readline()
            writer.write(data.upper())
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"ping\n")
        await writer.drain()
        assert await reader.readline() == b"PING\n"
        writer.close()
        server.close()
        await server.wait_closed()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "print(42)", stdout=asyncio.subprocess.PIPE)
        out, _ = await proc.communicate()
        assert out.strip() == b"42"
        await asyncio.sleep(0.01)

    asyncio.run(main())


def check_sockets():
    import socket

    a, b = socket.socketpair()
    a.sendall(b"x")
    assert b.recv(1) == b"x"
    a.close()
    b.close()
    u = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    u.close()
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.sendto(b"u", udp.getsockname())
    assert udp.recvfrom(1)[0] == b"u"
    udp.close()
    try:
        s6 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        s6.close()
    except OSError as e:
        if e.errno != errno.EAFNOSUPPORT:
            raise
    socket.getaddrinfo("127.0.0.1", 80)
    socket.getaddrinfo("localhost", 80)
    socket.if_nameindex()  # netlink (NETLINK_ROUTE)


def check_sqlite(tmp):
    import sqlite3

    path = os.path.join(tmp, "db.sqlite")
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("CREATE TABLE t (x INTEGER)")
    with con:
        con.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(100)])
    assert con.execute("SELECT sum(x) FROM t").fetchone()[0] == 4950
    con.close()
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode=DELETE")
    with con:
        con.execute("DELETE FROM t")
    con.close()


def check_files(tmp):
    import mmap
    import shutil

    p = os.path.join(tmp, "f")
    with open(p, "wb") as f:
        f.write(b"\0" * 8192)
        f.flush()
        os.fsync(f.fileno())
    with open(p, "r+b") as f:
        m = mmap.mmap(f.fileno(), 0)
        m[:4] = b"abcd"
        m.flush()
        m.resize(16384)
        m.close()
    anon = mmap.mmap(-1, 1 << 20)
    anon.madvise(mmap.MADV_DONTNEED)
    anon.close()
    shutil.copy2(p, p + ".copy")  # sendfile, xattrs, utimensat
    os.rename(p + ".copy", p + ".moved")
    os.link(p, p + ".hard")
    os.symlink(p, p + ".sym")
    assert os.readlink(p + ".sym") == p
    os.chmod(p, 0o600)
    os.chown(p, os.getuid(), os.getgid())
    os.utime(p, None)
    os.truncate(p, 100)
    os.mkdir(os.path.join(tmp, "d"))
    os.rmdir(os.path.join(tmp, "d"))
    os.mkfifo(os.path.join(tmp, "fifo"))
    st = os.stat(p)
    assert st.st_size == 100
    os.statvfs(tmp)
    list(os.scandir(tmp))
    with open(p, "rb") as src, open(p + ".cfr", "wb") as dst:
        if hasattr(os, "copy_file_range"):
            os.copy_file_range(src.fileno(), dst.fileno(), 100)
    fd = os.open(p, os.O_RDWR)
    os.posix_fallocate(fd, 0, 4096)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
    os.pwrite(fd, b"zz", 10)
    assert os.pread(fd, 2, 10) == b"zz"
    import fcntl
    fcntl.flock(fd, fcntl.LOCK_EX)
    fcntl.lockf(fd, fcntl.LOCK_UN)
    os.close(fd)
    tempfile.NamedTemporaryFile(dir=tmp).close()


def check_ssl():
    import hashlib
    import ssl

    ctx = ssl.create_default_context()
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    hashlib.sha256(b"x").hexdigest()


def check_ctypes():
    assert libc.getpid() == os.getpid()
    assert libc.strlen(b"hello") == 5
    # A Python callback called from C needs a libffi closure, i.e. writable
    # then executable memory.
    cmp_t = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int),
                             ctypes.POINTER(ctypes.c_int))
    arr = (ctypes.c_int * 5)(5, 1, 4, 2, 3)
    libc.qsort(arr, len(arr), ctypes.sizeof(ctypes.c_int),
               cmp_t(lambda a, b: a[0] - b[0]))
    assert list(arr) == [1, 2, 3, 4, 5]


def check_select():
    import select
    import selectors

    r, w = os.pipe()
    os.write(w, b"x")
    assert select.select([r], [], [], 1)[0] == [r]
    ep = select.epoll()
    ep.register(r, select.EPOLLIN)
    assert ep.poll(1)
    ep.close()
    p = select.poll()
    p.register(r, select.POLLIN)
    assert p.poll(1000)
    with selectors.DefaultSelector() as sel:
        sel.register(r, selectors.EVENT_READ)
        assert sel.select(1)
    os.close(r)
    os.close(w)
    if hasattr(os, "eventfd"):
        fd = os.eventfd(0)
        os.eventfd_write(fd, 3)
        assert os.eventfd_read(fd) == 3
        os.close(fd)


def check_signals_and_time():
    import faulthandler
    import signal
    import time

    faulthandler.enable()
    fired = []
    signal.signal(signal.SIGALRM, lambda *a: fired.append(1))
    signal.setitimer(signal.ITIMER_REAL, 0.01)
    deadline = time.monotonic() + 5
    while not fired and time.monotonic() < deadline:
        time.sleep(0.005)
    assert fired
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.getitimer(signal.ITIMER_REAL)
    signal.alarm(0)
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
    os.kill(os.getpid(), signal.SIGUSR1)
    assert signal.sigtimedwait([signal.SIGUSR1], 1) is not None
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGUSR1])
    time.process_time()
    time.thread_time()
    time.clock_getres(time.CLOCK_MONOTONIC)
    os.times()


def check_process_info():
    import platform
    import resource

    os.getrandom(16)
    os.urandom(16)
    os.sched_getaffinity(0)
    os.cpu_count()
    os.uname()
    platform.platform()
    resource.getrusage(resource.RUSAGE_SELF)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    resource.prlimit(0, resource.RLIMIT_NOFILE)
    os.getpgid(0)
    os.getsid(0)
    os.getgroups()
    os.getresuid()
    os.getresgid()
    os.umask(os.umask(0o22))
    os.getcwd()
    os.nice(0)
    os.sched_yield()
    os.getloadavg()


def workload():
    checks = [
        ("threads", check_threads),
        ("multiprocessing", check_multiprocessing),
        ("shared_memory", check_shared_memory),
        ("subprocess", check_subprocess),
        ("asyncio", check_asyncio),
        ("sockets", check_sockets),
        ("ssl", check_ssl),
        ("ctypes", check_ctypes),
        ("select", check_select),
        ("signals_and_time", check_signals_and_time),
        ("process_info", check_process_info),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        checks.append(("sqlite", lambda: check_sqlite(tmp)))
        checks.append(("files", lambda: check_files(tmp)))
        for name, fn in checks:
            fn()
            log("ok", name)
    log("unicode: héllo wörld ✓ 世界 🐍")
    log(MARKER)


# ---------------------------------------------------------------- denied

CLONE_NEW = {
    "CLONE_NEWTIME": 0x80,
    "CLONE_NEWNS": 0x20000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}
# CLONE_THREAD without CLONE_SIGHAND is invalid, so the kernel refuses these
# clones with EINVAL before doing anything: only the filter can say EPERM.
CLONE_THREAD = 0x10000


def expect_errno(failures, what, nr, args, want):
    res, err = raw_syscall(nr, *args)
    if res != -1 or err != want:
        failures.append("%s: got result %d errno %s, want errno %s" % (
            what, res, errno.errorcode.get(err, err), errno.errorcode[want]))


def denied(probes_path):
    import socket

    with open(probes_path) as f:
        probes = json.load(f)
    failures = []
    for p in probes:
        expect_errno(failures, p["name"], p["nr"], p["args"], p["errno"])

    for flag, bit in sorted(CLONE_NEW.items()):
        expect_errno(failures, "clone(%s)" % flag, NR_CLONE,
                     [CLONE_THREAD | bit, 0, 0, 0, 0], errno.EPERM)
    # Without a CLONE_NEW* flag the filter lets clone through to the kernel.
    expect_errno(failures, "clone(CLONE_THREAD) reaches the kernel", NR_CLONE,
                 [CLONE_THREAD, 0, 0, 0, 0], errno.EINVAL)

    af_vsock, af_packet, af_alg = 40, 17, 38
    netlink_netfilter = 12
    for what, args in [
        ("socket(AF_VSOCK)", [af_vsock, socket.SOCK_STREAM, 0]),
        ("socket(AF_PACKET)", [af_packet, socket.SOCK_RAW, 0]),
        ("socket(AF_ALG)", [af_alg, socket.SOCK_SEQPACKET, 0]),
        ("socket(AF_INET, SOCK_RAW)", [socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP]),
        ("socket(AF_INET6, SOCK_RAW)", [socket.AF_INET6, socket.SOCK_RAW, 58]),
        ("socket(AF_NETLINK, NETLINK_NETFILTER)", [socket.AF_NETLINK, socket.SOCK_RAW, netlink_netfilter]),
        ("socket(AF_UNIX with upper bits)", [(1 << 32) | socket.AF_UNIX, socket.SOCK_STREAM, 0]),
    ]:
        expect_errno(failures, what, NR_SOCKET, args, errno.EPERM)
    for fam, typ, proto in [
        (socket.AF_UNIX, socket.SOCK_STREAM, 0),
        (socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC, 0),
        (socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_NONBLOCK, 0),
        (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP),
        (socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP),
        (socket.AF_INET6, socket.SOCK_STREAM | socket.SOCK_CLOEXEC, socket.IPPROTO_TCP),
        (socket.AF_INET6, socket.SOCK_DGRAM, 0),
        (socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, 0),
    ]:
        try:
            socket.socket(fam, typ, proto).close()
        except OSError as e:
            if fam == socket.AF_INET6 and e.errno == errno.EAFNOSUPPORT:
                continue  # a host without IPv6: the kernel, not the filter
            failures.append("socket(%d, %d, %d) should work: %s" % (fam, typ, proto, e))

    with tempfile.TemporaryDirectory() as tmp:
        at_fdcwd = -100
        s_ifchr = 0o020000
        dev = os.path.join(tmp, "null").encode()
        buf = ctypes.create_string_buffer(dev)
        expect_errno(failures, "mknodat(S_IFCHR)", NR_MKNODAT,
                     [at_fdcwd, ctypes.addressof(buf), s_ifchr | 0o600, os.makedev(1, 3)],
                     errno.EPERM)
        os.mkfifo(os.path.join(tmp, "fifo"))

    for value in (0, 0xFFFFFFFF):
        res, err = raw_syscall(NR_PERSONALITY, value)
        if res == -1:
            failures.append("personality(%#x) should work: errno %d" % (value, err))

    # prlimit64: reading any process is allowed, writing only for pid 0.
    rlimit_nofile = 7
    old = (ctypes.c_uint64 * 2)()
    res, err = raw_syscall(NR_PRLIMIT64, os.getpid(), rlimit_nofile, 0, ctypes.addressof(old))
    if res != 0:
        failures.append("prlimit64(getpid(), read) should work: errno %d" % err)
    else:
        # Write back the value just read.
        res, err = raw_syscall(NR_PRLIMIT64, 0, rlimit_nofile, ctypes.addressof(old), 0)
        if res != 0:
            failures.append("prlimit64(0, write same value) should work: errno %d" % err)
    expect_errno(failures, "prlimit64(other pid, write)", NR_PRLIMIT64,
                 [os.getppid(), rlimit_nofile, -1, 0], errno.EPERM)

    for f in failures:
        log("FAIL", f)
    if failures:
        sys.exit(1)
    log("checked %d denied syscalls" % len(probes))
    log(MARKER)


# ---------------------------------------------------------------- foreign ABIs

# Runs machine code that returns eax as an int and prints the result.
CALL_CODE = (
    "import ctypes, mmap\n"
    "buf = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\n"
    "buf.write(%r)\n"
    "fn = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(buf)))\n"
    "print(fn(), flush=True)\n"
)
# mov eax, 20 (getpid in the i386 table); int 0x80; ret
IA32_GETPID = CALL_CODE % b"\xb8\x14\x00\x00\x00\xcd\x80\xc3"
# mov eax, 39 (getpid in the x86_64 table); syscall; ret
NATIVE_GETPID = CALL_CODE % b"\xb8\x27\x00\x00\x00\x0f\x05\xc3"
X32_GETPID = (
    "import ctypes\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "print(libc.syscall(ctypes.c_long(%d)), ctypes.get_errno(), flush=True)\n"
    % (X32_SYSCALL_BIT | NR_GETPID)
)
NO_CORE = "import resource; resource.setrlimit(resource.RLIMIT_CORE, (0, 0))\n"


def run_child(code):
    import subprocess

    return subprocess.run([sys.executable, "-c", NO_CORE + code],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def foreign_abi(check_ia32):
    import signal

    cases = [("x32 getpid", X32_GETPID)]
    if check_ia32:
        cases.append(("i386 int $0x80 getpid", IA32_GETPID))
    failures = []
    for what, code in cases:
        r = run_child(code)
        if r.returncode != -signal.SIGSYS:
            failures.append("%s: exit %d, want killed by SIGSYS; output %r" % (
                what, r.returncode, r.stdout))
        else:
            log("killed by SIGSYS:", what)
    # The same code path with the native ABI still works under the filter.
    r = run_child(NATIVE_GETPID)
    if r.returncode != 0:
        failures.append("native control child failed: %r" % r.stdout)
    for f in failures:
        log("FAIL", f)
    if failures:
        sys.exit(1)
    log(MARKER)


def ia32_available():
    r = run_child(NATIVE_GETPID)
    if r.returncode != 0 or not r.stdout.strip().isdigit():
        # The harness itself is broken, not the kernel.
        log("native syscall through the same stub failed: exit %d output %r" % (
            r.returncode, r.stdout))
        sys.exit(1)
    r = run_child(IA32_GETPID)
    if r.returncode == 0 and r.stdout.strip().isdigit():
        log(MARKER)
    else:
        log("int $0x80 unavailable: exit %d output %r" % (r.returncode, r.stdout))
        sys.exit(2)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "workload":
        workload()
    elif mode == "denied":
        denied(sys.argv[2])
    elif mode == "foreign-abi":
        foreign_abi(check_ia32=os.environ.get("CELLBLOCK_TEST_NO_IA32") != "1")
    elif mode == "ia32-available":
        ia32_available()
    else:
        sys.exit("unknown mode %r" % mode)
