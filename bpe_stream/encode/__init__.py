"""Encoding and decoding: the tokenizer, parallel encoding, id files and evaluation."""
