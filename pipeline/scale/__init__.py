"""Scaling out: `python -m pipeline repro` runs DVC's stale stages side by side (`repro`), on local processes with
their own GPUs or as SLURM jobs through submitit (`executors`). No training cell depends on this code.
"""
