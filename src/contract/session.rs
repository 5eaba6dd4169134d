//! Node runtime sessions (seed `data/runtimesession.ts`, `04-registration.md`, "Node sessions and
//! assignments"): the controller reference every runtime record names, and
//! `IRuntimeSessionReference`, the node's current session.

use super::primitives::{Id, NodeId};
use super::reader::{Parsed, Record, generation, id, node_id, parsed};
use serde::Serialize;
use serde_json::Value;

/// The controller kinds of runtime records (`controller.kind`): `"cloudly"` or `"onebox"`.
///
/// Seed counterpart: the `kind` member of the `controller` object of `IRuntimeSessionReference`,
/// `IRuntimeAssignment` and `IRuntimeLocalStorageClaim` (`'cloudly' | 'onebox'`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ControllerKind {
    /// `"cloudly"`: this controller.
    Cloudly,
    /// `"onebox"`: the single-machine controller.
    Onebox,
}

impl ControllerKind {
    /// Parses `"cloudly"` or `"onebox"`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "cloudly" => Some(ControllerKind::Cloudly),
            "onebox" => Some(ControllerKind::Onebox),
            _ => None,
        }
    }

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ControllerKind::Cloudly => "cloudly",
            ControllerKind::Onebox => "onebox",
        }
    }

    /// Reads a controller kind from JSON.
    pub fn read(value: &Value) -> Parsed<Self> {
        parsed(value, ControllerKind::parse)
    }
}

/// The controller a runtime record names: `{ kind: "cloudly" | "onebox", id: Id }`, exact keys.
///
/// Seed counterpart: the `controller` member of `IRuntimeSessionReference`, `IRuntimeAssignment`
/// and `IRuntimeLocalStorageClaim`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct ControllerReference {
    /// Which kind of controller issued the record.
    pub kind: ControllerKind,
    /// The controller's id.
    pub id: Id,
}

impl ControllerReference {
    /// Reads `{ kind, id }` with exact keys.
    pub fn read(value: &Value) -> Parsed<Self> {
        let record = Record::exact(value, &["kind", "id"])?;
        Ok(ControllerReference { kind: record.read("kind", ControllerKind::read)?, id: record.read("id", id)? })
    }
}

/// `IRuntimeSessionReference`: `{ id, generation, controller, clusterId, nodeId, runtimeNamespace }`,
/// exact keys — a node's session as `openRuntimeSession` answers it. Each open makes a new current
/// session with the next generation; every node method carries it and it must equal (all six
/// members) the socket's current session.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeSessionReference {
    /// The session id.
    pub id: Id,
    /// The session generation (≥ 1), one more with every open.
    pub generation: u64,
    /// The controller the session is open with.
    pub controller: ControllerReference,
    /// The node's cluster.
    pub cluster_id: Id,
    /// The node.
    pub node_id: NodeId,
    /// The node's runtime namespace.
    pub runtime_namespace: Id,
}

impl RuntimeSessionReference {
    /// Reads an `IRuntimeSessionReference` with exact keys (the seed's session snapshot).
    pub fn read(value: &Value) -> Parsed<Self> {
        let record =
            Record::exact(value, &["id", "generation", "controller", "clusterId", "nodeId", "runtimeNamespace"])?;
        Ok(RuntimeSessionReference {
            id: record.read("id", id)?,
            generation: record.read("generation", generation)?,
            controller: record.read("controller", ControllerReference::read)?,
            cluster_id: record.read("clusterId", id)?,
            node_id: record.read("nodeId", node_id)?,
            runtime_namespace: record.read("runtimeNamespace", id)?,
        })
    }

    /// The session as wire JSON.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("a session reference serializes to JSON")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::reader::Invalid;
    use serde_json::json;

    fn session() -> Value {
        json!({
            "id": "session-1", "generation": 3, "controller": { "kind": "cloudly", "id": "ctl-1" },
            "clusterId": "cluster-1", "nodeId": "node-1", "runtimeNamespace": "ns-1"
        })
    }

    #[test]
    fn a_session_reads_and_writes_back_exactly() {
        let read = RuntimeSessionReference::read(&session()).unwrap();
        assert_eq!(read.controller.kind, ControllerKind::Cloudly);
        assert_eq!(read.to_value(), session());
    }

    #[test]
    fn a_session_refuses_each_broken_member() {
        let broken: [(&str, Value); 7] = [
            ("generation", json!(0)),
            ("generation", json!(1.0)),
            ("controller", json!({ "kind": "swarm", "id": "ctl-1" })),
            ("controller", json!({ "kind": "cloudly", "id": "ctl-1", "extra": 1 })),
            ("nodeId", json!("Node-1")),
            ("runtimeNamespace", json!("")),
            ("clusterId", Value::Null),
        ];
        for (key, value) in broken {
            let mut candidate = session();
            candidate[key] = value;
            assert_eq!(RuntimeSessionReference::read(&candidate), Err(Invalid), "{key}");
        }
        let mut extra = session();
        extra["extra"] = json!(true);
        assert_eq!(RuntimeSessionReference::read(&extra), Err(Invalid));
        let mut missing = session();
        missing.as_object_mut().unwrap().remove("nodeId");
        assert_eq!(RuntimeSessionReference::read(&missing), Err(Invalid));
    }
}
