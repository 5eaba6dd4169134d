//! Runtime network records (`05-projection.md`): leases, the address plan, the protected
//! authority and signed per-node projections.
