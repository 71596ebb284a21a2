"""Runners: units of work on threads, processes or a Dask cluster."""
