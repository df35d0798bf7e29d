"""Stage 4, training: the loop, the single-model and joint tasks, one update step, losses, the
alignment and multi-task objectives, the optimiser, distributed training and CUDA graphs."""
