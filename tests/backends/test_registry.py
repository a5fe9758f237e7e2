"""The registry: the automatic order on each kind of machine, capability flags, resume compatibility."""

from __future__ import annotations

import pytest

from backends import registry
from backends.base import Backend, Gpu, Hardware
from backends.fake import FakeBackend

CPU_ONLY = Hardware(cpu_count=4, physical_cores=2, ram_bytes=16 * 2**30, system="Linux", machine="x86_64")
NVIDIA = Hardware(cuda=True, cuda_name="RTX 4090", cuda_memory_bytes=24 * 2**30,
                  gpus=(Gpu("RTX 4090", 24 * 2**30, "8.9", True),), system="Linux", machine="x86_64")


class Accelerated(FakeBackend):
    name = "accel"

    @classmethod
    def runs_accelerated(cls, hw: Hardware) -> bool:
        return hw.cuda


@pytest.fixture
def engines(monkeypatch):
    """A registry with test engines registered exactly like the real ones."""
    table = dict(registry.ENGINES)
    monkeypatch.setattr(registry, "ENGINES", table)
    return table


def test_flags_are_read_from_the_class():
    assert registry.capabilities("fake") == registry.Capabilities("fake-json")
    assert registry.capabilities("torch").adapter_format == "peft"


def test_an_accelerated_engine_goes_first_only_where_it_is_accelerated(engines):
    engines.clear()
    engines.update({"torch": "tests.backends.test_registry:Accelerated",
                    "llama_cpp": "backends.fake:FakeBackend"})
    assert registry.auto_order(NVIDIA) == ["torch", "llama_cpp"]
    assert registry.auto_order(CPU_ONLY) == ["llama_cpp", "torch"]


def test_only_registered_engines_are_tried():
    assert set(registry.auto_order(CPU_ONLY)) <= set(registry.ENGINES)
    assert registry.auto_order(Hardware(apple_silicon=True, system="Darwin", machine="arm64"))[0] == "mlx"
    assert "mlx" not in registry.auto_order(CPU_ONLY)  # MLX on Linux runs on CPU with reference BLAS: opt-in


def test_resume_needs_the_same_adapter_format():
    assert registry.resume_conflict("torch", "torch") is None
    message = registry.resume_conflict("torch", "fake")
    assert "peft" in message and "fake-json" in message and "--backend torch" in message
    assert "--fresh" in registry.resume_conflict("mystery", "torch")


def test_every_flag_has_a_default_on_the_base_class():
    assert Backend.adapter_format == "peft"


def test_on_a_cpu_only_machine_auto_tries_llama_cpp_before_torch_and_never_fake():
    assert registry.auto_order(CPU_ONLY) == ["llama_cpp", "torch"]
    assert registry.choose("fake", CPU_ONLY)[0] == "fake"
