"""Training: the plan, the driver and the merge engines (in memory and on disk)."""
