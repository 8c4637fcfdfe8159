"""A stand-in for the `pynvml` module: a few GPUs with fixed UUIDs, power and energy counters."""

from __future__ import annotations

import time
from types import SimpleNamespace


class NVMLError(Exception):
    pass


class FakeNvml:
    """Module-like object; `energy` is None for a GPU without the total-energy counter."""

    def __init__(self, gpus: list[dict]) -> None:
        self.gpus = gpus
        self.shut_down = False
        self.energy_calls = 0

    def nvmlInit(self) -> None:  # noqa: N802 - the pynvml API's own names
        pass

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.shut_down = True

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> dict:  # noqa: N802
        return self.gpus[index]

    def nvmlDeviceGetUUID(self, handle: dict) -> str:  # noqa: N802
        return handle["uuid"]

    def nvmlDeviceGetName(self, handle: dict) -> bytes:  # noqa: N802
        return handle.get("name", "Fake GPU").encode()

    def nvmlDeviceGetUtilizationRates(self, handle: dict) -> SimpleNamespace:  # noqa: N802
        return SimpleNamespace(gpu=handle["util"], memory=0)

    def nvmlDeviceGetMemoryInfo(self, handle: dict) -> SimpleNamespace:  # noqa: N802
        return SimpleNamespace(used=handle["mem"], total=80 * 2**30, free=0)

    def nvmlDeviceGetPowerUsage(self, handle: dict) -> int:  # noqa: N802
        return handle["power_mw"]

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: dict) -> int:  # noqa: N802
        if handle.get("energy_mj") is None:
            raise NVMLError("Not Supported")
        self.energy_calls += 1
        # The counter advances by 1 J (1000 mJ) every time it is read.
        handle["energy_mj"] += 1000
        return handle["energy_mj"]


def three_gpus() -> FakeNvml:
    return FakeNvml(
        [
            {
                "uuid": "GPU-aaaa1111-0000",
                "util": 10,
                "mem": 1 * 2**30,
                "power_mw": 100_000,
                "energy_mj": 5_000_000,
            },
            {
                "uuid": "GPU-bbbb2222-0000",
                "util": 50,
                "mem": 2 * 2**30,
                "power_mw": 200_000,
                "energy_mj": None,
            },
            {
                "uuid": "GPU-bbbc3333-0000",
                "util": 90,
                "mem": 3 * 2**30,
                "power_mw": 300_000,
                "energy_mj": 7_000_000,
            },
        ]
    )


class FakeNvmlProcesses(FakeNvml):
    """FakeNvml with compute processes and per-process SM samples on GPU 0: `procs` holds the
    PIDs on the device, `util` (pid -> SM %) one sample per call at the fake clock, or the real
    time in µs without one (None: the driver does not support per-process utilisation)."""

    def __init__(self, procs: list[int], util: dict[int, int] | None,
                 clock: list[int] | None = None) -> None:
        super().__init__([{"uuid": "GPU-aaaa1111-0000", "util": 0, "mem": 0, "power_mw": 0,
                           "energy_mj": None}])
        self.procs, self.util, self.clock = procs, util, clock

    def nvmlDeviceGetComputeRunningProcesses(self, handle: dict) -> list[SimpleNamespace]:  # noqa: N802
        return [SimpleNamespace(pid=p, usedGpuMemory=2**30) for p in self.procs]

    def nvmlDeviceGetProcessUtilization(self, handle: dict, since: int) -> list[SimpleNamespace]:  # noqa: N802
        if self.util is None:
            raise NVMLError("Not Supported")
        t = self.clock[0] if self.clock else int(time.time() * 1e6)
        if t <= since:
            raise NVMLError("Not Found")
        return [SimpleNamespace(pid=p, timeStamp=t, smUtil=sm, memUtil=0, encUtil=0, decUtil=0)
                for p, sm in self.util.items()]
