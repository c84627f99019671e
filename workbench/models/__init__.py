"""Models: the Llama-family target (``llama.py``) and the EAGLE draft head (``draft.py``)."""
