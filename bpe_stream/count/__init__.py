"""Counting: bytes in, pretoken counts into the store."""
