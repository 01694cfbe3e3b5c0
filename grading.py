"""Grading: the last \\boxed{...} of a response against a reference answer.

Exact match and integer comparison settle most responses in this process; the rest go to
Math-Verify (sympy underneath) in grader processes with timeouts and a hard deadline, so a
pathological answer costs a bounded time and counts as wrong. Used for the toy and for MATH alike.
"""
import atexit
import os
import re
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# ----------------------------------------------------------------------------- grading

_BOXED = "\\boxed{"
_INT = re.compile(r"^[+-]?\d+$")
GRADE_TIMEOUT_S = 5        # Math-Verify's own per-parse / per-comparison timeout (whole seconds)
GRADE_ITEM_BUDGET_S = 0.5  # per-batch deadline: hard item deadline + this much per item and worker
GRADE_STATS = {"quick": 0, "verified": 0, "killed": 0, "crashed": 0, "batch_deadline": 0}


def last_boxed(text: str):
    """Content of the last \\boxed{...} in `text` (nested braces allowed), or None."""
    start = text.rfind(_BOXED)
    if start < 0:
        return None
    depth, i = 1, start + len(_BOXED)
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
    return None


def grade(response: str, answer: str, timeout_s: int = GRADE_TIMEOUT_S) -> bool:
    """True when the last \\boxed{} of `response` equals `answer`; see grade_many."""
    return grade_many([response], [answer], timeout_s)[0]


def grade_many(responses: list, answers: list, timeout_s: int = GRADE_TIMEOUT_S,
               workers: int = 0, deadline_s: float = None, integer_only: bool = False) -> list:
    """[last \\boxed{} of responses[i] equals answers[i]] as a list of bools; safe in any thread.

    1. Cheap exact paths in this process: no \\boxed{} -> False; equal strings -> True; two
       integers -> integer equality. They settle every well-formed toy response without IPC.
    2. The rest, deduplicated on (prediction, answer), goes to a pool of `workers` grader
       processes (0: min(8, cpu count)). Each runs Math-Verify in its own main thread, where
       Math-Verify's signal.alarm timeouts (`timeout_s` per parse and per comparison) work.
    3. An outer deadline covers what those timeouts cannot interrupt (a long computation inside
       C code): an item running longer than `deadline_s` (default 3 * timeout_s + 1), or still
       unfinished when the batch's deadline passes, counts as wrong and its worker is killed and
       replaced. Counts are in GRADE_STATS; a warning is printed whenever an item was cut.
    A grader failure is a wrong answer, never an exception and never a hang; but grader workers
    that cannot start at all raise RuntimeError rather than silently grading everything wrong.

    `integer_only` (the toy): only a plain integer in the box counts. The toy's prompt holds an
    expression equal to the answer, which Math-Verify would accept: `\\boxed{12+34}` for 46 would
    be a reward for copying the prompt.
    """
    if len(responses) != len(answers):
        raise ValueError(f"grade_many got {len(responses)} responses but {len(answers)} answers")
    results = [None] * len(responses)
    todo = {}  # (prediction, answer) -> indices of the responses that need Math-Verify
    for i, (response, answer) in enumerate(zip(responses, answers)):
        pred, gold = last_boxed(response), str(answer).strip()
        quick = _quick_grade(pred, gold)
        if quick is None and integer_only:
            quick = False
        if quick is None:
            todo.setdefault((pred.strip(), gold), []).append(i)
        else:
            results[i] = quick
    GRADE_STATS["quick"] += len(responses) - sum(map(len, todo.values()))
    if todo:
        # Math-Verify's alarm takes whole seconds, and 0 would switch its timeouts off
        verdicts = _grade_slow(list(todo), max(1, int(timeout_s)), workers, deadline_s)
        for indices, verdict in zip(todo.values(), verdicts):
            for i in indices:
                results[i] = verdict
    return results


def _quick_grade(pred, gold: str):
    """True/False when string or integer comparison settles it, None when Math-Verify must."""
    if pred is None or not pred.strip():
        return False
    pred = pred.strip()
    if pred == gold:
        return True
    if _INT.match(pred) and _INT.match(gold):
        return int(pred) == int(gold)
    return None


def _math_verify(pred: str, gold: str, timeout_s: int) -> bool:
    """Math-Verify on a boxed prediction and answer; its timeouts need the main thread."""
    from math_verify import verify
    target = _parse_boxed(pred, timeout_s)
    return bool(target) and bool(verify(_parse_gold(gold, timeout_s), target,
                                        timeout_seconds=timeout_s))


def _parse_boxed(text: str, timeout_s: int):
    from math_verify import parse
    # wrapped in \boxed{} so that Math-Verify applies its boxed-answer normalization
    return parse("\\boxed{" + text + "}", parsing_timeout=timeout_s)


_GOLD_CACHE = {}


def _parse_gold(gold: str, timeout_s: int):
    """Parsed reference answers, cached: a problem's answer is parsed once, not once per sample."""
    if gold not in _GOLD_CACHE:
        if len(_GOLD_CACHE) > 100_000:
            _GOLD_CACHE.clear()
        _GOLD_CACHE[gold] = _parse_boxed(gold, timeout_s)
    return _GOLD_CACHE[gold]


def start_graders(workers: int = 0) -> None:
    """Start the grader processes now without waiting for them (importing Math-Verify takes
    a while), e.g. while a vLLM engine starts; grade_many would otherwise start them."""
    with _POOL.lock:
        while len(_POOL.workers) < _n_workers(workers):
            _POOL.workers.append(_POOL._start())


def _n_workers(workers: int) -> int:
    return workers or min(8, os.cpu_count() or 1)


def _grade_slow(items: list, timeout_s: int, workers: int, deadline_s) -> list:
    if deadline_s is None:
        deadline_s = 3 * timeout_s + 1
    return _POOL.grade(items, timeout_s, _n_workers(workers), deadline_s)


def _grader_main(read_fd: int, write_fd: int) -> None:
    """Grader process: import and warm up Math-Verify, say ready, then grade one item at a time."""
    import logging
    import traceback
    from multiprocessing.connection import Connection
    inbox, outbox = Connection(read_fd, writable=False), Connection(write_fd, readable=False)
    try:
        logging.getLogger("math_verify").setLevel(logging.ERROR)  # timeouts are counted, not logged
        _math_verify("1", "1", GRADE_TIMEOUT_S)
    except BaseException:  # noqa: BLE001 - report why this worker cannot grade, then stop
        outbox.send(("error", traceback.format_exc()))
        return
    outbox.send(("ready", None))
    while True:
        try:
            msg = inbox.recv()
        except (EOFError, OSError, KeyboardInterrupt):  # the parent is gone
            return
        if msg is None:
            return
        key, pred, gold, timeout_s = msg
        try:
            verdict = _math_verify(pred, gold, timeout_s)
        except BaseException:  # noqa: BLE001 - a grader failure is a wrong answer, by design
            verdict = False
        outbox.send((key, verdict))


class _GraderPool:
    """Grader processes, started lazily, each fed one item at a time through its own pipes, so a
    stuck item is known exactly and only its worker is replaced. One batch at a time (a lock).

    Workers are fresh interpreters (`python -c`), neither forks of a process that holds vLLM and
    torch threads nor multiprocessing's spawn, which re-runs an unguarded main script.
    """
    START_TIMEOUT_S = 180

    def __init__(self):
        self.workers = []  # dicts: proc, inbox / conn (its pipes), ready, item (index graded), since
        self.lock = threading.Lock()

    def _start(self) -> dict:
        import subprocess
        from multiprocessing.connection import Connection
        to_child, to_parent = os.pipe(), os.pipe()   # (read end, write end) each
        code = (f"import sys; sys.path.insert(0, {HERE!r}); import grading; "
                f"grading._grader_main({to_child[0]}, {to_parent[1]})")
        proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL,
                                pass_fds=(to_child[0], to_parent[1]))
        os.close(to_child[0])
        os.close(to_parent[1])
        return {"proc": proc, "inbox": Connection(to_child[1], readable=False),
                "conn": Connection(to_parent[0], writable=False), "ready": False, "item": None,
                "since": time.monotonic()}

    def _kill(self, w: dict) -> None:
        w["proc"].kill()
        w["proc"].wait()
        w["conn"].close()
        w["inbox"].close()
        self.workers.remove(w)

    def close(self) -> None:
        for w in list(self.workers):
            self._kill(w)

    def grade(self, items: list, timeout_s: int, n_workers: int, deadline_s: float) -> list:
        with self.lock:
            try:
                return self._grade(items, timeout_s, n_workers, deadline_s)
            except BaseException:
                # interrupted (e.g. Ctrl-C): a worker may still answer an item of this batch,
                # which the next batch would misread as one of its own; start afresh instead
                self.close()
                raise

    def _grade(self, items, timeout_s, n_workers, deadline_s) -> list:
        from multiprocessing.connection import wait
        while len(self.workers) > n_workers:
            self._kill(self.workers[-1])
        while len(self.workers) < n_workers:
            self.workers.append(self._start())
        results = [False] * len(items)
        todo = list(range(len(items)))[::-1]   # popped from the end: first items first
        batch_end = None                       # set once a worker is ready to take items
        cut = 0
        while todo or any(w["item"] is not None for w in self.workers):
            now = time.monotonic()
            ready = [w for w in self.workers if w["ready"]]
            if ready and batch_end is None:
                batch_end = now + deadline_s + GRADE_ITEM_BUDGET_S * len(items) / n_workers
            for w in ready:
                if w["item"] is None and todo:
                    i = todo.pop()
                    w["inbox"].send((i, items[i][0], items[i][1], timeout_s))
                    w["item"], w["since"] = i, now
            waits = [w["since"] + (deadline_s if w["ready"] else self.START_TIMEOUT_S)
                     for w in self.workers if w["item"] is not None or not w["ready"]]
            waits += [batch_end] if batch_end else []
            for conn in wait([w["conn"] for w in self.workers], max(0.0, min(waits) - now)):
                w = next(w for w in self.workers if w["conn"] is conn)
                try:
                    key, value = conn.recv()
                except (EOFError, OSError):  # the worker died (e.g. out of memory)
                    key, value = "died", None
                if key == "ready":
                    w["ready"] = True
                elif key in ("error", "died") and not w["ready"]:
                    self.close()
                    raise RuntimeError(f"a grader process could not start Math-Verify "
                                       f"(pip install 'math-verify[antlr4_13_2]'):\n{value or ''}")
                elif key == "died":  # its item, if any, stays False
                    GRADE_STATS["crashed"] += w["item"] is not None
                    cut += w["item"] is not None
                    self._kill(w)
                    self.workers.append(self._start())
                else:
                    results[key] = value
                    GRADE_STATS["verified"] += 1
                    w["item"] = None
            now = time.monotonic()
            over_batch = batch_end is not None and now > batch_end
            for w in list(self.workers):
                if w["item"] is not None and (over_batch or now - w["since"] > deadline_s):
                    GRADE_STATS["batch_deadline" if over_batch else "killed"] += 1
                    cut += 1
                    self._kill(w)   # its item stays False
                    self.workers.append(self._start())
                elif not w["ready"] and now - w["since"] > self.START_TIMEOUT_S:
                    self.close()
                    raise RuntimeError(f"grader processes did not start in "
                                       f"{self.START_TIMEOUT_S} s (is the machine overloaded?)")
            if over_batch:
                GRADE_STATS["batch_deadline"] += len(todo)
                cut += len(todo)
                todo = []
        if cut:
            print(f"grade_many: {cut} of {len(items)} distinct answers counted wrong after the "
                  f"grading deadline ({deadline_s:g} s per item)", file=sys.stderr)
        return results


_POOL = _GraderPool()
atexit.register(_POOL.close)
