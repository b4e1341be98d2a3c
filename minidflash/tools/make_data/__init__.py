"""Making data: the prompts, the suites, the target's answers (the training runs: ``tools/train``)."""
