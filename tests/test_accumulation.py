"""Gradient accumulation and exact token normalisation: an update from micro-batches, from
replicas, or from both is the update of one step on the whole batch, with unequal token counts,
under TensorFlow and JAX."""

import contextlib
import textwrap

import keras
import numpy as np
import pytest
from conftest import JAX_CPU, TWO_CPUS, run_script

import keras_transformer as kt

MIRRORED_SCRIPT = TWO_CPUS + textwrap.dedent(
    """
    from test_accumulation import difference, fixed_batches, token_weights, train

    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    initial, batches = fixed_batches()
    weights = token_weights(batches[1])
    runs = {
        "whole": train(initial, batches, 1, weights),
        "accumulated": train(initial, batches, 2, weights),
        "mirrored": train(initial, batches, 1, weights, strategy=mirrored),
        "both": train(initial, batches, 2, weights, strategy=mirrored),
        "both_unweighted": train(initial, batches, 2, strategy=mirrored),
    }
    whole = runs["whole"][0]
    result = {
        name: {"difference": difference(weights, whole), "losses": losses}
        for name, (weights, losses) in runs.items()
    }
    result["moved"] = difference(initial, whole)
    print("RESULT " + json.dumps(result))
    """
)

JAX_SCRIPT = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, sys.argv[1])
    import keras
    from test_accumulation import difference, fixed_batches, mean_of_means, token_weights, train

    initial, batches = fixed_batches(batches=2, rows=6)
    labels = batches[1]
    whole, losses = train(initial, batches, 1, token_weights(labels))
    accumulated, accumulated_losses = train(initial, batches, 4, token_weights(labels))
    means = train(initial, batches, 1, mean_of_means(labels, 4))[0]
    unweighted = train(initial, batches, 4)[0]
    print("RESULT " + json.dumps({
        "backend": keras.backend.backend(),
        "accumulated": difference(accumulated, whole),
        "losses": [losses, accumulated_losses],
        "unweighted": difference(unweighted, means),
    }))
    """
)


def fixed_batches(batches=3, rows=16):
    """Initial weights of a tiny model, and `batches` batches of `rows` pairs whose quarters
    hold unequal numbers of real target tokens (rows 0-3 of every 8 are short): the two
    micro-batches of a batch differ, and so do the halves each replica gets."""
    rng = np.random.default_rng(0)
    source = rng.integers(4, 20, (batches, rows, 6)).astype("int32")
    target = rng.integers(4, 20, (batches, rows, 5)).astype("int32")
    lengths = rng.integers(2, 6, (batches, rows))
    lengths[:, 0:4] = lengths[:, 8:12] = 2
    target[:, :, 0] = 2
    target[np.arange(5) >= lengths[..., None]] = 0
    labels = np.concatenate([target[..., 1:], np.zeros_like(target[..., :1])], -1)
    labels[np.arange(5) == lengths[..., None] - 1] = 3
    keras.utils.set_random_seed(0)
    initial = kt.build_transformer(tiny_config()).get_weights()
    return initial, ({"source": source, "target": target}, labels)


def tiny_config():
    return kt.TransformerConfig.preset("tiny", vocab_size=20, dropout=0.0)


def token_weights(labels):
    """[batches, rows, T] labels -> the weights `kt.data.weigh_tokens` gives each batch."""
    real = (labels != 0).astype("float32")
    return real / real.sum(axis=(1, 2), keepdims=True)


def mean_of_means(labels, steps):
    """Token weights that make one step's loss the mean, over the micro-batches holding pairs,
    of each micro-batch's token mean: micro-batch i of `steps` holds rows i, i + steps, ..."""
    real = (labels != 0).astype("float32")
    rows = labels.shape[1]
    weights = np.zeros_like(real)
    for i in range(min(rows, steps)):
        tokens = real[:, i::steps].sum(axis=(1, 2), keepdims=True)
        weights[:, i::steps] = real[:, i::steps] / tokens / min(rows, steps)
    return weights


def train(initial, batches, accumulate_steps, weights=None, strategy=None):
    """Weights after one update per batch (fit on arrays, batches in order), and the losses
    logged; `weights` [batches, rows, T]: token weights, None: none (Keras's mean)."""
    inputs, labels = batches
    count, rows = labels.shape[:2]
    config = tiny_config()
    with strategy.scope() if strategy else contextlib.nullcontext():
        model = kt.build_transformer(config)
        model.compile(
            # SGD: weights differ as the gradients do. Adam's first updates move each weight by
            # about the learning rate whatever its gradient's size, so a gradient that is zero
            # but for rounding (which the order of a sum changes) would move weights by 1e-4.
            optimizer=keras.optimizers.SGD(1.0),
            loss=kt.LabelSmoothedCrossEntropy(token_weights=True),
            accumulate_steps=accumulate_steps,
        )
    model.set_weights(initial)
    history = model.fit(
        {name: ids.reshape(count * rows, -1) for name, ids in inputs.items()},
        labels.reshape(count * rows, -1),
        sample_weight=None if weights is None else weights.reshape(count * rows, -1),
        batch_size=rows,
        shuffle=False,
        verbose=0,
    )
    assert (
        int(keras.ops.convert_to_numpy(model.optimizer.iterations)) == count
    )  # updates, not micro-batches
    return model.get_weights(), history.history["loss"]


def difference(weights, others):
    return max(float(np.max(np.abs(a - b))) for a, b in zip(weights, others))


@pytest.mark.slow
def test_accumulated_and_mirrored_updates_equal_one_step_on_the_whole_batch():
    """(a) 2 accumulated micro-batches, (b) MirroredStrategy over two CPUs, (c) both: the same
    weights after three updates as one step per whole batch, within 1e-5, and the same logged
    loss (the token mean of the batch). Without token weights the micro-batches' and replicas'
    means are averaged, which the same comparison tells apart."""
    result = run_script(MIRRORED_SCRIPT)
    whole_losses = result["whole"]["losses"]
    for name in ("accumulated", "mirrored", "both"):
        assert result[name]["difference"] < 1e-5, (name, result)
        assert result[name]["losses"] == pytest.approx(whole_losses, rel=1e-5), (name, result)
    assert result["moved"] > 1e-3  # the updates did move the weights
    assert result["both_unweighted"]["difference"] > 1e-3, result


@pytest.mark.slow
def test_accumulation_under_jax_equals_one_step_on_the_whole_batch():
    """JAX's training step (a lax.scan over micro-batches), on batches of 6 pairs in 4
    micro-batches (rows that do not divide): the same update as the whole batch; without token
    weights, the mean of the micro-batches' means."""
    result = run_script(JAX_SCRIPT, env=JAX_CPU)
    assert result["backend"] == "jax"
    assert result["accumulated"] < 1e-5, result
    assert result["losses"][0] == pytest.approx(result["losses"][1], rel=1e-5)
    assert result["unweighted"] < 1e-5, result


@pytest.mark.slow
@pytest.mark.parametrize("steps", [4, 8])
def test_rows_that_do_not_divide_are_padded_with_empty_rows(steps):
    """Batches of 6 pairs in 4 micro-batches (rows 0 and 4, 1 and 5, 2, 3) or 8 (one row each,
    two empty): with token weights the update of the whole batch; without, the mean of the
    token means of the micro-batches that hold pairs (4, or 6 of the 8)."""
    initial, batches = fixed_batches(batches=2, rows=6)
    labels = batches[1]
    whole = train(initial, batches, 1, token_weights(labels))[0]
    assert difference(train(initial, batches, steps, token_weights(labels))[0], whole) < 1e-5
    means = train(initial, batches, 1, mean_of_means(labels, steps))[0]
    unweighted = train(initial, batches, steps)[0]
    assert difference(unweighted, means) < 1e-5
    assert difference(means, whole) > 1e-3  # the two normalisations do differ here


@pytest.mark.parametrize(
    "value, message",
    [(0, "got 0"), (1.5, "got 1.5"), (True, "got True")],
)
def test_compile_refuses_a_bad_accumulate_steps(value, message):
    model = kt.build_transformer(tiny_config())
    with pytest.raises(ValueError, match=f"accumulate_steps must be a positive integer, {message}"):
        model.compile(optimizer="adam", loss=kt.LabelSmoothedCrossEntropy(), accumulate_steps=value)


def test_token_weights_are_one_over_the_batch_real_tokens():
    import tensorflow as tf

    from keras_transformer.data import weigh_tokens

    labels = tf.constant([[5, 6, 0], [7, 0, 0]])
    dataset = tf.data.Dataset.from_tensors(({"source": labels, "target": labels}, labels))
    (_, _, weights) = next(iter(weigh_tokens(dataset)))
    np.testing.assert_allclose(weights, [[1 / 3, 1 / 3, 0], [1 / 3, 0, 0]], rtol=1e-6)


def test_token_weights_sum_and_other_weights_keep_their_keras_meaning():
    """token_weights=True: sum_t w_t * loss_t, the token mean for weights 1/n, and [batch]
    weights refused. Without it a sample_weight scales each token's share of the batch's token
    mean, as Keras weighs a loss and as before token weights existed."""
    rng = np.random.default_rng(1)
    labels = np.array([[5, 6, 0], [7, 0, 0]])
    logits = rng.normal(size=(2, 3, 9)).astype("float32")
    real = (labels != 0).astype("float32")
    mean = float(kt.LabelSmoothedCrossEntropy()(labels, logits))
    summed = kt.LabelSmoothedCrossEntropy(token_weights=True)
    assert float(summed(labels, logits, sample_weight=real / 3)) == pytest.approx(mean, rel=1e-6)
    assert float(summed(labels, logits, sample_weight=real)) == pytest.approx(3 * mean, rel=1e-6)
    assert float(summed(labels, logits)) == pytest.approx(mean, rel=1e-6)
    with pytest.raises(ValueError, match=r"token weights \[batch, target_length\]"):
        summed(labels, logits, sample_weight=np.ones(2, "float32"))
    first_only = np.array([[1, 1, 0], [0, 0, 0]], "float32")
    kept = kt.LabelSmoothedCrossEntropy()(labels, logits, sample_weight=first_only)
    sentence = kt.LabelSmoothedCrossEntropy()(labels[:1, :2], logits[:1, :2])
    assert float(kept) == pytest.approx(float(sentence) * 2 / 3, rel=1e-6)


@pytest.mark.slow
def test_a_saved_model_is_compiled_again_with_its_accumulation(tmp_path):
    """Keras compiles a loaded model from its compile config, accumulate_steps included, and
    restores the optimizer's state."""
    _, (inputs, labels) = fixed_batches(batches=1, rows=8)
    model = kt.build_transformer(tiny_config())
    model.compile(
        optimizer=kt.create_optimizer(tiny_config()),
        loss=kt.LabelSmoothedCrossEntropy(),
        accumulate_steps=4,
    )
    model.fit({k: v[0] for k, v in inputs.items()}, labels[0], batch_size=8, verbose=0)
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert loaded.compiled and loaded.accumulate_steps == 4
    assert isinstance(loaded.loss, kt.LabelSmoothedCrossEntropy)
    assert int(keras.ops.convert_to_numpy(loaded.optimizer.iterations)) == 1
