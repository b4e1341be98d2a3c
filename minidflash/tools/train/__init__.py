"""Training: the tiny target (tiny_target) and a drafter for any target (train_drafter)."""
