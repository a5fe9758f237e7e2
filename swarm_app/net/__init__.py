"""The network shell's shared parts: the door of this process's HTTP servers (`gate.py`, aiohttp) and giving
freed network buffers back to the OS (`memory.py`). Only peer/io and watch import this package; nothing
below it (kernel, peer/core, training, backends) may reach aiohttp, directly or through another module.
"""
