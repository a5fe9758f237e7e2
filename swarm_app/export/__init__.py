"""A run's adapter rewritten for other tools (`swarm export`: GGUF files and an Ollama Modelfile,
`gguf.py`) or for another engine of this app (`swarm convert`, `convert.py`).

Both work on the files of a run folder and load no model. A feature above the session; the commands
print what they return.
"""
