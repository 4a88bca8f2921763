"""The quality of translations (not the model's scores: `keras_transformer.scoring`): a list of
sentences translated in batches, corpus BLEU (13a tokenization), chrF and chrF++ by sacrebleu with
their signatures, the validation loss of references. Used by the training program, its callbacks,
`training.evaluate` and the quality study."""

import json
import pathlib
import sys

import keras
import numpy as np

from keras_transformer_cli.run_dir import scores_beside


def progress_verbosity():
    """Keras's progress bar on a terminal; in a log file only the final line."""
    return 1 if sys.stdout.isatty() else 2


def translate_all(translate, sentences, batch_size=64, verbose=0, cut=None):
    """Translations of `sentences` in their order, decoded in batches of similar length;
    `translate(list of str) -> [Translation]` (a loaded translator's `translate`). `cut`,
    a list, receives the index of every sentence whose source was longer than the model holds."""
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    results = [None] * len(sentences)
    progress = keras.utils.Progbar(len(sentences), verbose=verbose, unit_name="sentence")
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        for i, translation in zip(chunk, translate([sentences[i] for i in chunk])):
            results[i] = translation.text
            if cut is not None and translation.cut:
                cut.append(i)
        progress.add(len(chunk))
    return results


def evaluate(translate, pairs, output, batch_size=64):
    """Translates the sources of `pairs` (with a progress bar), scores the translations against
    the targets, writes both beside `output` and prints the scores; returns them."""
    cut = []
    hypotheses = translate_all(
        translate, [s for s, _ in pairs], batch_size, verbose=progress_verbosity(), cut=cut
    )
    scores = score_report(hypotheses, [t for _, t in pairs], output, sorted(i + 1 for i in cut))
    print_scores(scores)
    print(f"translations written to {output}, scores to {output}.scores.json")
    return scores


def corpus_scores(hypotheses, references):
    """sacrebleu's corpus BLEU (13a tokenization), chrF and chrF++ (word order 2) of detokenized
    hypotheses against one reference each, with their signatures and BLEU's brevity penalty."""
    import sacrebleu

    metrics = {
        "bleu": sacrebleu.metrics.BLEU(),
        "chrf": sacrebleu.metrics.CHRF(),
        "chrf++": sacrebleu.metrics.CHRF(word_order=2),
    }
    scores = {"sentences": len(hypotheses)}
    for name, metric in metrics.items():
        result = metric.corpus_score(hypotheses, [references])
        scores[name] = result.score
        scores[f"{name}_text"] = str(result)
        scores[f"{name}_signature"] = str(metric.get_signature())
        if name == "bleu":
            scores["brevity_penalty"], scores["length_ratio"] = result.bp, result.ratio
    return scores


def score_report(hypotheses, references, output, sources_cut=()):
    """`corpus_scores`; writes the hypotheses to `output` (one per line) and the scores to
    `output` + ".scores.json" with `sources_cut`, the lines (from 1) whose source was longer
    than the model holds and was translated cut, said on the console too; returns the scores.
    (A test set's score must cover every reference: such a sentence is translated as far as
    the model holds it, never dropped, and never silently.)"""
    scores = corpus_scores(hypotheses, references)
    scores["sources_cut"] = list(sources_cut)
    if sources_cut:
        shown = ", ".join(map(str, sources_cut[:10])) + (", ..." if len(sources_cut) > 10 else "")
        print(
            f"{len(sources_cut)} of {len(hypotheses)} sources are longer than the model holds "
            f"and were translated cut to it: lines {shown}"
        )
    output = write_translations(hypotheses, output)
    scores_beside(output).write_text(json.dumps(scores, indent=2))
    return scores


def write_translations(hypotheses, output):
    """The hypotheses, one per line, into `output` (its folder made if needed)."""
    output = pathlib.Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    # One line each, as every program reads lines (split at \n only): \r and \n become spaces.
    lines = (h.replace("\r", " ").replace("\n", " ") + "\n" for h in hypotheses)
    output.write_text("".join(lines), encoding="utf-8")
    return output


def print_scores(scores):
    """The scores as sacrebleu prints them, each with its signature."""
    for name in ("bleu", "chrf", "chrf++"):
        print(f"{scores[name + '_text']}    ({scores[name + '_signature']})")


def validation_loss(model, batches):
    """The cross-entropy of the reference tokens in nats per token (padding excluded, without
    label smoothing: comparable across runs of any eps_ls) over `batches` of
    ({"source", "target"}, target_out[, weights]), as `kt.data.make_batches` or binarized data
    give them."""
    total, count = 0.0, 0
    for inputs, target, *_ in batches:
        logits = model(inputs, training=False)
        log_probs = keras.ops.convert_to_numpy(keras.ops.log_softmax(logits, axis=-1))
        target = keras.ops.convert_to_numpy(target)
        picked = np.take_along_axis(log_probs, target[..., None], axis=-1)[..., 0]
        total -= float(picked[target != 0].sum())
        count += int((target != 0).sum())
    if not count:
        raise ValueError("no validation pair is short enough for --max-length")
    return total / count
