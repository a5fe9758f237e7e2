"""The experiment's three PNGs, drawn from summary.curves: cumulative training reward per round (the paper's
figure), held-out greedy accuracy over rounds, and local-only reward per own question over rounds; each a
line per config, the mean over seeds with the spread (one standard deviation) shaded.

matplotlib is imported here only, when drawing (Agg: no display needed); where it is not installed the
PNGs are skipped and `draw` says so. Must not compute metrics.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

FILES = {"cum_reward": "cumulative_reward.png", "heldout": "heldout_accuracy.png", "local_reward": "local_reward.png"}
SMOOTHING = 20
"""The local reward is noisy round to round: drawn as a moving average over about 1/SMOOTHING of the rounds."""


def available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def draw(curves: dict[str, Any], out: Path, title: str) -> list[Path]:
    """Write the three PNGs into `out`; returns their paths ([] when matplotlib is missing)."""
    if not available() or not curves:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for key, ylabel in (("cum_reward", "cumulative training reward (sum over nodes)"),
                        ("heldout", "held-out greedy accuracy (mean over nodes)"),
                        ("local_reward", "local reward per own question (moving average)")):
        fig, ax = plt.subplots(figsize=(7, 4.2))
        for config, curve in curves.items():
            _line(ax, config, curve, key)
        ax.set(xlabel="round", ylabel=ylabel, title=title)
        ax.grid(alpha=0.3)
        ax.legend(title="I/J")
        fig.tight_layout()
        path = out / FILES[key]
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written


def _line(ax, config: str, curve: dict[str, Any], key: str) -> None:
    rounds = curve["heldout_rounds"] if key == "heldout" else curve["rounds"]
    mean, std = curve[key]["mean"], curve[key]["std"]
    if key == "local_reward":
        window = max(1, len(mean) // SMOOTHING)
        mean, std = moving_average(mean, window), moving_average(std, window)
    marker = "o" if key == "heldout" else None
    (line,) = ax.plot(rounds, mean, marker=marker, label=config)
    ax.fill_between(rounds, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)],
                    color=line.get_color(), alpha=0.2)


def moving_average(values: list[float], window: int) -> list[float]:
    return [sum(values[max(0, i - window + 1):i + 1]) / len(values[max(0, i - window + 1):i + 1]) for i in range(len(values))]
