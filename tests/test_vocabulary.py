"""`kt.update_vocabulary`: a trained model carried over to another vocabulary (fine-tuning).

What can hold exactly is tested: with the same pieces in another order, the same per-token
log-probabilities; with new pieces added, the same logits for the shared pieces, and the same
log-probabilities once renormalised over the shared pieces (each new row adds exp(its logit) to
the full softmax's normaliser, so the full log-probabilities necessarily drop)."""

import numpy as np
import pytest
from keras import ops
from sentencepiece import sentencepiece_model_pb2

import keras_transformer as kt

SENTENCES = ["Der Hund läuft schnell.", "Die Katze schläft heute."]
TRANSLATIONS = ["The dog runs fast.", "The cat sleeps today."]


def reordered(tokenizer, new_pieces=(), seed=0):
    """`tokenizer`'s vocabulary with its pieces after the special ids in another order, and
    `new_pieces` (with scores too low to change any segmentation) mixed in."""
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(tokenizer.model_proto)
    pieces = list(proto.pieces)
    for text in new_pieces:
        piece = sentencepiece_model_pb2.ModelProto.SentencePiece(piece=text, score=-1e6)
        pieces.append(piece)
    rest = pieces[4:]
    order = np.random.default_rng(seed).permutation(len(rest))
    del proto.pieces[:]
    proto.pieces.extend([*pieces[:4], *(rest[i] for i in order)])
    return kt.SubwordTokenizer(proto.SerializeToString())


def logits_of(model, tokenizer):
    """Logits [B, T, V] of the model for SENTENCES -> TRANSLATIONS, and the target ids."""
    source = tokenizer.tokenize(SENTENCES, padded=True).numpy()
    target = tokenizer.tokenize(TRANSLATIONS, padded=True).numpy()
    target_in = np.pad(target, ((0, 0), (1, 0)), constant_values=2)[:, :-1]
    logits = model({"source": source, "target": target_in})
    return ops.convert_to_numpy(logits), target


def gathered(log_probs, ids):
    return np.take_along_axis(log_probs, ids[..., None], axis=-1)[..., 0]


@pytest.fixture(scope="module")
def model_and_tokenizer(tokenizer):
    config = kt.TransformerConfig.preset("tiny", vocab_size=tokenizer.vocab_size, num_layers=1)
    return kt.build_transformer(config), tokenizer


def test_the_same_pieces_in_another_order_score_the_same(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    other = reordered(tokenizer)
    for text in SENTENCES + TRANSLATIONS:  # the same segmentation, other ids
        ids, other_ids = (t.tokenize([text]).numpy()[0] for t in (tokenizer, other))
        assert [tokenizer.id_to_piece(i) for i in ids] == [other.id_to_piece(i) for i in other_ids]
        assert list(ids) != list(other_ids)
    updated = kt.update_vocabulary(model, tokenizer, other)
    assert updated.embedding.source_embeddings is updated.embedding.target_embeddings  # tied
    before, target = logits_of(model, tokenizer)
    after, other_target = logits_of(updated, other)
    np.testing.assert_allclose(
        gathered(ops.convert_to_numpy(ops.log_softmax(after)), other_target),
        gathered(ops.convert_to_numpy(ops.log_softmax(before)), target),
        atol=1e-5,
    )


def test_new_pieces_leave_the_shared_pieces_logits_and_get_fresh_rows(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    extra = [f"\u2581neu{i}" for i in range(100)]
    other = reordered(tokenizer, extra, seed=1)
    assert other.vocab_size == tokenizer.vocab_size + 100
    updated = kt.update_vocabulary(model, tokenizer, other)
    before, _ = logits_of(model, tokenizer)
    after, _ = logits_of(updated, other)
    new_ids, old_ids = kt.vocabulary.shared_rows(tokenizer, other)
    assert len(old_ids) == tokenizer.vocab_size and sorted(old_ids) == list(range(len(old_ids)))
    shared = after[..., new_ids]  # in the old ids' order
    np.testing.assert_allclose(shared, before[..., old_ids], atol=1e-5)
    np.testing.assert_allclose(
        ops.convert_to_numpy(ops.log_softmax(shared)),
        ops.convert_to_numpy(ops.log_softmax(before[..., old_ids])),
        atol=1e-5,
    )
    assert (ops.convert_to_numpy(ops.log_softmax(after))[..., new_ids] < shared - 1e-3).all()
    matrix = ops.convert_to_numpy(updated.embedding.target_embeddings)
    fresh = matrix[sorted(set(range(other.vocab_size)) - set(new_ids))]
    assert fresh.shape == (100, 64)
    assert np.std(fresh) == pytest.approx(64**-0.5, rel=0.1)  # the layer's initializer
    assert updated.config.tokenizer_sha256 == other.sha256  # the model knows its new tokenizer
    with pytest.raises(ValueError, match="pieces but the model's vocab_size is"):
        kt.update_vocabulary(updated, tokenizer, other)
