"""MCP ``certify`` in a child process, killed at its deadline: a check is never waited out.

A check is torch work that cannot be interrupted from another thread, and the
deadline was looked at only between checks, so one long check held the server
past its bound (584 s against 120). The checks now run in a spawned process
(fork is unsafe in a threaded server); it sends each check's progress and then
the certificate over a pipe, and the server waits at most the deadline for
them, then kills it and answers one line naming the check it was in. The
child's memory is its own too: a certify that runs out of it ends the child,
not the server.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..errors import TensorcadError


def _child(pipe, design: Any, settings: Any) -> None:
    """In the child: the design loaded, built and certified (or the model ``settings.model`` makes, as
    `tensorcad certify --model` certifies it), each check announced, the certificate sent."""
    from tensorcad.hf import load_design
    from tensorcad.runtime.certification.registry import MODEL_CHECKS, run_checks
    from tensorcad.views import answers

    try:
        if settings.model is not None:
            from tensorcad.runtime.certification.subjects.pretrained import factory_subject

            subject, names = factory_subject(settings.model, settings).subject, MODEL_CHECKS
        else:
            subject = answers.certify_subject(load_design(design), settings, seq_path="seq")
            names = answers.certify_checks()
        checks = run_checks(subject, names,
                            lambda name, done, count: pipe.send(("progress", name, done, count)))
        pipe.send(("result", answers.certificate(subject, checks)))
    except TensorcadError as e:
        pipe.send(("refused", e.path, e.message))
    except Exception as e:  # noqa: BLE001 - a bug is answered as one, in the parent
        pipe.send(("bug", type(e).__name__, str(e)[:300]))
    finally:
        pipe.close()


def certify_in_child(design: Any, settings: Any, seconds: float, count: int,
                     progress: Callable[[int, int, str], None]) -> dict:
    """The certificate of ``design`` (a preset name, path or design object: what the tool was given), or a
    ``TensorcadError`` once ``seconds`` have passed, the child killed; ``progress(done, count, message)``."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    receiving, sending = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(sending, design, settings), daemon=True, name="tensorcad-certify")
    start, current, done = time.monotonic(), None, 0
    child.start()
    sending.close()  # the child holds the only sending end: its death is an end of file here
    try:
        while True:
            left = seconds - (time.monotonic() - start)
            if left <= 0 or not receiving.poll(left):
                where = f"in {current}" if current else "while building the model"
                raise TensorcadError("certify", f"stopped {where} after {done} of {count} checks: past its "
                                                f"{seconds:g} s budget ({time.monotonic() - start:.0f} s); give a "
                                                "smaller params or seq, or run `tensorcad certify`")
            try:
                message = receiving.recv()
            except EOFError:
                child.join(1)
                raise TensorcadError("certify", f"the certify process ended without an answer (exit "
                                                f"{child.exitcode}: out of memory?); give a smaller params or seq"
                                     ) from None
            kind, *rest = message
            if kind == "progress":
                current, done, count = rest
                progress(done, count, f"certify: {current}")
            elif kind == "result":
                return rest[0]
            elif kind == "refused":
                raise TensorcadError(*rest)
            else:
                raise RuntimeError(f"{rest[0]} in the certify process: {rest[1]}")
    finally:
        if child.is_alive():
            child.kill()
        child.join()
        receiving.close()
