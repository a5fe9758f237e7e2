"""Batched generation in llama.cpp through its low-level API: many sequences per `llama_decode`.

Owns one llama.cpp model, one context and one token batch. A call takes rows of prompt ids in which
copies of a prompt sit next to each other (L completions per question): each distinct prompt is
evaluated once, in the sequence of its first row, and its KV cells are shared with the other copies
(`llama_memory_seq_cp` in a unified KV cache); then every unfinished row advances one token per
`llama_decode`, and rows that stop leave the batch. The caller chooses the tokens: it gets each step's
logits as one (rows x vocab) float32 array, a view of llama.cpp's buffer (the llama_cpp engine hands them
to the torch engine's token chooser, so both engines sample alike; llama.cpp's own sampler chain cost
~1.2 ms per row and step over a 152k vocabulary, 10% of a 0.5B model's decode).
The KV cache is F32 (F16 moves logits by ~1e-2). Imports llama_cpp on construction only.
Must not import swarm_app.
"""

from __future__ import annotations

import ctypes
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from backends.base import BackendError, Progress

Chooser = Callable[[np.ndarray], list[int]]
"""(rows x vocab) float32 logits -> one token per row."""

SEQUENCES = 64
"""Rows per context pass: the context's n_seq_max (llama.cpp allows up to 256)."""
BATCH_TOKENS = 512
"""Tokens per llama_decode call while prompts are evaluated (n_batch = n_ubatch)."""
CELL_STEP = 1024
"""The context grows in steps of this many KV cells when a call needs more."""
F32 = 0
"""ggml type id of float32."""
NATIVE_LEVELS = {1: logging.DEBUG, 2: logging.DEBUG, 3: logging.DEBUG, 4: logging.WARNING}
"""ggml's log levels (1 debug, 2 info, 3 warn, 4 error; 5 continues a line) -> ours. llama.cpp warns about
things that are fine here (a unified KV cache larger than the training context), so only errors show."""
native_log = logging.getLogger("backends.llama_cpp.engine.native")
_log_callback = None
"""The ctypes callback handed to llama_log_set (kept alive here: llama.cpp holds only its address)."""


@dataclass
class Row:
    """One sequence being generated: the tokens so far, and whether a stop token ended it."""

    seq: int
    prompt_len: int
    tokens: list[int] = field(default_factory=list)
    stopped: bool = False


def _forward_native_log(level: int, text: bytes, _user_data) -> None:
    line = text.decode("utf-8", "replace").strip()
    if line:
        native_log.log(NATIVE_LEVELS.get(level, logging.DEBUG), "%s", line)


class BatchedDecoder:
    def __init__(self, gguf: Path, threads: int) -> None:
        import llama_cpp

        global _log_callback
        if _log_callback is None:
            # llama-cpp-python's own callback maps levels of an older ggml, so warnings reach stderr raw.
            _log_callback = llama_cpp.llama_log_callback(_forward_native_log)
            llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))
            llama_cpp.llama_backend_init()
        self._lib = llama_cpp
        self._threads = max(1, threads)
        params = llama_cpp.llama_model_default_params()
        self._model = llama_cpp.llama_model_load_from_file(str(gguf).encode(), params)
        if not self._model:
            raise BackendError(f"llama.cpp cannot load {gguf}: delete the file to convert again, or use --backend torch")
        self._vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(self._model))
        self._ctx = None
        self._cells = 0
        self._adapter = None
        self._batch = llama_cpp.llama_batch_init(max(BATCH_TOKENS, SEQUENCES), 0, 1)

    @property
    def model(self):
        """The llama_model pointer (for llama_adapter_lora_init)."""
        return self._model

    def set_threads(self, threads: int) -> None:
        """Threads for the next decode calls (llama_set_n_threads on a live context, else at its creation)."""
        self._threads = max(1, threads)
        if self._ctx is not None:
            self._lib.llama_set_n_threads(self._ctx, self._threads, self._threads)

    def set_adapter(self, adapter) -> None:
        """Attach `adapter` (a llama_adapter_lora pointer, or None) at scale 1 to this and every later context."""
        self._adapter = adapter
        if self._ctx is not None:
            self._attach()

    def _attach(self) -> None:
        lib = self._lib
        if self._adapter is None:
            lib.llama_set_adapters_lora(self._ctx, None, 0, None)
            return
        adapters = (lib.llama_adapter_lora_p_ctypes * 1)(self._adapter)
        scales = (ctypes.c_float * 1)(1.0)
        if lib.llama_set_adapters_lora(self._ctx, adapters, 1, scales) != 0:
            raise BackendError("llama.cpp could not attach the adapter: use --backend torch and report this")

    def _context(self, cells: int):
        """A context with at least `cells` KV cells (a new one, adapter attached, when the old one is smaller)."""
        lib = self._lib
        if self._ctx is not None and self._cells >= cells:
            return self._ctx
        self._free_context()
        params = lib.llama_context_default_params()
        params.n_ctx = -(-cells // CELL_STEP) * CELL_STEP
        params.n_batch = params.n_ubatch = BATCH_TOKENS
        params.n_seq_max = SEQUENCES
        params.n_threads = params.n_threads_batch = self._threads
        params.type_k = params.type_v = F32
        params.kv_unified = True  # copies of a prompt share its cells (measured: as fast as one stream each)
        params.no_perf = True
        self._ctx = lib.llama_init_from_model(self._model, params)
        if not self._ctx:
            raise BackendError(f"llama.cpp could not create a context of {params.n_ctx} tokens: "
                               "lower train.completions or sampling.max_new_tokens")
        self._cells = params.n_ctx
        self._attach()
        return self._ctx

    def generate(self, rows: list[list[int]], choose: Chooser, max_new: int, stops: set[int],
                 progress: Progress | None = None) -> list[tuple[list[int], bool]]:
        """(new tokens without the stop token, stopped by a stop token) per row of prompt ids."""
        out: list[tuple[list[int], bool]] = []
        chunks = range(0, len(rows), SEQUENCES)
        for k, start in enumerate(chunks):
            report = None if progress is None else (lambda step, k=k: progress(k * max_new + step, len(chunks) * max_new))
            done = self._generate_chunk(rows[start : start + SEQUENCES], choose, max_new, stops, report)
            out.extend((row.tokens, row.stopped) for row in done)
        return out

    def _generate_chunk(self, prompts, choose: Chooser, max_new: int, stops: set[int], report) -> list[Row]:
        lib = self._lib
        firsts = [i for i in range(len(prompts)) if i == 0 or prompts[i] != prompts[i - 1]]
        ctx = self._context(sum(len(prompts[i]) for i in firsts) + len(prompts) * max_new + 1)
        memory = lib.llama_get_memory(ctx)
        lib.llama_memory_clear(memory, True)
        rows = [Row(seq=i, prompt_len=len(p)) for i, p in enumerate(prompts)]
        ends = dict(zip(firsts, [*firsts[1:], len(prompts)]))
        for first, logits in self._evaluate([(prompts[first], first) for first in firsts]):
            for copy in range(first + 1, ends[first]):
                lib.llama_memory_seq_cp(memory, first, copy, -1, -1)
            # every copy draws its first token from the prompt's logits
            self._accept(rows[first : ends[first]], choose(np.repeat(logits[None], ends[first] - first, axis=0)), stops)
        for step in range(1, max_new):
            active = [row for row in rows if not row.stopped and len(row.tokens) < max_new]
            if report is not None:
                report(step)
            if not active:
                break
            self._decode([(row.tokens[-1], row.prompt_len + len(row.tokens) - 1, row.seq, True) for row in active])
            self._accept(active, choose(np.ctypeslib.as_array(lib.llama_get_logits(ctx), shape=(len(active), self._vocab))),
                         stops)
        if report is not None:
            report(max_new)
        for row in rows:
            if row.stopped:
                row.tokens.pop()
        return rows

    @staticmethod
    def _accept(rows: list[Row], tokens: list[int], stops: set[int]) -> None:
        for row, token in zip(rows, tokens):
            row.tokens.append(token)
            row.stopped = token in stops

    def _evaluate(self, prompts: list[tuple[list[int], int]]):
        """Run each (prompt ids, sequence) through its sequence, several prompts per llama_decode (up to
        BATCH_TOKENS tokens); yields (sequence, a copy of its last token's logits) as each is ready."""
        tokens = [(token, pos, seq, pos == len(prompt) - 1) for prompt, seq in prompts for pos, token in enumerate(prompt)]
        for start in range(0, len(tokens), BATCH_TOKENS):
            part = tokens[start : start + BATCH_TOKENS]
            self._decode(part)
            for i, (_, _, seq, last) in enumerate(part):
                if last:
                    yield seq, np.ctypeslib.as_array(self._lib.llama_get_logits_ith(self._ctx, i), shape=(self._vocab,)).copy()

    def _decode(self, tokens: list[tuple[int, int, int, bool]]) -> None:
        """One llama_decode of (token, position, sequence, wants logits) tuples."""
        batch = self._batch
        batch.n_tokens = len(tokens)
        for i, (token, pos, seq, logits) in enumerate(tokens):
            batch.token[i] = token
            batch.pos[i] = pos
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq
            batch.logits[i] = logits
        status = self._lib.llama_decode(self._ctx, batch)
        if status != 0:
            raise BackendError(f"llama.cpp could not decode a batch of {len(tokens)} tokens (status {status}): "
                               "use --backend torch and report this")

    def model_size(self) -> int:
        return int(self._lib.llama_model_size(self._model))

    def _free_context(self) -> None:
        if self._ctx is not None:
            self._lib.llama_set_adapters_lora(self._ctx, None, 0, None)
            self._lib.llama_free(self._ctx)
            self._ctx, self._cells = None, 0

    def close(self) -> None:
        """Free the context, batch and model (the adapter belongs to the caller)."""
        self._free_context()
        if self._batch is not None:
            self._lib.llama_batch_free(self._batch)
            self._batch = None
        if self._model:
            self._lib.llama_model_free(self._model)
            self._model = None
