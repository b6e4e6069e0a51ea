"""The verifiers taskset plugin of a slotpool env: `--env.taskset.id slotpool-verifiers`.

verifiers 0.4 imports a taskset by its id as a top-level package (a dotted id is not one), so
this package only names what `slotpool_adapters.verifiers` holds.
"""

from slotpool_adapters.verifiers import SlotpoolConfig, SlotpoolData, SlotpoolEnv, SlotpoolEnvConfig, SlotpoolTask, SlotpoolTaskset

__all__ = ["SlotpoolConfig", "SlotpoolData", "SlotpoolEnv", "SlotpoolEnvConfig", "SlotpoolTask", "SlotpoolTaskset"]
