"""Relay suites built from test material shipped in the torch wheel
(OpInfo's op_db, ModuleInfo's module_db); no PyTorch checkout needed."""
