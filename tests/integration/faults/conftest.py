"""A broker of the module's own for the fault tests (started once per module, stopped at its end)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from integration.faults.broker import FaultBroker


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultBroker]:
    """A :class:`FaultBroker` the module's tests stop and start as they need."""
    fault_broker = FaultBroker(tmp_path_factory.mktemp("fault-broker"))
    try:
        yield fault_broker
    finally:
        fault_broker.broker.stop()
