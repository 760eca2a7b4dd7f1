"""matplotlib backend for cellblock runs: MPLBACKEND=module://cellblock._mpl_backend.

Drawing is Agg's. plt.show() (and Figure.show()) sends each open figure that
has something drawn as an image/png display item and closes it; the runner
calls flush() when the code is over for the figures still open.
"""

import io

from matplotlib._pylab_helpers import Gcf
from matplotlib.backend_bases import FigureManagerBase, _Backend
from matplotlib.backends.backend_agg import FigureCanvasAgg

from cellblock import _channel


def _blank(fig):
    # Only the figure's background patch: no axes, text, image or artist.
    try:
        return all(c is fig.patch for c in fig.get_children())
    except Exception:
        return False


def _send(fig):
    ch = _channel.channel
    if ch is None or _blank(fig):
        return
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    png = buf.getvalue()
    limits = ch.limits
    data, dropped, _ = _channel.bundle(fig, limits)
    data.pop("image/png", None)
    _channel._add(data, dropped, "image/png", png, limits)
    ch.send_item(data, dropped)


class FigureManagerCellblock(FigureManagerBase):
    def show(self):
        fig = self.canvas.figure
        _send(fig)
        Gcf.destroy(self)


class FigureCanvasCellblock(FigureCanvasAgg):
    # Read by matplotlib 3.6 and later to make a figure's manager.
    manager_class = FigureManagerCellblock


def flush():
    """Send every open figure that has something drawn, and close them all."""
    for manager in list(Gcf.get_all_fig_managers()):
        try:
            _send(manager.canvas.figure)
        finally:
            Gcf.destroy(manager)


@_Backend.export
class _BackendCellblock(_Backend):
    FigureCanvas = FigureCanvasCellblock
    FigureManager = FigureManagerCellblock

    @staticmethod
    def show(*args, **kwargs):
        flush()
