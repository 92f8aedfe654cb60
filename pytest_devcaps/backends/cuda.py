"""NVIDIA (CUDA) and AMD (ROCm/HIP) GPUs: torch's ``cuda`` device type.

The only module that may touch ``torch.cuda``. NVIDIA devices are described through NVML so
that discovery creates no CUDA context; ROCm devices through ``torch.cuda`` properties.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Mapping

from pytest_devcaps.backends.base import PLATFORM_FACT, TorchDeviceAdapter, torch_version
from pytest_devcaps.model import DeviceIdentity, Fact


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def rocm_version(hip: str | None) -> str | None:
    """``"6.3"`` from torch.version.hip ``"6.3.42131-fa1d09cbd"``."""
    if not hip:
        return None
    return ".".join(hip.split("-", 1)[0].split(".")[:2])


def nvidia_facts(major: int, minor: int) -> dict[str, Any]:
    return {"compute_capability": float(f"{major}.{minor}"), "sm": major * 10 + minor,
            "arch": f"sm_{major}{minor}"}


def visible_nvml_indices(count: int, uuids: list[str], spec: str | None) -> list[int] | None:
    """NVML indices in torch's order under ``CUDA_VISIBLE_DEVICES`` (None: cannot map).

    CUDA stops at the first invalid entry; UUID entries may be unique prefixes. MIG entries
    cannot be mapped to NVML handles here, so they return None (torch then answers).
    """
    if spec is None:
        return list(range(count))
    chosen: list[int] = []
    for entry in (e.strip() for e in spec.split(",")):
        if entry.startswith("MIG-"):
            return None
        if entry.isdigit():
            index = int(entry)
            if index >= count:
                break
        elif entry.startswith("GPU-"):
            matches = [i for i, u in enumerate(uuids) if u.startswith(entry)]
            if len(matches) != 1:
                break
            index = matches[0]
        else:
            break
        if index in chosen:
            break
        chosen.append(index)
    return chosen


class CudaAdapter(TorchDeviceAdapter):
    """``cuda`` devices: NVIDIA via NVML, AMD via torch (torch.version.hip set)."""

    type = "cuda"
    facts: Mapping[str, Fact] = {
        # NVIDIA
        "compute_capability": Fact("CUDA compute capability as a number: 8.0, 8.9, 9.0, 10.0"),
        "sm": Fact("compute capability as an integer: 80, 89, 90, 100"),
        "cuda_version": Fact("torch.version.cuda", version=True),
        "cudnn_version": Fact("torch.backends.cudnn.version(), an integer: 90100 is 9.1.0"),
        "nvml": Fact("whether NVML described the device: ok, or why not"),
        "uuid": Fact("the NVML device UUID (GPU-...)"),
        "nvml_index": Fact("the NVML index of the device"),
        # AMD
        "gcn_arch": Fact("gcnArchName with its feature flags: gfx942:sramecc+:xnack-"),
        "rocm_version": Fact("ROCm major.minor from torch.version.hip", version=True),
        "platform": PLATFORM_FACT,
    }

    def __init__(self, nvml_loader: Callable[[], Any] | None = None,
                 cuda_module: Any | None = None) -> None:
        """``nvml_loader`` returns the pynvml module; ``cuda_module`` stands in for torch.cuda
        (both for tests)."""
        self._nvml_loader = nvml_loader or _import_pynvml
        self._cuda_module = cuda_module
        self.nvml_status = "not queried"

    def _cuda(self) -> Any:
        if self._cuda_module is None:
            import torch

            return torch.cuda
        return self._cuda_module

    @property
    def visible_devices_variable(self) -> str:
        return "HIP_VISIBLE_DEVICES" if self._hip() else "CUDA_VISIBLE_DEVICES"

    @staticmethod
    def _hip() -> str | None:
        import torch

        return torch.version.hip

    def is_available(self) -> bool:
        import torch

        if not torch.backends.cuda.is_built():  # type: ignore[no-untyped-call]  # cheap: a CPU-only build stops here
            return False
        return int(self._cuda().device_count()) > 0  # NVML/amdsmi based before CUDA is initialised

    def discover(self) -> list[DeviceIdentity]:
        if self._hip():
            return self._discover_rocm()
        identities = self._discover_nvml()
        return identities if identities is not None else self._discover_torch_nvidia()

    # -- NVIDIA --------------------------------------------------------------------------
    def _discover_nvml(self) -> list[DeviceIdentity] | None:
        try:
            nvml = self._nvml_loader()
            nvml.nvmlInit()
        except Exception as exc:
            self.nvml_status = f"unavailable: {exc}"
            return None
        try:
            count = nvml.nvmlDeviceGetCount()
            handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            uuids = [_text(nvml.nvmlDeviceGetUUID(h)) for h in handles]
            order = visible_nvml_indices(count, uuids, os.environ.get("CUDA_VISIBLE_DEVICES"))
            if order is None:
                self.nvml_status = "unavailable: CUDA_VISIBLE_DEVICES names MIG instances"
                return None
            driver = _text(nvml.nvmlSystemGetDriverVersion())
            self.nvml_status = "ok"
            identities = []
            for torch_index, nvml_index in enumerate(order):
                handle = handles[nvml_index]
                major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
                identities.append(self._nvidia_identity(
                    torch_index, len(order), _text(nvml.nvmlDeviceGetName(handle)),
                    int(nvml.nvmlDeviceGetMemoryInfo(handle).total), major, minor, driver,
                    {"uuid": uuids[nvml_index], "nvml_index": nvml_index}))
            return identities
        except Exception as exc:
            self.nvml_status = f"unavailable: {exc}"
            return None
        finally:
            try:
                nvml.nvmlShutdown()
            except Exception:
                pass

    def _discover_torch_nvidia(self) -> list[DeviceIdentity]:
        """NVML failed: ask torch (this initialises CUDA in this process)."""
        cuda = self._cuda()
        count = cuda.device_count()
        identities = []
        for index in range(count):
            props = cuda.get_device_properties(index)
            identities.append(self._nvidia_identity(index, count, props.name,
                                                    int(props.total_memory), props.major,
                                                    props.minor, None, {}))
        return identities

    def _nvidia_identity(self, index: int, count: int, name: str, memory: int, major: int,
                         minor: int, driver: str | None,
                         extra: dict[str, Any]) -> DeviceIdentity:
        import torch

        facts = nvidia_facts(major, minor)
        facts.update(cuda_version=torch.version.cuda, cudnn_version=_cudnn_version(),
                     platform=sys.platform, nvml=self.nvml_status, **extra)
        return DeviceIdentity(type="cuda", index=index, vendor="nvidia", name=name,
                              arch=facts["arch"], memory_bytes=memory, count=count,
                              torch_version=torch_version(), runtime_version=torch.version.cuda,
                              driver_version=driver, facts=facts)

    # -- AMD -----------------------------------------------------------------------------
    def _discover_rocm(self) -> list[DeviceIdentity]:
        cuda = self._cuda()
        count = cuda.device_count()
        hip = self._hip()
        identities = []
        for index in range(count):
            props = cuda.get_device_properties(index)
            gcn_arch = str(getattr(props, "gcnArchName", "") or "")
            arch = gcn_arch.split(":", 1)[0] or "unknown"
            identities.append(DeviceIdentity(
                type="cuda", index=index, vendor="amd", name=props.name, arch=arch,
                memory_bytes=int(props.total_memory), count=count,
                torch_version=torch_version(), runtime_version=hip,
                facts={"arch": arch, "gcn_arch": gcn_arch, "rocm_version": rocm_version(hip),
                       "platform": sys.platform}))
        return identities


def _import_pynvml() -> Any:
    import pynvml

    return pynvml


def _cudnn_version() -> int | None:
    try:
        import torch

        version = torch.backends.cudnn.version()  # type: ignore[no-untyped-call]
    except Exception:
        return None
    return None if version is None else int(version)
