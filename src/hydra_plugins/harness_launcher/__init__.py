"""harness's Hydra plugins (Hydra finds them only under `hydra_plugins`, and imports every
module here whenever it starts: keep them light)."""
