"""Engines for generation and LoRA updates behind one small contract (`base.Backend`).

A leaf package: it never imports `swarm_app`. Engines are imported only when chosen (`registry`).
"""
