"""diagnostics/loss_surface.py: the healthy Huber loss passes; a shifted minimum, a clipped plateau and a NaN region
each fail the check that names them; the PNG is written (or, without matplotlib, a one-line note); bad input exits 2."""
import sys

import pytest
import torch

import loss_surface  # noqa: E402  (conftest puts diagnostics/ on sys.path)


@pytest.mark.parametrize("bug,summary_start", [
    (None, "finite everywhere, no plateau, minimum on target"),
    ("min", "the minimum is at (0.3, -0.2), not at the target"),
    ("plateau", "81% of the grid is a plateau"),
    ("nan", "781 of 1681 grid points give a NaN/inf"),
])
def test_each_twin_fails_the_check_that_names_it(bug, summary_start):
    result = loss_surface.check_loss_surface(loss_surface.make_demo_surface(bug))
    assert result["status"] == ("pass" if bug is None else "fail")
    assert result["summary"].startswith(summary_start)
    d = result["details"]
    if bug == "nan":
        assert d["first_nonfinite_at"] == [-2.0, -2.0]
    if bug != "min":
        assert d["min_distance_steps"] == pytest.approx(0, abs=1e-9)


def test_png_is_written_and_never_overwritten(tmp_path, capsys):
    png = tmp_path / "surface.png"
    assert loss_surface.main(["--bug", "plateau", "--grid", "11", "--png", str(png)]) == 1
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"png: {png}" in capsys.readouterr().out
    assert loss_surface.main(["--bug", "plateau", "--grid", "11", "--png", str(png)]) == 2
    assert capsys.readouterr().err == f"error: --png {png} exists; pass --force to replace it, or choose another path\n"


@pytest.mark.hostile
def test_a_png_that_cannot_be_written_is_one_line_and_exit_2(tmp_path, capsys):
    png = tmp_path / ("s" * 300 + ".png")  # longer than a file name may be (255 bytes): the write itself fails
    assert loss_surface.main(["--healthy", "--grid", "11", "--png", str(png)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot write {png}: ") and err.count("\n") == 1 and not list(tmp_path.iterdir())


def test_without_matplotlib_the_check_runs_and_says_so_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now raises ImportError
    assert loss_surface.main(["--healthy", "--grid", "11", "--png", str(tmp_path / "s.png")]) == 0
    out = capsys.readouterr().out
    assert "png: not written: matplotlib is not installed" in out and not (tmp_path / "s.png").exists()


@pytest.mark.hostile
@pytest.mark.parametrize("source,args,says", [
    (None, [], "surface file not found"),
    ("def make_surface():\n    raise RuntimeError('no data')\n", [], "make_surface() in"),
    ("def make_surface():\n    return {'loss': 1}\n", [], "must be a dict with loss"),
    ("def make_surface():\n    return {'loss': lambda a, b: a + b, 'x_range': (1, 0), 'y_range': (0, 1)}\n", [],
     "x_range must be (low, high)"),
    ("def make_surface():\n    return {'loss': lambda a, b: a * b, 'x_range': (float('-inf'), 1), 'y_range': (0, 1)}\n", [],
     "x_range must be (low, high), two finite numbers"),
    ("def make_surface():\n    return {'loss': lambda a, b: (a - 1) ** 2 + b ** 2, 'x_range': (0, 2), 'y_range': (-1, 1),"
     " 'target': (float('nan'), 0.0)}\n", [], "target must be (a, b), two finite numbers"),
    ("def make_surface():\n    return {'loss': lambda a, b: a + b, 'x_range': (1, 1), 'y_range': (0, 1)}\n", [],
     "x_range must be (low, high)"),  # low == high: no grid
    ("def make_surface():\n    return {'loss': lambda a, b: a + b, 'x_range': ('0', 1), 'y_range': (0, 1)}\n", [],
     "x_range must be (low, high), two finite numbers"),  # text, neither a number nor a tensor
    ("def make_surface():\n    return {'loss': lambda a, b: 3.0, 'x_range': (0, 1), 'y_range': (0, 1)}\n", [],
     "loss(a, b) returned float, expected a scalar tensor"),
    ("def make_surface():\n    return {'loss': lambda a, b: a.view(5), 'x_range': (0, 1), 'y_range': (0, 1)}\n", [],
     "the loss could not be evaluated: RuntimeError"),
    ("def make_surface():\n    return {'loss': lambda a, b: a * b, 'x_range': (0, 1), 'y_range': (0, 1)}\n", ["--grid", "100000"],
     "--grid 100000: use 5 to 401"),
])
def test_bad_surfaces_exit_2_with_one_line(tmp_path, capsys, source, args, says):
    path = tmp_path / "surface.py"
    if source is not None:
        path.write_text(source)
    assert loss_surface.main(["--surface", str(path), *args]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and says in err


def test_a_loss_vmap_cannot_trace_is_evaluated_point_by_point_with_the_same_verdict():
    def branching(a, b):  # float(a): data-dependent Python control flow, which vmap refuses
        return (a - 1) ** 2 + (b + 0.5) ** 2 if float(a.detach()) > -10 else a

    smooth = {"loss": branching, "x_range": (-2.0, 2.0), "y_range": (-2.0, 2.0), "target": (1.0, -0.5)}
    traced = dict(smooth, loss=lambda a, b: (a - 1) ** 2 + (b + 0.5) ** 2)
    looped, vmapped = loss_surface.check_loss_surface(smooth, n=21), loss_surface.check_loss_surface(traced, n=21)
    assert looped == vmapped and looped["status"] == "pass"


def test_a_target_of_zero_dimensional_tensors_is_accepted_as_numbers():
    surface = dict(loss_surface.make_demo_surface(None), target=(torch.tensor(1.0), torch.tensor(-0.5)))
    result = loss_surface.check_loss_surface(surface, n=21)
    assert (result["status"], result["details"]["target"]) == ("pass", [1.0, -0.5])


@pytest.mark.parametrize("grid", [5, 7, 9])
def test_a_moved_minimum_fails_on_a_coarse_grid_too(grid):
    """At 5-9 points a grid step is 0.5-1 wide, and the moved minimum (0.3, -0.2) lands within 2 steps of the target
    (the distance rule passed it at 7): the loss at the target itself, above the lowest grid point's basin, fails it.
    The healthy twin's target is its minimum at any grid."""
    assert loss_surface.check_loss_surface(loss_surface.make_demo_surface("min"), n=grid)["status"] == "fail"
    assert loss_surface.check_loss_surface(loss_surface.make_demo_surface(None), n=grid)["status"] == "pass"


def test_a_minimum_moved_by_a_hair_is_still_on_target():
    """A weight decay of 1e-3 moves the minimum by 0.001: the loss at the target is within the basin (1% of the
    loss's range over the grid above the lowest point) and the grid minimum on it: pass."""
    surface = {"loss": lambda a, b: (a - 1) ** 2 + (b + 0.5) ** 2 + 1e-3 * (a ** 2 + b ** 2),
               "x_range": (-2.0, 2.0), "y_range": (-2.0, 2.0), "target": (1.0, -0.5)}
    result = loss_surface.check_loss_surface(surface)
    assert result["status"] == "pass" and result["details"]["target_loss"] < 1e-2


def test_the_text_report_and_the_plot_mark_the_minimum_and_the_target(tmp_path, capsys):
    png = tmp_path / "surface.png"
    assert loss_surface.main(["--bug", "min", "--grid", "11", "--png", str(png)]) == 1
    out = capsys.readouterr().out
    assert "minimum 0.465 at (0.4, " in out and "), target (1, -0.5); plateau 0% of the grid" in out, out
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure
    drawn = []
    real = Figure.savefig

    def keep(fig, *args, **kwargs):
        drawn.extend(c.get_label() for ax in fig.axes for c in ax.collections)
        return real(fig, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Figure, "savefig", keep)
        assert loss_surface.main(["--bug", "min", "--grid", "11", "--png", str(tmp_path / "again.png")]) == 1
    assert {"target", "grid minimum"} <= set(drawn)
