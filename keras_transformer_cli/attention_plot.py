"""The encoder-decoder attention of one translation as a picture a person can read: a heat map
with the source sentence's subword pieces along the x axis and the translation's along the y
axis, a title saying what is drawn and a colour bar. TensorBoard's attention images
(`training.callbacks.TranslationMonitor`) and the notebook's plot both draw it with
`attention_figure`.

Drawn with matplotlib's object API (`matplotlib.figure.Figure` on an Agg canvas): no display
is needed and pyplot's global state (its backend, its open figures) is left alone."""

import numpy as np

# What a figure of `attention_figure` is drawn with, sized for TensorBoard's Images tab (about
# 600 to 800 pixels wide at DPI).
DPI = 100
FONT_SIZE = 9  # points, for the pieces; the title is one point larger
MAX_PIECES = 40  # per axis; a longer sentence shows its first MAX_PIECES and says so
MAX_PIECE_CHARS = 16  # a longer piece is shortened to its first 15 characters and "…"
WHAT = "last decoder layer, heads averaged"  # what TranslationMonitor draws


def piece_label(piece):
    """`piece` as a tick label: shortened to MAX_PIECE_CHARS characters, the last an ellipsis."""
    if len(piece) <= MAX_PIECE_CHARS:
        return piece
    return piece[: MAX_PIECE_CHARS - 1] + "…"


def attention_figure(weights, source_pieces, translation_pieces, what=WHAT, max_pieces=MAX_PIECES):
    """A matplotlib Figure of the attention `weights` [T, S] (row t: how the translation's piece
    t attends over the S source pieces) with the `source_pieces` (S) as the x axis's tick labels
    and the `translation_pieces` (T) as the y axis's, titled "source → translation: `what`".
    Past `max_pieces` on an axis, the first `max_pieces` pieces are drawn and the title says how
    many there were. Raises ValueError when `weights` is not [len(translation_pieces),
    len(source_pieces)]."""
    from matplotlib.figure import Figure

    weights = np.asarray(weights, dtype="float32")
    source_pieces, translation_pieces = list(source_pieces), list(translation_pieces)
    expected = (len(translation_pieces), len(source_pieces))
    if weights.shape != expected:
        raise ValueError(
            f"the attention weights have the shape {weights.shape}, but {expected[0]} "
            f"translation and {expected[1]} source pieces need [translation, source] = "
            f"{list(expected)}"
        )
    if 0 in expected:
        raise ValueError(f"nothing to draw: {expected[0]} translation, {expected[1]} source pieces")
    cut = []
    if len(translation_pieces) > max_pieces:
        cut.append(f"first {max_pieces} of {len(translation_pieces)} translation pieces")
    if len(source_pieces) > max_pieces:
        cut.append(f"first {max_pieces} of {len(source_pieces)} source pieces")
    source = [piece_label(p) for p in source_pieces[:max_pieces]]
    translation = [piece_label(p) for p in translation_pieces[:max_pieces]]
    grid = weights[: len(translation), : len(source)]

    # Inches: the heat map's cells are at least a line of text (0.16 in at 9 pt) apart, the
    # labels' room grows with the longest piece (about 0.075 in a character at 9 pt).
    char, cell = 0.075, 0.16
    width = np.clip(2.4 + char * max(map(len, translation)) + cell * len(source), 6.4, 8.0)
    height = np.clip(1.3 + char * max(map(len, source)) + cell * len(translation), 3.0, 9.0)
    figure = Figure(figsize=(float(width), float(height)), dpi=DPI, layout="constrained")
    axes = figure.add_subplot()
    image = axes.imshow(
        grid, cmap="viridis", vmin=0.0, vmax=max(float(grid.max()), 1e-9), aspect="auto"
    )
    axes.set_xticks(range(len(source)), source, rotation=90, fontsize=FONT_SIZE)
    axes.set_yticks(range(len(translation)), translation, fontsize=FONT_SIZE)
    axes.tick_params(length=2, pad=2)
    axes.set_xlabel("source", fontsize=FONT_SIZE)
    axes.set_ylabel("translation", fontsize=FONT_SIZE)
    title = f"source → translation: {what}"
    if cut:
        title += "\n(" + "; ".join(cut) + ")"
    axes.set_title(title, fontsize=FONT_SIZE + 1)
    colour_bar = figure.colorbar(image, ax=axes, fraction=0.05, pad=0.02)
    colour_bar.set_label("attention weight", fontsize=FONT_SIZE)
    colour_bar.ax.tick_params(labelsize=FONT_SIZE)
    return figure


def figure_pixels(figure):
    """`figure` rendered by Agg: uint8 RGBA pixels [H, W, 4] (H, W: its size in inches times
    its DPI)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    return np.array(canvas.buffer_rgba(), dtype="uint8")


def tick_labels(figure):
    """(x axis's tick labels, y axis's) of an `attention_figure`: the pieces it draws."""
    axes = figure.axes[0]
    return (
        [label.get_text() for label in axes.get_xticklabels()],
        [label.get_text() for label in axes.get_yticklabels()],
    )
