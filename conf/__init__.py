"""netsweep's Hydra configs, installed as the package `sweep.conf` (see setup.py): the root
`config.yaml` and one folder per config group (network, tcp, system, workload, experiment)."""
