"""The compiled engine from Python: emits, replays, the typed errors, the
follower, and the GIL released around engine work."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from gapless_mcp import AheadError, ConfigError, GapError, GaplessError, Ring, TooLargeError


def test_emits_get_dense_seqs_and_replay_after_a_cursor_returns_the_rest() -> None:
    ring = Ring(events=64, bytes=64 << 10)
    seqs = [ring.emit(f"event {n}".encode()) for n in range(1, 11)]
    assert seqs == list(range(1, 11))
    assert ring.published == 10
    replayed = ring.replay_after(7)
    assert [event.seq for event in replayed] == [8, 9, 10]
    assert [event.data for event in replayed] == [b"event 8", b"event 9", b"event 10"]
    assert ring.replay_after(10) == []


def test_an_evicted_cursor_raises_a_gap_with_its_figures() -> None:
    ring = Ring(events=8, bytes=64 << 10)
    for n in range(100):
        ring.emit(b"x" * 16)
    with pytest.raises(GapError) as raised:
        ring.replay_after(3)
    gap = raised.value
    assert isinstance(gap, GaplessError)
    assert gap.cursor == 3
    assert gap.published == 100
    assert gap.first_retained > 4
    assert gap.evicted == gap.first_retained - gap.cursor - 1
    coverage = ring.coverage(3)
    assert (coverage.kind, coverage.covered) == ("gap", False)
    assert coverage.first_retained == gap.first_retained
    assert coverage.evicted == gap.evicted


def test_a_cursor_beyond_what_was_published_is_ahead() -> None:
    ring = Ring()
    ring.emit(b"one")
    with pytest.raises(AheadError) as raised:
        ring.replay_after(5)
    assert (raised.value.cursor, raised.value.published) == (5, 1)
    assert ring.coverage(5).kind == "ahead"
    covered = ring.coverage(0)
    assert (covered.kind, covered.covered, covered.first, covered.published) == ("covered", True, 1, 1)


def test_a_payload_larger_than_the_ring_takes_is_refused_and_uses_no_seq() -> None:
    ring = Ring(events=16, bytes=4096)
    with pytest.raises(TooLargeError) as raised:
        ring.emit(b"x" * (ring.max_payload + 1))
    assert raised.value.length == ring.max_payload + 1
    assert raised.value.max_payload == ring.max_payload
    assert ring.published == 0
    assert ring.emit(b"x" * ring.max_payload) == 1


def test_sizes_outside_the_engines_ranges_are_a_config_error() -> None:
    with pytest.raises(ConfigError):
        Ring(events=0)
    with pytest.raises(ConfigError):
        Ring(epoch=0)
    assert Ring(epoch=0xC0FFEE).epoch == 0xC0FFEE


def test_concurrent_emitters_in_threads_lose_nothing() -> None:
    ring = Ring(events=16384, bytes=1 << 20)
    threads, per_thread = 8, 1000
    seqs: list[list[int]] = [[] for _ in range(threads)]

    def emitter(index: int) -> None:
        for n in range(per_thread):
            seqs[index].append(ring.emit(f"{index}:{n}".encode()))

    workers = [threading.Thread(target=emitter, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    every = sorted(seq for mine in seqs for seq in mine)
    assert every == list(range(1, threads * per_thread + 1)), "each seq given once, none skipped"
    payloads = {event.data for event in ring.replay_after(0)}
    assert payloads == {f"{i}:{n}".encode() for i in range(threads) for n in range(per_thread)}
    # Each thread's own emits are in its order.
    for index in range(threads):
        assert seqs[index] == sorted(seqs[index])


def test_a_follower_waits_without_holding_the_gil() -> None:
    """The follower blocks in the engine with the GIL released: this thread
    keeps running and emits while it waits. Were the GIL held, this thread
    could not run until the wait timed out (30 s), and the waiter would
    return nothing."""
    ring = Ring()
    follower = ring.follow(0)
    got: list[bytes] = []
    started = threading.Event()

    def waiter() -> None:
        started.set()
        got.extend(event.data for event in follower.next(timeout=30))

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    started.wait()
    ring.emit(b"wake up")
    thread.join()
    assert got == [b"wake up"], "the follower returned the event emitted while it waited"
    assert follower.cursor == 1


def test_a_follower_that_falls_behind_the_ring_raises_a_gap() -> None:
    ring = Ring(events=8, bytes=64 << 10)
    follower = ring.follow(0)
    for _ in range(100):
        ring.emit(b"y")
    with pytest.raises(GapError):
        follower.next(timeout=0)


def test_a_follower_times_out_with_nothing() -> None:
    ring = Ring()
    assert ring.follow(0).next(timeout=0.01) == []
    with pytest.raises(GaplessError):
        ring.follow(0).next(timeout=-1.0)


# The follower's mutex is held by a waiting `next` (with the GIL released).
# Were `cursor` to take it (with the GIL held), a read during a wait would
# block holding the GIL: no emitter could run to wake the waiter, and the
# interpreter would hang. Run in a child process, so that a hang fails this
# test (on the child's timeout) instead of hanging the suite.
_CURSOR_DURING_A_WAIT = textwrap.dedent(
    """
    import threading, time
    from gapless_mcp import Ring

    ring = Ring()
    follower = ring.follow(0)
    got = []
    waiter = threading.Thread(
        target=lambda: got.extend(e.data for e in follower.next(timeout=None)), daemon=True
    )
    waiter.start()
    reads = []

    def read() -> None:
        # Reads for 0.3 s: however the threads are scheduled, the waiter
        # is in its wait for nearly all of it.
        end = time.monotonic() + 0.3
        while time.monotonic() < end:
            reads.append(follower.cursor)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert not reader.is_alive(), "reading the cursor blocked on the waiting follower"
    assert reads and set(reads) == {0}, reads
    ring.emit(b"wake up")
    waiter.join(timeout=10)
    assert not waiter.is_alive(), "the emit did not wake the follower"
    assert got == [b"wake up"], got
    assert follower.cursor == 1
    print("ok", len(reads))
    """
)


def test_reading_the_cursor_while_a_follower_waits_never_blocks() -> None:
    try:
        child = subprocess.run(
            [sys.executable, "-c", _CURSOR_DURING_A_WAIT], capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired:
        pytest.fail("deadlock: reading Follower.cursor during a wait hung the interpreter for 60 s")
    assert child.returncode == 0, child.stdout + child.stderr
    assert child.stdout.startswith("ok"), child.stdout


@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="needs signal.pthread_kill")
def test_ctrl_c_interrupts_a_wait_without_timeout() -> None:
    """SIGINT to the main thread waiting in ``next(timeout=None)`` on a ring
    nobody emits to raises ``KeyboardInterrupt`` out of the wait. A
    watchdog emits after 20 s, so that a wait deaf to signals fails this
    test rather than hanging it."""
    assert threading.current_thread() is threading.main_thread()
    ring = Ring()
    follower = ring.follow(0)
    interrupted = threading.Event()
    woken_by_watchdog = threading.Event()
    main = threading.main_thread().ident

    def interrupt() -> None:
        # Late enough that the main thread is most likely in its wait;
        # were it not yet, the interrupt is raised before the wait instead,
        # within the same `raises` block.
        time.sleep(0.2)
        signal.pthread_kill(main, signal.SIGINT)
        if not interrupted.wait(20):
            woken_by_watchdog.set()
            ring.emit(b"watchdog")

    helper = threading.Thread(target=interrupt, daemon=True)
    with pytest.raises(KeyboardInterrupt):
        helper.start()
        follower.next(timeout=None)
    interrupted.set()
    helper.join(timeout=30)
    assert not woken_by_watchdog.is_set(), "SIGINT was only acted on once the watchdog's emit ended the wait"
    assert ring.published == 0
    assert follower.cursor == 0
