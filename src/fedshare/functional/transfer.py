"""Host-to-device copies that do not wait for the device.

A plain `tensor.to("cuda")` from ordinary (pageable) host memory returns only once the copy is
done, a host/device synchronisation; done at every training step it stalls the queue of GPU
work. Staged through pinned memory the copy is queued like a kernel (the caching host
allocator keeps the staging buffer until the copy has run)."""

import torch


def to_device(tensor: torch.Tensor, device: torch.device | str | None) -> torch.Tensor:
    """`tensor` (on the host) on `device`, without a synchronisation when that is a GPU."""
    if device is None or torch.device(device).type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)
