"""The floor for benchmarks/fixed_cost.py: one fit of harness's built-in workload with a plain
Lightning Trainer, no harness around it (no Hydra, no presets, no result.json, no tracking).

The model and data are harness's own classes with conf/model/transformer.yaml's and
conf/data/synthetic.yaml's defaults; the Trainer gets conf/trainer/default.yaml's settings
(TRAINER below; fixed_cost.py checks they still match the yaml before it measures).

    python plain_fit.py OUT_DIR [train_batches] [batch_size]
"""

from __future__ import annotations

import sys

# conf/trainer/default.yaml, with what harness fills in for `harness profiler=none logger=none
# precision=fp32 trainer.enable_progress_bar=false`: precision, logger, profiler, progress bar.
TRAINER = {
    "accelerator": "auto",
    "devices": 1,
    "num_nodes": 1,
    "strategy": "auto",
    "max_epochs": 1,
    "max_steps": -1,
    "limit_train_batches": 1.0,
    "limit_val_batches": 1.0,
    "limit_predict_batches": 1.0,
    "val_check_interval": None,
    "num_sanity_val_steps": 0,
    "log_every_n_steps": 10,
    "enable_checkpointing": False,
    "enable_model_summary": False,
    "enable_progress_bar": False,
    "deterministic": False,
    "benchmark": None,
}
HARNESS_FILLS = {"precision": "32-true", "logger": False, "profiler": None}


def main() -> None:
    out_dir = sys.argv[1]
    train_batches = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    batch_size = int(sys.argv[3]) if len(sys.argv) > 3 else 32

    import lightning.pytorch as pl

    from harness.workload.data import SyntheticDataModule
    from harness.workload.model import TransformerModule

    pl.seed_everything(0, workers=True, verbose=False)
    data = SyntheticDataModule(batch_size=batch_size, train_batches=train_batches)
    model = TransformerModule(dim=data.dim)
    trainer = pl.Trainer(**TRAINER, **HARNESS_FILLS, default_root_dir=out_dir)
    trainer.fit(model, datamodule=data)


if __name__ == "__main__":
    main()
