"""The conversation in a terminal: a prompt per line in, the answer streamed out as it is decoded.

Every line is a question of its own (no history: the run's model learns single questions). With a task
(`--task`), a question of that task is asked at once and on each empty line, shown with the right answer
and the verifier's score on the `<answer>` span, the reward training would give. Writes to the streams
it is given (the command's stdout); the model's answers are streamed, the rest is whole lines.
"""

from __future__ import annotations

import json
import random
from typing import Iterable, TextIO

from backends.base import Completion, Sampling
from swarm_app.chat.talk import Talker, draw_question, prompt_messages
from swarm_app.kernel import tasks


def answer_prompt(talker: Talker, text: str, sampling: Sampling, out: TextIO) -> Completion:
    """Stream the answer to `text` to `out`, ending with a newline."""
    talker.refresh()
    completion = talker.answer(prompt_messages(text), sampling, lambda piece: _write(out, piece))
    _write(out, "\n")
    return completion


def answer_task(talker: Talker, specs: list[tasks.TaskSpec], rng: random.Random, sampling: Sampling,
                out: TextIO) -> float:
    """A new question of `specs`, the model's streamed answer, the right answer and the score; returns the score."""
    talker.refresh()
    task = draw_question(specs, rng)
    _write(out, f"question ({task.ref.dataset}, held-out item {task.ref.index}): {task.question}\nanswer: ")
    completion = talker.answer(task.messages(), sampling, lambda piece: _write(out, piece))
    reward = tasks.score(task, completion.text)
    given = tasks.extract_answer(completion.text)
    _write(out, f"\nright answer: {task.answer} · the model's: {given if given is not None else '(no <answer> span)'}"
                f" · score {reward:g}\n")
    return reward


def converse(talker: Talker, lines: Iterable[str], sampling: Sampling, out: TextIO,
             specs: list[tasks.TaskSpec] | None = None, rng: random.Random | None = None, prompt: str = "") -> None:
    """Answer every line until the input ends; with `specs`, a task question first and on each empty line."""
    rng = rng or random.Random()
    if specs:
        answer_task(talker, specs, rng, sampling, out)
    _write(out, prompt)
    for line in lines:
        text = line.strip()
        if text:
            answer_prompt(talker, text, sampling, out)
        elif specs:
            answer_task(talker, specs, rng, sampling, out)
        _write(out, prompt)


def _write(out: TextIO, text: str) -> None:
    if text:
        out.write(text)
        out.flush()


def serve_json_lines(talker: Talker, lines: Iterable[str], sampling: Sampling, out: TextIO) -> None:
    """For programs (the TUI's chat view): {"prompt": TEXT} per line in; {"piece": TEXT} as the answer is
    decoded, then {"done": true, "text": ..., "source": ...} out. A bad line gets {"error": ...}; the chat goes on."""
    _send(out, {"ready": True, "source": talker.source})
    for line in lines:
        try:
            text = json.loads(line)["prompt"]
            if not isinstance(text, str) or not text.strip():
                raise ValueError("an empty prompt")
        except (ValueError, KeyError, TypeError) as exc:
            _send(out, {"error": f"not a prompt ({exc}): send {{\"prompt\": TEXT}} per line"})
            continue
        talker.refresh()
        completion = talker.answer(prompt_messages(text), sampling, lambda piece: _send(out, {"piece": piece}))
        _send(out, {"done": True, "text": completion.text, "source": talker.source})


def _send(out: TextIO, message: dict) -> None:
    out.write(json.dumps(message) + "\n")
    out.flush()
