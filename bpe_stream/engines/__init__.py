"""Engines that run the counting unit (``counting.count_range``) somewhere else than here."""
