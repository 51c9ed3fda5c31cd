"""A sweep run: controllers, worker processes, ranks, the run folder and its records, what rank 0 prints."""
