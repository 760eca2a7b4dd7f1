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


def run(code, argv0="-c", argv=(), mode="script", env=None, start_env=None, inputs=None,
        limits=None, stdin=b"", cwd=None, timeout=60, python=None, send=True, raw_out=None):
    """Run code through the runner; returns a Result."""
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
