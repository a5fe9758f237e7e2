"""Token ids in, text pieces out: what `Backend.stream` hands on while an engine decodes one completion.

Every engine that tokenizes with the model's HF tokenizer (torch, mlx, llama_cpp through torch) streams
through `TextPieces`: each new token is decoded with the tokens before it (a byte-level BPE token can end
inside a UTF-8 character, and a tokenizer may clean up spaces between tokens, so tokens are never decoded
one by one), and only the text added since the last piece is handed on. A token that leaves a broken
character ("\ufffd" at the end) waits for the next. The pieces join into exactly the text that
generate would return: `finish` hands on what is left. Must not import swarm_app.
"""

from __future__ import annotations

from backends.base import OnText


class TextPieces:
    """The text of one completion as it grows, up to its first stop token (which is never shown)."""

    def __init__(self, tokenizer, stop_ids: list[int], on_text: OnText) -> None:
        self._tok, self._stops, self._on_text = tokenizer, set(stop_ids), on_text
        self.ids: list[int] = []
        self.stopped = False
        self._sent = ""

    def add(self, token: int) -> None:
        """One more decoded token; hands on the text it completes (nothing once a stop token came)."""
        if self.stopped:
            return
        if token in self._stops:
            self.stopped = True
            return
        self.ids.append(token)
        text = self._tok.decode(self.ids, skip_special_tokens=True)
        if not text.endswith("\ufffd"):
            self._hand_on(text)

    def finish(self, text: str) -> None:
        """The completion's final text (as generate returns it): hands on what the pieces lack."""
        self._hand_on(text)

    def _hand_on(self, text: str) -> None:
        # A text that no longer extends what was sent (a clean-up rule of the tokenizer rewrote the end) waits
        # for `finish`, which the caller checks: the pieces must never contradict what was shown.
        if text.startswith(self._sent) and len(text) > len(self._sent):
            piece, self._sent = text[len(self._sent):], text
            self._on_text(piece)

    @property
    def sent(self) -> str:
        """Everything handed on so far."""
        return self._sent
