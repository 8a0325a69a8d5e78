"""What `start_engine_core` builds, recorded instead of launched: the tests of its settings read what it was given."""

from __future__ import annotations


class LaunchedCore:
    def __init__(self, builder, _tokenizer, *, preload=None, cpus=None) -> None:
        self.builder, self.preload, self.cpus = builder, preload, cpus

    def launch(self) -> None:
        pass
