"""Hugging Face architectures on spyre: the model sweep.

``python -m torch_spyre.models sweep`` builds every text architecture of the
installed transformers from a tiny seeded config and runs it on spyre
against the CPU (eager, strict, compiled, generate); see ``__main__.py``.

- ``configs``: which architectures, and their tiny configs;
- ``runner``: one architecture, mode by mode (in-process);
- ``sweep``: every architecture in a child process, resumable;
- ``report``: sweep.json -> sweep.md and the pass-rate plot.
"""
