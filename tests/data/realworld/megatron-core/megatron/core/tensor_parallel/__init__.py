from .random import CheckpointWithoutOutput, checkpoint
