"""A shared source/target subword vocabulary (byte-pair encoding, as in §5.1, or a unigram
language model, Kudo 2018), trained with sentencepiece and applied inside the TensorFlow graph by
tensorflow-text.

Running in the graph is what lets an exported model take raw strings: TensorFlow Serving links
the tensorflow-text ops. Text is normalized the same way when the vocabulary is trained and when
it is applied: invalid UTF-8 is replaced by U+FFFD, then NFKC, then U+2581 (sentencepiece's
word-boundary mark) becomes a space, then leading and trailing ASCII whitespace is stripped.
`detokenize(tokenize(s)) == normalize(s)` for any string: byte fallback spells characters
outside the vocabulary as UTF-8 bytes, so nothing becomes <unk>.
"""

import io
import pathlib

import sentencepiece
import tensorflow as tf
import tensorflow_text as tf_text
from sentencepiece import sentencepiece_model_pb2

from keras_transformer.compat import sentencepiece_tokenizer
from keras_transformer.digests import sha256_of_bytes
from keras_transformer.ids import BOS_ID, EOS_ID, PAD_ID, SPECIAL_IDS, UNK_ID
from keras_transformer.text import WORD_BOUNDARY, normalize_text

BYTE_PIECES = 256
MODEL_TYPES = ("bpe", "unigram")


def checked_processor(model_proto):
    """A sentencepiece processor of `model_proto` (bytes), refused unless its ids 0-3 are
    <pad>, <unk>, <s>, </s>. Needs no TensorFlow."""
    processor = sentencepiece.SentencePieceProcessor(model_proto=model_proto)
    pieces = [processor.id_to_piece(i) for i in SPECIAL_IDS]
    if pieces != ["<pad>", "<unk>", "<s>", "</s>"]:
        raise ValueError(
            f"the sentencepiece model's ids 0-3 are {pieces}; expected <pad>, <unk>, <s>, </s> "
            "(train it with SubwordTokenizer.train)"
        )
    return processor


class SubwordTokenizer(tf.Module):
    """A sentencepiece model (BPE or unigram) with ids pad=0, unk=1, bos=2, eos=3, shared by both
    languages.

    As a `tf.Module` it can be tracked by another module (a Translator): the model travels
    inside the SavedModel and the file it was loaded from is no longer needed. `sha256`: the
    hex SHA-256 of the model's bytes, which identifies the vocabulary (a model's config records
    it: `TransformerConfig.check_tokenizer`). `path`: the file it was loaded from or trained
    into, for messages (None when built from bytes).
    """

    def __init__(self, model_proto, name="subword_tokenizer", path=None):
        super().__init__(name=name)
        self.model_proto = bytes(model_proto)
        self.sha256 = sha256_of_bytes(self.model_proto)
        self.path = None if path is None else pathlib.Path(path)
        processor = checked_processor(self.model_proto)
        self.vocab_size = processor.get_piece_size()
        self._processor = processor
        self._sentencepiece = sentencepiece_tokenizer(self.model_proto, name)

    @classmethod
    def train(
        cls,
        texts,
        vocab_size,
        path,
        character_coverage=0.9995,
        max_sentences=2_000_000,
        model_type="bpe",
        symbols=(),
    ):
        """Trains a vocabulary of at most `vocab_size` pieces on `texts` (sentences of both
        languages), writes the model to `path` and returns the tokenizer. `model_type`: "bpe"
        (byte-pair encoding, §5.1) or "unigram" (a unigram language model, Kudo 2018).
        `symbols`: strings that are each one piece wherever they occur, such as a tag (a piece
        cannot otherwise join punctuation and letters).

        The vocabulary may come out smaller when the texts hold fewer distinct pieces; read
        `vocab_size` from the returned tokenizer.
        """
        if model_type not in MODEL_TYPES:
            raise ValueError(
                f"model_type must be one of {', '.join(MODEL_TYPES)}; got {model_type!r}"
            )
        minimum = len(SPECIAL_IDS) + BYTE_PIECES + 1
        if vocab_size < minimum:
            raise ValueError(
                f"vocab_size must be at least {minimum} (4 special ids and 256 byte pieces); got "
                f"{vocab_size}"
            )
        sentences = (line for line in map(normalize_text, texts) if line)
        model = io.BytesIO()
        try:
            sentencepiece.SentencePieceTrainer.train(
                sentence_iterator=sentences,
                model_writer=model,
                vocab_size=vocab_size,
                model_type=model_type,
                pad_id=PAD_ID,
                unk_id=UNK_ID,
                bos_id=BOS_ID,
                eos_id=EOS_ID,
                byte_fallback=True,
                character_coverage=character_coverage,
                normalization_rule_name="identity",  # normalize_text has already run
                remove_extra_whitespaces=False,
                split_digits=True,
                user_defined_symbols=list(symbols),
                hard_vocab_limit=False,
                input_sentence_size=max_sentences,
                shuffle_input_sentence=True,
                minloglevel=2,
            )
        except RuntimeError as error:
            raise ValueError(f"training the subword vocabulary failed: {error}") from error
        tokenizer = cls(model.getvalue(), path=path)
        tokenizer.save(path)
        return tokenizer

    @classmethod
    def load(cls, path):
        path = pathlib.Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no sentencepiece model at {path}")
        try:
            return cls(path.read_bytes(), path=path)
        except RuntimeError as error:  # sentencepiece's parser: a cut or foreign file
            raise ValueError(
                f"{path}: not a readable sentencepiece model ({' '.join(str(error).split())})"
            ) from None
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None

    def save(self, path):
        path = pathlib.Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(self.model_proto)
        return path

    def normalize(self, strings):
        """Replaces invalid UTF-8 by U+FFFD, applies NFKC, turns U+2581 into a space and strips
        ASCII whitespace at both ends."""
        strings = tf.strings.unicode_transcode(
            strings, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
        )
        strings = tf.strings.regex_replace(
            tf_text.normalize_utf8(strings, "NFKC"), WORD_BOUNDARY, " "
        )
        return tf.strings.strip(strings)

    def tokenize(self, strings, padded=False):
        """Subword ids of a batch of strings [B]: int32 RaggedTensor [B, None], or a dense
        [B, T] tensor padded with pad_id when `padded`. No bos or eos is added."""
        ids = self._sentencepiece.tokenize(self.normalize(strings))
        return ids.to_tensor(PAD_ID) if padded else ids

    @property
    def model_type(self):
        """The model's kind as trained: "bpe" or "unigram"."""
        proto = sentencepiece_model_pb2.ModelProto()
        proto.ParseFromString(self.model_proto)
        return sentencepiece_model_pb2.TrainerSpec.ModelType.Name(
            proto.trainer_spec.model_type
        ).lower()

    def sampling(self, alpha):
        """A tokenizer for training batches that draws a new segmentation at every call, a form
        of subword regularisation (Kudo, 2018). `alpha` in (0, 1): for a BPE model, BPE-dropout
        (Provilkov et al., 2020), each merge skipped with this probability; for a unigram model,
        a segmentation drawn from all of them with probabilities P(x)^alpha (smaller: more
        varied). Not a `tf.Module`: nothing exported can hold it, so validation, evaluation,
        export and serving segment as `tokenize` does. Its draws are not seeded (sentencepiece's
        own generator)."""
        return SampledSegmentation(self, alpha)

    def detokenize(self, ids):
        """Strings [B] from ids [B, T] (ragged or dense); pad, bos and eos ids are dropped, the
        text stops at the first eos, and byte pieces that do not form valid UTF-8 become U+FFFD."""
        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.RaggedTensor.from_tensor(ids)
        ids = tf.cast(ids, tf.int32)
        before_eos = tf.math.cumsum(tf.cast(ids == EOS_ID, tf.int32), axis=1) == 0
        keep = before_eos & (ids != PAD_ID) & (ids != BOS_ID)
        text = self._sentencepiece.detokenize(tf.ragged.boolean_mask(ids, keep))
        return tf.strings.unicode_transcode(
            text, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
        )

    def id_to_piece(self, token_id):
        return self._processor.id_to_piece(int(token_id))


class SampledSegmentation:
    """`SubwordTokenizer.sampling`'s tokenizer: `tokenize` as the tokenizer's, each segmentation
    drawn (BPE-dropout, or unigram sampling)."""

    def __init__(self, tokenizer, alpha):
        if not 0 < alpha < 1:
            name = "BPE-dropout" if tokenizer.model_type == "bpe" else "unigram sampling's alpha"
            raise ValueError(f"{name} must be in (0, 1); got {alpha}")
        self.alpha = alpha
        self.normalize = tokenizer.normalize
        # nbest_size -1: sample among all segmentations; alpha, the merges' dropout probability
        # (BPE) or the exponent on the segmentations' probabilities (unigram)
        self._sentencepiece = sentencepiece_tokenizer(
            tokenizer.model_proto, tokenizer.name, nbest_size=-1, alpha=alpha
        )

    def tokenize(self, strings, padded=False):
        """Subword ids of a batch of strings [B], one segmentation drawn for each."""
        ids = self._sentencepiece.tokenize(self.normalize(strings))
        return ids.to_tensor(PAD_ID) if padded else ids
