"""A fake accelerator for pytester runs: PrivateUse1 renamed ``acme``, a backend adapter that
reports ``count`` devices, and a stand-in ``torch.acme`` whose ``set_device`` writes a line to
the file named by ``$PIN_LOG`` (``<who> set_device <index>``)."""

from __future__ import annotations

CONFTEST = '''
import os
import types

import pytest
import torch
from pytest_devcaps import DeviceIdentity, Fact

torch.utils.rename_privateuse1_backend("acme")
torch.acme = types.SimpleNamespace(
    is_available=lambda: False,  # the generic PrivateUse1 adapter leaves it to AcmeBackend
    set_device=lambda index: open(os.environ["PIN_LOG"], "a").write(
        f"{os.environ.get(WHO)} set_device {index}\\n"),
)


class AcmeBackend:
    type = "acme"
    visible_devices_variable = VARIABLE
    facts = {"generation": Fact("Acme chip generation")}

    def is_available(self):
        return True

    def discover(self):
        return [DeviceIdentity(type="acme", index=0, vendor="acme", name="Acme N1", arch="n1",
                               count=COUNT, facts={"generation": 1})]


@pytest.hookimpl(optionalhook=True)
def pytest_devcaps_register_backends(registrar):
    registrar.add(AcmeBackend())
'''


def acme_conftest(*, count: int, variable: str | None = "ACME_VISIBLE_DEVICES",
                  who: str = "PYTEST_XDIST_WORKER") -> str:
    """The conftest text; ``who`` names the environment variable that identifies the process
    in the set_device log (the xdist worker id, or ``RANK`` under torchrun)."""
    return (CONFTEST.replace("VARIABLE", repr(variable)).replace("COUNT", str(count))
            .replace("WHO", repr(who)))
