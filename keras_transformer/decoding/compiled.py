"""Searches compiled once per model, search and settings (`run_search`), and the cache that
holds the compiled functions."""

import dataclasses
import weakref

import tensorflow as tf

from keras_transformer.decoding.loop import search_model

_COMPILED = weakref.WeakKeyDictionary()  # model -> {settings: tf.function}


def run_search(
    model, source_ids, search, max_length=None, jit_compile=False, target_prefix=None, **settings
):
    """The n-best ids [B, K, L] and scores [B, K] of any `search` on int32 source ids [B, S]
    (`loop.search_model`, whose keyword `settings` it takes), compiled once per model, search and
    settings and reused; its tensor fields (a seed) and the target prefix are the compiled
    function's tensor arguments."""
    tensors = {
        field.name: getattr(search, field.name)
        for field in dataclasses.fields(search)
        if tf.is_tensor(getattr(search, field.name))
    }
    search = dataclasses.replace(search, **dict.fromkeys(tensors))  # the settings alone
    if target_prefix is not None:
        tensors["target_prefix"] = tf.convert_to_tensor(target_prefix, tf.int32)
    compiled = _compiled(model, search, jit_compile, tuple(tensors), settings)
    return compiled(source_ids, max_length=max_length, **tensors)


def _compiled(model, search, jit_compile, tensors, settings):
    """One tf.function per model, search, settings and names of the tensor arguments it takes
    beside the source (`tensors`: one function per set, which tracing needs), traced once and
    reused. It holds the model weakly, so the cache never keeps a model alive."""
    per_model = _COMPILED.setdefault(model, {})
    key = (search, jit_compile, tensors, tuple(sorted(settings.items())))
    if key not in per_model:
        model_ref = weakref.ref(model)

        def compiled_search(source_ids, max_length, target_prefix=None, **search_tensors):
            return search_model(
                model_ref(),
                source_ids,
                dataclasses.replace(search, **search_tensors),
                max_length=max_length,
                target_prefix=target_prefix,
                static_shapes=jit_compile,
                **settings,
            )

        per_model[key] = tf.function(
            compiled_search, jit_compile=jit_compile, reduce_retracing=True, autograph=False
        )
    return per_model[key]
