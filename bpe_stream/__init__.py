"""bpe-stream: byte-level BPE tokenizers trained on corpora larger than RAM.

Library entry points: :class:`Tokenizer` (encode/decode, load/save), :func:`train_bpe`
(CS336 shape), :class:`Store` (the LMDB word-frequency store) and
:func:`train_from_store`.
"""

from .pipeline import train_bpe, train_from_store
from .store import Store
from .tokenizer import Tokenizer
from .trainer import TrainConfig, Trainer

__version__ = "0.1.0"
__all__ = ["Tokenizer", "Store", "TrainConfig", "Trainer", "train_bpe", "train_from_store", "__version__"]
