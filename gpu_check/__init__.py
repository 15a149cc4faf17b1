"""The GPU check: one command that runs every CUDA figure of the project on a bare single-GPU machine.

``python -m gpu_check OUT`` (``make gpu-check``) runs, each part in its own process under its own time limit
(a part that fails, crashes or runs out of time is recorded, and the others go on), and writes JSON and a
short Markdown summary into the folder OUT. ``plan`` says what runs and what it needs (no torch import: the dry
run works anywhere), ``driver`` runs the parts, ``parts`` holds them, ``summary`` writes the Markdown.
See docs/gpu_check.md.
"""
