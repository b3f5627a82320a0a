"""Generation settings shared by the scheduler and the graph runner (as HF's GenerationConfig)."""
from dataclasses import dataclass


@dataclass
class GenerationConfig:
    temperature: float = 1.0
    top_p: float = 1.0


@dataclass
class Request:
    rid: int
    temperature: float
