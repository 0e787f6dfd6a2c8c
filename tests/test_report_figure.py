"""The reproduce report's figure (issue 48): measured cells drawn at every scale, each point
named by its method, and a title that fits the figure."""

from fedshare.reproduce.measure import Measured
from fedshare.reproduce.render import TITLE_WIDTH, figure

LONG_TITLE = "baselines/checks at scale preset, cells from " + "/a/long/output/folder" * 6


def cell(method: str, values: list[float], paper: float | None = None) -> Measured:
    numbers = None if paper is None else "rebafl_table1"
    return Measured(
        numbers,
        "digits_pat2_m80",
        method,
        "final_accuracy",
        values,
        list(range(len(values))),
        paper=None if paper is None else (paper, 0.0),
    )


def drawn_text(fig) -> list[str]:
    ax = fig.axes[0]
    return [t.get_text() for t in ax.texts] + [t.get_text() for t in ax.get_yticklabels()]


def test_without_paper_numbers_every_measured_cell_is_drawn_with_its_name():
    items = [cell("fedavg", [90.0, 92.0]), cell("scaffold", [80.0, 84.0]), cell("gone", [])]
    fig = figure(items, LONG_TITLE)
    ax = fig.axes[0]
    (points,) = [line for line in ax.lines if line.get_marker() == "o"]
    assert list(points.get_xdata()) == [91.0, 82.0]  # the means, the unmeasured cell left out
    names = drawn_text(fig)
    assert "fedavg" in names and "scaffold" in names and "gone" not in names
    assert not any("no measured cell" in text for text in names)


def test_against_paper_numbers_each_point_carries_its_method_name():
    fig = figure([cell("fedavg", [60.0, 62.0], 70.0), cell("rebafl", [75.0], 80.0)], "t")
    ax = fig.axes[0]
    (points,) = [line for line in ax.lines if line.get_marker() == "o"]
    assert list(points.get_xdata()) == [70.0, 80.0] and list(points.get_ydata()) == [61.0, 75.0]
    assert {"fedavg", "rebafl"} <= set(drawn_text(fig))


def test_a_long_title_wraps_and_stays_inside_the_figure():
    fig = figure([cell("fedavg", [90.0])], LONG_TITLE)
    title = fig.axes[0].title
    assert all(len(line) <= TITLE_WIDTH for line in title.get_text().splitlines())
    fig.canvas.draw()
    box, page = title.get_window_extent(), fig.bbox
    assert page.x0 <= box.x0 and box.x1 <= page.x1 and box.y1 <= page.y1


def test_cells_of_several_columns_are_named_with_their_column():
    other = cell("fedavg", [50.0], 55.0)
    other.column = "digits_dir0.1"
    fig = figure([cell("fedavg", [60.0], 70.0), other], "t")
    assert {"fedavg · digits_pat2_m80", "fedavg · digits_dir0.1"} <= set(drawn_text(fig))
