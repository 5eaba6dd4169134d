//! `registerClusterIngress` (ingress → relay → controller) and `listClusterIngressRegistrations`
//! (`04-registration.md`, "`registerClusterIngress`").
//!
//! **The judgement order is the spec's, and the first failing check answers:**
//!
//! 1. the protocol offer, read before anything else ([`read_protocol_offer`]): `protocol-refused`;
//! 2. then the named refusals, each with its configured `retryAfterMs`:
//!    `not-ready` (draining, or the store does not answer), `registration-invalid`,
//!    `relay-not-connected`, `ingress-not-designated`, `node-mismatch`, `assignment-not-running`,
//!    `bearer-refused`, and `conflict` at the commit.
//!
//! `not-ready` comes first of the named refusals, so a check that would answer without asking the
//! store (an invalid body, a missing relay token) asks the store whether it answers before it
//! refuses; every other check reads the store anyway, and a failed read is `not-ready`.
//!
//! The facts of steps 3–7 are read without a lock. The commit is one guarded statement that
//! writes only while the designation, the assignment (and its `ready` state) and the node's
//! session are still the ones read (`store::registrations`); otherwise `conflict`.
//!
//! **No refusal, log line or metric label quotes the bearer or anything derived from it.** The
//! bearer is hashed once and compared with the stored hash in constant time.

use super::plan::assignments::is_ready_under;
use super::secrets::{Bearer, hash_value};
use super::{Controller, DomainError};
use crate::contract::assignment::{EnvironmentSource, RuntimeAssignment};
use crate::contract::designation::ClusterIngressDesignation;
use crate::contract::registration::{
    CLUSTER_INGRESS_ENVIRONMENT_NAMES, ClusterIngressRegistration, ClusterIngressRegistrationRefusal, ProtocolOffer,
    ProtocolRefusal, RefusalReason, is_retry_after_ms,
};
use crate::contract::session::RuntimeSessionReference;
use crate::contract::{Id, NodeId};
use crate::store::registrations::{
    IngressRegistration, RegistrationCommit, RegistrationFacts, RelayConnectionReference, RelayedFacts,
    SessionGeneration, StoredIngressRegistration,
};

/// The most registrations one `listClusterIngressRegistrations` answers.
pub const MAX_REGISTRATION_PAGE: u32 = 500;

/// The page size of `listClusterIngressRegistrations` without `limit`.
pub const DEFAULT_REGISTRATION_PAGE: u32 = 100;

/// The configured `retryAfterMs` of each refusal reason, every one within 1 000…300 000
/// (`clusterIngressRegistrationContract`). Defaults are the spec's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryAfterTable([u64; RefusalReason::ALL.len()]);

impl Default for RetryAfterTable {
    fn default() -> Self {
        RetryAfterTable(RefusalReason::ALL.map(RefusalReason::default_retry_after_ms))
    }
}

impl RetryAfterTable {
    fn index(reason: RefusalReason) -> usize {
        RefusalReason::ALL.iter().position(|candidate| *candidate == reason).expect("every reason is listed")
    }

    /// The `retryAfterMs` of `reason`.
    pub fn get(&self, reason: RefusalReason) -> u64 {
        self.0[Self::index(reason)]
    }

    /// The refusal of `reason` with its configured `retryAfterMs`.
    pub fn refusal(&self, reason: RefusalReason) -> ClusterIngressRegistrationRefusal {
        ClusterIngressRegistrationRefusal::new(reason, self.get(reason))
            .expect("the table holds only values within the contract's range")
    }

    /// The defaults with overrides from `reason=ms` pairs separated by commas
    /// (`not-ready=10000,conflict=2000`); an empty text keeps the defaults. Refuses an unknown
    /// reason, a repeated one, or a value outside 1 000…300 000.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut table = RetryAfterTable::default();
        let mut seen = Vec::new();
        for pair in text.split(',').map(str::trim).filter(|pair| !pair.is_empty()) {
            let (name, value) = pair.split_once('=').ok_or_else(|| format!("{pair:?} is not reason=milliseconds"))?;
            let reason = RefusalReason::parse(name.trim())
                .ok_or_else(|| format!("{:?} is not a cluster ingress registration refusal reason", name.trim()))?;
            let value: u64 =
                value.trim().parse().map_err(|_| format!("{:?} is not a number of milliseconds", value.trim()))?;
            if !is_retry_after_ms(value) {
                return Err(format!("the retryAfterMs of {reason} must be from 1000 to 300000"));
            }
            if seen.contains(&reason) {
                return Err(format!("{reason} is given twice"));
            }
            seen.push(reason);
            table.0[Self::index(reason)] = value;
        }
        Ok(table)
    }

    /// The table as `reason=ms` pairs in judgement order (`cloudly config`).
    pub fn to_text(&self) -> String {
        RefusalReason::ALL.iter().map(|reason| format!("{reason}={}", self.get(*reason))).collect::<Vec<_>>().join(",")
    }
}

/// A test seam: awaited after the judge's reads (steps 3–7) and before the commit, so a test can
/// change the facts in exactly that window. Only in builds with the `testing` feature.
#[cfg(feature = "testing")]
pub type RegistrationCommitGate =
    std::sync::Arc<dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> + Send + Sync>;

/// An accepted registration and the cluster's route table revision at the time.
#[derive(Debug, Clone)]
pub struct RegistrationAccepted {
    /// The recorded registration.
    pub registration: StoredIngressRegistration,
    /// The cluster's current route table revision, `None` before the first table.
    pub route_table_revision: Option<u64>,
}

/// `registerClusterIngress`, read by `api` before the judgement: each part on its own, so the
/// judge answers the first failing check in the spec's order.
#[derive(Debug)]
pub struct RegisterClusterIngressRequest {
    /// Step 1: the offer (`read_protocol_offer`), or the controller's refusal when it is
    /// unreadable, another protocol's, or shares no version.
    pub protocol: Result<ProtocolOffer, ProtocolRefusal>,
    /// Step 3: the registration (`parse_cluster_ingress_registration`), or its violations.
    pub registration: Result<ClusterIngressRegistration, Vec<String>>,
    /// Step 4: the relay's connection token (the envelope's `authInfo.jwt`).
    pub relay_token: Option<Bearer>,
}

/// `listClusterIngressRegistrations`: `{ identity, clusterId, nodeId?, before?, limit? }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListClusterIngressRegistrationsRequest {
    /// The cluster.
    pub cluster_id: Id,
    /// Only this node's registrations.
    pub node_id: Option<NodeId>,
    /// Only registrations with a smaller `sequence` (the `nextBefore` of the previous page).
    pub before: Option<u64>,
    /// The page size (1 to [`MAX_REGISTRATION_PAGE`]), `None` for [`DEFAULT_REGISTRATION_PAGE`].
    pub limit: Option<u32>,
}

/// One page of `listClusterIngressRegistrations`, newest first.
#[derive(Debug, Clone)]
pub struct RegistrationPage {
    /// The registrations.
    pub registrations: Vec<StoredIngressRegistration>,
    /// The `before` of the next page, `None` at the end.
    pub next_before: Option<u64>,
}

/// True when `assignment` carries the designation's current credential: its bearer entry is a
/// secret binding to the designation's `credential.secretVersion`.
pub fn carries_credential(assignment: &RuntimeAssignment, designation: &ClusterIngressDesignation) -> bool {
    assignment.workload.environment.iter().any(|entry| {
        entry.name.as_str() == CLUSTER_INGRESS_ENVIRONMENT_NAMES.bearer
            && matches!(&entry.source, EnvironmentSource::Secret(version)
                if *version == designation.credential.secret_version)
    })
}

/// What steps 4–7 accept a registration with.
pub struct Judged<'a> {
    /// The cluster's current designation.
    pub designation: &'a ClusterIngressDesignation,
    /// The running assignment that carries its credential.
    pub assignment: &'a RuntimeAssignment,
    /// The node's current session it runs under.
    pub session: &'a RuntimeSessionReference,
}

/// Steps 4–7 of the judgement order over the facts, in order: `ingress-not-designated`,
/// `node-mismatch`, `assignment-not-running`, `bearer-refused`. Pure.
pub fn judge_facts<'a>(
    facts: &'a RegistrationFacts,
    registration: &ClusterIngressRegistration,
) -> Result<Judged<'a>, RefusalReason> {
    // 4. A cluster holding only a fleet-cutover designation holds no Pallet one: this controller
    //    does not run the fleet-cutover flow.
    let designation = facts.designation.as_ref().ok_or(RefusalReason::IngressNotDesignated)?;
    // 5. A node of the cluster in the placement of the designated service's current spec.
    let placed = facts.spec.as_ref().is_some_and(|spec| spec.body.placement.node_ids.contains(&registration.node_id));
    if !placed || !facts.node_exists {
        return Err(RefusalReason::NodeMismatch);
    }
    // 6. Running (ready, reported under the node's current session) and carrying the
    //    designation's current credential.
    let session = facts.session.as_ref().ok_or(RefusalReason::AssignmentNotRunning)?;
    let assignment = facts
        .assignments
        .iter()
        .find(|(assignment, state)| {
            state.as_ref().is_some_and(|state| is_ready_under(state, session))
                && carries_credential(assignment, designation)
        })
        .map(|(assignment, _)| assignment)
        .ok_or(RefusalReason::AssignmentNotRunning)?;
    // 7. SHA-256 of the presented bearer against the stored hash, in constant time.
    let expected = facts.credential_hash.as_ref().ok_or(RefusalReason::BearerRefused)?;
    if !Bearer::from_presented(registration.bearer.expose()).matches_hash(expected) {
        return Err(RefusalReason::BearerRefused);
    }
    Ok(Judged { designation, assignment, session })
}

/// Why a registration was not accepted, before it becomes an answer.
enum Refusal {
    /// One of the named reasons.
    Reason(RefusalReason),
    /// The controller could not judge (the store failed or holds corrupt data): `not-ready`.
    CannotJudge(DomainError),
}

impl From<RefusalReason> for Refusal {
    fn from(reason: RefusalReason) -> Self {
        Refusal::Reason(reason)
    }
}

impl From<DomainError> for Refusal {
    fn from(error: DomainError) -> Self {
        Refusal::CannotJudge(error)
    }
}

impl From<crate::store::StoreError> for Refusal {
    fn from(error: crate::store::StoreError) -> Self {
        Refusal::CannotJudge(error.into())
    }
}

impl Controller {
    /// Installs (or removes) the [`RegistrationCommitGate`] test seam.
    #[cfg(feature = "testing")]
    pub fn set_registration_commit_gate(&self, gate: Option<RegistrationCommitGate>) {
        *self.registration_commit_gate.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = gate;
    }

    fn registration_refused(&self, reason: RefusalReason) -> DomainError {
        DomainError::RegistrationRefused(self.settings.registration_retry_after.refusal(reason))
    }

    /// `registerClusterIngress` (the relay, forwarding): answers the recorded registration, or
    /// [`DomainError::ProtocolRefused`] / [`DomainError::RegistrationRefused`] for the first
    /// failing check of the spec's order.
    pub async fn register_cluster_ingress(
        &self,
        request: RegisterClusterIngressRequest,
    ) -> Result<RegistrationAccepted, DomainError> {
        let RegisterClusterIngressRequest { protocol, registration, relay_token } = request;
        let offer = protocol.map_err(|_| DomainError::ProtocolRefused)?;
        let protocol_version = offer.negotiated_version().expect("an accepted offer shares a version");
        if self.is_draining() {
            return Err(self.registration_refused(RefusalReason::NotReady));
        }
        match self.judge_registration(registration, relay_token.as_ref(), protocol_version).await {
            Ok(accepted) => {
                let registration = &accepted.registration.registration;
                tracing::info!(
                    cluster = %registration.cluster_id, node = %registration.node_id, version = %registration.version,
                    relay_epoch = registration.relay.epoch, designation_generation = registration.designation.generation,
                    "cluster ingress registered"
                );
                Ok(accepted)
            }
            Err(Refusal::Reason(reason)) => {
                tracing::info!(%reason, "cluster ingress registration refused");
                Err(self.registration_refused(reason))
            }
            Err(Refusal::CannotJudge(error)) => {
                tracing::warn!(%error, "cluster ingress registration cannot be judged");
                Err(self.registration_refused(RefusalReason::NotReady))
            }
        }
    }

    /// A refusal that was decided without asking the store: `not-ready` when the store does not
    /// answer (it comes first in the order), else `reason`.
    async fn refused_without_store(&self, reason: RefusalReason) -> Refusal {
        match self.store.is_ready().await {
            Ok(true) => Refusal::Reason(reason),
            Ok(false) => Refusal::Reason(RefusalReason::NotReady),
            Err(error) => Refusal::CannotJudge(error.into()),
        }
    }

    /// Steps 2–8 of the judgement order.
    async fn judge_registration(
        &self,
        registration: Result<ClusterIngressRegistration, Vec<String>>,
        relay_token: Option<&Bearer>,
        protocol_version: u64,
    ) -> Result<RegistrationAccepted, Refusal> {
        // 2. registration-invalid
        let registration: ClusterIngressRegistration = match registration {
            Ok(registration) => registration,
            Err(violations) => {
                // The validator never quotes a value, so its violations are safe to log.
                tracing::info!(?violations, "cluster ingress registration invalid");
                return Err(self.refused_without_store(RefusalReason::RegistrationInvalid).await);
            }
        };
        // 3. relay-not-connected
        let Some(token) = relay_token else {
            return Err(self.refused_without_store(RefusalReason::RelayNotConnected).await);
        };
        // The connection and, in its cluster, the facts of steps 4–7, read together.
        let found = self.store.registration_facts(hash_value(token.expose()), &registration.node_id).await?;
        let Some(RelayedFacts { relay, facts }) = found else { return Err(RefusalReason::RelayNotConnected.into()) };
        if !self.is_elected_now(&relay) {
            return Err(RefusalReason::RelayNotConnected.into());
        }
        let connection = relay.connection;
        // 4.–7. over the facts
        let Judged { designation, assignment, session } = judge_facts(&facts, &registration)?;
        // 8. conflict: the commit writes only while the facts read above still hold
        #[cfg(feature = "testing")]
        {
            let gate = self.registration_commit_gate.read().unwrap_or_else(|poisoned| poisoned.into_inner()).clone();
            if let Some(gate) = gate {
                gate().await;
            }
        }
        let record =
            self.registration_record(&registration, &connection, designation, assignment, session, protocol_version);
        let sequence = match self.store.commit_registration(&record).await? {
            RegistrationCommit::Recorded(sequence) => sequence,
            RegistrationCommit::Conflict => return Err(RefusalReason::Conflict.into()),
        };
        Ok(RegistrationAccepted {
            registration: StoredIngressRegistration { sequence, registration: record },
            route_table_revision: facts.route_table_revision,
        })
    }

    fn registration_record(
        &self,
        registration: &ClusterIngressRegistration,
        connection: &crate::store::relays::StoredRelayConnection,
        designation: &ClusterIngressDesignation,
        assignment: &RuntimeAssignment,
        session: &RuntimeSessionReference,
        protocol_version: u64,
    ) -> IngressRegistration {
        IngressRegistration {
            id: Id::parse(&format!("ingress-reg-{}", uuid::Uuid::new_v4().simple())).expect("a uuid id is an Id"),
            cluster_id: connection.cluster_id.clone(),
            node_id: registration.node_id.clone(),
            version: registration.version.clone(),
            capabilities: registration.capabilities.clone(),
            protocol_version,
            relay: RelayConnectionReference {
                id: connection.id.clone(),
                relay_id: connection.relay_id.clone(),
                epoch: connection.epoch,
            },
            designation: designation.reference(),
            assignment: assignment.reference(),
            session: SessionGeneration { id: session.id.clone(), generation: session.generation },
            registered_at: self.clock.now_ms(),
        }
    }

    /// `listClusterIngressRegistrations` (every role) → the cluster's accepted registrations,
    /// newest first, and the `before` of the next page.
    pub async fn list_cluster_ingress_registrations(
        &self,
        request: ListClusterIngressRegistrationsRequest,
    ) -> Result<RegistrationPage, DomainError> {
        let ListClusterIngressRegistrationsRequest { cluster_id, node_id, before, limit } = request;
        let limit = limit.unwrap_or(DEFAULT_REGISTRATION_PAGE);
        self.existing_cluster(&cluster_id).await?;
        // One more than asked tells whether another page follows.
        let mut registrations = self.store.list_registrations(&cluster_id, node_id.as_ref(), before, limit + 1).await?;
        let next_before = if registrations.len() > limit as usize {
            registrations.truncate(limit as usize);
            registrations.last().map(|last| last.sequence)
        } else {
            None
        };
        Ok(RegistrationPage { registrations, next_before })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_retry_table_defaults_to_the_spec_and_takes_overrides_in_range() {
        let table = RetryAfterTable::default();
        for reason in RefusalReason::ALL {
            assert_eq!(table.get(reason), reason.default_retry_after_ms());
        }
        assert_eq!(RetryAfterTable::parse("").unwrap(), table);
        let changed = RetryAfterTable::parse(" not-ready = 10000 , conflict=2000").unwrap();
        assert_eq!(changed.get(RefusalReason::NotReady), 10_000);
        assert_eq!(changed.get(RefusalReason::Conflict), 2_000);
        assert_eq!(changed.get(RefusalReason::BearerRefused), 30_000);
        assert_eq!(RetryAfterTable::parse(&changed.to_text()).unwrap(), changed);
        for bad in
            ["not-ready=999", "conflict=300001", "nope=5000", "conflict", "conflict=x", "conflict=1000,conflict=2000"]
        {
            assert!(RetryAfterTable::parse(bad).is_err(), "{bad}");
        }
    }
}
