"""Durability tests with real processes: SIGKILL at chosen points, restarts, concurrency."""
