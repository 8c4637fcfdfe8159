"""harness's submitit launchers (`hydra/launcher=slurm`, `hydra/launcher=local`).

Hydra only instantiates launcher plugins defined under the `hydra_plugins`
namespace package, hence this home outside `harness`. Keep it light: Hydra
imports every module here whenever it starts.
"""
