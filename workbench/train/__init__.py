"""Training the EAGLE-2 draft head by self-distillation (``python -m workbench.train``).

``prompts``  the training prompts (templates x topics; never benchmark questions)
``data``     the target's greedy answers + its post-norm features, in shards
``batches``  (f_t, x_{t+1}) -> f_{t+1} pairs, padded batches, the loss mask
``forward``  the head's training forward (causal SDPA) and the EAGLE loss
``loop``     seeded, resumable training with checkpoints
``export``   EAGLE-format checkpoint (fp16, no embeddings) and the hot-token list
``evaluate`` accept length τ on MT-bench first turns (``python -m workbench.train.evaluate``)
"""
