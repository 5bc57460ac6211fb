"""The benchmarks' figures: a matplotlib ``Figure`` on the Agg canvas (no display, no global pyplot state),
saved atomically, with matplotlib's own logger kept at warnings (fairseq's logging setup would otherwise
print its font-manager debug lines into every report run)."""
import logging

from fairseq_plugins.files import atomic_output


def new_figure(rows: int = 1, columns: int = 1, **figure_options):
    """(figure, axes) as ``plt.subplots`` gives them, without pyplot."""
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(**figure_options)
    FigureCanvasAgg(figure)
    return figure, figure.subplots(rows, columns)


def save_png(figure, path: str, dpi: int = 110, **options):
    """Write the figure as a PNG at ``path``, atomically (a reader never sees half a file)."""
    with atomic_output(path, "wb") as f:
        figure.savefig(f, format="png", dpi=dpi, **options)
