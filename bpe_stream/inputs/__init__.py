"""Inputs: files, stdin, compressed and record forms, read and cut into pieces at safe points."""
