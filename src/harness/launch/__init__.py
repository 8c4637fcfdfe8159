"""Running jobs elsewhere: SLURM through submitit, signals, and multi-process (DDP) runs."""
