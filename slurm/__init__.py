"""The kit on Slurm: the same A/B, eval and bench as sbatch jobs (slurm/README.md)."""
