"""The text normalization shared by the tokenizer (in the graph) and the programs that tokenize
in Python (the CTranslate2 translator): NFKC, U+2581 as a space, ASCII whitespace stripped."""

import unicodedata

ASCII_WHITESPACE = " \t\n\r\f\v"
WORD_BOUNDARY = "\u2581"  # sentencepiece's own space mark; it cannot survive detokenization


def normalize_text(text):
    """The normalization of `SubwordTokenizer.normalize`, for one Python string."""
    return unicodedata.normalize("NFKC", text).replace(WORD_BOUNDARY, " ").strip(ASCII_WHITESPACE)
