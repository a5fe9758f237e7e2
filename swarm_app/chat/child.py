"""The TUI's chat: a `swarm chat --json-lines` process on the running node's folder, started on first use.

Why a process and not a second engine in the node's: torch keeps its random generator and its thread count
per process. Loading a torch engine seeds the global generator (a fresh LoRA adapter is drawn from seed 0)
and sets the thread count, so a second engine loaded beside a training one would change the node's draws
and threads: its rounds would no longer be a function of (seed, round). A process of its own has its own
generator, threads and memory (freed when the chat closes), reads the folder as `swarm chat` does (no
lock, nothing written), and is the same code path as the command. It costs a start (imports and a model
load: seconds), once. Replies come back as ChatReplied events on the asyncio loop that asked.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Callable

from swarm_app.kernel.events import ChatReplied
from swarm_app.kernel.paths import swarm_command

log = logging.getLogger(__name__)


class ChildChat:
    """`ask(prompt, reply)` on the loop; answers one prompt at a time, in order."""

    def __init__(self, run_dir: Path, backend: Callable[[], str] = lambda: "", threads: int = 1) -> None:
        """`backend()`: the node's engine once it is loaded ("" before: the checkpoint's, or auto)."""
        self.run_dir, self.backend, self.threads = run_dir, backend, threads
        self._proc: asyncio.subprocess.Process | None = None
        self._turn: asyncio.Lock | None = None
        self._asked = 0
        self._tasks: set[asyncio.Task] = set()

    def argv(self) -> list[str]:
        argv = [*swarm_command(), "chat", "--json-lines", "--run-dir", str(self.run_dir),
                "--threads", str(self.threads)]
        return argv + (["--backend", self.backend()] if self.backend() else [])

    def ask(self, prompt: str, reply: Callable[[ChatReplied], None]) -> int:
        """Queue `prompt`; `reply` hears its answer as it grows. Returns the prompt's number."""
        self._asked += 1
        task = asyncio.get_running_loop().create_task(self._answer(self._asked, prompt, reply))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return self._asked

    async def _answer(self, asked: int, prompt: str, reply: Callable[[ChatReplied], None]) -> None:
        self._turn = self._turn or asyncio.Lock()
        async with self._turn:
            text, source = "", ""
            try:
                proc = await self._started()
                proc.stdin.write((json.dumps({"prompt": prompt}) + "\n").encode("utf-8"))
                await proc.stdin.drain()
                while True:
                    message = await self._read(proc)
                    if "piece" in message:
                        text += str(message["piece"])
                        reply(ChatReplied(asked, text, source=source))
                    elif message.get("done"):
                        reply(ChatReplied(asked, str(message.get("text", text)), True, str(message.get("source", ""))))
                        return
                    elif "error" in message:
                        raise RuntimeError(str(message["error"]))
            except (RuntimeError, OSError, ValueError) as exc:
                reply(ChatReplied(asked, text, True, source, error=str(exc)))

    async def _started(self) -> asyncio.subprocess.Process:
        if self._proc is None or self._proc.returncode is not None:
            self._proc = await asyncio.create_subprocess_exec(
                *self.argv(), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, limit=1 << 20)
            ready = await self._read(self._proc)
            if not ready.get("ready"):
                raise RuntimeError(f"the chat did not start: {ready}")
        return self._proc

    async def _read(self, proc: asyncio.subprocess.Process) -> dict:
        line = await proc.stdout.readline()
        if not line:  # it ended: its last stderr line says why (a one-line error of swarm chat)
            err = (await proc.stderr.read()).decode("utf-8", "replace").strip().splitlines()
            raise RuntimeError(err[-1] if err else f"the chat process ended (exit {await proc.wait()})")
        message = json.loads(line)
        if not isinstance(message, dict):
            raise ValueError(f"not a chat message: {line[:200]!r}")
        return message

    async def close(self) -> None:
        """End the chat process (the node is not touched)."""
        for task in list(self._tasks):
            task.cancel()
        if self._proc is not None and self._proc.returncode is None:
            self._proc.stdin.close()
            try:
                await asyncio.wait_for(self._proc.wait(), 5)
            except asyncio.TimeoutError:
                self._proc.kill()
                await self._proc.wait()
