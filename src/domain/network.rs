//! Runtime network address plans (`05-projection.md`, "Address plan"): the methods
//! `putRuntimeNetworkAddressPlan` and `getRuntimeNetworkAddressPlan`.
//!
//! `putRuntimeNetworkAddressPlan` (admin) writes a cluster's plan; `api` has already sealed it
//! (the digest computed) and validated it with the contract, so every rule of the plan itself
//! holds. Under the cluster's reconcile lock the write is judged
//! (`plan::leases::judge_address_plan_write`: a compare-and-swap on the plan's own `revision`,
//! admitted with `admitRuntimeNetworkAddressPlanChange` against the current plan and checked
//! against the live leases, each of which must stay inside its organization's pool; a refusal is
//! `address-plan-change-refused` naming every violation, and writes nothing). An accepted plan
//! makes the cluster's protected authority (its id is the cluster's id) a new generation when its
//! platform endpoints change, and the leases follow the assignments in the same transaction (a
//! pool added or grown allocates for the assignments that lack one); then the whole cluster is
//! reconciled, since pools decide which services run. The leases' rules are `plan::leases`'.

use super::plan::leases::judge_address_plan_write;
use super::runners::{Change, leases_follow_assignments};
use super::{ClusterRequest, Controller, DomainError};
use crate::contract::network::RuntimeNetworkAddressPlan;
use crate::store::{FactScope, MissingKind, StoredNetworkPlan};

/// `putRuntimeNetworkAddressPlan`: `{ identity, plan }`, the plan sealed (its digest computed)
/// and valid by the contract's rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutRuntimeNetworkAddressPlanRequest {
    /// The plan.
    pub plan: RuntimeNetworkAddressPlan,
}

impl Controller {
    /// `putRuntimeNetworkAddressPlan` (admin) → `{ plan, protectedAuthority }`: see the module
    /// documentation. `not-found` when the plan's cluster does not exist.
    pub async fn put_runtime_network_address_plan(
        &self,
        request: PutRuntimeNetworkAddressPlanRequest,
    ) -> Result<StoredNetworkPlan, DomainError> {
        let PutRuntimeNetworkAddressPlanRequest { plan } = request;
        let mut locked =
            self.store.lock_network(&plan.cluster_id).await?.ok_or(DomainError::NotFound(MissingKind::Cluster))?;
        let live_leases = locked.lease_facts(&FactScope::Cluster).await?.leases;
        let current = locked.current().cloned();
        let authority = match judge_address_plan_write(current.as_ref(), &plan, &live_leases) {
            Ok(authority) => authority,
            Err(refusal) => {
                locked.rollback().await?;
                return Err(refusal);
            }
        };
        let changed = current.as_ref().is_none_or(|current| current.authority != authority);
        locked.write_plan(&plan, changed.then_some(&authority)).await?;
        let lease_changes = leases_follow_assignments(locked.as_mut(), &FactScope::Cluster).await?.changes;
        locked.commit().await?;
        // Pools decide which services run (`network-workload-pool-*`): reconcile the assignments
        // (whose leases follow) and the statuses.
        self.assignments_changed(&plan.cluster_id, Change::Everything).await;
        tracing::info!(
            cluster = %plan.cluster_id,
            revision = plan.revision,
            authority_generation = authority.generation,
            lease_changes,
            "runtime network address plan written"
        );
        Ok(StoredNetworkPlan { plan, authority })
    }

    /// `getRuntimeNetworkAddressPlan` (every role) → `{ plan, protectedAuthority }`, both `None`
    /// when the cluster has no plan; `not-found` when the cluster does not exist.
    pub async fn get_runtime_network_address_plan(
        &self,
        request: ClusterRequest,
    ) -> Result<Option<StoredNetworkPlan>, DomainError> {
        let ClusterRequest { cluster_id } = request;
        self.existing_cluster(&cluster_id).await?;
        Ok(self.store.network_plan(&cluster_id).await?)
    }
}
