"""The attention a person can read: keras_transformer_cli.attention_plot draws the source pieces
along the x axis and the translation's along the y axis (TensorBoard's images and the notebook),
and TranslationMonitor writes it as the image `attention/N` of LOG_DIR/validation."""

import glob

import numpy as np
import pytest
from conftest import synthetic_pairs

from keras_transformer_cli.attention_plot import (
    FONT_SIZE,
    MAX_PIECES,
    attention_figure,
    figure_pixels,
    tick_labels,
)


def pieces_of(tokenizer, sentence):
    """The subword pieces of `sentence`, as the Translator names them."""
    import tensorflow as tf

    ids = tokenizer.tokenize(tf.constant([sentence]))[0].numpy()
    return [tokenizer.id_to_piece(int(i)) for i in ids] + ["</s>"]


def test_the_pieces_are_the_axes_tick_labels(tokenizer):
    source = pieces_of(tokenizer, "Der Hund schläft heute auf der grünen Straße.")
    translation = pieces_of(tokenizer, "The dog sleeps on the green street today.")
    weights = np.random.default_rng(0).dirichlet(np.ones(len(source)), len(translation))
    figure = attention_figure(weights, source, translation)

    assert tick_labels(figure) == (source, translation)
    axes = figure.axes[0]
    assert axes.get_title() == "source → translation: last decoder layer, heads averaged"
    assert all(label.get_rotation() == 90 for label in axes.get_xticklabels())
    sizes = [label.get_fontsize() for label in axes.get_xticklabels() + axes.get_yticklabels()]
    assert min(sizes) >= FONT_SIZE >= 9
    assert len(figure.axes) == 2  # the heat map and its colour bar
    # the grid drawn is the weights, row t = translation piece t
    np.testing.assert_allclose(axes.images[0].get_array(), weights, rtol=1e-6)

    pixels = figure_pixels(figure)
    width, height = figure.get_size_inches() * figure.dpi
    assert pixels.dtype == np.uint8 and pixels.shape == (round(height), round(width), 4)
    assert 600 <= width <= 800 and 300 <= height <= 900  # TensorBoard's Images tab
    assert len(np.unique(pixels.reshape(-1, 4), axis=0)) > 50  # a drawing, not a blank


def test_a_long_sentence_is_cut_and_the_title_says_so():
    source = [f"▁s{i}" for i in range(MAX_PIECES + 10)]
    translation = [f"▁t{i}" for i in range(MAX_PIECES + 3)]
    figure = attention_figure(np.full((len(translation), len(source)), 0.1), source, translation)

    assert tick_labels(figure) == (source[:MAX_PIECES], translation[:MAX_PIECES])
    title = figure.axes[0].get_title()
    assert f"first {MAX_PIECES} of {MAX_PIECES + 3} translation pieces" in title
    assert f"first {MAX_PIECES} of {MAX_PIECES + 10} source pieces" in title
    assert figure_pixels(figure).shape[1] <= 800


def test_weights_that_disagree_with_the_pieces_are_refused():
    with pytest.raises(ValueError, match=r"shape \(3, 4\).*2 translation and 4 source pieces"):
        attention_figure(np.zeros((3, 4)), ["a", "b", "c", "d"], ["x", "y"])
    with pytest.raises(ValueError, match="translation and 4 source pieces"):
        attention_figure(np.zeros((2, 2, 4)), ["a", "b", "c", "d"], ["x", "y"])  # heads left


def test_the_callback_writes_labelled_attention_images(tokenizer, tmp_path):
    """TranslationMonitor after an epoch: one image `attention/N` per sample, an RGBA PNG of
    the plot of the last decoder layer's attention, heads averaged, with the pieces of the
    source and of the greedy translation on its axes."""
    import keras
    import tensorflow as tf
    from tensorboard.backend.event_processing import event_accumulator

    import keras_transformer as kt
    from training.callbacks import TranslationMonitor

    config = kt.TransformerConfig.preset("tiny", vocab_size=tokenizer.vocab_size, max_length=12)
    model = kt.build_transformer(config)
    model.compile(optimizer=keras.optimizers.Adam(), loss=kt.LabelSmoothedCrossEntropy())
    pairs = synthetic_pairs(2, seed=3, max_words=4)
    monitor = TranslationMonitor(tokenizer, pairs, tmp_path, samples=2)
    monitor.set_model(model)
    monitor.on_train_begin()

    source, translation, weights = monitor.translator.attention(pairs[0][0])
    expected = figure_pixels(attention_figure(weights[-1].mean(axis=0), source, translation))
    monitor.on_epoch_end(0, {})

    (path,) = glob.glob(f"{tmp_path}/events.out.tfevents.*")
    accumulator = event_accumulator.EventAccumulator(
        path, size_guidance={event_accumulator.TENSORS: 0}
    )
    accumulator.Reload()
    tags = accumulator.Tags()["tensors"]
    assert {"attention/0", "attention/1"} <= set(tags)
    assert accumulator.SummaryMetadata("attention/0").plugin_data.plugin_name == "images"
    (event,) = accumulator.Tensors("attention/0")
    width, height, png = tf.make_ndarray(event.tensor_proto)
    image = tf.io.decode_png(png).numpy()
    assert image.dtype == np.uint8 and image.shape == (int(height), int(width), 4)
    np.testing.assert_array_equal(image, expected)  # the plot above, pieces and all
