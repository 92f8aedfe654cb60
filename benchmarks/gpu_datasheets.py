"""Datasheet peaks of GPUs, for the roofline floor printed next to each GPU-sweep time.

Dense figures (the "with sparsity" numbers of NVIDIA's datasheets halved), per GPU:
memory bandwidth (bytes/s) and tensor throughput (FLOP/s) for bf16 and fp8.

* NVIDIA H100 SXM5: 3.35 TB/s HBM3; 989 TFLOP/s bf16, 1,979 fp8 (NVIDIA H100 Tensor Core GPU
  datasheet: 1,979 / 3,958 "with sparsity").
* NVIDIA H100 PCIe: 2.0 TB/s HBM2e; 756 bf16, 1,513 fp8 (same datasheet: 1,513 / 3,026 sparse).
* NVIDIA H200 SXM: 4.8 TB/s HBM3e; 989 bf16, 1,979 fp8 (NVIDIA H200 datasheet: 1,979 / 3,958
  "with sparsity"; the same GH100 compute as H100 SXM).
* NVIDIA A100 SXM4 80 GB: 2,039 GB/s HBM2e; 312 bf16; no fp8 (NVIDIA A100 datasheet).
* AMD Instinct MI300X: 5.3 TB/s HBM3; 1,307.4 bf16, 2,614.9 fp8 (AMD Instinct MI300X datasheet,
  dense).
* AMD Instinct MI325X: 6.0 TB/s HBM3E; 1,307.4 bf16, 2,614.9 fp8 (AMD Instinct MI325X datasheet).

A GPU not listed gets no floor (the sweep says so); ``--peak BW,BF16,FP8`` (TB/s, TFLOP/s)
supplies one.
"""

from __future__ import annotations

from dataclasses import dataclass

TB, TF = 1e12, 1e12


@dataclass(frozen=True)
class Peaks:
    name: str
    bandwidth: float          # bytes / s
    bf16: float               # FLOP / s, dense
    fp8: float | None         # FLOP / s, dense; None: no fp8 tensor cores
    source: str

    def floor_s(self, flops: float, bytes_moved: float, fp8: bool) -> tuple[float, str]:
        """The roofline floor (seconds) and which roof bounds it ("memory" / "compute")."""
        peak = self.fp8 if fp8 and self.fp8 else self.bf16
        memory, compute = bytes_moved / self.bandwidth, flops / peak
        return (memory, "memory") if memory >= compute else (compute, "compute")


# Matched against the device name, in order (the first key contained in the lowered name wins).
DATASHEETS: tuple[tuple[str, Peaks], ...] = (
    ("h200", Peaks("NVIDIA H200 SXM", 4.8 * TB, 989 * TF, 1979 * TF, "NVIDIA H200 datasheet (sparse figures halved)")),
    ("h100 pcie", Peaks("NVIDIA H100 PCIe", 2.0 * TB, 756 * TF, 1513 * TF, "NVIDIA H100 datasheet (PCIe; sparse halved)")),
    ("h100", Peaks("NVIDIA H100 SXM5", 3.35 * TB, 989 * TF, 1979 * TF, "NVIDIA H100 datasheet (SXM; sparse halved)")),
    ("a100", Peaks("NVIDIA A100 SXM4 80GB", 2.039 * TB, 312 * TF, None, "NVIDIA A100 datasheet (SXM4 80GB)")),
    ("mi325x", Peaks("AMD Instinct MI325X", 6.0 * TB, 1307.4 * TF, 2614.9 * TF, "AMD Instinct MI325X datasheet")),
    ("mi300x", Peaks("AMD Instinct MI300X", 5.3 * TB, 1307.4 * TF, 2614.9 * TF, "AMD Instinct MI300X datasheet")),
)


def peaks_for(device_name: str, override: str | None = None) -> Peaks | None:
    """The datasheet peaks of ``device_name`` (``override``: "TB/s,bf16 TFLOP/s,fp8 TFLOP/s")."""
    if override:
        bw, bf16, fp8 = (float(v) for v in override.split(","))
        return Peaks(f"{device_name} (given)", bw * TB, bf16 * TF, fp8 * TF, "--peak")
    lowered = device_name.lower()
    return next((p for key, p in DATASHEETS if key in lowered), None)


def fused_gemm_traffic(m: int, n: int, k: int, groups: int, *, reductions: int = 2, y_bytes: int = 2) -> float:
    """Bytes the fused fp8 kernel must move at least: fp8 A and B once, bf16 y, rowwise scales,
    the bias, and the fp32 reduction outputs (``reductions`` whole-row ones and one grouped)."""
    return m * k + k * n + m * n * y_bytes + 4 * (m + n) + 2 * n + 4 * m * (reductions + groups)
