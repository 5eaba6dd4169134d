//! The status of a scope's services (`06-storage-claims.md`, "IServiceRuntimeStatus"): a spec the
//! verdict blocks is `refused` or `waiting`; one that passes is `converged` when every assignment
//! it calls for is running (its head carries what the spec calls for, is in its node's set, and
//! its latest state is `ready` under the node's current session) **and every claim those
//! assignments seal was answered `ready` by its node under the node's current session**; while
//! its assignments run but a sealed claim is not, it is `waiting` with `storage-import-pending`
//! (the table's one storage reason: the node has not confirmed the volume's storage — imported
//! or initialized; a reason outside the table would fail `validateServiceRuntimeStatus`);
//! otherwise `converging`.

use super::assignments::{self, is_ready_under};
use super::claims::node_state;
use super::issue::desired_assignments;
use super::lookups::Lookups;
use super::verdicts::blocking_verdict;
use crate::contract::assignment::RuntimeAssignment;
use crate::contract::reader::compare_bytes;
use crate::contract::service_status::{ServiceRuntimeVerdict as Verdict, ServiceRuntimeWaitingReason as Waiting};
use crate::contract::session::{ControllerReference, RuntimeSessionReference};
use crate::contract::storage_claim::LocalStorageClaimNodeState as NodeState;
use crate::contract::{Id, NodeId};
use crate::store::assignments::AssignmentFacts;
use crate::store::service_status::{RecordedStatus, StatusFacts};
use crate::store::sessions::ReportedState;
use std::collections::BTreeMap;

/// The verdict on every current spec of the facts' scope, by service id.
pub fn judge_services(
    facts: &AssignmentFacts,
    status: &StatusFacts,
    controller: &ControllerReference,
) -> BTreeMap<Id, (u64, Verdict)> {
    let lookups = Lookups::of(facts);
    let desired = desired_assignments(facts, &lookups, controller);
    let sessions: BTreeMap<&NodeId, &RuntimeSessionReference> =
        status.sessions.iter().map(|(node, session)| (node, session)).collect();
    let states: BTreeMap<(&Id, u64), &ReportedState> =
        status.head_states.iter().map(|state| ((&state.assignment_id, state.generation), &state.reported)).collect();
    let running = |draft: &RuntimeAssignment| {
        let Some(head) = facts.heads.get(&draft.id) else { return false };
        let payload = &head.signed.payload;
        head.active
            && assignments::same_content(payload, draft)
            && states
                .get(&(&payload.id, payload.generation))
                .zip(sessions.get(&payload.node_id))
                .is_some_and(|(reported, session)| is_ready_under(reported, session))
    };
    // Every claim the draft seals answered `ready` by its node under the node's current session.
    let storage_ready = |draft: &RuntimeAssignment| {
        draft.workload.storage.iter().all(|sealed| {
            facts.claims.get(&sealed.id).is_some_and(|head| {
                head.signed.payload.reference() == *sealed
                    && node_state(head) == Some(NodeState::Ready)
                    && head.answer.as_ref().zip(sessions.get(&draft.node_id)).is_some_and(|(answer, session)| {
                        answer.session_id == session.id && answer.session_generation == session.generation
                    })
            })
        })
    };
    let mut drafts_of: BTreeMap<&Id, Vec<&RuntimeAssignment>> = BTreeMap::new();
    for draft in desired.values() {
        drafts_of.entry(&draft.service_id).or_default().push(draft);
    }
    facts
        .services
        .iter()
        .map(|spec| {
            let verdict =
                blocking_verdict(spec, facts, &lookups).unwrap_or_else(|| match drafts_of.get(&spec.body.service_id) {
                    Some(drafts) if drafts.iter().all(|draft| running(draft)) => {
                        if drafts.iter().all(|draft| storage_ready(draft)) {
                            Verdict::Converged
                        } else {
                            Verdict::Waiting(Waiting::StorageImportPending)
                        }
                    }
                    _ => Verdict::Converging,
                });
            (spec.body.service_id.clone(), (spec.revision, verdict))
        })
        .collect()
}

/// The verdicts as the store records them, judged at `now_ms`.
pub fn recorded_verdicts(verdicts: BTreeMap<Id, (u64, Verdict)>, now_ms: u64) -> Vec<RecordedStatus> {
    verdicts
        .into_iter()
        .map(|(service_id, (spec_revision, verdict))| RecordedStatus {
            service_id,
            spec_revision,
            state: verdict.state().as_str().to_owned(),
            reason: verdict.reason().map(str::to_owned),
            changed_at: now_ms,
        })
        .collect()
}

/// The services whose judged verdict is not the recorded one (a service judged without a
/// record, or recorded without a current spec, included), sorted by id.
pub fn status_differences(verdicts: &BTreeMap<Id, (u64, Verdict)>, recorded: &[RecordedStatus]) -> Vec<Id> {
    let recorded: BTreeMap<&Id, &RecordedStatus> = recorded.iter().map(|status| (&status.service_id, status)).collect();
    let mut differing: Vec<Id> = verdicts
        .iter()
        .filter(|(service_id, (revision, verdict))| {
            recorded.get(service_id).is_none_or(|status| {
                status.spec_revision != *revision
                    || status.state != verdict.state().as_str()
                    || status.reason.as_deref() != verdict.reason()
            })
        })
        .map(|(service_id, _)| service_id.clone())
        .collect();
    differing.extend(recorded.keys().filter(|service_id| !verdicts.contains_key(**service_id)).map(|id| (*id).clone()));
    differing.sort_by(|left, right| compare_bytes(left.as_str(), right.as_str()));
    differing
}
