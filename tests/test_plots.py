"""The run's reward plot, drawn from history.jsonl as ART writes it."""

import json

from skill_rl.training.plots import read_history, reward_plot

PNG = b"\x89PNG\r\n\x1a\n"


def test_the_plot_holds_every_logged_step_and_skips_a_torn_line(tmp_path):
    rows = [
        {"step": s, "train/reward": 0.1 * s, "train/format": 0.5, "train/procedure": 0.2, "train/correctness": 0.3}
        for s in (1, 2, 3, 4)
    ] + [{"step": 2, "val/reward": 0.4}, {"step": 4, "val/reward": 0.35}]
    (tmp_path / "history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 5, "train/rew')
    series = read_history(tmp_path / "history.jsonl")
    assert [s for s, _ in series["train/reward"]] == [1, 2, 3, 4] and series["val/reward"] == [(2, 0.4), (4, 0.35)]
    path = reward_plot(tmp_path, "demo")
    assert path == tmp_path / "rewards.png" and path.read_bytes()[:8] == PNG
    # no temporary file left
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".png"] == ["rewards.png"]


def test_no_history_yet_draws_nothing(tmp_path):
    assert reward_plot(tmp_path) is None and not (tmp_path / "rewards.png").exists()


def test_a_run_name_with_dollar_signs_is_drawn_literally_not_as_mathtext(tmp_path):
    (tmp_path / "history.jsonl").write_text(json.dumps({"step": 1, "train/reward": 0.5}) + "\n")
    # unbalanced mathtext: matplotlib would raise drawing it
    path = reward_plot(tmp_path, "git-commit: run$\\frac{$x_")
    assert path.read_bytes()[:8] == PNG


def test_a_training_run_draws_the_plot_off_its_path_and_waits_for_it_at_the_end(tmp_path, monkeypatch):
    import asyncio
    import threading

    from skill_rl.training import plots

    release, drawn = threading.Event(), []

    # a plot that takes as long as the test says
    def slow_plot(run_dir, title=""):
        assert release.wait(10)
        drawn.append(title)
        return run_dir / plots.PLOT_NAME

    async def run():
        plotter = plots.Plotter()
        # returns while the plot is still being drawn
        await plotter.draw(tmp_path, "first")
        assert drawn == []
        release.set()
        # the first one is finished before the second starts
        await plotter.draw(tmp_path, "second")
        assert drawn == ["first"]
        assert await plotter.done() == tmp_path / plots.PLOT_NAME and drawn == ["first", "second"]
        # nothing left to wait for
        assert await plotter.done() is None

    monkeypatch.setattr(plots, "reward_plot", slow_plot)
    asyncio.run(run())
