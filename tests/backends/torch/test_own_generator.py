"""Each torch engine samples from its own generator: nodes in one process never share torch's global one.

`swarm experiment` and `swarm demo` run several nodes in one process, each generating on its own thread. When
every engine seeded and drew from torch's global generator, one node's draw took numbers from another's stream,
and a cell run twice differed from round 1. CPU, one thread, the tiny untrained llama.
"""

from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from backends.base import ModelSpec, Sampling  # noqa: E402
from backends.torch.engine import TorchBackend  # noqa: E402

PROMPTS = [[{"role": "user", "content": f"What is {k} + 4?"}] for k in range(4)]
SAMPLED = Sampling(max_new_tokens=24, temperature=1.0, seed=1234)


@pytest.fixture(scope="module")
def backend(tiny_model_dir):
    torch.set_num_threads(1)
    b = TorchBackend()
    b.load(ModelSpec(path=str(tiny_model_dir), threads=1))
    yield b
    b.close()


def texts(backend, sampling=SAMPLED) -> list[str]:
    return [c.text for group in backend.generate(PROMPTS, 4, sampling) for c in group]


def test_a_seeded_call_is_not_moved_by_another_thread_drawing_from_the_global_generator(backend):
    alone = texts(backend)
    assert len(set(alone)) > 4  # sampled, not one answer repeated: a shared stream would show
    stop = threading.Event()

    def another_node() -> None:  # what a second engine on another thread did with the global generator
        while not stop.is_set():
            torch.manual_seed(99)
            torch.rand(64)

    hammer = threading.Thread(target=another_node)
    hammer.start()
    try:
        beside = [texts(backend) for _ in range(3)]
    finally:
        stop.set()
        hammer.join()
    assert beside == [alone] * 3


def test_an_unseeded_call_leaves_the_global_generator_alone(backend):
    torch.manual_seed(5)
    before = torch.get_rng_state()
    texts(backend, Sampling(max_new_tokens=8, temperature=1.0))
    assert torch.equal(torch.get_rng_state(), before)
