package integration

import (
	"strings"
	"testing"

	"github.com/cellblock/cellblock/internal/api"
)

// TestOrdinaryPython runs everyday Python under the seccomp allowlist and
// the limits; each feature prints OK <name> or the test fails.
func TestOrdinaryPython(t *testing.T) {
	d := daemon(t)
	features := map[string]string{
		"threads": `
import threading
out = []
ts = [threading.Thread(target=out.append, args=(i,)) for i in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
assert sorted(out) == list(range(8))`,
		"fork_pool": `
import multiprocessing as mp
with mp.get_context("fork").Pool(2) as p:
    assert p.map(abs, [-1, -2, 3]) == [1, 2, 3]`,
		"spawn_pool": `
import multiprocessing as mp
if __name__ == "__main__":
    with mp.get_context("spawn").Pool(2) as p:
        assert p.map(abs, [-1, -2, 3]) == [1, 2, 3]`,
		"forkserver_pool": `
import multiprocessing as mp
if __name__ == "__main__":
    with mp.get_context("forkserver").Pool(2) as p:
        assert p.map(abs, [-4]) == [4]`,
		"shared_memory": `
from multiprocessing import shared_memory
shm = shared_memory.SharedMemory(create=True, size=1 << 20)
shm.buf[:3] = b"abc"
other = shared_memory.SharedMemory(name=shm.name)
assert bytes(other.buf[:3]) == b"abc"
other.close(); shm.close(); shm.unlink()`,
		"subprocess": `
import subprocess, sys
r = subprocess.run([sys.executable, "-c", "print('child')"], capture_output=True, text=True, check=True)
assert r.stdout == "child\n"
assert subprocess.run(["/usr/bin/python3", "-c", "import sys; sys.exit(3)"]).returncode == 3`,
		"asyncio": `
import asyncio
async def handle(r, w):
    w.write(await r.read(5)); await w.drain(); w.close()
async def main():
    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(b"hello"); await w.drain()
    assert await r.read(5) == b"hello"
    w.close(); srv.close()
    await asyncio.gather(*(asyncio.sleep(0.01) for _ in range(100)))
asyncio.run(main())`,
		"sqlite": `
import sqlite3
db = sqlite3.connect("/tmp/t.db")
db.execute("create table t (x)"); db.executemany("insert into t values (?)", [(i,) for i in range(1000)]); db.commit()
assert db.execute("select sum(x) from t").fetchone()[0] == 499500`,
		"mmap": `
import mmap
with open("/tmp/m", "wb") as f: f.write(b"\0" * 4096)
with open("/tmp/m", "r+b") as f:
    m = mmap.mmap(f.fileno(), 0); m[:5] = b"hello"; m.flush(); m.close()
anon = mmap.mmap(-1, 1 << 20); anon[0] = 1`,
		"ssl": `
import ssl, hashlib
ctx = ssl.create_default_context()
assert ctx.verify_mode == ssl.CERT_REQUIRED
assert hashlib.sha256(b"x").hexdigest().startswith("2d711642")`,
		"ctypes": `
import ctypes, ctypes.util
libc = ctypes.CDLL(None)
assert libc.getpid() > 0
buf = ctypes.create_string_buffer(16); libc.strcpy(buf, b"hi"); assert buf.value == b"hi"
cb = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(lambda x: x * 2)
assert cb(21) == 42`,
		"select_epoll": `
import select, os, selectors
r, w = os.pipe(); os.write(w, b"x")
assert select.select([r], [], [], 1)[0] == [r]
ep = select.epoll(); ep.register(r, select.EPOLLIN); assert ep.poll(1)
p = select.poll(); p.register(r); assert p.poll(1000)
sel = selectors.DefaultSelector(); sel.register(r, selectors.EVENT_READ); assert sel.select(1)`,
		"itimers": `
import signal, time
fired = []
signal.signal(signal.SIGALRM, lambda *a: fired.append(1))
signal.setitimer(signal.ITIMER_REAL, 0.05)
time.sleep(0.3)
assert fired
signal.signal(signal.SIGVTALRM, lambda *a: fired.append(2))
signal.setitimer(signal.ITIMER_VIRTUAL, 0.01)
t = time.process_time()
while 2 not in fired and time.process_time() - t < 2: pass
assert 2 in fired`,
		"unicode": `
print("héllo wörld ✓ 日本語 🐍")`,
		"random_time_misc": `
import os, random, time, uuid, tempfile, getpass, locale, zlib, lzma, bz2, json, decimal
assert len(os.urandom(16)) == 16
uuid.uuid4(); time.monotonic(); time.time()
with tempfile.TemporaryDirectory() as d: open(d + "/f", "w").write("x")
assert getpass.getuser() in ("sandbox", "nobody")
assert os.cpu_count() >= 1
assert zlib.decompress(zlib.compress(b"x")) == b"x"`,
	}
	for name, code := range features {
		t.Run(name, func(t *testing.T) {
			res := run(t, d, &api.RunRequest{Code: code + "\nprint('OK " + name + "')\n", TimeoutMs: 60000})
			if res.Error != nil || res.ExitCode != 0 || !strings.Contains(res.Stdout, "OK "+name) {
				t.Fatalf("%s failed: exit %d error %+v\nstdout:\n%s\nstderr:\n%s", name, res.ExitCode, res.Error, res.Stdout, res.Stderr)
			}
		})
	}
}
