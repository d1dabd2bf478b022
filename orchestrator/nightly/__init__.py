"""Nightly rebuild matrices: a thin layer over the pipeline (issue 14).

A night is a plan (dossiers by targets), dispatched cell by cell to targets that already exist (Docker
endpoints, a Slurm partition), with history, drift and one summary page. Nothing here builds or probes:
each cell runs `orch rebuild` (the pipeline) against its target's engine. `cell.py` is the contract
between the runner (plan, history, summary) and the targets (docker endpoints, Slurm).
"""
