"""A tiny offline tokenizer folder (word level, 128 words) that AutoTokenizer loads (SGLang bench client).

python tests/fakes/tiny_tokenizer.py DIR     # or import it and call build(DIR)
"""

from __future__ import annotations

import sys
from pathlib import Path

SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]
WORDS = ["token"] + [f"w{i}" for i in range(123)]


def build(folder: Path | str) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {word: i for i, word in enumerate(SPECIALS + WORDS)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    folder = Path(folder)
    wrapped.save_pretrained(folder)
    return folder


if __name__ == "__main__":
    print(build(sys.argv[1] if len(sys.argv) > 1 else "tiny-tokenizer"))
