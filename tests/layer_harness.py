"""One check for every public layer (after KerasHub's `run_layer_test`): config round trip,
.keras round trip, eager and compiled calls, the dtype policies, and a training step."""

import keras
import numpy as np

POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")


def run_layer_test(make_layer, inputs, tmp_path, call=None, atol=1e-5):
    """Checks the layer `make_layer(**kwargs)` builds, on numpy `inputs` (a tuple), called as
    `call(layer, *inputs)` (default `layer(*inputs)`), which must return one float tensor;
    `tmp_path` is where the .keras file goes:

    1. `get_config` -> `from_config` gives a layer with the same config that, given the same
       weights, computes the same outputs;
    2. a functional model around it survives `model.save` / `keras.models.load_model`;
    3. a compiled call (a tf.function or jax.jit, by backend) equals the eager one;
    4. under each dtype policy the layer keeps float32 variables and computes in the policy's
       dtype, with finite outputs, and `compute_output_spec` (what a functional model
       declares) gives the eager output's shape and dtype;
    5. one `fit` step of a model around it changes every one of its variables.
    """
    call = call or (lambda layer, *args: layer(*args))
    layer = make_layer()
    expected = np.asarray(call(layer, *inputs), "float32")

    # 1. config round trip
    restored = layer.__class__.from_config(layer.get_config())
    assert restored.get_config() == layer.get_config()
    call(restored, *inputs)
    restored.set_weights(layer.get_weights())
    np.testing.assert_allclose(np.asarray(call(restored, *inputs), "float32"), expected, atol=atol)

    # 2. .keras round trip
    model = _model_around(layer, inputs, call)
    model.save(tmp_path / "layer.keras")
    loaded = keras.models.load_model(tmp_path / "layer.keras")
    np.testing.assert_allclose(
        loaded.predict(list(inputs), verbose=0), model.predict(list(inputs), verbose=0), atol=atol
    )

    # 3. eager and compiled
    np.testing.assert_allclose(
        np.asarray(_compiled(lambda *a: call(layer, *a))(*inputs), "float32"), expected, atol=atol
    )

    # 4. dtype policies
    for policy in POLICIES:
        typed = make_layer(dtype=policy)
        out = call(typed, *inputs)
        compute = keras.dtype_policies.get(policy).compute_dtype
        assert keras.backend.standardize_dtype(out.dtype) in (compute, "float32"), (
            policy,
            out.dtype,
        )
        assert np.isfinite(np.asarray(out, "float32")).all(), policy
        assert all(keras.backend.standardize_dtype(v.dtype) == "float32" for v in typed.weights), (
            policy
        )
        symbolic = [keras.KerasTensor(x.shape, str(x.dtype)) for x in inputs]
        spec = call(SpecOf(typed), *symbolic)
        assert (tuple(spec.shape), spec.dtype) == (
            tuple(out.shape),
            keras.backend.standardize_dtype(out.dtype),
        ), (policy, spec, out.dtype)

    # 5. one training step changes every variable
    before = [np.array(w) for w in layer.get_weights()]
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
    model.fit(list(inputs), np.ones_like(expected), batch_size=len(expected), epochs=1, verbose=0)
    unchanged = [
        v.path for v, old in zip(layer.weights, before) if np.array_equal(np.asarray(v), old)
    ]
    assert not unchanged, f"one fit step left {unchanged} unchanged"
    return layer


class SpecOf:
    """Calls a layer's `compute_output_spec` where a call function calls the layer."""

    def __init__(self, layer):
        self.layer = layer

    def __call__(self, *args, **kwargs):
        return self.layer.compute_output_spec(*args, **kwargs)


def _model_around(layer, inputs, call):
    """A functional model of `call(layer, *inputs)`, plus a Dense, so that a layer without
    variables still trains; its inputs named after their position."""
    symbolic = [
        keras.Input(x.shape[1:], dtype=str(x.dtype), name=f"input_{i}")
        for i, x in enumerate(inputs)
    ]
    outputs = call(layer, *symbolic)
    return keras.Model(
        symbolic, keras.layers.Dense(outputs.shape[-1], name="trainable_head")(outputs)
    )


def _compiled(function):
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(function)
    if backend == "jax":
        import jax

        return jax.jit(function)
    return function
