"""Pretokenizing: the named patterns, the native scanner, special-token splitting."""
