"""Convert a trained model into a CTranslate2 model directory (serving.translate and
training.evaluate read it).

    python -m serving.ctranslate2 --model runs/demo/model.keras --output exports/ct2 \
        --quantization int8
    python -m serving.translate --model exports/ct2 "Guten Morgen."

CTranslate2's TransformerSpec describes our model exactly: post-norm (or pre-norm with a final
LayerNorm), ReLU, no attention biases, embeddings scaled by sqrt(d_model), the pre-softmax
projection tied to the target embedding, and the position table written out (the paper's
interleaved sinusoids, or the learned table). The directory holds model.bin, config.json, the
vocabulary and our sentencepiece model (tokenizer.model).
"""

import json
import pathlib

import numpy as np

from keras_transformer_cli import console, flags
from keras_transformer_cli.files import new_directory

QUANTIZATIONS = ("none", "int8", "int8_float32", "float16")


def transformer_spec(model, pieces):
    """The ctranslate2 TransformerSpec of a keras_transformer model and its vocabulary `pieces`
    (the sentencepiece pieces by id). Raises ValueError naming a config field it cannot
    represent."""
    from ctranslate2.specs import transformer_spec as specs

    from keras_transformer.layers.positional import sinusoidal_encoding
    from keras_transformer.layers.stack import LAYER_NORM_EPSILON

    config = model.config
    head_size = config.d_model // config.num_heads
    key_dim, value_dim = config.key_dim or head_size, config.value_dim or head_size
    if value_dim != key_dim:
        raise ValueError(
            f"value_dim={value_dim} differs from key_dim={key_dim}: CTranslate2's attention has "
            "one head size for queries, keys and values"
        )
    stack = dict(
        num_layers=config.num_layers,
        num_heads=config.num_heads,
        pre_norm=config.norm_first,
        head_dim=None if key_dim == head_size else key_dim,
    )
    encoder, decoder = specs.TransformerEncoderSpec(**stack), specs.TransformerDecoderSpec(**stack)
    embedding = model.embedding
    encoder.embeddings[0].weight = _array(embedding.source_embeddings)
    decoder.embeddings.weight = _array(embedding.target_embeddings)
    decoder.projection.weight = _array(embedding.target_embeddings)
    for spec, stack_layer in ((encoder, model.encoder), (decoder, model.decoder)):
        if config.positional == "learned":
            table = _array(stack_layer.position.position_embeddings)
        else:
            table = _array(sinusoidal_encoding(np.arange(config.max_length), config.d_model))
        spec.position_encodings.encodings = table
        if config.norm_first:
            _layer_norm(spec.layer_norm, stack_layer.final_norm)
    for spec, layer in zip(encoder.layer, model.encoder.layers):
        _attention(spec.self_attention, layer.self_attention, layer.self_attention_norm, True)
        _feed_forward(spec.ffn, layer.feed_forward, layer.feed_forward_norm)
    for spec, layer in zip(decoder.layer, model.decoder.layers):
        _attention(spec.self_attention, layer.self_attention, layer.self_attention_norm, True)
        _attention(spec.attention, layer.cross_attention, layer.cross_attention_norm, False)
        _feed_forward(spec.ffn, layer.feed_forward, layer.feed_forward_norm)
    spec = specs.TransformerSpec(encoder, decoder)
    spec.config.layer_norm_epsilon = LAYER_NORM_EPSILON
    spec.config.add_source_eos = True  # our sources end with eos
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)
    return spec


def _array(variable):
    import keras

    return np.asarray(keras.ops.convert_to_numpy(variable), np.float32)


def _layer_norm(spec, layer):
    spec.gamma, spec.beta = _array(layer.gamma), _array(layer.beta)


def _attention(spec, attention, norm, self_attention):
    """W^Q, W^K, W^V, W^O (Keras [in, out]) as CTranslate2's [out, in] linears: one fused QKV
    projection for self-attention; Q, then fused KV, for encoder-decoder attention."""
    query, key, value, output = (
        _array(kernel).T
        for kernel in (
            attention.query_kernel,
            attention.key_kernel,
            attention.value_kernel,
            attention.output_kernel,
        )
    )
    fused = (
        [np.concatenate([query, key, value])]
        if self_attention
        else [query, np.concatenate([key, value])]
    )
    for linear, weight in zip(spec.linear, [*fused, output]):
        linear.weight = weight
    _layer_norm(spec.layer_norm, norm)


def _feed_forward(spec, feed_forward, norm):
    spec.linear_0.weight = _array(feed_forward.inner.kernel).T
    spec.linear_0.bias = _array(feed_forward.inner.bias)
    spec.linear_1.weight = _array(feed_forward.outer.kernel).T
    spec.linear_1.bias = _array(feed_forward.outer.bias)
    _layer_norm(spec.layer_norm, norm)


def convert(model, tokenizer_path, out_dir, quantization="none"):
    """Writes the CTranslate2 model of `model` (with its sentencepiece model) to `out_dir`,
    which must not exist; returns it."""
    from keras_transformer.exports import CTRANSLATE2_LIMITS_FILE, TOKENIZER_FILE
    from keras_transformer.tokenizer import SubwordTokenizer

    if quantization not in QUANTIZATIONS:
        raise ValueError(f"--quantization {quantization!r}: choose one of {QUANTIZATIONS}")
    out_dir = pathlib.Path(out_dir)
    if out_dir.exists():
        raise FileExistsError(f"{out_dir} exists; choose another --output or remove it")
    tokenizer = SubwordTokenizer.load(tokenizer_path)
    model.config.check_tokenizer(tokenizer)
    spec = transformer_spec(model, [tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size)])
    spec.register_file(str(tokenizer_path), TOKENIZER_FILE)
    spec.validate()
    spec.optimize(quantization=None if quantization == "none" else quantization)
    with new_directory(out_dir) as (directory, scratch):
        limits = scratch / CTRANSLATE2_LIMITS_FILE
        limits.write_text(json.dumps({"max_length": model.config.max_length}))
        spec.register_file(str(limits), CTRANSLATE2_LIMITS_FILE)
        spec.save(str(directory))
    return out_dir


def build_parser():
    parser = flags.parser(__doc__, "serving.ctranslate2")
    flags.add_model(parser, "keras", "checkpoint")
    flags.add_output(parser, "the CTranslate2 model directory, e.g. exports/ct2", required=True)
    parser.add_argument(
        "--quantization",
        default="none",
        choices=QUANTIZATIONS,
        help="CTranslate2's weight quantization: none (float32 weights), int8, int8_float32 or "
        "float16",
    )
    return parser


@console.program
def main(argv=None):
    args = flags.parse(build_parser(), argv)
    from keras_transformer_cli import run_dir

    try:
        model, tokenizer_path = run_dir.load_with_tokenizer(args.model, args.tokenizer)
        out_dir = convert(model, tokenizer_path, args.output, args.quantization)
    except (ValueError, FileExistsError) as error:
        console.fail(error)
    print(f"converted {args.model} to {out_dir} ({args.quantization})")


if __name__ == "__main__":
    main()
