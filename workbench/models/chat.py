"""A conversation through the target's chat template: the one encoder the CLI, the app, the
benchmarks and the training data share."""

from __future__ import annotations


def chat_ids(tokenizer, messages: list[dict] | str) -> list[int]:
    """Token ids of ``messages`` (a list of ``{"role", "content"}``, or one user message as a
    string) through the chat template, ending with the assistant header, ready for its turn.
    transformers 5 returns a ``BatchEncoding`` where 4 returned a list: both are read."""
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)
