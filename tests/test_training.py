"""§5.3 (optimizer and Eq. 3), §5.4 (label smoothing), and learning a synthetic task."""

import math

import keras
import numpy as np
import pytest

import keras_transformer as kt

BOS, EOS = 2, 3


def eq3(step_num, d_model=512, warmup_steps=4000, scale=1.0):
    return scale * d_model**-0.5 * min(step_num**-0.5, step_num * warmup_steps**-1.5)


@pytest.mark.parametrize("step_num", [1, 4000, 100000])
def test_schedule_is_eq3(step_num):
    schedule = kt.TransformerSchedule(d_model=512, warmup_steps=4000)
    # Keras passes optimizer.iterations, the count of updates already made: step_num - 1.
    assert float(schedule(step_num - 1)) == pytest.approx(eq3(step_num), rel=1e-6)


def test_optimizer_applies_eq3_from_the_first_update():
    config = kt.TransformerConfig.preset("tiny", vocab_size=10, d_model=64, warmup_steps=4000)
    optimizer = kt.create_optimizer(config)
    weight = keras.Variable(np.zeros(3, "float32"))
    for step_num in (1, 2, 3):
        assert float(optimizer.learning_rate) == pytest.approx(eq3(step_num, 64), rel=1e-6)
        optimizer.apply_gradients([(np.ones(3, "float32"), weight)])
    # Adam's first update moves each weight by about the learning rate.
    assert float(weight[0]) == pytest.approx(-sum(eq3(n, 64) for n in (1, 2, 3)), rel=1e-3)


def test_schedule_peaks_at_warmup_and_serializes():
    schedule = kt.TransformerSchedule(d_model=512, warmup_steps=4000)
    rates = np.asarray([float(schedule(s - 1)) for s in (3999, 4000, 4001)])
    assert rates[0] < rates[1] > rates[2]
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert restored.get_config() == {"d_model": 512, "warmup_steps": 4000, "scale": 1.0}


@pytest.mark.parametrize("step_num", [1, 400, 5000])
def test_scale_multiplies_the_whole_curve(step_num):
    config = kt.TransformerConfig.preset(
        "small", vocab_size=10, learning_rate_scale=2.5, warmup_steps=400
    )
    schedule = keras.saving.deserialize_keras_object(
        kt.create_optimizer(config).get_config()["learning_rate"]
    )
    assert float(schedule(step_num - 1)) == pytest.approx(
        eq3(step_num, 256, 400, scale=2.5), rel=1e-6
    )
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert float(restored(step_num - 1)) == float(schedule(step_num - 1))
    with pytest.raises(ValueError, match="scale must be positive, got 0"):
        kt.TransformerSchedule(256, 400, scale=0)


def test_optimizer_has_the_papers_adam_settings():
    optimizer = kt.create_optimizer(kt.TransformerConfig.preset("base", vocab_size=100))
    assert (optimizer.beta_1, optimizer.beta_2, optimizer.epsilon) == (0.9, 0.98, 1e-9)
    schedule = optimizer.get_config()["learning_rate"]
    assert schedule["class_name"] == "TransformerSchedule"
    assert schedule["config"] == {"d_model": 512, "warmup_steps": 4000, "scale": 1.0}


def test_label_smoothed_loss_equals_hand_computation():
    # Vocabulary of 4, eps = 0.1: q = 0.9 * onehot + 0.025 everywhere.
    logits = np.array(
        [[[2.0, 0.5, -1.0, 0.0], [0.1, 0.2, 0.3, 0.4], [9.0, 9.0, 9.0, 9.0]]], "float32"
    )
    labels = np.array([[1, 3, 0]], "int32")  # the last position is padding
    loss = float(kt.LabelSmoothedCrossEntropy(0.1)(labels, logits))
    expected = []
    for t, y in enumerate([1, 3]):
        z = logits[0, t].astype(float)
        log_p = z - math.log(sum(math.exp(v) for v in z))
        q = [0.025 + (0.9 if k == y else 0.0) for k in range(4)]
        expected.append(-sum(qk * lp for qk, lp in zip(q, log_p)))
    assert loss == pytest.approx(sum(expected) / 2, rel=1e-6)


def test_loss_ignores_padding_whatever_its_logits():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 5, 7)).astype("float32")
    labels = np.array([[4, 5, 6, 0, 0], [3, 4, 0, 0, 0]], "int32")
    loss = kt.LabelSmoothedCrossEntropy()
    changed = logits.copy()
    changed[labels == 0] = 50.0
    assert float(loss(labels, changed)) == pytest.approx(float(loss(labels, logits)), rel=1e-6)
    # The mean is over the 5 real tokens, not over all 10 positions.
    per_sentence = [float(loss(labels[i : i + 1], logits[i : i + 1])) for i in range(2)]
    assert float(loss(labels, logits)) == pytest.approx(
        (3 * per_sentence[0] + 2 * per_sentence[1]) / 5, rel=1e-5
    )


def smoothed_cross_entropy(labels, logits, eps):
    """-sum_k q_k log p_k per token (§5.4), in float64, and q."""
    z = logits.astype("float64")
    top = z.max(-1, keepdims=True)
    log_p = z - top - np.log(np.exp(z - top).sum(-1, keepdims=True))
    q = np.full(z.shape, eps / z.shape[-1])
    np.put_along_axis(q, labels[..., None], 1 - eps + eps / z.shape[-1], axis=-1)
    return -(q * log_p).sum(-1), q


def large_logits_and_padded_labels():
    rng = np.random.default_rng(3)
    logits = rng.uniform(-50, 50, (3, 7, 41)).astype("float32")
    labels = rng.integers(1, 41, (3, 7)).astype("int32")
    labels[0, 4:] = labels[2, 1:] = 0
    return logits, labels


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_loss_is_the_smoothed_cross_entropy_at_large_logits(eps):
    logits, labels = large_logits_and_padded_labels()
    expected, _ = smoothed_cross_entropy(labels, logits, eps)
    real = labels != 0
    loss = kt.LabelSmoothedCrossEntropy(eps)
    assert float(loss(labels, logits)) == pytest.approx(expected[real].mean(), rel=1e-6)
    weights = np.random.default_rng(4).uniform(0.1, 1.0, labels.shape).astype("float32")
    weighted = kt.LabelSmoothedCrossEntropy(eps, token_weights=True)(labels, logits, weights)
    assert float(weighted) == pytest.approx((weights * expected)[real].sum(), rel=1e-6)


@pytest.mark.parametrize("jit_compile", [None, False, True])
def test_loss_gradient_is_softmax_minus_smoothed_target(jit_compile):
    """Under TensorFlow the gradient is written out, not differentiated: eagerly (None), in a
    graph, and with XLA (the training program's --jit-compile)."""
    import tensorflow as tf

    logits, labels = large_logits_and_padded_labels()
    weights = np.random.default_rng(5).uniform(0.1, 1.0, labels.shape).astype("float32")
    loss = kt.LabelSmoothedCrossEntropy(0.1, token_weights=True)

    def gradient(logits):
        with tf.GradientTape() as tape:
            tape.watch(logits)
            value = loss(labels, logits, weights)
        return tape.gradient(value, logits)

    if jit_compile is not None:
        gradient = tf.function(gradient, jit_compile=jit_compile)

    z = logits.astype("float64")
    softmax = np.exp(z - z.max(-1, keepdims=True))
    softmax /= softmax.sum(-1, keepdims=True)
    _, q = smoothed_cross_entropy(labels, z, 0.1)
    expected = np.where((labels != 0)[..., None], weights[..., None] * (softmax - q), 0.0)
    np.testing.assert_allclose(gradient(tf.constant(logits)), expected, rtol=0, atol=1e-6)


def test_masked_accuracy_ignores_padding():
    labels = np.array([[1, 2, 0, 0]], "int32")
    logits = np.zeros((1, 4, 3), "float32")
    logits[0, 0, 1] = logits[0, 1, 0] = 1.0  # right, wrong; padding predicts anything
    logits[0, 2:, 0] = 1.0
    assert float(kt.masked_accuracy(labels, logits)) == pytest.approx(0.5)


def test_masked_accuracy_is_the_argmax_hitting_the_label():
    logits, labels = large_logits_and_padded_labels()
    predicted = logits.argmax(-1)
    labels[:, ::2] = np.where(labels[:, ::2] != 0, predicted[:, ::2], 0)  # some right
    real = labels != 0
    expected = (predicted == labels)[real].mean()
    assert 0 < expected < 1
    assert float(kt.masked_accuracy(labels, logits)) == pytest.approx(expected, rel=1e-6)


def test_masked_accuracy_counts_a_tie_for_the_largest_logit_as_right():
    labels = np.array([[2, 2]], "int32")
    logits = np.array([[[0.0, 1.0, 1.0], [0.0, 1.0, 0.5]]], "float32")  # tied with 1; below 1
    assert float(kt.masked_accuracy(labels, logits)) == pytest.approx(0.5)


def test_masked_accuracy_metric_weighs_tokens_across_batches():
    metric = kt.MaskedAccuracy()
    right = np.zeros((1, 4, 3), "float32")
    right[..., 1] = 1.0
    metric.update_state(np.array([[1, 0, 0, 0]], "int32"), right)  # 1 of 1 right
    metric.update_state(np.array([[2, 2, 2, 2]], "int32"), right)  # 0 of 4 right
    assert float(metric.result()) == pytest.approx(1 / 5)
    metric.reset_state()
    assert float(metric.result()) == 0.0


def reversal_task(n, vocab_size, max_length, seed):
    """Source: random tokens; target: the same tokens reversed, then eos (teacher forcing)."""
    rng = np.random.default_rng(seed)
    source = np.zeros((n, max_length), "int32")
    target_in = np.zeros((n, max_length + 1), "int32")
    target_out = np.zeros((n, max_length + 1), "int32")
    for i, length in enumerate(rng.integers(3, max_length + 1, n)):
        tokens = rng.integers(4, vocab_size, length)
        source[i, :length] = tokens
        target_in[i, 0] = BOS
        target_in[i, 1 : length + 1] = tokens[::-1]
        target_out[i, :length] = tokens[::-1]
        target_out[i, length] = EOS
    return {"source": source, "target": target_in}, target_out


@pytest.mark.slow
def test_tiny_model_learns_reversal_with_fit():
    config = kt.TransformerConfig.preset("tiny", vocab_size=16, dropout=0.0, warmup_steps=100)
    model = kt.build_transformer(config)
    model.compile(
        optimizer=kt.create_optimizer(config),
        loss=kt.LabelSmoothedCrossEntropy(config.label_smoothing),
        metrics=[kt.MaskedAccuracy()],
    )
    x, y = reversal_task(9600, 16, 8, seed=0)
    # 600 steps: three seeds measured at 99.5-100% (at 450 steps one seed was at 94%).
    model.fit(x, y, batch_size=64, epochs=4, verbose=0)
    held_out_x, held_out_y = reversal_task(512, 16, 8, seed=1)
    logits = model.predict(held_out_x, batch_size=128, verbose=0)
    accuracy = float(kt.masked_accuracy(held_out_y, logits))
    print(f"held-out token accuracy after 600 steps: {accuracy:.4f}")
    assert accuracy > 0.95
