"""The special token ids every part of the library agrees on: the tokenizer's vocabulary puts
them first, the model masks padding by them, decoding starts and stops with them."""

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
SPECIAL_IDS = (PAD_ID, UNK_ID, BOS_ID, EOS_ID)
