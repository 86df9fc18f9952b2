"""What a run needs to know of its device: whether it multiplies bf16 natively (and the autocast the forward
passes run in), its dense bf16 peak for MFU, and moving host batches onto it."""

from __future__ import annotations

from stages.training.config import PRECISIONS

# Dense bf16 peak of known GPUs, TFLOP/s (vendor data sheets; H200 has H100's compute).
PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "GH200": 989.0, "A100": 312.0, "L40S": 362.0, "L4": 121.0,
               "A10G": 70.0, "RTX 4090": 165.0}


def peak_flops(device: str, peak_tflops: float = 0.0) -> float | None:
    """The device's dense bf16 peak in FLOP/s: ``peak_tflops`` when set, else a known GPU's, else None."""
    if peak_tflops:
        return peak_tflops * 1e12
    if device.startswith("cuda"):
        import torch

        name = torch.cuda.get_device_name(device)
        return next((tflops * 1e12 for key, tflops in PEAK_TFLOPS.items() if key in name), None)
    return None


def native_bf16(device: str) -> bool:
    """Whether ``device`` multiplies bf16 matrices natively: a CUDA GPU that supports bf16, or a CPU with
    AMX or AVX512-BF16 (elsewhere bf16 is emulated and slower than fp32)."""
    import torch

    if device.startswith("cuda"):
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    cpu = getattr(torch, "cpu", None)
    probes = ("_is_amx_tile_supported", "_is_avx512_bf16_supported")  # private probes: absent = unknown = no
    return device == "cpu" and any(bool(getattr(cpu, name, lambda: False)()) for name in probes)


def bf16_enabled(precision: str, device: str) -> bool:
    """``bf16``: always; ``fp32``: never; ``auto``: where the device multiplies bf16 natively (autocast: only the
    matrix products run in bf16; benchmarks/cpu_bf16.py)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision: {precision!r} is not one of auto, fp32, bf16")
    return precision == "bf16" or (precision == "auto" and native_bf16(device))


def bf16_autocast(device: str, enabled: bool):
    """The context the forward passes run in: bf16 autocast on ``device`` when ``enabled``."""
    import torch

    return torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16, enabled=enabled)


def to_device(batch: dict, device: str) -> dict:
    if device == "cpu":
        return batch
    return {k: v.pin_memory().to(device, non_blocking=True) for k, v in batch.items()}
