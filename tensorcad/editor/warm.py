"""The editor's first look paid for before it is asked: imports, first-time setup and the opening design.

A fresh server's first round (analyze, then rules, preview and chart) costs
what no later one does: scipy's special functions imported, the expression
evaluator and the samplers run for the first time. ``warm`` pays that on a
background thread as the server starts, on a small preset, and then analyses
the design the page opens with at the operating point it opens at, so the
answers a newcomer first sees come from the caches every later edit also uses.
It computes nothing the requests would not: the same api functions, the same
caches.
"""

from __future__ import annotations

import threading
import time

from tensorcad.design import load
from tensorcad.errors import TensorcadError

from . import api

# What app.js opens with when no design is given, and the preview's grid it asks for.
OPENING_PRESET = "llama-3-8b-documents"
CELLS = 128
SMALL = {"design": "nano-sort", "op": {"seq": 1024, "packing": {"mean": 128}}}


def first_round(body: dict) -> None:
    """One edit's requests, as the page sends them."""
    api.analyze(body)
    api.rules(body)
    if load(body["design"]).attentions():
        api.preview({**body, "attention": 0, "cells": CELLS})
    api.chart(body)


def warm(initial: dict | None = None) -> float:
    """Seconds spent: a small preset's round, then the opening design's at its own context, unpacked."""
    start = time.perf_counter()
    opening = ({"design": initial["design"], "op": {"seq": initial["context"]}} if initial is not None
               else {"design": OPENING_PRESET, "op": {"seq": load(OPENING_PRESET).context}})
    for body in (SMALL, opening):
        try:
            first_round(body)
        except TensorcadError:  # a design past the analysis budget: its request will say so itself
            pass
    return time.perf_counter() - start


def warm_in_background(initial: dict | None = None) -> threading.Thread:
    thread = threading.Thread(target=warm, args=(initial,), name="editor-warm", daemon=True)
    thread.start()
    return thread
