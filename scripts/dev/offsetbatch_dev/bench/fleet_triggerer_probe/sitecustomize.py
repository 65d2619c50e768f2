"""The fleet benchmark's probe in the triggerer (``fleet``; on its PYTHONPATH only, and only when
``OFFSETBATCH_FLEET_PROBE`` names a file): times the lag triggers' shared poll without changing what
it does. When ``offsetbatch.dag.lag_trigger`` is imported, its shared poll's Kafka reads (the
partitions and log ends of every topic, ``KafkaAdmin.partitions``/``offsets`` of the class the poll
gets from ``_stream_classes``) and each trigger's decision on a reading (``_Reader.poll``) are wrapped
to append one line each to the file:

    read <start> <end>                    one shared poll's request to the cluster (epoch s)
    decide <reading.at> <start> <end>     one pipeline's decision on the reading made at reading.at

A cycle: from its read's start to the last decision on it. Benchmark-only; never installed."""

import os
import sys

_PATH = os.environ.get("OFFSETBATCH_FLEET_PROBE")
_TARGET = "offsetbatch.dag.lag_trigger"


def _install() -> None:
    import importlib.abc
    import importlib.util
    import threading
    import time

    lock = threading.Lock()
    out = open(_PATH, "a", buffering=1)

    def write(line: str) -> None:
        with lock:
            out.write(line)

    def patch(module) -> None:
        original_classes = module._stream_classes

        def stream_classes():
            interest, admin = original_classes()

            class TimedAdmin(admin):
                def partitions(self, *args, **kwargs):
                    self._fleet_t0 = time.time()
                    return super().partitions(*args, **kwargs)

                def offsets(self, *args, **kwargs):
                    try:
                        return super().offsets(*args, **kwargs)
                    finally:
                        write(f"read {getattr(self, '_fleet_t0', time.time()):.3f} {time.time():.3f}\n")

            return interest, TimedAdmin

        module._stream_classes = stream_classes
        original_poll = module._Reader.poll

        def poll(self, reading=None):
            t0 = time.time()
            try:
                return original_poll(self, reading)
            finally:
                if reading is not None:
                    write(f"decide {reading.at:.3f} {t0:.3f} {time.time():.3f}\n")

        module._Reader.poll = poll

    class Finder(importlib.abc.MetaPathFinder):
        busy = False

        def find_spec(self, name, path, target=None):
            if name != _TARGET or self.busy:
                return None
            self.busy = True
            try:
                spec = importlib.util.find_spec(name)
            finally:
                self.busy = False
            if spec is None or spec.loader is None:
                return spec
            exec_module = spec.loader.exec_module

            def patched(module):
                exec_module(module)
                patch(module)

            spec.loader.exec_module = patched
            return spec

    sys.meta_path.insert(0, Finder())


if _PATH:
    try:
        _install()
    except Exception as exc:  # noqa: BLE001 - a probe never stops the triggerer
        print(f"fleet probe not installed: {exc}", file=sys.stderr)
