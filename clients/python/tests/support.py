"""What the tests share: the daemon they talk to, and how they skip
without one.

The tests run against a real cellblockd: the one at $CELLBLOCK_SOCKET (or
the default socket). Without a daemon they skip, saying why, unless
CELLBLOCK_TEST_REQUIRE_DAEMON=1 (the root suite's integration test sets it),
when they fail instead.
"""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(ROOT))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import cellblock_client  # noqa: E402

_checked = None


def socket():
    return os.environ.get("CELLBLOCK_SOCKET") or "/run/cellblock/cellblockd.sock"


def require_daemon(test):
    """Skip test (a TestCase) without a daemon, or fail when one is required."""
    global _checked
    if _checked is None:
        try:
            with cellblock_client.Client(socket()) as c:
                c.health()
            _checked = ""
        except Exception as e:  # noqa: BLE001 - any failure means no daemon
            _checked = "no cellblockd at %s (%s): set CELLBLOCK_SOCKET" % (socket(), e)
    if _checked:
        if os.environ.get("CELLBLOCK_TEST_REQUIRE_DAEMON") == "1":
            test.fail(_checked)
        test.skipTest(_checked)


class DaemonTest(unittest.TestCase):
    """A test case against the daemon: self.client is a Client of it."""

    def setUp(self):
        require_daemon(self)
        self.client = cellblock_client.Client(socket())
        self.addCleanup(self.client.close)
