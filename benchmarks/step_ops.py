"""Ops per decoding step of the exported graph: what TensorFlow runs for each position when it
decodes without XLA (as TensorFlow Serving does), counted after Grappler's optimizations.

    python -m benchmarks.step_ops                  # the tiny and small presets, greedy and beam 4
    python -m benchmarks.step_ops --preset base

The search is traced with a dynamic batch and source length, as the Translator traces it; the
count is of the while loop's body, without constants and the loop's own Enter/Exit nodes.
"""

import collections

from keras_transformer_cli import console, flags


def loop_ops(model, beam_size):
    """{op type: count} of one step of beam search (beam size 1: greedy search) on `model`."""
    import tensorflow as tf
    from tensorflow.core.protobuf import config_pb2
    from tensorflow.python.grappler import tf_optimizer

    from keras_transformer import decoding

    def search(source_ids):
        strategy = decoding.Greedy() if beam_size == 1 else decoding.Beam(beam_size, 0.6)
        return decoding.search_model(model, source_ids, strategy, None, 50)

    function = tf.function(search, input_signature=[tf.TensorSpec([None, None], tf.int32)])
    graph = function.get_concrete_function().graph
    meta_graph = tf.compat.v1.train.export_meta_graph(
        graph=graph, graph_def=graph.as_graph_def(add_shapes=True)
    )
    meta_graph.collection_def["train_op"].node_list.value.extend(
        output.name for output in graph.outputs
    )
    optimized = tf_optimizer.OptimizeGraph(config_pb2.ConfigProto(), meta_graph)
    return collections.Counter(
        node.op
        for node in optimized.node
        if "while/" in node.name
        and node.op not in ("Const", "NoOp", "Enter", "Exit", "Placeholder")
    )


def build_parser():
    parser = flags.parser(__doc__, "benchmarks.step_ops")
    flags.add_presets(parser)
    return parser


@console.program
def main(argv=None):
    args = flags.parse(build_parser(), argv)

    import keras_transformer as kt

    print("| preset | search | ops per decoding step |\n| --- | --- | ---: |")
    for preset in args.preset or ["tiny", "small"]:
        config = kt.TransformerConfig.preset(preset, vocab_size=8000, dropout=0.0)
        model = kt.build_transformer(config)
        for name, beam_size in (("greedy", 1), ("beam 4", 4)):
            print(f"| {preset} | {name} | {sum(loop_ops(model, beam_size).values())} |")


if __name__ == "__main__":
    main()
