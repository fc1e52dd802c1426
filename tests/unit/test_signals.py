"""Signals during `up`: SIGINT/SIGTERM interrupt, and none cuts the rollback of an earlier
one short (issue 24: two SIGTERMs at the same instant once skipped it; 14 namespaces left)."""

from __future__ import annotations

import contextlib
import signal
import threading

import pytest

from emulator import lab
from emulator.cli import progress as prog


@pytest.fixture
def own_handlers():
    """The process's SIGINT/SIGTERM handlers, put back after the test."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield saved
    for s, handler in saved.items():
        signal.signal(s, handler)


def _interrupted(sig: signal.Signals) -> bool:
    try:
        signal.raise_signal(sig)  # the Python handler runs before raise_signal returns
    except KeyboardInterrupt:
        return True
    return False


def test_no_signal_interrupts_the_unwinding_of_an_interruption(own_handlers):
    # The second SIGTERM raised a KeyboardInterrupt while the first was unwinding, before
    # the rollback held signals (or while a worker pool was being joined): no rollback.
    prog.interrupt_on_sigterm()
    try:
        signal.raise_signal(signal.SIGTERM)
    except KeyboardInterrupt:  # unwinding: an except, a finally, a with's __exit__
        assert [_interrupted(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGTERM,
                                          signal.SIGINT, signal.SIGTERM)] == [False] * 5
    else:
        raise AssertionError("the first SIGTERM did not interrupt")


def test_a_signal_while_the_command_exits_does_not_replace_its_exit_code(own_handlers):
    prog.interrupt_on_sigterm()
    try:
        raise SystemExit(130)  # what the CLI does once the rollback is over
    except SystemExit:
        assert not _interrupted(signal.SIGTERM) and not _interrupted(signal.SIGINT)


def test_a_swallowed_interruption_leaves_the_command_interruptible(own_handlers):
    # A KeyboardInterrupt raised inside a __del__ is printed and dropped by Python: the
    # next signal must interrupt again, or the command would go on deaf to SIGTERM.
    prog.interrupt_on_sigterm()
    assert _interrupted(signal.SIGTERM)
    assert _interrupted(signal.SIGTERM)
    assert _interrupted(signal.SIGINT)


def test_signals_held_ignores_both_and_restores_them(own_handlers):
    with lab.signals_held():
        assert not _interrupted(signal.SIGINT) and not _interrupted(signal.SIGTERM)
    assert {s: signal.getsignal(s) for s in own_handlers} == own_handlers


def test_a_signal_before_the_rollback_holds_signals_does_not_skip_it(monkeypatch):
    # An API caller's handler raises on every Ctrl-C: one landing as the rollback starts
    # (before signals are held) must not leave the lab's resources behind.
    undone: list[str] = []
    undo = contextlib.ExitStack()
    for what in ("namespaces", "daemons"):
        undo.callback(undone.append, what)
    held = lab.signals_held
    landed = []

    @contextlib.contextmanager
    def second_signal_lands_first():
        if not landed:
            landed.append(True)
            raise KeyboardInterrupt
        with held():
            yield

    monkeypatch.setattr(lab, "signals_held", second_signal_lands_first)
    lab._unwind(undo)
    assert undone == ["daemons", "namespaces"] and landed


def test_the_rollback_waits_for_a_worker_the_pool_lost(monkeypatch):
    # A KeyboardInterrupt inside the pool's Thread.start() leaves that worker out of the
    # pool's list: leaving the pool does not wait for it, and it went on creating a
    # namespace after the rollback had removed the others (xg-sigb20c-spine1 was left).
    from emulator import netns

    release, created = threading.Event(), []

    def orphan() -> None:
        release.wait()
        created.append("spine1")

    worker = threading.Thread(target=orphan, name=f"{netns.WORKER_PREFIX}_0")
    worker.start()
    undo = contextlib.ExitStack()
    undo.callback(lambda: undone.append(list(created)))
    undone: list[list[str]] = []
    threading.Timer(0.05, release.set).start()  # the worker finishes some time later
    lab._unwind(undo)
    assert undone == [["spine1"]] and not worker.is_alive()


def test_parallel_workers_end_on_their_own_after_an_interrupt(own_handlers):
    # The burst test once hung for good: a KeyboardInterrupt cut a ThreadPoolExecutor's
    # shutdown short, its idle workers waited for work forever, and so did the rollback
    # waiting for them. parallel()'s workers end when their items are done.
    from emulator import netns

    signal.signal(signal.SIGINT, signal.default_int_handler)
    main = threading.main_thread().ident
    assert main is not None

    gate, running, done = threading.Event(), threading.Event(), []

    def item(i: int) -> None:
        running.set()
        gate.wait()
        done.append(i)

    def interrupt() -> None:
        # once an item runs (not after a fixed delay: on a loaded machine 50 ms can land
        # before any worker started, and then no item runs at all)
        running.wait()
        signal.pthread_kill(main, signal.SIGINT)

    # Ctrl-C while the items run: a real signal to the main thread, which interrupts its join
    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        netns.parallel(item, range(10))
    gate.set()
    netns.join_workers()
    assert sorted(done) == list(range(10))
    assert not [t for t in threading.enumerate() if t.name.startswith(netns.WORKER_PREFIX)]
