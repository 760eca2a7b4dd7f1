# The runner's side of the channel to the daemon (see nsjail/runner/PROTOCOL.md):
# framing, the run's caps, and turning objects into display items.
#
# Everything here may run after hostile user code: every function needed
# later is bound as a default argument or an attribute when this module is
# imported, and nothing raises out of send() or the display functions except
# an interrupt (KeyboardInterrupt) arriving in the middle of them.

import binascii as _binascii
import json as _json
import os as _os
import _signal
from _thread import RLock as _RLock
from _thread import get_ident as _get_ident

# The caps in force until the run message says otherwise; the same values
# as the Go package's DefaultLimits, with frame_bytes at its pre-run value.
DEFAULT_LIMITS = {
    "frame_bytes": 1 << 20,
    "display_items": 64,
    "display_item_bytes": 1 << 20,
    "display_total_bytes": 8 << 20,
    "repr_bytes": 4096,
    "json_bytes": 65536,
    "message_bytes": 4096,
    "traceback_bytes": 65536,
}

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
JPEG_MAGIC = b"\xff\xd8\xff"

# The largest frame the daemon sends (a run message, a tool's answer).
MAX_IN_FRAME = 16 << 20
# How deep a JSON value (a cell's value, application/json, metadata) may nest.
JSON_DEPTH = 64
# The most a display item's metadata may take, encoded.
METADATA_BYTES = 16384

# The rich reprs looked for, in IPython's order, with the MIME type each
# gives and whether its content is binary (base64 in the frame).
_REPR_METHODS = (
    ("_repr_png_", "image/png", True),
    ("_repr_jpeg_", "image/jpeg", True),
    ("_repr_svg_", "image/svg+xml", False),
    ("_repr_html_", "text/html", False),
    ("_repr_markdown_", "text/markdown", False),
    ("_repr_latex_", "text/latex", False),
    ("_repr_json_", "application/json", False),
)
# The MIME types the daemon accepts in a display item.
MIME_TYPES = frozenset(m for _, m, _ in _REPR_METHODS) | {"text/plain"}

_MAGIC = {"image/png": PNG_MAGIC, "image/jpeg": JPEG_MAGIC}


def utf8_len(s, _len=len):
    """The length of s encoded as UTF-8 (lone surrogates count as "?")."""
    try:
        return _len(s.encode("utf-8"))
    except UnicodeEncodeError:
        return _len(s.encode("utf-8", "replace"))


def cap_text(s, limit, head=True):
    """s cut to at most limit UTF-8 bytes, with a note of the whole size.

    head keeps the start (reprs, messages); otherwise the end is kept
    (tracebacks, whose last lines say what happened)."""
    b = s.encode("utf-8", "replace")
    if len(b) <= limit:
        return b.decode("utf-8")
    note = "[cellblock: cut, %d bytes in all]" % len(b)
    keep = limit - len(note) - 1
    if keep < 0:
        return b[:limit].decode("utf-8", "ignore")
    if head:
        return b[:keep].decode("utf-8", "ignore") + "\n" + note
    return note + "\n" + b[len(b) - keep:].decode("utf-8", "ignore")


def safe_repr(obj, limit):
    try:
        r = repr(obj)
        if type(r) is not str:
            raise TypeError("__repr__ returned non-string")
    except Exception as e:
        r = "<repr failed: %s: %s>" % (type_name(type(e)), _short_str(e))
    return cap_text(r, limit)


def _short_str(e):
    try:
        s = str(e)
    except Exception:
        s = "<str() failed>"
    return cap_text(s, 200)


def type_name(t):
    """The qualified name of class t, with its module unless builtins."""
    try:
        mod = t.__module__
        name = t.__qualname__
        if type(name) is not str:
            name = t.__name__
        if mod in (None, "builtins") or type(mod) is not str:
            return cap_text(name, 256)
        return cap_text(mod + "." + name, 256)
    except Exception:
        return "<unknown type>"


class _TooBig(Exception):
    pass


def json_text(value, limit, _dumps=_json.dumps):
    """value encoded as JSON if it is plain JSON data (dict with str keys,
    list, tuple, str, int, float that is finite, bool, None) nested at most
    JSON_DEPTH deep and at most limit bytes long; else None."""
    budget = [limit]

    def walk(v, depth):
        if depth > JSON_DEPTH:
            raise _TooBig
        t = type(v)
        if t is str:
            budget[0] -= len(v) + 2
        elif t is bool or v is None:
            budget[0] -= 5
        elif t is int:
            if v.bit_length() > 4000:
                raise _TooBig
            budget[0] -= 1
        elif t is float:
            if v != v or v in (float("inf"), float("-inf")):
                raise _TooBig
            budget[0] -= 1
        elif t is list or t is tuple:
            budget[0] -= 2
            for x in v:
                if budget[0] < 0:
                    raise _TooBig
                walk(x, depth + 1)
        elif t is dict:
            budget[0] -= 2
            for k, x in v.items():
                if type(k) is not str or budget[0] < 0:
                    raise _TooBig
                budget[0] -= len(k) + 3
                walk(x, depth + 1)
        else:
            raise _TooBig
        if budget[0] < 0:
            raise _TooBig

    try:
        walk(value, 1)
        s = _dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (_TooBig, ValueError, TypeError, RecursionError):
        return None
    if utf8_len(s) > limit:
        return None
    return s


class Channel:
    """The runner's end of the channel: one socket, written by the process
    that made the Channel only, one whole frame at a time."""

    def __init__(self, fd, _getpid=_os.getpid, _fstat=_os.fstat):
        self.fd = fd
        self.pid = _getpid()
        st = _fstat(fd)
        self.ident = (st.st_dev, st.st_ino)
        self.dead = False
        self.lock = _RLock()
        self.sending = False
        self.pending = []
        # Set in a session (see send_raw): SIGINT does not cut the main
        # thread's frames.
        self.hold_interrupts = False
        self.main = _get_ident()
        self.held = False
        self.limits = dict(DEFAULT_LIMITS)
        # Display accounting for the run.
        self.items = 0
        self.total = 0
        self.dropped = 0

    def set_limits(self, limits):
        for k in DEFAULT_LIMITS:
            v = limits.get(k) if type(limits) is dict else None
            if type(v) is int and v > 0:
                self.limits[k] = v

    def send(self, obj, _dumps=_json.dumps):
        """Send obj as one frame. False when it was not sent (too big, not
        JSON, the channel gone, or a forked child)."""
        try:
            data = _dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        except Exception:
            return False
        return self.send_raw(data)

    def send_raw(self, text, _getpid=_os.getpid, _ident=_get_ident, _getsignal=_signal.getsignal,
                 _setsignal=_signal.signal, _SIGINT=_signal.SIGINT, _default=_signal.default_int_handler):
        """Send text, one JSON object already encoded, as one frame.

        With hold_interrupts set (a session, whose channel must outlive
        its runs), SIGINT is held while the main thread writes, and its
        KeyboardInterrupt raised once the frame is whole."""
        try:
            if self.dead or _getpid() != self.pid:
                return False
            data = text.encode("utf-8", "replace")
            if len(data) > self.limits["frame_bytes"]:
                return False
            frame = len(data).to_bytes(4, "big") + data
        except Exception:
            return False
        ok = True
        held = False
        with self.lock:
            if self.sending:
                # A signal handler sending while this thread is mid-frame:
                # the outer send writes it after its own frame.
                self.pending.append(frame)
                return True
            hold = False
            try:
                if self.hold_interrupts and _ident() == self.main and _getsignal(_SIGINT) is _default:
                    self.held = False
                    _setsignal(_SIGINT, self._hold)
                    hold = True
                # Set in the try: an interrupt before any of the frame is
                # written leaves the channel as it was.
                self.sending = True
                self._write(frame)
                while self.pending and not self.dead:
                    self._write(self.pending.pop(0))
            except Exception:
                if self.sending:
                    self.dead = True
                ok = False
            except BaseException:
                if self.sending:
                    # Interrupted mid-frame: the stream can no longer be
                    # framed.
                    self.dead = True
                raise
            finally:
                self.sending = False
                if hold:
                    _setsignal(_SIGINT, _default)
                    held, self.held = self.held, False
        if held:
            raise KeyboardInterrupt
        return ok

    def _hold(self, signum, frame):
        """SIGINT's handler while the main thread writes a frame."""
        self.held = True

    def _write(self, frame, _write=_os.write, _fstat=_os.fstat, _setb=_os.set_blocking):
        st = _fstat(self.fd)
        if (st.st_dev, st.st_ino) != self.ident:
            # The program closed the channel and the number was reused.
            raise OSError("channel replaced")
        _setb(self.fd, True)
        view = memoryview(frame)
        while view:
            n = _write(self.fd, view)
            view = view[n:]

    # Display items.

    def display(self, obj):
        """Send obj's rich representation as a display item."""
        try:
            data, dropped, md = bundle(obj, self.limits)
        except Exception:
            return
        self.send_item(data, dropped, md)

    def send_item(self, data, dropped, md=None):
        """Send one display item, after the run's caps: over
        display_item_bytes or past display_total_bytes it keeps its
        text/plain only; past display_items it is counted as dropped."""
        lim = self.limits
        try:
            with self.lock:
                if self.items >= lim["display_items"]:
                    self.dropped += 1
                    return
                size = 0
                for v in data.values():
                    size += v[1]
                if size > lim["display_item_bytes"]:
                    _keep_plain(data, dropped, "item over display_item_bytes (%d)" % lim["display_item_bytes"])
                    size = data["text/plain"][1]
                if self.total + size > lim["display_total_bytes"]:
                    _keep_plain(data, dropped, "past display_total_bytes (%d)" % lim["display_total_bytes"])
                    size = data["text/plain"][1]
                    if self.total + size > lim["display_total_bytes"]:
                        self.dropped += 1
                        return
                self.items += 1
                self.total += size
        except Exception:
            return
        self._send_item(data, dropped, md)

    def _send_item(self, data, dropped, md, _dumps=_json.dumps):
        try:
            parts = []
            for mime, (content, _, is_json) in data.items():
                parts.append(_dumps(mime) + ":" + (content if is_json else _dumps(content, ensure_ascii=False)))
            meta = dict(md) if md else {}
            if dropped:
                meta["cellblock"] = {"dropped": dropped}
            text = '{"type":"display","data":{%s},"metadata":%s}' % (
                ",".join(parts), _dumps(meta, ensure_ascii=False, allow_nan=False))
            if self.send_raw(text):
                return
            # Too big for a frame even so (escaping): keep text/plain.
            plain = data["text/plain"][0]
            dropped = dropped + [{"mime": m, "bytes": data[m][1], "reason": "frame over frame_bytes"}
                                 for m in data if m != "text/plain"]
            self.send({"type": "display", "data": {"text/plain": plain},
                       "metadata": {"cellblock": {"dropped": dropped}}})
        except Exception:
            pass


def _keep_plain(data, dropped, reason):
    for mime in list(data):
        if mime != "text/plain":
            dropped.append({"mime": mime, "bytes": data[mime][1], "reason": reason})
            del data[mime]


def bundle(obj, limits):
    """obj's MIME bundle: data maps a MIME type to (content, size, is_json)
    where content is a str (base64 for binary types) or, when is_json, JSON
    text; dropped lists what was left out and why; md is the metadata a
    _repr_mimebundle_ gave, or None."""
    plain = safe_repr(obj, limits["repr_bytes"])
    data = {}
    dropped = []
    md = None
    if not isinstance(obj, type):
        found = {}
        mb = _method(obj, "_repr_mimebundle_", dropped)
        if mb is not None:
            try:
                r = mb(include=None, exclude=None)
                if type(r) is tuple and len(r) == 2:
                    r, md = r
                if isinstance(r, dict):
                    for k, v in r.items():
                        if type(k) is str:
                            found[k] = v
                elif r is not None:
                    dropped.append({"mime": "*", "bytes": 0, "reason": "_repr_mimebundle_ did not return a dict"})
            except Exception as e:
                dropped.append({"mime": "*", "bytes": 0, "reason": _raised("_repr_mimebundle_", e)})
        for name, mime, _ in _REPR_METHODS:
            if mime in found:
                continue
            m = _method(obj, name, dropped, mime)
            if m is None:
                continue
            try:
                r = m()
            except Exception as e:
                dropped.append({"mime": mime, "bytes": 0, "reason": _raised(name, e)})
                continue
            if type(r) is tuple and len(r) == 2:
                r = r[0]
            if r is not None:
                found[mime] = r
        for mime, v in found.items():
            if mime == "text/plain":
                if type(v) is str:
                    plain = cap_text(v, limits["repr_bytes"])
                continue
            _add(data, dropped, mime, v, limits)
        if md is not None:
            mdt = json_text(md, METADATA_BYTES) if type(md) is dict else None
            if mdt is None:
                dropped.append({"mime": "metadata", "bytes": 0,
                                "reason": "metadata not a JSON object within %d bytes" % METADATA_BYTES})
                md = None
            else:
                md = {k: v for k, v in md.items() if k != "cellblock"}
    data["text/plain"] = (plain, utf8_len(plain), False)
    return data, dropped, md


def _method(obj, name, dropped, mime="*"):
    try:
        m = getattr(obj, name, None)
    except Exception as e:
        dropped.append({"mime": mime, "bytes": 0, "reason": _raised(name, e)})
        return None
    return m if callable(m) else None


def _raised(name, e):
    return cap_text("%s raised %s: %s" % (name, type_name(type(e)), _short_str(e)), 512)


def _add(data, dropped, mime, v, limits, _b64=_binascii.b2a_base64, _unb64=_binascii.a2b_base64):
    if mime not in MIME_TYPES:
        dropped.append({"mime": cap_text(mime, 255), "bytes": 0, "reason": "MIME type not supported"})
        return
    magic = _MAGIC.get(mime)
    if magic is not None:
        if isinstance(v, str):
            try:
                v = _unb64(v.encode("ascii"))
            except Exception:
                dropped.append({"mime": mime, "bytes": utf8_len(v), "reason": "not valid base64"})
                return
        if not isinstance(v, (bytes, bytearray, memoryview)):
            dropped.append({"mime": mime, "bytes": 0, "reason": "not bytes but %s" % type_name(type(v))})
            return
        v = bytes(v)
        if not v.startswith(magic):
            dropped.append({"mime": mime, "bytes": len(v), "reason": "content does not start with the %s signature" % mime})
            return
        s = _b64(v, newline=False).decode("ascii")
        data[mime] = (s, len(s), False)
        return
    if mime == "application/json":
        s = json_text(v, limits["display_item_bytes"])
        if s is None:
            dropped.append({"mime": mime, "bytes": 0, "reason": "not JSON data within display_item_bytes"})
            return
        data[mime] = (s, utf8_len(s), True)
        return
    if isinstance(v, (bytes, bytearray)):
        v = bytes(v).decode("utf-8", "replace")
    if type(v) is not str:
        dropped.append({"mime": mime, "bytes": 0, "reason": "not a string but %s" % type_name(type(v))})
        return
    data[mime] = (v, utf8_len(v), False)


# The run's channel, set by the runner; None in any other process (a Python
# the program started, or a forked child).
channel = None
