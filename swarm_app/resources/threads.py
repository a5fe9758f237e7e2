"""Thread counts that adapt: the engine computes on whichever count is fastest on this machine now.

One thread per physical core is right on an idle machine and falls apart as soon as anything else runs
(OpenMP threads waiting for a descheduled sibling stall every parallel region: 15-95x slower than one thread
under a load of 3-6 on 2 cores). So the count is measured, not assumed. `ThreadTuner` starts on one thread
(never the slow case), measures it after a warm-up round, tries each larger candidate for one round, keeps
the fastest, and every `probe_every` rounds tries a neighbouring count for one round (4% of rounds at the
default of 25), moving when it is `min_gain` faster. One fast probe round can be luck (a sibling process
paused for a moment), so a move is on trial: if the next `confirm` rounds on the new count are not faster
than the old count's usual speed, the tuner moves back. A round much slower than recent ones (something
started on the machine) brings the next probe forward.

A probe has a price, and on a short run it shows: with one of 2 cores kept busy by another program, the
probe round at 2 threads made a 6-round run 1.25-1.30x slower than one at 1 thread. So a probe runs only
when the CPUs it needs are free: `record` takes the CPUs other programs left free during the round (None:
unknown), and a probe at n threads waits while fewer than n - `noise_cpus` were (it runs at the first round
that has them). A probe round that runs past `abort_after` times the usual round is cut short: the session
asks `abort_probe` during the round and goes back to the best count at once, so a bad probe costs at most
about that much (1.5: above the ~1.3x of a round with a held-out evaluation, which must not read as a
losing probe). Speed is work per second (tokens generated plus trained), so rounds of different sizes
compare. Sans-IO: the session reports each round and the free CPUs, and applies `threads`.
"""

from __future__ import annotations

from collections import deque
from statistics import median


def candidates(max_threads: int) -> list[int]:
    """1, 2, 4, ... below `max_threads`, and `max_threads` itself."""
    counts, n = [], 1
    while n < max_threads:
        counts.append(n)
        n *= 2
    return counts + [max(1, max_threads)]


class ThreadTuner:
    def __init__(self, max_threads: int, probe_every: int = 25, min_gain: float = 0.10, slowdown: float = 2.0,
                 abort_after: float = 1.5, confirm: int = 2, warmup: int = 1, noise_cpus: float = 0.25) -> None:
        self.options = candidates(max_threads)
        self.probe_every, self.min_gain, self.slowdown, self.abort_after = probe_every, min_gain, slowdown, abort_after
        self.confirm = confirm
        self.noise_cpus = noise_cpus
        """Other programs' use of the CPUs a probe needs that still counts as free (background noise)."""
        self.waited = 0
        """Rounds a due probe waited for the CPUs it needs."""
        self._warmup = warmup
        """Rounds not measured at the start: the first round also loads kernels and fills caches, and
        measured, it made one thread look slow enough for any probe to beat it."""
        self._on_trial: tuple[int, float, list[float]] | None = None
        """After a move: (the count moved from, its usual speed, the new count's speeds since the move)."""
        self.best = self.options[0]
        self.probe: int | None = None
        """The count on trial this round (None: the round runs on `best`)."""
        self.probes = 0
        self._speed = {n: deque(maxlen=5) for n in self.options}
        self._seconds = {n: deque(maxlen=5) for n in self.options}
        self._untried = self.options[1:]
        self._since_probe = 0
        self._upward = True  # the first round runs on one thread: the trials start after it

    @property
    def threads(self) -> int:
        """The count the round under way (or the next one) runs on."""
        return self.probe or self.best

    def record(self, work: float, seconds: float, free_cpus: float | None = None) -> int:
        """A round on `threads` did `work` in `seconds` while other programs left `free_cpus` CPUs free
        (None: not known); returns the count for the next round."""
        if self._warmup > 0:
            self._warmup -= 1
            return self.threads
        if seconds > 0 and work > 0:
            self._note(self.threads, work / seconds, seconds)
        if self.probe is not None:
            if self._faster(self.probe, self.best):
                self._on_trial = (self.best, median(self._speed[self.best]) if self._speed[self.best] else 0.0, [])
                self.best = self.probe
            self.probe = None
        else:
            self._since_probe += 1
            if self._on_trial is not None and seconds > 0 and work > 0:
                self._judge_move(work / seconds)
        self._next(free_cpus)
        return self.threads

    def _judge_move(self, speed: float) -> None:
        moved_from, usual, since = self._on_trial
        since.append(speed)
        if len(since) < self.confirm:
            return
        self._on_trial = None
        if median(since) <= usual:  # the probe was luck: back to the count that was faster
            self.best = moved_from

    def abort_probe(self, elapsed_s: float) -> bool:
        """True (and back on `best`) when the probe round has run `abort_after` times a usual round."""
        usual = self._seconds[self.best]
        if self.probe is None or not usual or elapsed_s <= self.abort_after * median(usual):
            return False
        self._speed[self.probe].append(0.0)  # slower than anything measured
        self.probe = None
        return True

    def _note(self, threads: int, speed: float, seconds: float) -> None:
        recent = self._speed[threads]
        if threads == self.best and len(recent) >= 2 and speed * self.slowdown < median(recent):
            self._since_probe = self.probe_every  # the machine changed: probe next round
            recent.clear()
        recent.append(speed)
        self._seconds[threads].append(seconds)

    def _faster(self, probed: int, kept: int) -> bool:
        if not self._speed[probed] or not self._speed[kept]:
            return bool(self._speed[probed])
        return self._speed[probed][-1] > (1 + self.min_gain) * median(self._speed[kept])

    def _next(self, free_cpus: float | None) -> None:
        if self._untried:
            if self._room_for(self._untried[0], free_cpus):
                self.probe = self._untried.pop(0)
        elif self._since_probe >= self.probe_every and len(self.options) > 1:
            neighbour = self._neighbour()
            if self._room_for(neighbour, free_cpus):
                self._since_probe = 0
                self.probe = neighbour
        if self.probe is not None:
            self.probes += 1

    def _room_for(self, threads: int, free_cpus: float | None) -> bool:
        """Whether a probe at `threads` may run now: the CPUs it needs were free of other programs' work
        (unknown counts as free). A probe below the best count needs none beyond what runs already."""
        if free_cpus is None or threads <= self.best or free_cpus >= threads - self.noise_cpus:
            return True
        self.waited += 1
        return False

    def _neighbour(self) -> int:
        """A count next to `best`, below and above in turn."""
        i = self.options.index(self.best)
        below = self.options[i - 1] if i > 0 else None
        above = self.options[i + 1] if i + 1 < len(self.options) else None
        self._upward = not self._upward
        if below is None or (above is not None and self._upward):
            return above
        return below

    def describe(self) -> str:
        speeds = {n: round(median(s), 1) for n, s in self._speed.items() if s}
        return f"{self.best} thread{'s' if self.best > 1 else ''} (work per second by thread count: {speeds})"
