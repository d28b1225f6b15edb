"""A TCP relay that delays every chunk, for multi-host tests where `tc netem` is missing.

Why: a distributed run across machines puts milliseconds between the master and its
workers; on one kernel, even across network namespaces, the round trip is tens of
microseconds, so the master's clock-offset measurement (its uncertainty is half the best
ping round trip) and every ticket round trip would be tested only at a latency no real
network has. `tc qdisc ... netem` would add it, but kernels built without `sch_netem`
answer "Specified qdisc kind is unknown". This relay is the stand-in: it accepts on one
address, connects each accepted connection to the target, and forwards each chunk it reads
after `delay ± jitter` ms (drawn per chunk, uniform), never earlier than the chunk before
it in the same direction: order is kept per direction, as on one TCP path.

Run as a script (in the master's network namespace: `ip netns exec NS python
tests/delayrelay.py ...`); it prints `relay listening on HOST:PORT` once bound, `accepted
HOST:PORT` for each connection, and on SIGTERM one `summary` line (connections, chunks, the
smallest and largest delay actually applied), then exits.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import signal
import sys
from dataclasses import dataclass

CHUNK_BYTES = 65536


@dataclass(slots=True)
class Tally:
    """What the relay did, for its summary line (delays as applied: write time − arrival)."""

    connections: int = 0
    chunks: int = 0
    bytes: int = 0
    min_delay_s: float = float("inf")
    max_delay_s: float = 0.0

    def line(self) -> str:
        low = 0.0 if self.chunks == 0 else self.min_delay_s
        return (f"summary connections={self.connections} chunks={self.chunks} "
                f"bytes={self.bytes} min_delay_ms={low * 1e3:.2f} "
                f"max_delay_ms={self.max_delay_s * 1e3:.2f}")


class DelayRelay:
    def __init__(self, target: tuple[str, int], delay_s: float, jitter_s: float,
                 seed: int) -> None:
        self.target = target
        self.delay_s, self.jitter_s = delay_s, jitter_s
        self.rng = random.Random(seed)
        self.tally = Tally()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        self.tally.connections += 1
        print(f"accepted {peer[0]}:{peer[1]}", flush=True)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:  # the target is not up (yet): the client reconnects
            writer.close()
            return
        try:
            await asyncio.gather(self._direction(reader, up_writer),
                                 self._direction(up_reader, writer))
        except (OSError, asyncio.CancelledError):  # a peer gone; or the relay stopping
            pass
        finally:
            for w in (writer, up_writer):
                w.close()

    async def _direction(self, reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter) -> None:
        """Read chunks as they come; write each at its due time, in order."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, float, bytes]] = asyncio.Queue()

        async def pump_in() -> None:
            last_due = 0.0
            while True:
                data = await reader.read(CHUNK_BYTES)
                now = loop.time()
                spread = self.rng.uniform(-self.jitter_s, self.jitter_s)
                last_due = max(now + self.delay_s + spread, last_due)
                await queue.put((now, last_due, data))
                if not data:
                    return

        async def pump_out() -> None:
            while True:
                arrived, due, data = await queue.get()
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if not data:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                applied = loop.time() - arrived
                t = self.tally
                t.chunks, t.bytes = t.chunks + 1, t.bytes + len(data)
                t.min_delay_s, t.max_delay_s = (min(t.min_delay_s, applied),
                                                max(t.max_delay_s, applied))
                writer.write(data)
                await writer.drain()

        out = asyncio.ensure_future(pump_out())
        try:
            await pump_in()
            await out
        finally:
            out.cancel()


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: expected HOST:PORT")
    return host, int(port)


async def _main(args: argparse.Namespace) -> None:
    relay = DelayRelay(args.target, args.delay_ms / 1e3, args.jitter_ms / 1e3, args.seed)
    server = await asyncio.start_server(relay.serve, *args.listen)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    host, port = server.sockets[0].getsockname()[:2]
    print(f"relay listening on {host}:{port}", flush=True)
    await stop.wait()
    server.close()
    rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in rest:  # the connections: closed, so the summary is the last line
        task.cancel()
    await asyncio.gather(*rest, return_exceptions=True)
    print(relay.tally.line(), flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--listen", type=_address, required=True, help="HOST:PORT to accept on")
    p.add_argument("--target", type=_address, required=True, help="HOST:PORT to connect to")
    p.add_argument("--delay-ms", type=float, default=10.0)
    p.add_argument("--jitter-ms", type=float, default=2.0)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if not 0 <= args.jitter_ms <= args.delay_ms:
        p.error(f"--jitter-ms {args.jitter_ms}: must be between 0 and --delay-ms")
    asyncio.run(_main(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
