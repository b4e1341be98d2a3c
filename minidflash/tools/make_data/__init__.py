"""Making data: the prompts, the target's answers, and the training runs that read them."""
