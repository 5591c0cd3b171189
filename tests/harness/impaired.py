"""Whether the impaired-network tests can run here (test_impaired.py, test_liveness.py): the
answer of harness.netimp.available(), asked once, when this module is first imported (as root it
makes and deletes a network namespace to know). The `impaired` fixture is in harness/fixtures.py."""
from harness.netimp import available

WHY_NOT = available()
