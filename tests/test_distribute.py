"""model.fit under tf.distribute.MirroredStrategy over two logical CPU devices."""

import json
import textwrap

import pytest
from conftest import TWO_CPUS, run_script

# Both cases in one fresh process (one TensorFlow start). argv: the tests' folder, a tokenizer,
# the pipeline's seeds (JSON).
SCRIPT = TWO_CPUS + textwrap.dedent(
    """
    import keras, numpy as np
    from conftest import synthetic_pairs
    import keras_transformer as kt
    from keras_transformer.data import Corpus, make_batches

    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])

    # fit and evaluate: one model's weights, single-device and mirrored
    rng = np.random.default_rng(0)
    source = rng.integers(4, 20, (8, 6)).astype("int32")
    target = rng.integers(4, 20, (8, 5)).astype("int32")
    target[::2, 3:] = 0
    x = {"source": source, "target": target}
    config = kt.TransformerConfig.preset("tiny", vocab_size=20, dropout=0.0)

    def compiled():
        model = kt.build_transformer(config)
        model.compile(optimizer=kt.create_optimizer(config), loss=kt.LabelSmoothedCrossEntropy())
        return model

    keras.utils.set_random_seed(0)
    single = compiled()
    weights = single.get_weights()
    with strategy.scope():
        mirrored = compiled()
    mirrored.set_weights(weights)
    fit = {
        "replicas": strategy.num_replicas_in_sync,
        "single_loss": single.evaluate(x, target, batch_size=8, verbose=0),
        "mirrored_loss": mirrored.evaluate(x, target, batch_size=8, verbose=0),
        "fit_losses": mirrored.fit(x, target, batch_size=8, epochs=3, verbose=0).history["loss"],
    }

    # bucketed batches of the data pipeline, one run per seed
    tokenizer = kt.SubwordTokenizer.load(sys.argv[2])
    pairs = Corpus(synthetic_pairs(300, seed=2)).dataset()
    config = kt.TransformerConfig.preset("tiny", vocab_size=tokenizer.vocab_size)
    pipeline = []
    for seed in json.loads(sys.argv[3]):
        batches = make_batches(pairs, tokenizer, tokens_per_batch=1023, max_length=48, repeat=True,
                               seed=seed, batch_size_multiple=strategy.num_replicas_in_sync)
        with strategy.scope():
            model = kt.build_transformer(config)
            model.compile(optimizer=kt.create_optimizer(config), metrics=[kt.MaskedAccuracy()],
                          loss=kt.LabelSmoothedCrossEntropy())
        history = model.fit(batches, steps_per_epoch=4, epochs=2, shuffle=False, verbose=0).history
        pipeline.append({"loss": history["loss"], "steps": int(model.optimizer.iterations.numpy())})
    print("RESULT " + json.dumps({"fit": fit, "pipeline": pipeline}))
    """
)


@pytest.fixture(scope="module")
def mirrored(tokenizer, tmp_path_factory):
    """SCRIPT's results: {"fit": ..., "pipeline": [one run per seed 0 and 1]}."""
    model_file = tokenizer.save(tmp_path_factory.mktemp("mirrored") / "shared.model")
    return run_script(SCRIPT, model_file, json.dumps([0, 1]))


@pytest.mark.slow
def test_fit_and_evaluate_under_mirrored_strategy(mirrored):
    result = mirrored["fit"]
    assert result["replicas"] == 2
    # Both replicas hold 4 sentences with the same number of real tokens, so the mean of the
    # per-replica token means equals the single-device token mean.
    assert abs(result["mirrored_loss"] - result["single_loss"]) < 1e-4
    losses = result["fit_losses"]
    assert all(abs(v) < 100 for v in losses) and losses[-1] < losses[0]


# Without batch_size_multiple these budgets and seeds give a first batch of 31 pairs, which
# Keras cannot split evenly over two replicas when it builds the model.
@pytest.mark.slow
def test_bucketed_batches_train_under_mirrored_strategy(mirrored):
    results = mirrored["pipeline"]
    assert len(results) == 2  # the seeds 0 and 1
    for result in results:
        assert result["steps"] == 8
        assert all(0 < loss < 100 for loss in result["loss"])
