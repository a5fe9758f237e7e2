"""`swarm doctor --json` through cli.main, on faked machines: Linux + NVIDIA, CPU-only Linux, an M-series Mac."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from backends.base import Hardware
from swarm_app.cli import main
from swarm_app.doctor import report as doctor_command
from swarm_app.kernel import hardware
from swarm_app.kernel.hardware import Sources
from tests.kernel.test_hardware import X86_CPUINFO, mac_bin, nvidia_bin

pytest.importorskip("torch")  # the decisions below assume the default install (torch, transformers, peft)


def doctor_json(capsys, monkeypatch, sources: Sources | None, *flags: str, code: int = 0) -> dict:
    if sources is not None:
        monkeypatch.setattr(hardware, "live_sources", lambda: sources)
    assert main(["doctor", "--json", *flags]) == code  # 1: a check failed
    return json.loads(capsys.readouterr().out)


def engines(report: dict) -> dict:
    return {e["name"]: e for e in report["backends"]}


def test_linux_with_nvidia_and_a_cpu_build_of_torch(tmp_path, capsys, monkeypatch):
    src = Sources("Linux", "x86_64", X86_CPUINFO, str(nvidia_bin(tmp_path)), (), tmp_path, False)
    monkeypatch.setattr("backends.torch.engine.torch_cuda_build", lambda: "")
    report = doctor_json(capsys, monkeypatch, src)
    assert report["hardware"]["gpus"][0]["name"] == "NVIDIA GeForce RTX 4090"
    # The card goes unused by auto's CPU choice (llama.cpp where installed), and the reason says why.
    assert report["chosen"] in {"torch", "llama_cpp"} and "this torch is a CPU build" in report["reason"]
    assert engines(report)["torch"]["install"] == ("pip install --force-reinstall torch "
                                                   "--index-url https://download.pytorch.org/whl/cu124")


def test_linux_with_nvidia_and_a_cuda_torch_trains_on_the_gpu(tmp_path, capsys, monkeypatch):
    src = Sources("Linux", "x86_64", X86_CPUINFO, str(nvidia_bin(tmp_path)), (), tmp_path, False)
    monkeypatch.setattr("backends.torch.engine.torch_cuda_build", lambda: "12.4")
    report = doctor_json(capsys, monkeypatch, src)
    assert (report["chosen"], report["reason"]) == ("torch", "torch on CUDA (NVIDIA GeForce RTX 4090)")
    assert report["recommended"]["model"] == "Qwen/Qwen2.5-1.5B-Instruct"  # 24 GiB with bf16


def test_cpu_only_linux(tmp_path, capsys, monkeypatch):
    src = Sources("Linux", "x86_64", X86_CPUINFO, str(tmp_path / "empty-bin"), (), tmp_path, False)
    report = doctor_json(capsys, monkeypatch, src)
    assert report["hardware"]["gpus"] == [] and "avx512f" in report["hardware"]["simd"]
    assert report["chosen"] in {"torch", "llama_cpp"}
    assert {"chosen", "reason", "backends"} <= set(report)
    assert all(set(e) >= {"name", "available", "reason"} for e in report["backends"])
    assert [e["name"] for e in report["backends"]] == ["torch", "mlx", "llama_cpp", "fake"]
    assert report["model"]["model_id"] == "swarm-tiny"
    assert report["recommended"]["threads"] >= 1


def test_macos_arm64(tmp_path, capsys, monkeypatch):
    src = Sources("Darwin", "arm64", "", str(mac_bin(tmp_path)), (), tmp_path, False)
    report = doctor_json(capsys, monkeypatch, src)
    assert report["hardware"]["apple_silicon"] and report["hardware"]["apple_chip"] == "Apple M2 Pro"
    mlx = engines(report)["mlx"]
    assert mlx["available"] == mlx["installed"]
    if not mlx["installed"]:
        assert mlx["install"] == 'pip install "swarm-app[mlx]"'
    # On Apple silicon auto prefers MLX (the GPU) over torch (CPU there) wherever mlx is installed.
    assert (report["chosen"] == "mlx") == mlx["installed"]


@pytest.mark.parametrize("hw, command", [
    (Hardware(system="Darwin", machine="arm64", apple_silicon=True), "pip install torch"),
    (Hardware(system="Linux"), "pip install torch --index-url https://download.pytorch.org/whl/cpu"),
    (Hardware(system="Windows"), "pip install torch --index-url https://download.pytorch.org/whl/cpu"),
    (Hardware(system="Windows", cuda=True, cuda_driver="572.16"),
     "pip install --force-reinstall torch --index-url https://download.pytorch.org/whl/cu128"),
    (Hardware(system="Linux", cuda=True, cuda_driver="565.57"),
     "pip install --force-reinstall torch --index-url https://download.pytorch.org/whl/cu126"),
    (Hardware(system="Linux", cuda=True, cuda_driver="470.82"),
     "update the NVIDIA driver to 525 or newer, then: pip install torch --index-url https://download.pytorch.org/whl/cu124"),
])
def test_the_torch_install_command_fits_the_machine(hw, command):
    assert doctor_command.torch_install_command(hw) == command


def test_listen_port_and_bootstrap_peers(tmp_path, capsys, monkeypatch):
    with socket.socket() as busy, socket.socket() as closed:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        closed.bind(("127.0.0.1", 0))
        closed_port = closed.getsockname()[1]
        closed.close()  # nothing listens there now
        port = busy.getsockname()[1]
        report = doctor_json(capsys, monkeypatch, None, "--listen", f"127.0.0.1:{port}",
                             "--peer", f"127.0.0.1:{port}", "--peer", f"127.0.0.1:{closed_port}", "--peer", "nonsense")
    assert report["listen"]["free"] is False and report["listen"]["reason"]
    reach = {p["address"]: p["reachable"] for p in report["peers"]}
    assert reach == {f"127.0.0.1:{port}": True, f"127.0.0.1:{closed_port}": False, "nonsense": False}


def test_a_free_listen_port_and_a_missing_model(capsys, monkeypatch, tmp_path):
    report = doctor_json(capsys, monkeypatch, None, "--listen", "127.0.0.1:0", "--model", str(tmp_path / "none"), code=1)
    assert report["listen"]["free"] is True
    assert report["model"]["folder"] is None and "does not exist" in report["model"]["error"]


def test_the_text_report_names_the_choice(capsys):
    assert main(["doctor", "--listen", "127.0.0.1:0"]) == 0
    out = capsys.readouterr().out
    assert "chosen: " in out and "recommended: " in out and "config file: " in out


def test_pace_times_probe_rounds_on_the_chosen_engine(capsys, monkeypatch):
    report = doctor_json(capsys, monkeypatch, None, "--listen", "127.0.0.1:0", "--backend", "fake", "--pace")
    pace = report["pace"]
    assert 0 < pace["round_s"] < 60 and pace["rounds_per_hour"] >= 60
    assert len(pace["probe_s"]) == 2 and "on fake" in pace["how"]
    assert main(["doctor", "--listen", "127.0.0.1:0", "--backend", "fake", "--pace"]) == 0
    assert "s per round, ~" in capsys.readouterr().out


def test_pace_without_a_model_says_why_not(capsys, monkeypatch, tmp_path):
    report = doctor_json(capsys, monkeypatch, None, "--listen", "127.0.0.1:0", "--pace", "--model", str(tmp_path / "none"),
                         code=1)
    assert report["pace"].startswith("not probed:") and "does not exist" in report["pace"]


@pytest.mark.skipif(Path("/proc/driver/nvidia").exists(), reason="a driver without nvidia-smi makes doctor ask torch")
def test_doctor_on_a_machine_without_a_gpu_imports_no_engine():
    code = ("import sys; from swarm_app.cli import main; main(['doctor', '--json', '--listen', '127.0.0.1:0']); "
            "heavy = {'torch', 'textual', 'mlx', 'llama_cpp', 'transformers'}; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy), file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stderr.strip().splitlines()[-1] == "[]"


def test_a_peer_on_a_newer_protocol_says_how_to_update(capsys, monkeypatch):
    import http.server
    import json as jsonlib
    import threading

    class NewerNode(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = jsonlib.dumps({"protocol": "RSP/1", "v": 2, "software": "swarm-app/9.0.0"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), NewerNode)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        address = f"127.0.0.1:{server.server_port}"
        report = doctor_json(capsys, monkeypatch, None, "--listen", "127.0.0.1:0", "--peer", address)
    finally:
        server.shutdown()
    peer = report["peers"][0]
    assert peer["reachable"] and peer["protocol"] == 2 and peer["software"] == "swarm-app/9.0.0"
    assert "protocol v2" in peer["update"] and "install.sh" in peer["update"]


def test_doctor_exits_1_and_says_which_check_failed(capsys, monkeypatch):
    """Issue 29: it exited 0 with the listen port taken and every peer unreachable."""
    monkeypatch.setenv("SWARM_PEER_ENABLED", "true")  # a node that joins the swarm: its port is a check
    with socket.socket() as busy, socket.socket() as closed:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        closed.bind(("127.0.0.1", 0))
        gone = f"127.0.0.1:{closed.getsockname()[1]}"
        closed.close()
        taken = f"127.0.0.1:{busy.getsockname()[1]}"
        assert main(["doctor", "--listen", taken]) == 1
        said = capsys.readouterr().err.strip().splitlines()
        assert len(said) == 1 and said[0].startswith(f"swarm doctor: 1 check failed: listen {taken} is not free ("), said
        assert main(["doctor", "--listen", "127.0.0.1:0", "--peer", gone]) == 1
        err = capsys.readouterr().err
        assert f"no bootstrap or --peer address answers ({gone}: " in err and "check failed" in err
        assert main(["doctor", "--listen", "127.0.0.1:0", "--peer", gone, "--peer", taken]) == 0  # one answers
    assert main(["doctor", "--listen", "127.0.0.1:0"]) == 0
    assert capsys.readouterr().err == ""


@contextlib.contextmanager
def node_in_a_thread(config):
    """A real peer node on its own event loop thread: doctor runs asyncio.run itself."""
    from swarm_app.peer.core.identity import Identity
    from swarm_app.peer.io.node import PeerNode

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    node = PeerNode(config, Identity.generate())
    asyncio.run_coroutine_threadsafe(node.start(), loop).result(10)
    try:
        yield node
    finally:
        asyncio.run_coroutine_threadsafe(node.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def test_doctor_names_the_swarm_and_asks_a_peer_to_dial_it_back(capsys, monkeypatch):
    from swarm_app.peer.core.config import local_config

    monkeypatch.setenv("SWARM_PEER_ENABLED", "true")
    with node_in_a_thread(local_config()) as helper:
        report = doctor_json(capsys, monkeypatch, None, "--listen", "127.0.0.1:0", "--bootstrap", helper.address)
        reach = report["reachability"]
        swarm = {k: v for k, v in report["swarm"].items() if k != "discovery"}
        assert swarm == {"name": "easy", "bootstrap": [helper.address], "bootstrap_from": "settings",
                         "dns_seeds": []}
        assert report["peers"][0]["swarm"] == "easy" and report["peers"][0]["update"] == ""
        assert reach["checked"] and reach["reachable"] is True and reach["confirmed"] == 1 and reach["port"] > 0
        assert reach["lan_only"] and reach["confirmed_from_internet"] == 0  # the helper is on loopback
        assert helper.dialback.counters["served"] == 1
        assert main(["doctor", "--listen", "127.0.0.1:0", "--bootstrap", helper.address]) == 0
        out = capsys.readouterr().out
        assert f"swarm: easy; bootstrap (settings): {helper.address}" in out
        assert "reachable from outside: on this network only (peers here dialed it back on port " in out


def test_a_helper_named_by_host_name_counts_by_the_address_it_resolves_to(capsys, monkeypatch):
    """`localhost` is no IP: it counts as the loopback address it resolves to, not as a host on the internet."""
    from swarm_app.peer.core.config import local_config

    monkeypatch.setenv("SWARM_PEER_ENABLED", "true")
    with node_in_a_thread(local_config()) as helper:
        named = "localhost:" + helper.address.rsplit(":", 1)[1]
        reach = doctor_json(capsys, monkeypatch, None, "--listen", "127.0.0.1:0", "--bootstrap", named)["reachability"]
        assert reach["checked"] and reach["confirmed"] == 1 and helper.dialback.counters["served"] == 1
        assert reach["lan_only"] and reach["confirmed_from_internet"] == 0


@pytest.mark.skipif(sys.platform != "linux", reason="needs 127.x.y.z addresses (Linux)")
def test_doctor_says_when_peers_cannot_dial_back_and_how_to_fix_it(capsys, monkeypatch):
    """It listens on 127.0.6.2 but asks from 127.0.0.1: the helper dials 127.0.0.1, where nothing listens."""
    from swarm_app.peer.core.config import local_config

    monkeypatch.setenv("SWARM_PEER_ENABLED", "true")
    with node_in_a_thread(local_config()) as helper:
        report = doctor_json(capsys, monkeypatch, None, "--listen", "127.0.6.2:0", "--bootstrap", helper.address)
        reach = report["reachability"]
        assert reach["checked"] and reach["reachable"] is False and reach["failed"] == 1
        assert "it still works: it dials out" in reach["text"]
        assert reach["fix"] == (f"to accept peers too: forward TCP port {reach['port']} on your router to this computer, "
                                "or enable UPnP there")


def test_doctor_says_a_peer_of_another_swarm_will_not_connect(capsys, monkeypatch):
    from swarm_app.peer.core.config import local_config

    monkeypatch.setenv("SWARM_PEER_ENABLED", "true")
    with node_in_a_thread(local_config()) as helper:
        report = doctor_json(capsys, monkeypatch, None, "--listen", "127.0.0.1:0", "--swarm", "my-lab",
                             "--bootstrap", helper.address)
    assert report["peers"][0]["update"] == "it is in swarm 'easy', this node joins 'my-lab': they will not connect (--swarm easy)"
    assert report["reachability"]["checked"] is False
    assert "no peer of this swarm answered" in report["reachability"]["text"]


def test_doctor_without_a_bootstrap_says_none_ships_and_a_bad_swarm_name_is_exit_2(capsys, monkeypatch):
    monkeypatch.setenv("SWARM_PEER_ENABLED", "true")
    assert main(["doctor", "--listen", "127.0.0.1:0"]) == 0
    out = capsys.readouterr().out
    assert "swarm: easy; bootstrap (shipped with the app): none (none ships: the DHT finds the swarm by name" in out
    assert "reachable from outside: not checked: no peer of this swarm answered" in out
    assert main(["doctor", "--swarm", "Bad Name"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "swarm name 'Bad Name'" in err[0]
