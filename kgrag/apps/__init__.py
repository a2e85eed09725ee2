"""Apps on an experiment: `kgrag ask`, `kgrag serve` and the LEGO instance table (`kgrag lego-table`)."""
