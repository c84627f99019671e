"""What the notebooks share: set-up, the machine label, and the small computations behind their
figures and takeaway sentences, kept here (with tests) so that a notebook cell only calls the
engine, these helpers and ``workbench/viz``, and renders what they return (docs/code.md names
each module).
"""
