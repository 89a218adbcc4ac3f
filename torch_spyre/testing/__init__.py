"""The upstream test relay: PyTorch's own tests against `spyre`, driven by a
declarative YAML file (see docs/relay.md).

* `python -m torch_spyre.testing run --config test/relay/spyre.yaml` runs it;
* `pytest -p torch_spyre.testing.plugin --relay-config ...` is the same run
  driven by pytest directly (e.g. over upstream test files);
* `device_type.SpyreTestBase` is the device-type test base.
"""

from .config import ConfigError, RelayConfig, load_config, parse_config

__all__ = ["ConfigError", "RelayConfig", "load_config", "parse_config"]
