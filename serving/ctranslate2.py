"""Export a trained model to CTranslate2, a C++ inference engine (fast on CPUs, int8 weights),
and translate with it.

    python -m serving.ctranslate2 --model runs/demo/model.keras --out exports/ct2 \
        --quantization int8
    python -m serving.translate --engine ctranslate2 --model exports/ct2 "Guten Morgen."

CTranslate2's TransformerSpec describes our model exactly: post-norm (or pre-norm with a final
LayerNorm), ReLU, no attention biases, embeddings scaled by sqrt(d_model), the pre-softmax
projection tied to the target embedding, and the position table written out (the paper's
interleaved sinusoids, or the learned table). The directory holds model.bin, config.json, the
vocabulary and our sentencepiece model (tokenizer.model).
"""

import argparse
import json
import pathlib
import shutil
import sys
import tempfile

import numpy as np

from serving.export import add_model_arguments, model_and_tokenizer
from training.console import add_verbose_flag

TOKENIZER_FILE = "tokenizer.model"
LIMITS_FILE = "keras_transformer.json"  # {"max_length": the model's config.max_length}
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
    from keras_transformer.tokenizer import checked_processor

    if quantization not in QUANTIZATIONS:
        raise ValueError(f"--quantization {quantization!r}: choose one of {QUANTIZATIONS}")
    out_dir = pathlib.Path(out_dir)
    if out_dir.exists():
        raise FileExistsError(f"{out_dir} exists; choose another --out or remove it")
    processor = checked_processor(pathlib.Path(tokenizer_path).read_bytes())
    pieces = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    if len(pieces) != model.config.vocab_size:
        raise ValueError(
            f"{tokenizer_path} has {len(pieces)} pieces; the model's vocab_size is "
            f"{model.config.vocab_size}"
        )
    spec = transformer_spec(model, pieces)
    spec.register_file(str(tokenizer_path), TOKENIZER_FILE)
    spec.validate()
    spec.optimize(quantization=None if quantization == "none" else quantization)
    partial = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as scratch:
        limits = pathlib.Path(scratch) / LIMITS_FILE
        limits.write_text(json.dumps({"max_length": model.config.max_length}))
        spec.register_file(str(limits), LIMITS_FILE)
        spec.save(str(partial))
    partial.rename(out_dir)
    return out_dir


class CTranslate2Translator:
    """Translates strings with a converted model: our tokenization (normalize_text, then the
    sentencepiece model in the directory; sources cut to the model's max_length with eos, as
    `kt.Translator` cuts them), CTranslate2's beam search on raw log-probabilities, and the best
    of its hypotheses under GNMT's length penalty ((5 + |Y|) / 6)^alpha with |Y| counting eos,
    as `kt.beam_search` scores them (CTranslate2's own penalty is |Y|^alpha). A translation is
    at most source length (with eos) + `extra_length` tokens (§6.1) and the model's max_length;
    CTranslate2 takes one bound per call, so in a batch each sentence may run to the batch's
    largest bound. Unlike our searches, CTranslate2 does not forbid <pad> and <s> as outputs
    (forbidding them there renormalises the probabilities, and the scores would differ): a
    trained model does not choose them."""

    def __init__(self, model_dir, beam_size=4, alpha=0.6, extra_length=50, threads=0):
        import ctranslate2
        import sentencepiece

        model_dir = pathlib.Path(model_dir)
        if not (model_dir / "model.bin").is_file():
            raise FileNotFoundError(f"{model_dir} holds no CTranslate2 model (model.bin)")
        self.translator = ctranslate2.Translator(
            str(model_dir), device="cpu", intra_threads=threads
        )
        self.processor = sentencepiece.SentencePieceProcessor(
            model_file=str(model_dir / TOKENIZER_FILE)
        )
        self.max_length = json.loads((model_dir / LIMITS_FILE).read_text())["max_length"]
        self.beam_size, self.alpha, self.extra_length = beam_size, alpha, extra_length

    def tokenize(self, sentences):
        """Source pieces, at most max_length - 1 of them (eos comes after)."""
        from keras_transformer.tokenizer import normalize_text

        return [
            self.processor.encode(normalize_text(s), out_type=str)[: self.max_length - 1]
            for s in sentences
        ]

    def translate_pieces(self, pieces):
        """[(pieces, score)] for lists of source pieces: the best hypothesis and its
        log P(Y) / lp(Y)."""
        bound = min(max(len(p) for p in pieces) + 1 + self.extra_length, self.max_length)
        results = self.translator.translate_batch(
            pieces,
            beam_size=self.beam_size,
            num_hypotheses=self.beam_size,
            length_penalty=0.0,  # raw log-probabilities: GNMT's penalty is applied below
            return_scores=True,
            max_input_length=0,  # cut by tokenize
            max_decoding_length=bound,  # tokens with eos, or cut at the bound without it
        )
        best = []
        for result in results:
            scored = [
                (score / ((5.0 + min(len(tokens) + 1, bound)) / 6.0) ** self.alpha, tokens)
                for tokens, score in zip(result.hypotheses, result.scores)
            ]
            score, tokens = max(scored, key=lambda pair: pair[0])
            best.append((tokens, score))
        return best

    def translate(self, sentences):
        """[(translation, score)] for a list of strings."""
        if not sentences:
            return []
        return [
            (self.processor.decode_pieces(tokens), score)
            for tokens, score in self.translate_pieces(self.tokenize(sentences))
        ]


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m serving.ctranslate2",
        description="Convert a trained model into a CTranslate2 model directory (for "
        "`serving.translate --engine ctranslate2`).",
    )
    add_model_arguments(parser)
    parser.add_argument(
        "--out", type=pathlib.Path, required=True, help="the directory to write, e.g. exports/ct2"
    )
    parser.add_argument(
        "--quantization",
        default="none",
        choices=QUANTIZATIONS,
        help="CTranslate2's weight quantization: none (float32 weights), int8, int8_float32 or "
        "float16 (default: none)",
    )
    add_verbose_flag(parser)
    args = parser.parse_args(argv)

    from training import run_dir

    _, tokenizer_path = model_and_tokenizer(parser, args)
    try:
        out_dir = convert(
            run_dir.load_model(args.model), tokenizer_path, args.out, args.quantization
        )
    except (ValueError, FileExistsError) as error:
        parser.exit(1, f"error: {error}\n")
    print(f"converted {args.model} to {out_dir} ({args.quantization})", file=sys.stdout)


if __name__ == "__main__":
    main()
