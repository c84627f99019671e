"""What the notebooks share: set-up, the machine label, and the small computations behind their
figures and takeaway sentences, kept here (with tests) so that a notebook cell only calls the
engine, these helpers and ``workbench/viz``, and renders what they return.

==================  =========================================================================
``start.py``        one call at the top of a notebook: label, threads, figures, whole tables, the model
``machine.py``      which machine and when: CPU model, cores, GPU, torch, date, dtype, threads; no folders
``figures.py``      plotly output that a plain file viewer shows too (a PNG beside the figure)
``timing.py``       repeated timings as median and range
``cost_curve.py``   forwards timed in interleaved rounds, and the cost curve's figure
``predictions.py``  every printed prediction: StepCost.predict on the step cost measured here
``settings.py``     τ and speedup of speculative settings, one measurement every notebook quotes
``chain_model.py``  α of a greedy chain, fitted on half the steps, checked on the other half
``ancestors.py``    the path from the root to a node of a traced tree
``chi_square.py``   Pearson's chi-square p-value and total variation against an exact law
``exact_law.py``    the exact law of the next k tokens of a small-vocabulary target
``lossless.py``     p, q, min(p, q) and the residual at one position; each rule's exact law
``lossy.py``        the law the lossy accept thresholds emit, in closed form; the drift in words
``draft_law.py``    the draft head's law q of the next token after given tokens
``divergence.py``   where two greedy outputs part, and the target's top-2 margin there
``takeaways.py``    sentences computed from measured numbers: regime and bend, noise, trends
==================  =========================================================================
"""
