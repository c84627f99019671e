"""What the engine's records and traces imply, derived when the app, viz, a benchmark or a notebook
asks: a tree's expected accept length (``expectation.py``), the trees a perfect head or an early
exit would draft (``oracle.py``), the draft's calibration (``calibration.py``). The engine
records what a step did and never imports this layer."""
