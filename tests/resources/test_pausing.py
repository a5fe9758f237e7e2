"""What the views are told while the user's pause and the pause rules come and go (no loop, no sensors)."""

from __future__ import annotations

from swarm_app.kernel.events import TrainingPaused, TrainingResumed
from swarm_app.resources.guest import Verdict
from swarm_app.resources.pausing import Pausing

ON_BATTERY = Verdict(True, "on battery", "when the power is plugged in")


def test_each_new_reason_to_wait_is_told_once_and_the_end_of_waiting_too():
    wakes = []
    pausing = Pausing(lambda: wakes.append("wake"))
    assert pausing.notice(3) is None and not pausing.waiting

    pausing.pause()
    assert pausing.notice(3) == TrainingPaused(3, "", "")
    assert pausing.notice(3) is None  # told already
    pausing.hold(ON_BATTERY)
    assert pausing.notice(3) is None  # the user's pause goes before a rule's
    pausing.resume()
    assert pausing.notice(3) == TrainingPaused(3, "on battery", "when the power is plugged in")
    pausing.hold(Verdict(False))
    assert pausing.notice(3) == TrainingResumed() and not pausing.waiting
    assert pausing.notice(3) is None
    assert wakes == ["wake"] * 3  # the hold, the resume and the release each wake the waiting loop


def test_a_verdict_that_changes_nothing_wakes_nobody():
    wakes = []
    pausing = Pausing(lambda: wakes.append("wake"))
    pausing.hold(Verdict(False))
    pausing.resume()  # not paused: nothing to resume
    pausing.hold(ON_BATTERY)
    pausing.hold(ON_BATTERY)
    assert wakes == ["wake"] and pausing.held == ON_BATTERY
