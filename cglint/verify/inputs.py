"""Sample inputs: cloning them into static buffers, making fresh ones, copying them in."""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch


def as_tuple(args: Any) -> tuple:
    return args if isinstance(args, tuple) else (args,)


def map_tensors(value: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (list, tuple)):
        return type(value)(map_tensors(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: map_tensors(v, fn) for k, v in value.items()}
    return value


def tensors(value: Any, prefix: str = "output") -> list[tuple[str, torch.Tensor]]:
    """(name, tensor) for every tensor in a nested output: output, output[0], output['logits']."""
    if isinstance(value, torch.Tensor):
        return [(prefix, value)]
    if isinstance(value, (list, tuple)):
        return [item for i, v in enumerate(value) for item in tensors(v, f"{prefix}[{i}]")]
    if isinstance(value, dict):
        return [item for k, v in value.items() for item in tensors(v, f"{prefix}[{k!r}]")]
    return []


def clone(args: Any) -> Any:
    return map_tensors(args, lambda t: t.detach().clone().requires_grad_(t.requires_grad))


def _fresh(t: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Different values of the same shape, dtype and range (ints stay in the observed range)."""
    if t.dtype == torch.bool:
        return torch.rand(t.shape, device=t.device, generator=gen) < 0.5
    if t.is_floating_point():
        scale = t.detach().float().abs().mean().item() if t.numel() else 1.0
        out = torch.randn(t.shape, device=t.device, generator=gen).to(t.dtype) * (scale or 1.0)
        return out.requires_grad_(t.requires_grad)
    if t.numel() == 0 or t.is_complex():
        return t.clone()
    low, high = int(t.min().item()), int(t.max().item())
    if low == high:
        return t.clone()  # an index or position: keep it, other values may be out of range
    return torch.randint(low, high + 1, t.shape, device=t.device, dtype=t.dtype, generator=gen)


def fresh(sample: tuple, make_inputs: Optional[Callable[[], Any]], index: int) -> tuple:
    if make_inputs is not None:
        got = as_tuple(make_inputs())
        check_same_shapes(sample, got)
        return got
    generators: dict[torch.device, torch.Generator] = {}

    def one(t: torch.Tensor) -> torch.Tensor:
        # private generators: the user's RNG state (and any graph's) stays untouched
        gen = generators.get(t.device)
        if gen is None:
            gen = generators[t.device] = torch.Generator(device=t.device).manual_seed(1234 + index)
        return _fresh(t, gen)

    return map_tensors(sample, one)


def check_same_shapes(sample: tuple, got: tuple) -> None:
    a, b = tensors(sample, "arg"), tensors(got, "arg")
    shapes_a = [(n, tuple(t.shape), t.dtype) for n, t in a]
    shapes_b = [(n, tuple(t.shape), t.dtype) for n, t in b]
    if shapes_a != shapes_b:
        raise ValueError(
            "make_inputs() must return inputs with the shapes and dtypes of sample_args "
            f"(a graph replays fixed shapes): {shapes_a} != {shapes_b}"
        )


def copy_into(static: tuple, new: tuple) -> None:
    """What a correct replay loop does: write new data into the captured tensors."""
    for (_, dst), (_, src) in zip(tensors(static, "arg"), tensors(new, "arg")):
        with torch.no_grad():
            dst.copy_(src)
