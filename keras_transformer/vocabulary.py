"""A trained model carried over to another subword vocabulary, for fine-tuning on new data.

The model has one matrix for the source embedding, the target embedding and the pre-softmax
projection (§3.4). `update_vocabulary` gives a model of the new vocabulary whose row for each
piece that both vocabularies hold is that piece's row in the old matrix; the rows of new pieces
are drawn as `SharedEmbedding`'s own initializer draws them, and every other weight is copied.
The matrix stays one matrix (tied), as in the model given.

What holds afterwards, exactly: for a vocabulary of the same pieces in another order, every
sentence gets the same per-token log-probabilities. With new pieces, the logits of the shared
pieces are unchanged; the full-softmax log-probabilities are not, since each new row adds its
exp(logit) to the normaliser, but renormalised over the shared pieces they equal the old ones.
Needs no TensorFlow: the tokenizers are read through `vocab_size` and `id_to_piece`.
"""

import dataclasses

import keras


def shared_rows(old_tokenizer, new_tokenizer):
    """(ids in the new vocabulary, ids in the old one) of the pieces both hold."""
    old = {old_tokenizer.id_to_piece(i): i for i in range(old_tokenizer.vocab_size)}
    pairs = [
        (i, old[piece])
        for i in range(new_tokenizer.vocab_size)
        if (piece := new_tokenizer.id_to_piece(i)) in old
    ]
    return [new for new, _ in pairs], [old for _, old in pairs]


def update_vocabulary(model, old_tokenizer, new_tokenizer):
    """A new Transformer like `model` (its config, dtype policy and name) for `new_tokenizer`'s
    vocabulary: the rows of shared pieces copied from `model`'s embedding matrix (and from its
    source matrix when `share_embeddings` is False), the other rows freshly initialised, every
    other weight copied. `old_tokenizer` is `model`'s own vocabulary."""
    from keras_transformer.model import Transformer

    model.config.check_tokenizer(old_tokenizer)
    config = dataclasses.replace(
        model.config, vocab_size=new_tokenizer.vocab_size, tokenizer_sha256=new_tokenizer.sha256
    )
    updated = Transformer.from_config({**model.get_config(), "config": config.to_dict()})
    new_ids, old_ids = shared_rows(old_tokenizer, new_tokenizer)
    embedding = updated.embedding
    matrices = {v.path for v in (embedding.target_embeddings, embedding.source_embeddings)}
    old_values = {v.path: keras.ops.convert_to_numpy(v) for v in model.trainable_variables}
    for variable in updated.trainable_variables:
        value = old_values[variable.path]
        if variable.path in matrices:
            rows = keras.ops.convert_to_numpy(variable).copy()  # the initializer's draws
            rows[new_ids] = value[old_ids]
            value = rows
        variable.assign(value)
    return updated
