"""An engine that is installed but broken: its load fails the way a missing shared library does."""

from backends.fake import FakeBackend


class BrokenBackend(FakeBackend):
    name = "llama_cpp"

    @classmethod
    def is_available(cls, hw):
        return True, "installed (but broken)"

    def load(self, spec):
        raise OSError("libllama.so: cannot open shared object file: No such file or directory")
