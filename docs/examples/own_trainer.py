"""Your own training script, profiled by harness: its presets in the Trainer you build.

    python docs/examples/own_trainer.py --output-dir runs/try1

trains and runs inference on a small classifier, then writes runs/try1/reports/
(speed.json/.csv, memory.json/.csv, summary.txt/.json) and runs/try1/result.json, the files
`harness profiler=[speed,memory,summary]` writes for a job. Everything but the three lines
marked `harness` is a plain Lightning script; docs/own-model.md explains the rest.
"""

from __future__ import annotations

import argparse

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Timer
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from harness import ProfileSession


class Classifier(pl.LightningModule):
    def __init__(self, features: int = 32, hidden: int = 64, classes: int = 4) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def predict_step(self, batch, batch_idx):
        return self(batch[0]).argmax(-1)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


class RandomData(pl.LightningDataModule):
    def __init__(self, batch_size: int = 16, examples: int = 512, features: int = 32) -> None:
        super().__init__()
        self.batch_size, self.examples, self.features = batch_size, examples, features

    def setup(self, stage: str) -> None:
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(self.examples, self.features, generator=generator)
        self.dataset = TensorDataset(x, torch.randint(0, 4, (self.examples,), generator=generator))

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.dataset, batch_size=self.batch_size, shuffle=True)

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(self.dataset, batch_size=self.batch_size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", default="runs/try1")
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()

    # harness: the presets, by their conf/profiler names, with the command's options.
    session = ProfileSession(["speed", "memory", "summary"], output_dir=args.output_dir,
                             overrides=["profiler.speed.warmup_steps=3"])
    trainer = pl.Trainer(
        max_epochs=1,
        accelerator="auto",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        callbacks=[Timer(), *session.callbacks],  # harness: yours, then the session's
        profiler=session.profiler,  # harness: memory is a Lightning Profiler
    )
    model, data = Classifier(), RandomData(batch_size=args.batch_size)
    trainer.fit(model, datamodule=data)
    trainer.predict(model, datamodule=data, return_predictions=False)
    result = session.finish(trainer)  # harness: reports/ and result.json
    print(f"{result.status}: {result.metrics['train_examples_per_second']:.0f} training"
          f" examples/s, reports in {session.output_dir}")


if __name__ == "__main__":
    main()
