//! Assignments: their ids, their content, the states a node reports and what *running* means. The assignments the specs call for (`04-registration.md`, "Node sessions and assignments";
//! `03-designation.md`, "The ingress environment") and how they differ from the heads.
//!
//! For every current spec the verdict lets run ([`super::verdicts::blocking_verdict`]: a
//! placement node that does not exist refuses the whole spec, `no-eligible-node`), replica *i*
//! runs on `placement.nodeIds[i mod n]` with that node's runtime namespace. The assignment id is
//! stable per (cluster, service, replica index); a new generation (linking the previous one) is
//! issued only when what it carries changes. The designated ingress service's assignments also
//! carry the three ingress names, the bearer as a secret binding to the designation's
//! `credential.secretVersion`; a designated ingress of a cluster without `relayOrigin` gets no
//! assignment (`waiting`/`bindings-pending`).

use crate::contract::Id;
use crate::contract::assignment::{RuntimeAssignment, snapshot_runtime_assignment};
use crate::contract::session::RuntimeSessionReference;
use crate::store::sessions::ReportedState;
use sha2::{Digest as _, Sha256};

/// A state a node reports for an assignment generation (`reportRuntimeAssignmentState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AssignmentState {
    /// `starting`.
    Starting,
    /// `ready`.
    Ready,
    /// `failed`.
    Failed,
    /// `stopped`.
    Stopped,
}

impl AssignmentState {
    /// Parses the wire spelling (also the stored one).
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "starting" => Some(AssignmentState::Starting),
            "ready" => Some(AssignmentState::Ready),
            "failed" => Some(AssignmentState::Failed),
            "stopped" => Some(AssignmentState::Stopped),
            _ => None,
        }
    }

    /// The wire spelling (also the stored one).
    pub fn as_str(self) -> &'static str {
        match self {
            AssignmentState::Starting => "starting",
            AssignmentState::Ready => "ready",
            AssignmentState::Failed => "failed",
            AssignmentState::Stopped => "stopped",
        }
    }
}

/// True when `reported` is `ready` and was reported under `session` — with the assignment in
/// the node's current set, the definition of a **running** assignment.
pub fn is_ready_under(reported: &ReportedState, session: &RuntimeSessionReference) -> bool {
    AssignmentState::parse(&reported.state) == Some(AssignmentState::Ready)
        && reported.session_id == session.id
        && reported.session_generation == session.generation
}

/// The stable id of replica `index` of a service: `asg-` + 40 hex digits of
/// SHA-256(cluster ∥ 0 ∥ service ∥ 0 ∥ index).
pub fn assignment_id(cluster_id: &Id, service_id: &Id, index: u64) -> Id {
    service_member_id("asg", cluster_id, service_id, &index.to_string())
}

/// The stable id of one member of a service (a replica, a volume): `prefix-` + 40 hex digits of
/// SHA-256(cluster ∥ 0 ∥ service ∥ 0 ∥ member).
pub(super) fn service_member_id(prefix: &str, cluster_id: &Id, service_id: &Id, member: &str) -> Id {
    let mut hasher = Sha256::new();
    hasher.update(cluster_id.as_str().as_bytes());
    hasher.update([0]);
    hasher.update(service_id.as_str().as_bytes());
    hasher.update([0]);
    hasher.update(member.as_bytes());
    Id::parse(&format!("{prefix}-{}", hex::encode(&hasher.finalize()[..20]))).expect("a hex id is an Id")
}

/// True when two assignments carry the same order (everything but the revision members and
/// the digest).
pub fn same_content(left: &RuntimeAssignment, right: &RuntimeAssignment) -> bool {
    left.controller == right.controller
        && left.organization_id == right.organization_id
        && left.cluster_id == right.cluster_id
        && left.node_id == right.node_id
        && left.runtime_namespace == right.runtime_namespace
        && left.service_id == right.service_id
        && left.spec_revision == right.spec_revision
        && left.workload == right.workload
}

/// True when the assignment's record passes the contract's reader (with its digest).
pub fn reads_back(assignment: &RuntimeAssignment) -> bool {
    serde_json::to_value(assignment).is_ok_and(|value| snapshot_runtime_assignment(&value).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assignment_ids_are_valid_stable_and_distinct() {
        let (cluster, service) = (Id::parse("c1").unwrap(), Id::parse("web").unwrap());
        let first = assignment_id(&cluster, &service, 0);
        assert_eq!(first, assignment_id(&cluster, &service, 0));
        assert_eq!(first.as_str().len(), 4 + 40);
        assert_ne!(first, assignment_id(&cluster, &service, 1));
        assert_ne!(first, assignment_id(&Id::parse("c2").unwrap(), &service, 0));
        // The separator keeps ("c1", "1web") and ("c11", "web") apart.
        assert_ne!(
            assignment_id(&Id::parse("c11").unwrap(), &service, 0),
            assignment_id(&cluster, &Id::parse("1web").unwrap(), 0)
        );
    }
}
