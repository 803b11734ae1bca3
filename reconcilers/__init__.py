"""Reconcilers: read external truth (Ethereum, Arweave) and return verdicts with evidence.

A workflow's ``@reconcile`` hook calls them and turns the verdict into a transition;
the evidence goes into the log as ``RECONCILED``. They never write anything.
"""
