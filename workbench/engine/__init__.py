"""The decoding engine: batches, plain decoding, and the EAGLE-2 draft / verify / accept cycle."""
