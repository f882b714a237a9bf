"""Published failure rates that inputs default to (facts, no simulation: the configuration schema reads them).

Llama 3 (Meta, "The Llama 3 Herd of Models", 2024, section 3.3.4): 419
unexpected interruptions in 54 days of pre-training on 16,384 GPUs.
"""

from __future__ import annotations

LLAMA3_INTERRUPTIONS = 419
LLAMA3_DAYS = 54
LLAMA3_GPUS = 16384


def llama3_gpu_mtbf_hours() -> float:
    """Per-GPU mean time between failures implied by the Llama 3 report (GPU-hours per interruption)."""
    return LLAMA3_DAYS * 24.0 * LLAMA3_GPUS / LLAMA3_INTERRUPTIONS
