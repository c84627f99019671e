"""Training the EAGLE-2 draft head by self-distillation: ``python -m workbench.train
generate|train|export|evaluate``.

``prompt_set``        the training prompts: templates x topics (never benchmark questions), or a user's prompts file
``prompt_templates``  loads the templates and topics the template set is built from (``workbench/data/prompt_templates.json``)
``generate``          the target's own answers to them, token shards + its post-norm features
``shards``            the data directory: shard files, features beside them, totals, the settings that made them
``features``          training sequences from the shards; held-out split by prompt
``batches``           (f_t, x_{t+1}) -> f_{t+1} pairs, padded batches, the loss mask
``forward``, ``ttt``  the head's training forward (causal SDPA), the EAGLE loss, unrolled draft steps
``loop``              seeded, resumable training with checkpoints
``export``            EAGLE-format checkpoint (fp16, no embeddings) and the hot-token list
``evaluate``          held-out and MT-bench agreement, τ and speed on MT-bench first turns
"""
