"""The check time limit (watchdog.py) seen from the event loop: checks that finish
within their limit send no signal at all, so a long synchronous scoring pass cannot fill the loop's
wake-up channel ("Exception ignored ... BlockingIOError"); a check past its limit is still stopped."""

import asyncio
import signal
import socket
import sys
import time

import pytest

from skill_rl.watchdog import Timeout, Watchdog


def wakeups_during(run) -> int:
    """How many signals reached the wake-up fd (asyncio's self-pipe) while `run()` ran."""
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    writer.setblocking(False)
    old = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    try:
        run()
    finally:
        signal.set_wakeup_fd(old)
    got = 0
    while True:
        try:
            got += len(reader.recv(65536))
        except BlockingIOError:
            break
    reader.close()
    writer.close()
    return got


def test_checks_within_their_limit_send_no_signal_however_long_the_pass():
    def many_short_calls():
        # the old timer ticked every limit / 4 (125 ms here): some 8 signals in this second; a limit this long
        # still holds each call when a loaded machine leaves this process waiting a while
        with Watchdog(0.5) as dog:
            end = time.monotonic() + 1.0
            while time.monotonic() < end:
                assert dog.call(sum, [1, 2]) == (3, None)

    assert wakeups_during(many_short_calls) == 0


# a hang guard, from a thread: the watchdog under test owns SIGALRM
@pytest.mark.timeout(60)
def test_a_call_past_its_limit_is_still_stopped_even_one_that_swallows_the_timeout():
    def swallow():
        while True:
            try:
                while True:
                    pass
            except BaseException:
                pass

    results = []

    def run():
        with Watchdog(0.05) as dog:
            results.append(dog.call(lambda: time.sleep(5)))
            results.append(dog.call(swallow))
            results.append(dog.call(sum, [1, 2]))

    start = time.monotonic()
    sent = wakeups_during(run)
    assert [type(e) for _, e in results] == [Timeout, Timeout, type(None)] and results[2][0] == 3
    # a few signals for the two that overran
    assert time.monotonic() - start < 5 and 2 <= sent <= 50


def test_a_long_scoring_pass_inside_the_event_loop_prints_no_wakeup_errors(monkeypatch):
    # what Python would print as "Exception ignored ... BlockingIOError"
    ignored = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: ignored.append(u.exc_type))

    async def scoring_pass():
        # asyncio now owns the wake-up fd
        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, lambda: None)
        # the old timer: a signal a millisecond, and the loop never reads them
        with Watchdog(0.004) as dog:
            end = time.monotonic() + 1.0
            while time.monotonic() < end:
                dog.call(sum, [1, 2])

    asyncio.run(scoring_pass())
    assert ignored == []
