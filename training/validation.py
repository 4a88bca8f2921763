"""The --keep-best figure of a model on the run's validation pairs: what `KeepBest` watches
(--keep-best loss) and what the run's final model is described by (`training.finish`)."""

import keras_transformer as kt
from keras_transformer.inference import signature_translator

from .metrics import corpus_scores, translate_all, validation_loss


def figure(context, model):
    """The --keep-best figure of `model` on the validation pairs of `context` (a RunContext):
    greedy BLEU or chrF, or the references' cross-entropy."""
    from keras_transformer.data import Corpus, make_batches  # TensorFlow's

    plan = context.plan
    pairs = context.validation_pairs[: plan.evaluation.bleu_sentences]
    keep_best = plan.selection.keep_best
    if keep_best == "loss":
        batches = make_batches(
            Corpus(pairs).dataset(),
            context.tokenizer,
            context.config.tokens_per_batch,
            plan.data.max_length,
        )
        return validation_loss(model, batches)
    translator = signature_translator(kt.Translator(model, context.tokenizer, beam_size=1), "model")
    hypotheses = translate_all(translator.translate, [s for s, _ in pairs])
    return corpus_scores(hypotheses, [t for _, t in pairs])[keep_best]
