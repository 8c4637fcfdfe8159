"""reports.files.write_csv writes a list of dicts with the csv module, byte for byte what pandas
wrote before (issue #22: a job's reports no longer import pandas for a list): checked on the rows
the speed, pytorch, memory and system presets really write, and on planted edge cases."""

from __future__ import annotations

import enum
import math

import lightning.pytorch as pl
import pandas as pd
import pytest
from own_loaders import TrainValOnly

from harness import ProfileSession
from harness.profilers import speed, torch_profiler
from harness.reports import files


class _Stage(str, enum.Enum):
    FIT = "fit"


def _pandas(rows) -> str:
    return pd.DataFrame(list(rows)).to_csv(index=False)


def test_the_presets_rows_read_as_pandas_wrote_them(tmp_path, monkeypatch):
    written: dict[str, list[dict]] = {}
    write_csv = files.write_csv

    def recording(path, rows):
        rows = list(rows)
        written[path.name] = rows
        return write_csv(path, rows)

    # write_report calls it in files; the presets by the name they imported
    for module in (files, speed, torch_profiler):
        monkeypatch.setattr(module, "write_csv", recording)
    session = ProfileSession(["speed", "pytorch", "memory", "system"],
                             output_dir=tmp_path / "run",
                             overrides=["profiler.speed.warmup_steps=2",
                                        "profiler.system.interval_s=0.05"])
    trainer = pl.Trainer(max_epochs=1, callbacks=session.callbacks, profiler=session.profiler,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, accelerator="cpu")
    module = TrainValOnly(train_examples=40, val_examples=16, batch_size=4)
    trainer.fit(module)
    trainer.predict(module, dataloaders=module.val_dataloader(), return_predictions=False)
    session.finish(trainer)

    assert {"speed.csv", "speed_steps.csv", "pytorch.csv", "memory.csv", "system.csv"} <= set(
        written), sorted(written)
    for name, rows in written.items():
        assert rows, name
        assert files._csv_of_rows(rows) is not None, f"{name} fell back to pandas"
        on_disk = (tmp_path / "run" / "reports" / name).read_bytes()
        assert on_disk == _pandas(rows).encode(), name
    # speed_steps.csv: a column per phase's rate, empty in the other phases' rows
    steps = written["speed_steps.csv"]
    assert {"training_rate", "validation_rate", "inference_rate"} <= {k for r in steps for k in r}


@pytest.mark.parametrize("rows", [
    [],
    [{}, {}],
    [{"a": 1, "b": None}, {"a": None, "c": 'x,y"z', "b": 2}],  # an int column with a gap: floats
    [{"a": True, "b": True}, {"a": None, "b": False}],
    [{"a": 0.1 + 0.2, "b": 1e-05, "c": 1e16, "d": math.inf, "e": math.nan,
      "f": 123456789012345678, "g": -math.inf, "h": -0.0}],
    [{"a": ""}], [{"a": None}],
    [{"a": "two\nlines", "b": " spaced "}],
    [{"a": 3, "b": 2.0}, {"a": 4, "b": 1}],
    [{"stage": _Stage.FIT, "n": 1}],  # a str enum (Lightning's TrainerFn): by its value
])
def test_planted_rows_read_as_pandas_writes_them(rows, tmp_path):
    assert files._csv_of_rows(rows) == _pandas(rows)
    files.write_csv(tmp_path / "t.csv", rows)
    assert (tmp_path / "t.csv").read_text() == _pandas(rows)


def test_rows_pandas_would_type_otherwise_still_go_through_pandas(tmp_path):
    import numpy as np

    for rows in ([{"a": 1, "b": "x"}, {"a": "s", "b": 2.5}], [{"a": np.int64(3)}],
                 [{"a": True}, {"a": 2}]):
        assert files._csv_of_rows(rows) is None
        files.write_csv(tmp_path / "t.csv", rows)
        assert (tmp_path / "t.csv").read_text() == _pandas(rows)
