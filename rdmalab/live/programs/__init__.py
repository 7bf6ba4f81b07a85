"""Verbs programs that run unchanged on rdmalab's soft engine and, imports rewritten, on pyverbs."""
