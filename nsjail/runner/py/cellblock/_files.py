# The runner's side of "file" frames (see nsjail/runner/PROTOCOL.md,
# "Files"): the daemon's input files, written under /work by this process,
# as the jail's user, before the code runs (or between a session's runs).
#
# The daemon checked every path already; the checks are made again here,
# and no component is followed through a symbolic link (O_NOFOLLOW on each,
# one directory at a time), so that a link the program planted in a
# session's /work cannot send a write elsewhere. Only regular files are
# written: a FIFO or anything else in the way is refused, never opened for
# a blocking write.

import binascii as _binascii
import errno as _errno
import os as _os
import stat as _stat

WORK = "/work"
# The daemon's bounds (api.MaxFilePathBytes and co.).
MAX_PATH = 1024
MAX_NAME = 255
MAX_DEPTH = 32

_DIR_FLAGS = _os.O_RDONLY | _os.O_DIRECTORY | _os.O_NOFOLLOW | _os.O_CLOEXEC
_FILE_FLAGS = _os.O_WRONLY | _os.O_CREAT | _os.O_NOFOLLOW | _os.O_NONBLOCK | _os.O_CLOEXEC


class _Refused(Exception):
    """A path or a frame the runner will not act on."""


def _parts(path):
    if type(path) is not str or not path or len(path.encode("utf-8", "surrogatepass")) > MAX_PATH:
        raise _Refused("the path is empty or too long")
    if path.startswith("/") or "\0" in path:
        raise _Refused("the path is absolute or has a NUL")
    parts = path.split("/")
    if len(parts) > MAX_DEPTH:
        raise _Refused("the path is too deep")
    for p in parts:
        if p in ("", ".", "..") or len(p.encode("utf-8", "surrogatepass")) > MAX_NAME:
            raise _Refused("the path has an empty, . or .. component, or one too long")
    return parts


def open_for_write(path, root=WORK):
    """(fd, dirfd, name): a descriptor for writing the regular file at
    path under root, emptied, with its directories made, never through a
    symbolic link; its directory's descriptor and its name there, to
    remove it should writing fail."""
    parts = _parts(path)
    d = _os.open(root, _DIR_FLAGS)
    try:
        for name in parts[:-1]:
            try:
                _os.mkdir(name, 0o755, dir_fd=d)
            except FileExistsError:
                pass
            nd = _os.open(name, _DIR_FLAGS, dir_fd=d)
            _os.close(d)
            d = nd
        fd = _os.open(parts[-1], _FILE_FLAGS, 0o644, dir_fd=d)
    except BaseException:
        _os.close(d)
        raise
    try:
        if not _stat.S_ISREG(_os.fstat(fd).st_mode):
            raise _Refused("something other than a regular file is in the way")
        _os.ftruncate(fd, 0)
        _os.set_blocking(fd, True)
    except BaseException:
        _os.close(fd)
        _os.close(d)
        raise
    return fd, d, parts[-1]


def _unb64(data, _a2b=_binascii.a2b_base64):
    """data, standard base64 with its padding, decoded; ValueError when it
    is not that. (binascii skips what is not base64; a strict decode
    comes out with exactly the length the input's size says.)"""
    if not data.isascii() or len(data) % 4:
        raise ValueError("not base64")
    b = _a2b(data)
    if len(b) != len(data) // 4 * 3 - (len(data) - len(data.rstrip("="))):
        raise ValueError("not base64")
    return b


class Writer:
    """Writes the file frames of one connection, one file at a time: a
    file's frames come in order, the first at offset 0, the last with
    "end"; the answer (file_written) goes out at its last frame."""

    def __init__(self, root=WORK):
        self.root = root
        self.path = None
        self.fd = -1
        self.dfd = -1  # the file's directory, and its name there
        self.name = None
        self.written = 0
        self.error = None

    def _close(self, remove=False):
        for attr in ("fd", "dfd"):
            fd = getattr(self, attr)
            if fd < 0:
                continue
            if attr == "dfd" and remove:
                # A file half written is not left behind as if whole.
                try:
                    _os.unlink(self.name, dir_fd=fd)
                except OSError:
                    pass
            try:
                _os.close(fd)
            except OSError:
                pass
            setattr(self, attr, -1)

    def _fail(self, e):
        if self.error is None:
            if isinstance(e, OSError) and e.errno:
                self.error = (_errno.errorcode.get(e.errno, "E%d" % e.errno), _os.strerror(e.errno))
            elif isinstance(e, (_Refused, ValueError)):
                self.error = ("EINVAL", str(e))
            else:
                self.error = ("EIO", "%s: %s" % (type(e).__name__, e))
        self._close(remove=True)

    def frame(self, msg):
        """Take one file frame; returns the answer to send, or None."""
        path = msg.get("path")
        offset = msg.get("offset")
        data = msg.get("data", "")
        end = msg.get("end") is True
        if offset == 0:
            self._close(remove=True)  # a file never ended is not whole
            self.path, self.written, self.error = path, 0, None
            try:
                self.fd, self.dfd, self.name = open_for_write(path, self.root)
            except BaseException as e:
                if not isinstance(e, Exception):
                    raise
                self._fail(e)
        elif path != self.path or offset != self.written or type(offset) is not int:
            # Out of order: this file is refused, whatever came before.
            if path != self.path:
                self._close(remove=True)
                self.path, self.written, self.error = path, 0, None
            self._fail(_Refused("a frame came out of order"))
        if self.error is None:
            try:
                if type(data) is not str:
                    raise _Refused("the data is not a string")
                b = _unb64(data)
                view = memoryview(b)
                while view:
                    view = view[_os.write(self.fd, view):]
                self.written += len(b)
            except (OSError, ValueError, _Refused, _binascii.Error) as e:
                self._fail(e)
        if not end:
            return None
        self._close()
        answer = {"type": "file_written", "path": path if type(path) is str else "", "bytes": self.written}
        if self.error is not None:
            answer["error"], answer["message"] = self.error
        self.path, self.written, self.error = None, 0, None
        return answer


_writer = [None]


def on_frame(ch, msg, root=WORK):
    """Handle a file frame that came on the channel ch, answering on it."""
    w = _writer[0]
    if w is None or w.root != root:
        w = _writer[0] = Writer(root)
    answer = w.frame(msg)
    if answer is not None:
        ch.send(answer)
