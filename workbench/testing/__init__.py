"""Tiny random-weight models and helpers for tests, notebooks and demos without the real model."""
