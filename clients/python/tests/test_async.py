"""AsyncClient against the real daemon: concurrent runs on one event loop,
which none of them blocks."""

import asyncio
import threading
import unittest

from support import require_daemon, socket

import cellblock_client as cb


class TestAsync(unittest.TestCase):
    def setUp(self):
        require_daemon(self)

    def run_async(self, coro):
        return asyncio.run(asyncio.wait_for(coro, 300))

    def test_16_concurrent_runs(self):
        async def main():
            async with cb.AsyncClient(socket()) as c:
                return await asyncio.gather(*[
                    c.run("import time\ntime.sleep(0.2)\nprint(%d * %d)" % (i, i)) for i in range(16)])

        results = self.run_async(main())
        self.assertEqual([r.stdout for r in results], ["%d\n" % (i * i) for i in range(16)])
        self.assertTrue(all(r.ok for r in results))

    def test_the_loop_is_not_blocked(self):
        # One run's tool waits for an event that only another run's tool
        # sets: both runs are in flight at once, and the loop runs their
        # tools while their streams are read. A client that blocked the
        # loop would never get to the second call.
        async def main():
            ev = asyncio.Event()
            loop_thread = []

            async def wait_for_other() -> str:
                loop_thread.append(threading.get_ident())
                await ev.wait()
                return "released"

            async def release() -> str:
                ev.set()
                return "set"

            ticks = []

            async def ticker():
                while not ev.is_set():
                    ticks.append(1)
                    await asyncio.sleep(0.01)

            async with cb.AsyncClient(socket()) as c:
                t = asyncio.ensure_future(ticker())
                a = c.run("print(tools.wait_for_other())", cell=True, tools={"wait_for_other": wait_for_other})
                b = c.run("import time\ntime.sleep(0.5)\nprint(tools.release())", cell=True,
                          tools={"release": release})
                ra, rb = await asyncio.gather(a, b)
                await t
            return ra, rb, ticks, loop_thread

        ra, rb, ticks, loop_thread = self.run_async(main())
        self.assertEqual(ra.stdout, "released\n")
        self.assertEqual(rb.stdout, "set\n")
        self.assertTrue(ticks)
        self.assertEqual(loop_thread, [threading.get_ident()])  # awaited on the loop's own thread

    def test_session_tools_output_errors(self):
        async def main():
            out = []
            async with cb.AsyncClient(socket()) as c:
                info = await c.info()
                self.assertIn("version", info)
                self.assertEqual((await c.health())["status"], "ok")

                def blocking(x: int) -> int:  # runs on the client's thread pool
                    return x + 1

                async def on_output(stream, text):
                    out.append(text)

                async with c.session(tools={"blocking": blocking}, on_output=on_output) as s:
                    await s.run("n = tools.blocking(x=1)")
                    r = await s.run("print(n)\nn * 10")
                    self.assertEqual(r.value.json, 20)
                    await s.put("f.txt", "content")
                    self.assertEqual(await s.get("f.txt"), b"content")
                    self.assertIn(cb.Variable("n", "int", "2"), await s.variables())
                    self.assertIn(s.id, [x["id"] for x in await c.sessions()])
                s2 = await c.session()
                await s2.close()
                with self.assertRaises(cb.SessionNotFoundError):
                    await s2.run("1")
                with self.assertRaises(cb.BadRequestError):
                    await c.run("")
                with self.assertRaises(cb.OverLimitError):
                    await c.run("1", timeout=10 ** 6)
                with self.assertRaises(cb.NotFoundError):
                    await c.artifact("0" * 64)
                r = await c.run("import os\nos.makedirs('out')\nopen('out/a.txt', 'w').write('A')")
                self.assertEqual(await c.artifact(r.files[0].sha256), b"A")

                def raises() -> None:
                    raise RuntimeError("nope")
                r = await c.run("import cellblock\ntry:\n    tools.raises()\nexcept cellblock.ToolError as e:\n"
                                "    print(e)", cell=True, tools={"raises": raises})
                self.assertEqual(r.stdout, "RuntimeError: nope\n")
            with self.assertRaises(cb.UnreachableError):
                async with cb.AsyncClient("/nonexistent.sock") as c2:
                    await c2.info()
            return out

        out = self.run_async(main())
        self.assertEqual("".join(out), "2\n")

    def test_cancelling_a_run_ends_it(self):
        async def main():
            async with cb.AsyncClient(socket()) as c:
                task = asyncio.ensure_future(c.run("import time\ntime.sleep(60)", on_output=lambda s, t: None))
                await asyncio.sleep(0.5)
                task.cancel()
                with self.assertRaises(asyncio.CancelledError):
                    await task
                # The client goes on working on new connections.
                return await c.run("print('still here')")

        self.assertEqual(self.run_async(main()).stdout, "still here\n")


if __name__ == "__main__":
    unittest.main()
