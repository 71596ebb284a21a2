"""The LMDB word-frequency store: its layout, batches, checkpoint, merging and the counts file."""
