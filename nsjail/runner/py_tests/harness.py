"""Run cellblock's runner as the jail's init will, without a jail.

The runner is started with a socketpair's end as its channel; the test
sends the run message and reads every frame until the last holder of the
runner's end has closed it.
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
PY_DIR = os.path.join(os.path.dirname(HERE), "py")
RUNNER = os.path.join(PY_DIR, "_cellblock_runner.py")
PYTHON = sys.executable
MPL = "module://cellblock._mpl_backend"


def base_env(**extra):
    """The environment a jail gives: ours, minus anything PYTHON*, with
    PYTHONPATH at the runner's directory and MPLBACKEND at its backend."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PYTHON") and not k.startswith("CELLBLOCK")}
    env["PYTHONPATH"] = PY_DIR
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # no __pycache__ in the source tree
    env["MPLBACKEND"] = MPL
    env["LC_ALL"] = "C.UTF-8"
    env.pop("LANG", None)
    env.pop("LC_CTYPE", None)
    env.update(extra)
    return env


def frame(obj):
    data = json.dumps(obj).encode()
    return len(data).to_bytes(4, "big") + data


class Result:
    def __init__(self, stdout, stderr, rc, frames, ready_ms=None):
        self.stdout = stdout
        self.stderr = stderr
        self.rc = rc
        self.frames = frames
        self.ready_ms = ready_ms

    def of(self, type_):
        return [f for f in self.frames if f.get("type") == type_]

    def one(self, type_):
        fs = self.of(type_)
        if len(fs) != 1:
            raise AssertionError("want one %s frame, got %d: %r" % (type_, len(fs), self.frames))
        return fs[0]

    def __repr__(self):
        return "Result(rc=%r, stdout=%r, stderr=%r, frames=%r)" % (
            self.rc, self.stdout[:2000], self.stderr[:2000], self.frames[:20])


def read_frames(sock, out, raw_out=None):
    buf = b""
    while True:
        try:
            b = sock.recv(1 << 20)
        except OSError:
            b = b""
        if not b:
            break
        buf += b
    if raw_out is not None:
        raw_out.append(buf)
    i = 0
    while i + 4 <= len(buf):
        n = int.from_bytes(buf[i:i + 4], "big")
        if i + 4 + n > len(buf):
            out.append({"type": "<truncated>"})
            return
        try:
            out.append(json.loads(buf[i + 4:i + 4 + n].decode("utf-8")))
        except ValueError as e:
            out.append({"type": "<garbage>", "error": str(e)})
        i += 4 + n


def file_frames(path, data, chunk=1 << 20):
    """The daemon's file frames for data at path (PROTOCOL.md, "Files")."""
    import base64
    frames = []
    off = 0
    while True:
        part = data[off:off + chunk]
        msg = {"type": "file", "path": path, "offset": off, "data": base64.b64encode(part).decode()}
        off += len(part)
        if off == len(data):
            msg["end"] = True
        frames.append(frame(msg))
        if off == len(data):
            return frames


def run(code, argv0="-c", argv=(), mode="script", env=None, start_env=None, inputs=None,
        limits=None, stdin=b"", cwd=None, timeout=60, python=None, send=True, raw_out=None, files=()):
    """Run code through the runner, after writing files ((path, bytes)
    pairs) with file frames; returns a Result."""
    env = base_env() if env is None else env
    start_env = dict(base_env() if start_env is None else start_env)
    parent, child = socket.socketpair()
    start_env["CELLBLOCK_RUNNER_FD"] = str(child.fileno())
    frames = []
    reader = threading.Thread(target=read_frames, args=(parent, frames, raw_out))
    p = subprocess.Popen([python or PYTHON, RUNNER], env=start_env, cwd=cwd,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         pass_fds=(child.fileno(),))
    child.close()
    reader.start()
    if send:
        msg = {"type": "run", "mode": mode, "code": code, "argv0": argv0, "argv": list(argv),
               "env": env}
        if inputs is not None:
            msg["inputs"] = inputs
        if limits is not None:
            msg["limits"] = limits
        try:
            for path, data in files:
                for f in file_frames(path, data):
                    parent.sendall(f)
            parent.sendall(frame(msg))
        except OSError:
            pass
    else:
        parent.shutdown(socket.SHUT_WR)
    try:
        out, err = p.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
    try:
        parent.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    reader.join(timeout)
    parent.close()
    return Result(out, err, p.returncode, frames)


def run_plain(code, argv0="-c", argv=(), env=None, stdin=b"", cwd=None, timeout=60, python=None):
    """Run code with python itself, as `python FILE args`, -c or -."""
    env = base_env() if env is None else env
    if argv0 == "-c":
        cmd = [python or PYTHON, "-c", code]
    elif argv0 == "-":
        cmd = [python or PYTHON, "-"]
        stdin = code.encode("utf-8", "surrogateescape")
    else:
        path = argv0 if os.path.isabs(argv0) else os.path.join(cwd or os.getcwd(), argv0)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(code.encode("utf-8", "surrogateescape"))
        cmd = [python or PYTHON, argv0]
    p = subprocess.Popen(cmd + list(argv), env=env, cwd=cwd, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = p.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
    return Result(out, err, p.returncode, [])


def tempdir():
    return tempfile.TemporaryDirectory(prefix="cellblock-runner-test-")


# Sessions (PROTOCOL.md, "Sessions"): the runner is sent {"type": "session"}
# in place of a run, says "idle", then carries out run frames, each with
# the run's stdin, stdout and stderr attached (SCM_RIGHTS), until the
# channel ends.

class Session:
    """A runner in session mode over a socketpair. Use as a context
    manager, or call close()."""

    def __init__(self, env=None, start_env=None, limits=None, python=None, timeout=60, cwd=None):
        import queue
        self.env = base_env() if env is None else env
        start_env = dict(base_env() if start_env is None else start_env)
        self.sock, child = socket.socketpair()
        start_env["CELLBLOCK_RUNNER_FD"] = str(child.fileno())
        self.frames = queue.Queue()  # every frame, then None at the channel's end
        self.raw = []  # every frame as it came, for the record
        self.stray = []  # frames that came outside a run waited for
        self.ended = False
        self.seq = 0
        # The runner's own stderr: it says why it fails before its session
        # begins (after, descriptors 0 to 2 are /dev/null).
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([python or PYTHON, RUNNER], env=start_env, stdin=subprocess.DEVNULL, cwd=cwd,
                                     stdout=subprocess.DEVNULL, stderr=self.log, pass_fds=(child.fileno(),))
        child.close()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        msg = {"type": "session", "env": self.env}
        if limits is not None:
            msg["limits"] = limits
        self.send(msg)
        self.ready = self.expect("ready", timeout)
        self.idle = self.expect("idle", timeout)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _read(self):
        import json as _json
        buf = b""
        while True:
            try:
                b = self.sock.recv(1 << 20)
            except OSError:
                b = b""
            if not b:
                break
            buf += b
            while len(buf) >= 4:
                n = int.from_bytes(buf[:4], "big")
                if len(buf) < 4 + n:
                    break
                raw, buf = buf[4:4 + n], buf[4 + n:]
                self.raw.append(raw)
                try:
                    self.frames.put(_json.loads(raw.decode("utf-8")))
                except ValueError as e:
                    self.frames.put({"type": "<garbage>", "error": str(e)})
        if buf:
            self.frames.put({"type": "<truncated>"})
        self.frames.put(None)

    def next_frame(self, timeout=60):
        """The next frame; None once the channel has ended."""
        import queue
        if self.ended:
            return None
        try:
            f = self.frames.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError("no frame from the runner in %ss; log %r" % (timeout, self.stderr()))
        if f is None:
            self.ended = True
        return f

    def expect(self, type_, timeout=60):
        """Frames up to the first of type_, which is returned; the others
        go to stray."""
        while True:
            f = self.next_frame(timeout)
            if f is None:
                raise AssertionError("the channel ended before %r; rc %r, stray %r, log %r" % (
                    type_, self.proc.poll(), self.stray, self.stderr()))
            if f.get("type") == type_:
                return f
            self.stray.append(f)

    def send(self, msg, fds=()):
        """msg (a dict, or bytes sent as they are) with fds attached."""
        import array
        data = msg if isinstance(msg, bytes) else frame(msg)
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", list(fds)))] if fds else []
        n = self.sock.sendmsg([data], anc)
        if n < len(data):
            self.sock.sendall(data[n:])

    def start(self, code, stdin=b"", mode="cell", seq=None, inputs=None, limits=None, filename=None, **extra):
        """Send a run; returns its SessionRun, in progress. Its filename
        is the daemon's, "<cell SEQ>", unless given."""
        if seq is None:
            self.seq += 1
            seq = self.seq
        msg = {"type": "run", "seq": seq, "mode": mode, "code": code,
               "filename": "<cell %d>" % seq if filename is None else filename}
        if inputs is not None:
            msg["inputs"] = inputs
        if limits is not None:
            msg["limits"] = limits
        msg.update(extra)
        return SessionRun(self, seq, msg, stdin)

    def run(self, code, stdin=b"", timeout=60, **kw):
        """Carry out a run to its done (or the channel's end)."""
        return self.start(code, stdin=stdin, **kw).wait(timeout)

    def stderr(self):
        if self.log.closed:
            return self.log_text
        self.log.seek(0)
        return self.log.read()

    def close(self, timeout=30):
        """End the channel; returns the runner's exit status."""
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.reader.join(timeout)
        self.sock.close()
        if not self.log.closed:
            self.log_text = self.stderr()
            self.log.close()
        return rc


class SessionRun:
    """One run of a Session: its frames from started to done, its output
    read from its own pipes to their end."""

    def __init__(self, sess, seq, msg, stdin):
        self.sess = sess
        self.seq = seq
        self.frames = []
        self.done = None
        self.started = None
        self.vars = None
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.eof = False  # both output pipes reached their end
        self._cond = threading.Condition()
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            sess.send(msg, (in_r, out_w, err_w))
        finally:
            for fd in (in_r, out_w, err_w):
                os.close(fd)
        self._threads = [threading.Thread(target=self._drain, args=(out_r, self.stdout), daemon=True),
                         threading.Thread(target=self._drain, args=(err_r, self.stderr), daemon=True)]
        self._feeder = threading.Thread(target=self._feed, args=(in_w, stdin), daemon=True)
        for t in self._threads + [self._feeder]:
            t.start()

    def _feed(self, fd, data):
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except OSError:
            pass
        finally:
            os.close(fd)

    def _drain(self, fd, into):
        try:
            while True:
                b = os.read(fd, 65536)
                if not b:
                    break
                with self._cond:
                    into += b
                    self._cond.notify_all()
        finally:
            os.close(fd)

    def wait_output(self, marker, timeout=60):
        """Wait until stdout has marker."""
        with self._cond:
            if not self._cond.wait_for(lambda: marker in self.stdout, timeout):
                raise AssertionError("no %r on stdout in %ss: %r" % (marker, timeout, bytes(self.stdout)))

    def wait(self, timeout=60):
        """Frames up to this run's done, or the channel's end; then the
        output to its end (eof says whether it came)."""
        sess = self.sess
        while self.started is None:
            f = sess.next_frame(timeout)
            if f is None:
                break
            if f.get("type") == "started" and f.get("seq") == self.seq:
                self.started = f
            else:
                sess.stray.append(f)
        while self.started is not None and self.done is None:
            f = sess.next_frame(timeout)
            if f is None:
                break
            self.frames.append(f)
            if f.get("type") == "vars" and f.get("seq") == self.seq:
                self.vars = f
            elif f.get("type") == "done":
                self.done = f
        for t in self._threads:
            t.join(10)
        self.eof = not any(t.is_alive() for t in self._threads)
        return self

    def of(self, type_):
        return [f for f in self.frames if f.get("type") == type_]

    def one(self, type_):
        fs = self.of(type_)
        if len(fs) != 1:
            raise AssertionError("want one %s frame, got %d: %r" % (type_, len(fs), self))
        return fs[0]

    def value(self):
        """The repr of the run's value; None without one."""
        vs = self.of("value")
        return vs[0]["value"]["repr"] if vs else None

    def exit_code(self):
        return None if self.done is None else self.done.get("exit_code")

    def __repr__(self):
        return "SessionRun(seq=%r, done=%r, stdout=%r, stderr=%r, frames=%r)" % (
            self.seq, self.done, bytes(self.stdout[:2000]), bytes(self.stderr[:2000]), self.frames[:20])
