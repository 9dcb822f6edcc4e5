"""`engine.backend=ns3`: ns-3 (the `ns3` wheel, optional extra `netsweep[ns3]`) as the network behind
netsweep's system layer. `build` finds the wheel and compiles the C++ helper; `transport` drives it."""
