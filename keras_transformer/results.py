"""What a translator answers: a `Translation` per sentence, a `Scored` per scored pair, and the
reading of one sentence's signature outputs into them. Imports neither Keras nor TensorFlow, so
that a serving client (`serving.client`) answers with these types without loading a model."""

import typing

TRANSLATE_INPUTS = ("source", "prefix")  # the inputs of a translation that can be cut
SCORE_INPUTS = ("source", "target")  # the inputs of a scored pair that can be cut


class Translation(typing.NamedTuple):
    """One translation, its score (log P(Y | X) over GNMT's length penalty, as beam search ranks
    it, §6.1), and the inputs of its sentence that were longer than the model holds and were cut
    to it (`cut`: "source", "prefix"; empty when none was). From a served model's answer
    (`from_outputs`), when its export gives the n-best and alignment outputs: `n_best`, the
    (text, score) pairs of the beam, best first; `tokens`, the translation's token ids with
    eos; `source_tokens`, the source's with eos; `alignment`, a row per token of `tokens` of
    the attention weights over `source_tokens`. Empty where not given."""

    text: str
    score: float
    cut: tuple = ()
    n_best: tuple = ()
    tokens: tuple = ()
    source_tokens: tuple = ()
    alignment: tuple = ()

    @classmethod
    def from_outputs(cls, outputs):
        """The Translation of one sentence's signature outputs ({output name: value}: a REST
        prediction row, or a row of each output tensor); KeyError naming an output it needs
        that is missing."""
        translation = cls(
            text_of(outputs["translation"]),
            float(outputs["score"]),
            cut_of(outputs, TRANSLATE_INPUTS),
        )
        if "alignment" not in outputs:  # an export without the n-best and alignment outputs
            return translation
        texts = [text_of(text) for text in outputs["nbest_translations"]]
        scores = [float(score) for score in outputs["nbest_scores"]]
        tokens = tuple(int(t) for t in outputs["tokens"] if int(t) != 0)
        source_tokens = tuple(int(t) for t in outputs["source_tokens"] if int(t) != 0)
        alignment = tuple(
            tuple(float(weight) for weight in row[: len(source_tokens)])
            for row in list(outputs["alignment"])[: len(tokens)]
        )
        return translation._replace(
            n_best=tuple(zip(texts, scores)),
            tokens=tokens,
            source_tokens=source_tokens,
            alignment=alignment,
        )


class Scored(typing.NamedTuple):
    """Forced decoding of one translation: log P(Y | X) over GNMT's length penalty (`score`, as
    beam search ranks), log P(Y | X) (`log_prob`), each token's log-probability, eos last
    (`token_scores`), and the inputs that were cut to what the model holds (`cut`: "source",
    "target")."""

    score: float
    log_prob: float
    token_scores: tuple
    cut: tuple = ()

    @classmethod
    def from_outputs(cls, outputs):
        """The Scored of one pair's outputs of the score signature (a REST prediction row, or a
        row of each output tensor); KeyError naming an output it needs that is missing."""
        return cls(
            float(outputs["score"]),
            float(outputs["log_prob"]),
            tuple(
                float(value)
                for value, token in zip(outputs["token_scores"], outputs["tokens"])
                if int(token) != 0
            ),
            cut_of(outputs, SCORE_INPUTS),
        )

    def line(self, normalized=False, tokens=False):
        """One line of text: log P (or the normalised score), then the token scores if asked,
        tab-separated."""
        line = f"{self.score if normalized else self.log_prob:.6f}"
        if tokens:
            line += "\t" + " ".join(f"{value:.6f}" for value in self.token_scores)
        return line


def cut_of(outputs, names):
    """The names among `names` whose output NAME_cut is true in one sentence's outputs: the
    inputs longer than the model holds, which it cut (none where an export has no such
    output)."""
    return tuple(name for name in names if bool(outputs.get(f"{name}_cut", False)))


def per_sentence(outputs):
    """One {output name: value} per sentence of batched outputs ({output name: array with a
    row per sentence})."""
    count = len(next(iter(outputs.values())))
    return [{name: value[row] for name, value in outputs.items()} for row in range(count)]


def text_of(value):
    """A text output as str (a tensor's bytes are UTF-8; a REST answer's is already str)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
