"""Training the EAGLE-2 draft head by self-distillation: ``python -m workbench.train
generate|train|export|evaluate`` (docs/training.md; docs/code.md names each module).
"""
