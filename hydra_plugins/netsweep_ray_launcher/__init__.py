"""netsweep's Hydra plugins: the `ray_netsweep` launcher and the `netsweep` sweeper (see
`ray_launcher`), selected in conf/config.yaml so that `python -m sweep -m ...` runs on Ray.

`hydra_plugins` is a namespace package (no `__init__.py`): Hydra imports every module under it at
start-up to find plugins, so these modules import nothing heavy until a sweep is launched.
"""
