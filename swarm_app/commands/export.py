"""`swarm export RUN --gguf DIR [--ollama NAME]`: a run's trained model as GGUF files (llama.cpp, Ollama).

Owns the flags and the printout; swarm_app/export/gguf.py writes the files.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("export", help="a run's trained model as GGUF files (llama.cpp, Ollama)")
    parser.add_argument("run_dir", metavar="RUN", help="the run folder (swarm run prints it)")
    parser.add_argument("--gguf", metavar="DIR", required=True, help="write base.gguf and adapter.gguf here")
    parser.add_argument("--ollama", metavar="NAME", help="also write a Modelfile for `ollama create NAME`")
    parser.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    from swarm_app.export.gguf import export_run

    done = export_run(Path(args.run_dir), Path(args.gguf), args.ollama or "")
    print(f"exported round {done.round}: {done.base} and {done.adapter}")
    print(f"  llama.cpp: llama-cli -m {done.base} --lora {done.adapter}")
    if done.modelfile is not None:
        print(f"  Ollama:    ollama create {args.ollama} -f {done.modelfile}  then  ollama run {args.ollama}")
    return 0
