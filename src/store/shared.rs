//! The part of the two SQL backends that is the same on both: the row readers, the reads every
//! write judges against, and every [`Store`](super::Store) method whose SQL both databases
//! accept as written (PostgreSQL and SQLite both take `$n` parameters). Each backend expands
//! `sql_store!` once with its own connection and row types; what differs stays in the backend:
//! how a write transaction begins and locks the cluster, migrations, readiness, and the queries
//! whose SQL differs.

/// Expands, in a backend module, a private module `shared` holding the shared row readers and
/// reads, and the backend's `impl Store` made of the shared methods plus the backend's own
/// methods given in braces. The own methods are expanded inside `shared`, so they see the
/// imports below plus everything of the backend module (`use super::*`).
///
/// The backend module must define:
/// - `async fn begin_write(pool) -> Result<Transaction, sqlx::Error>`: opens a write transaction;
/// - `async fn lock_cluster(&mut connection, &Id) -> Result<Option<StoredCluster>, StoreError>`:
///   reads the cluster row and holds it against other writers for the rest of the transaction;
/// - `async fn write_designation(&mut connection, &Id, Option<u64>, &DesignationWrite) ->
///   Result<bool, StoreError>`: moves the designation head from the given generation (guarded)
///   and, only if it moved, writes the generation, the sealed secret and the mutation record.
///
/// `cluster_row_changed` and `service_head_changed` are the messages of the two "cannot happen
/// under the lock" errors.
/// The record of cluster `c`'s current designation (NULL when it holds none), as a correlated
/// scalar subquery: its lookup is always the primary key's (cluster_id, generation), whatever the
/// planner's statistics say (joined instead, a planner that believes each cluster has one
/// generation may scan all of them).
macro_rules! current_designation_sql {
    () => {
        "(SELECT d.record FROM ingress_designations d WHERE d.cluster_id = c.id AND d.generation = c.designation_generation)"
    };
}

macro_rules! sql_store {
    (
        store: $store:ident,
        connection: $connection:ty,
        row: $row:ty,
        cluster_row_changed: $cluster_row_changed:literal,
        service_head_changed: $service_head_changed:literal,
        own_methods: { $($own:tt)* } $(,)?
    ) => {
        mod shared {
            #[allow(unused_imports)]
            use super::*;
            use super::{$store, begin_write, lock_cluster, write_designation, write_designation_alone};
            use $crate::contract::designation::ClusterIngressDesignation;
            use $crate::contract::inventory::{ClusterSpec, NodeSpec, ServiceRuntimeSpec, ServiceSpecBody};
            use $crate::contract::{Id, NodeId};
            use $crate::store::codec::{
                ClusterColumns, check_designation_write, counter_from_sql, counter_to_sql, hash_from_sql,
                mutation_key, read_cluster, read_designation, read_node, read_organization, read_service_spec, record_text,
            };
            use $crate::store::{
                DesignationCommit, DesignationFacts, DesignationJudge, DesignationRefusal, MissingKind, PutOutcome,
                RecordedMutation, SealedSecret, Store, StoreError, StoredCluster, StoredNode, StoredOrganization,
            };
            use sqlx::Row;

            pub(super) fn cluster_from_row(row: &$row) -> Result<StoredCluster, StoreError> {
                Ok(StoredCluster {
                    cluster: read_cluster(&row.try_get::<String, _>("record")?)?,
                    revision: counter_from_sql(row.try_get("revision")?, "cluster revision")?,
                })
            }

            pub(super) fn node_from_row(cluster_id: &Id, row: &$row) -> Result<StoredNode, StoreError> {
                Ok(StoredNode {
                    cluster_id: cluster_id.clone(),
                    node: read_node(&row.try_get::<String, _>("record")?)?,
                    bearer_hash: hash_from_sql(row.try_get("bearer_hash")?, "node bearer hash")?,
                    revision: counter_from_sql(row.try_get("revision")?, "node revision")?,
                })
            }

            /// The head of a service: its current revision and whether it is deleted.
            pub(super) async fn service_head(
                connection: &mut $connection,
                cluster_id: &Id,
                service_id: &Id,
            ) -> Result<Option<(u64, bool)>, StoreError> {
                let row = sqlx::query("SELECT current_revision, deleted FROM services WHERE cluster_id = $1 AND service_id = $2")
                    .bind(cluster_id.as_str())
                    .bind(service_id.as_str())
                    .fetch_optional(&mut *connection)
                    .await?;
                row.map(|row| {
                    Ok((counter_from_sql(row.try_get("current_revision")?, "service revision")?, row.try_get("deleted")?))
                })
                .transpose()
            }

            /// The current spec of a service that exists and is not deleted.
            pub(super) async fn current_spec(
                connection: &mut $connection,
                cluster_id: &Id,
                service_id: &Id,
            ) -> Result<Option<ServiceRuntimeSpec>, StoreError> {
                let row = sqlx::query(
                    "SELECT r.body, r.revision FROM services s \
                     JOIN service_spec_revisions r \
                       ON r.cluster_id = s.cluster_id AND r.service_id = s.service_id AND r.revision = s.current_revision \
                     WHERE s.cluster_id = $1 AND s.service_id = $2 AND NOT s.deleted",
                )
                .bind(cluster_id.as_str())
                .bind(service_id.as_str())
                .fetch_optional(&mut *connection)
                .await?;
                row.map(|row| read_service_spec(&row.try_get::<String, _>("body")?, row.try_get("revision")?)).transpose()
            }

            /// One revision of a service spec (also of a deleted service: every revision stays readable).
            pub(super) async fn spec_at(
                connection: &mut $connection,
                cluster_id: &Id,
                service_id: &Id,
                revision: u64,
            ) -> Result<Option<ServiceRuntimeSpec>, StoreError> {
                let row = sqlx::query(
                    "SELECT body, revision FROM service_spec_revisions WHERE cluster_id = $1 AND service_id = $2 AND revision = $3",
                )
                .bind(cluster_id.as_str())
                .bind(service_id.as_str())
                .bind(counter_to_sql(revision, "service revision")?)
                .fetch_optional(&mut *connection)
                .await?;
                row.map(|row| read_service_spec(&row.try_get::<String, _>("body")?, row.try_get("revision")?)).transpose()
            }

            /// The cluster's current designation.
            pub(super) async fn head_designation(
                connection: &mut $connection,
                cluster_id: &Id,
            ) -> Result<Option<ClusterIngressDesignation>, StoreError> {
                Ok(cluster_designation_on(connection, cluster_id).await?.flatten())
            }

            /// The cluster's current designation (`Some(None)`: it holds none), or `None` when
            /// there is no such cluster.
            pub(super) async fn cluster_designation_on(
                connection: &mut $connection,
                cluster_id: &Id,
            ) -> Result<Option<Option<ClusterIngressDesignation>>, StoreError> {
                let row = sqlx::query(concat!("SELECT ", current_designation_sql!(), " AS record FROM clusters c WHERE c.id = $1"))
                    .bind(cluster_id.as_str())
                    .fetch_optional(&mut *connection)
                    .await?;
                let Some(row) = row else { return Ok(None) };
                let record: Option<String> = row.try_get("record")?;
                Ok(Some(record.map(|text| read_designation(&text)).transpose()?))
            }

            /// The facts of a designation as one statement read them, with the cluster's facts
            /// version at that snapshot and whether the mutation id is recorded.
            pub(super) struct DesignationRead {
                facts: DesignationFacts,
                recorded: bool,
                version: i64,
            }

            /// Every fact the designation judge reads, in one statement (one snapshot): the cluster
            /// and its facts version, whether `mutation_id` is recorded, the service's current spec
            /// and the current designation.
            pub(super) async fn designation_facts(
                connection: &mut $connection,
                cluster_id: &Id,
                service_id: &Id,
                mutation_id: &Id,
            ) -> Result<DesignationRead, StoreError> {
                let row = sqlx::query(concat!(
                    "SELECT c.record, c.revision, c.facts_version, \
                       EXISTS (SELECT 1 FROM ingress_designations m WHERE m.mutation_key = $3) AS recorded, \
                       (SELECT r.body FROM service_spec_revisions r WHERE r.cluster_id = s.cluster_id \
                          AND r.service_id = s.service_id AND r.revision = s.current_revision) AS spec_body, \
                       s.current_revision AS spec_revision, ",
                    current_designation_sql!(),
                    " AS designation \
                     FROM (SELECT 1 AS one) facts \
                     LEFT JOIN clusters c ON c.id = $1 \
                     LEFT JOIN services s ON s.cluster_id = $1 AND s.service_id = $2 AND NOT s.deleted"
                ))
                .bind(cluster_id.as_str())
                .bind(service_id.as_str())
                .bind(mutation_key(cluster_id, mutation_id))
                .fetch_one(&mut *connection)
                .await?;
                if row.try_get::<Option<String>, _>("record")?.is_none() {
                    let facts = DesignationFacts { cluster: None, service: None, current: None };
                    return Ok(DesignationRead { facts, recorded: false, version: 0 });
                }
                let cluster = cluster_from_row(&row)?;
                let service = match (row.try_get::<Option<String>, _>("spec_body")?, row.try_get::<Option<i64>, _>("spec_revision")?) {
                    (Some(body), Some(revision)) => Some(read_service_spec(&body, revision)?),
                    _ => None,
                };
                let current = row.try_get::<Option<String>, _>("designation")?.map(|text| read_designation(&text)).transpose()?;
                Ok(DesignationRead {
                    facts: DesignationFacts { cluster: Some(cluster), service, current },
                    recorded: row.try_get("recorded")?,
                    version: row.try_get("facts_version")?,
                })
            }

            /// What the facts decide: an answer without a write, or a write to commit.
            pub(super) enum DesignationDecision {
                Answer(DesignationCommit),
                Write(DesignationWrite),
            }

            /// A recorded mutation id answers `MutationExists` before the judge is asked; then the
            /// judge decides, and an acceptance is checked against the facts it was given.
            pub(super) fn decide_designation(
                cluster_id: &Id,
                service_id: &Id,
                mutation_id: &Id,
                read: &DesignationRead,
                judge: &DesignationJudge<'_>,
            ) -> Result<DesignationDecision, StoreError> {
                if read.recorded {
                    return Ok(DesignationDecision::Answer(DesignationCommit::MutationExists));
                }
                match judge(&read.facts) {
                    Err(refusal) => Ok(DesignationDecision::Answer(DesignationCommit::Refused(refusal))),
                    // Nothing can be written for a cluster that does not exist.
                    Ok(_) if read.facts.cluster.is_none() => Ok(DesignationDecision::Answer(DesignationCommit::Refused(
                        DesignationRefusal::NotFound(MissingKind::Cluster),
                    ))),
                    Ok(write) => {
                        check_designation_write(cluster_id, service_id, mutation_id, &read.facts, &write)?;
                        Ok(DesignationDecision::Write(write))
                    }
                }
            }

            /// The answer of a committed designation: its spec is the facts' current spec
            /// (`check_designation_write` made sure the designation was prepared against it).
            pub(super) fn accepted_designation(facts: DesignationFacts, write: DesignationWrite) -> DesignationCommit {
                let spec = facts.service.expect("an accepted designation names the current spec");
                DesignationCommit::Accepted { designation: write.designation, spec }
            }

            /// Counts a write of a fact the designation judge reads (see `commit_designation`).
            pub(super) async fn bump_facts_version(connection: &mut $connection, cluster_id: &Id) -> Result<(), StoreError> {
                sqlx::query("UPDATE clusters SET facts_version = facts_version + 1 WHERE id = $1")
                    .bind(cluster_id.as_str())
                    .execute(&mut *connection)
                    .await?;
                Ok(())
            }

            #[async_trait::async_trait]
            impl Store for $store {
                $($own)*

                async fn get_organization(&self, id: &Id) -> Result<Option<StoredOrganization>, StoreError> {
                    let row = sqlx::query("SELECT record, revision FROM organizations WHERE id = $1")
                        .bind(id.as_str())
                        .fetch_optional(&mut *self.pool.acquire().await?)
                        .await?;
                    row.map(|row| {
                        Ok(StoredOrganization {
                            organization: read_organization(&row.try_get::<String, _>("record")?)?,
                            revision: counter_from_sql(row.try_get("revision")?, "organization revision")?,
                        })
                    })
                    .transpose()
                }
                async fn put_cluster(
                    &self,
                    cluster: &ClusterSpec,
                    expected_revision: Option<u64>,
                ) -> Result<PutOutcome<StoredCluster>, StoreError> {
                    let columns = ClusterColumns::of(cluster)?;
                    let mut pooled = self.pool.acquire().await?;
                    let mut transaction = begin_write(&mut pooled).await?;
                    let organization_exists = sqlx::query("SELECT 1 FROM organizations WHERE id = $1")
                        .bind(cluster.organization_id.as_str())
                        .fetch_optional(&mut *transaction)
                        .await?
                        .is_some();
                    if !organization_exists {
                        transaction.rollback().await?;
                        return Ok(PutOutcome::Missing(MissingKind::Organization));
                    }
                    let current = lock_cluster(&mut transaction, &cluster.id).await?.map(|stored| stored.revision);
                    let revision = match (current, expected_revision) {
                        (None, None) => {
                            let inserted = sqlx::query(
                                "INSERT INTO clusters (id, organization_id, record, revision, runtime_phase, runtime_generation, \
                                   relay_origin, fleet_designation_id, fleet_designation_generation, fleet_designation_digest) \
                                 VALUES ($1, $2, $3, 1, $4, $5, $6, $7, $8, $9) ON CONFLICT (id) DO NOTHING",
                            )
                            .bind(cluster.id.as_str())
                            .bind(&columns.organization_id)
                            .bind(&columns.record)
                            .bind(columns.runtime_phase)
                            .bind(columns.runtime_generation)
                            .bind(&columns.relay_origin)
                            .bind(&columns.fleet_id)
                            .bind(columns.fleet_generation)
                            .bind(&columns.fleet_digest)
                            .execute(&mut *transaction)
                            .await?;
                            if inserted.rows_affected() != 1 {
                                // Another transaction created it after our lock found nothing to lock (on SQLite, which
                                // holds the write lock, this cannot happen; it is answered as a conflict all the same).
                                let current = lock_cluster(&mut transaction, &cluster.id).await?.map(|stored| stored.revision);
                                transaction.rollback().await?;
                                return Ok(PutOutcome::RevisionConflict { current });
                            }
                            1
                        }
                        (Some(current), Some(expected)) if current == expected => {
                            if cluster.fleet_cutover_ingress_designation.is_some() {
                                let holds_pallet_designation =
                                    sqlx::query("SELECT 1 FROM clusters WHERE id = $1 AND designation_generation IS NOT NULL")
                                        .bind(cluster.id.as_str())
                                        .fetch_optional(&mut *transaction)
                                        .await?
                                        .is_some();
                                if holds_pallet_designation {
                                    transaction.rollback().await?;
                                    return Ok(PutOutcome::DesignationKindConflict);
                                }
                            }
                            let next = current + 1;
                            let updated = sqlx::query(
                                "UPDATE clusters SET organization_id = $2, record = $3, revision = $4, runtime_phase = $5, \
                                   runtime_generation = $6, relay_origin = $7, fleet_designation_id = $8, \
                                   fleet_designation_generation = $9, fleet_designation_digest = $10, \
                                   facts_version = facts_version + 1 \
                                 WHERE id = $1 AND revision = $11",
                            )
                            .bind(cluster.id.as_str())
                            .bind(&columns.organization_id)
                            .bind(&columns.record)
                            .bind(counter_to_sql(next, "cluster revision")?)
                            .bind(columns.runtime_phase)
                            .bind(columns.runtime_generation)
                            .bind(&columns.relay_origin)
                            .bind(&columns.fleet_id)
                            .bind(columns.fleet_generation)
                            .bind(&columns.fleet_digest)
                            .bind(counter_to_sql(current, "cluster revision")?)
                            .execute(&mut *transaction)
                            .await?;
                            if updated.rows_affected() != 1 {
                                transaction.rollback().await?;
                                return Err(StoreError::Unavailable($cluster_row_changed.into()));
                            }
                            next
                        }
                        (current, _) => {
                            transaction.rollback().await?;
                            return Ok(PutOutcome::RevisionConflict { current });
                        }
                    };
                    transaction.commit().await?;
                    Ok(PutOutcome::Written(StoredCluster { cluster: cluster.clone(), revision }))
                }

                async fn get_cluster(&self, id: &Id) -> Result<Option<StoredCluster>, StoreError> {
                    let row = sqlx::query("SELECT record, revision FROM clusters WHERE id = $1")
                        .bind(id.as_str())
                        .fetch_optional(&mut *self.pool.acquire().await?)
                        .await?;
                    row.map(|row| cluster_from_row(&row)).transpose()
                }

                async fn put_node(
                    &self,
                    cluster_id: &Id,
                    node: &NodeSpec,
                    new_bearer_hash: Option<[u8; 32]>,
                ) -> Result<PutOutcome<(StoredNode, bool)>, StoreError> {
                    let record = record_text(node, "node")?;
                    let mut pooled = self.pool.acquire().await?;
                    let mut transaction = begin_write(&mut pooled).await?;
                    if lock_cluster(&mut transaction, cluster_id).await?.is_none() {
                        transaction.rollback().await?;
                        return Ok(PutOutcome::Missing(MissingKind::Cluster));
                    }
                    let existing =
                        sqlx::query("SELECT bearer_hash, revision FROM cluster_nodes WHERE cluster_id = $1 AND node_id = $2")
                            .bind(cluster_id.as_str())
                            .bind(node.id.as_str())
                            .fetch_optional(&mut *transaction)
                            .await?;
                    let (bearer_hash, revision, created) = match existing {
                        None => {
                            let Some(bearer_hash) = new_bearer_hash else {
                                transaction.rollback().await?;
                                return Err(StoreError::Corrupt("node bearer hash required to create a node".into()));
                            };
                            sqlx::query(
                                "INSERT INTO cluster_nodes (cluster_id, node_id, record, bearer_hash, revision) \
                                 VALUES ($1, $2, $3, $4, 1)",
                            )
                            .bind(cluster_id.as_str())
                            .bind(node.id.as_str())
                            .bind(&record)
                            .bind(bearer_hash.as_slice())
                            .execute(&mut *transaction)
                            .await?;
                            (bearer_hash, 1, true)
                        }
                        Some(row) => {
                            let current_hash = hash_from_sql(row.try_get("bearer_hash")?, "node bearer hash")?;
                            let bearer_hash = new_bearer_hash.unwrap_or(current_hash);
                            let revision = counter_from_sql(row.try_get("revision")?, "node revision")? + 1;
                            sqlx::query(
                                "UPDATE cluster_nodes SET record = $3, bearer_hash = $4, revision = $5 \
                                 WHERE cluster_id = $1 AND node_id = $2",
                            )
                            .bind(cluster_id.as_str())
                            .bind(node.id.as_str())
                            .bind(&record)
                            .bind(bearer_hash.as_slice())
                            .bind(counter_to_sql(revision, "node revision")?)
                            .execute(&mut *transaction)
                            .await?;
                            (bearer_hash, revision, false)
                        }
                    };
                    transaction.commit().await?;
                    let stored = StoredNode { cluster_id: cluster_id.clone(), node: node.clone(), bearer_hash, revision };
                    Ok(PutOutcome::Written((stored, created)))
                }

                async fn get_node(&self, cluster_id: &Id, node_id: &NodeId) -> Result<Option<StoredNode>, StoreError> {
                    let row = sqlx::query(
                        "SELECT record, bearer_hash, revision FROM cluster_nodes WHERE cluster_id = $1 AND node_id = $2",
                    )
                    .bind(cluster_id.as_str())
                    .bind(node_id.as_str())
                    .fetch_optional(&mut *self.pool.acquire().await?)
                    .await?;
                    row.map(|row| node_from_row(cluster_id, &row)).transpose()
                }

                async fn put_service_spec(
                    &self,
                    body: &ServiceSpecBody,
                    expected_revision: Option<u64>,
                ) -> Result<PutOutcome<ServiceRuntimeSpec>, StoreError> {
                    let text = record_text(body, "service spec")?;
                    let (cluster_id, service_id) = (&body.cluster_id, &body.service_id);
                    let mut pooled = self.pool.acquire().await?;
                    let mut transaction = begin_write(&mut pooled).await?;
                    if lock_cluster(&mut transaction, cluster_id).await?.is_none() {
                        transaction.rollback().await?;
                        return Ok(PutOutcome::Missing(MissingKind::Cluster));
                    }
                    let head = service_head(&mut transaction, cluster_id, service_id).await?;
                    let revision = match (head, expected_revision) {
                        (None, None) => {
                            sqlx::query(
                                "INSERT INTO services (cluster_id, service_id, current_revision, deleted) VALUES ($1, $2, 1, FALSE)",
                            )
                            .bind(cluster_id.as_str())
                            .bind(service_id.as_str())
                            .execute(&mut *transaction)
                            .await?;
                            1
                        }
                        (Some((current, deleted)), expected)
                            if (deleted && expected.is_none()) || (!deleted && expected == Some(current)) =>
                        {
                            let next = current + 1;
                            let updated = sqlx::query(
                                "UPDATE services SET current_revision = $3, deleted = FALSE \
                                 WHERE cluster_id = $1 AND service_id = $2 AND current_revision = $4",
                            )
                            .bind(cluster_id.as_str())
                            .bind(service_id.as_str())
                            .bind(counter_to_sql(next, "service revision")?)
                            .bind(counter_to_sql(current, "service revision")?)
                            .execute(&mut *transaction)
                            .await?;
                            if updated.rows_affected() != 1 {
                                transaction.rollback().await?;
                                return Err(StoreError::Unavailable($service_head_changed.into()));
                            }
                            next
                        }
                        (head, _) => {
                            transaction.rollback().await?;
                            let current = head.and_then(|(current, deleted)| (!deleted).then_some(current));
                            return Ok(PutOutcome::RevisionConflict { current });
                        }
                    };
                    sqlx::query(
                        "INSERT INTO service_spec_revisions (cluster_id, service_id, revision, body) VALUES ($1, $2, $3, $4)",
                    )
                    .bind(cluster_id.as_str())
                    .bind(service_id.as_str())
                    .bind(counter_to_sql(revision, "service revision")?)
                    .bind(&text)
                    .execute(&mut *transaction)
                    .await?;
                    bump_facts_version(&mut transaction, cluster_id).await?;
                    transaction.commit().await?;
                    Ok(PutOutcome::Written(ServiceRuntimeSpec { body: body.clone(), revision }))
                }

                async fn get_service_spec(
                    &self,
                    cluster_id: &Id,
                    service_id: &Id,
                    revision: Option<u64>,
                ) -> Result<Option<ServiceRuntimeSpec>, StoreError> {
                    let mut connection = self.pool.acquire().await?;
                    match revision {
                        None => current_spec(&mut connection, cluster_id, service_id).await,
                        Some(revision) => spec_at(&mut connection, cluster_id, service_id, revision).await,
                    }
                }

                async fn delete_service(
                    &self,
                    cluster_id: &Id,
                    service_id: &Id,
                    expected_revision: u64,
                ) -> Result<PutOutcome<()>, StoreError> {
                    let mut pooled = self.pool.acquire().await?;
                    let mut transaction = begin_write(&mut pooled).await?;
                    if lock_cluster(&mut transaction, cluster_id).await?.is_none() {
                        transaction.rollback().await?;
                        return Ok(PutOutcome::Missing(MissingKind::Cluster));
                    }
                    let outcome = match service_head(&mut transaction, cluster_id, service_id).await? {
                        None | Some((_, true)) => PutOutcome::Missing(MissingKind::Service),
                        Some((current, false)) if current != expected_revision => {
                            PutOutcome::RevisionConflict { current: Some(current) }
                        }
                        Some((current, false)) => {
                            sqlx::query(
                                "UPDATE services SET deleted = TRUE \
                                 WHERE cluster_id = $1 AND service_id = $2 AND current_revision = $3 AND NOT deleted",
                            )
                            .bind(cluster_id.as_str())
                            .bind(service_id.as_str())
                            .bind(counter_to_sql(current, "service revision")?)
                            .execute(&mut *transaction)
                            .await?;
                            bump_facts_version(&mut transaction, cluster_id).await?;
                            transaction.commit().await?;
                            return Ok(PutOutcome::Written(()));
                        }
                    };
                    transaction.rollback().await?;
                    Ok(outcome)
                }

                async fn find_designation_mutation(
                    &self,
                    cluster_id: &Id,
                    mutation_id: &Id,
                ) -> Result<Option<RecordedMutation>, StoreError> {
                    let row = sqlx::query(
                        "SELECT d.request_canonical, d.record, r.body, r.revision \
                         FROM ingress_designations d \
                         LEFT JOIN service_spec_revisions r ON r.cluster_id = d.cluster_id \
                           AND r.service_id = d.ingress_service_id AND r.revision = d.prepared_spec_revision \
                         WHERE d.mutation_key = $1",
                    )
                    .bind(mutation_key(cluster_id, mutation_id))
                    .fetch_optional(&mut *self.pool.acquire().await?)
                    .await?;
                    let Some(row) = row else { return Ok(None) };
                    let (Some(body), Some(revision)) =
                        (row.try_get::<Option<String>, _>("body")?, row.try_get::<Option<i64>, _>("revision")?)
                    else {
                        return Err(StoreError::Corrupt("a recorded designation names a missing spec revision".into()));
                    };
                    Ok(Some(RecordedMutation {
                        request_canonical: row.try_get("request_canonical")?,
                        designation: read_designation(&row.try_get::<String, _>("record")?)?,
                        spec: read_service_spec(&body, revision)?,
                    }))
                }

                async fn current_designation(&self, cluster_id: &Id) -> Result<Option<ClusterIngressDesignation>, StoreError> {
                    let mut connection = self.pool.acquire().await?;
                    head_designation(&mut connection, cluster_id).await
                }

                async fn cluster_designation(
                    &self,
                    cluster_id: &Id,
                ) -> Result<Option<Option<ClusterIngressDesignation>>, StoreError> {
                    cluster_designation_on(&mut *self.pool.acquire().await?, cluster_id).await
                }

                async fn list_designations(
                    &self,
                    cluster_id: &Id,
                    from_generation: u64,
                    limit: u32,
                ) -> Result<Vec<ClusterIngressDesignation>, StoreError> {
                    sqlx::query(
                        "SELECT record FROM ingress_designations WHERE cluster_id = $1 AND generation >= $2 \
                         ORDER BY generation LIMIT $3",
                    )
                    .bind(cluster_id.as_str())
                    .bind(counter_to_sql(from_generation, "designation generation")?)
                    .bind(i64::from(limit))
                    .fetch_all(&mut *self.pool.acquire().await?)
                    .await?
                    .iter()
                    .map(|row| read_designation(&row.try_get::<String, _>("record")?))
                    .collect()
                }

                async fn commit_designation(
                    &self,
                    cluster_id: &Id,
                    service_id: &Id,
                    mutation_id: &Id,
                    judge: &DesignationJudge<'_>,
                ) -> Result<DesignationCommit, StoreError> {
                    let mut pooled = self.pool.acquire().await?;
                    // Optimistic: every fact at one snapshot, the judge, and one write that commits only
                    // while no fact has been written since (the cluster's facts version). A refusal is
                    // answered from that one snapshot.
                    let read = designation_facts(&mut pooled, cluster_id, service_id, mutation_id).await?;
                    match decide_designation(cluster_id, service_id, mutation_id, &read, judge)? {
                        DesignationDecision::Answer(commit) => return Ok(commit),
                        DesignationDecision::Write(write) => {
                            let current_generation = read.facts.current.as_ref().map(|current| current.generation);
                            if write_designation_alone(&mut pooled, cluster_id, read.version, current_generation, &write).await? {
                                return Ok(accepted_designation(read.facts, write));
                            }
                        }
                    }
                    // A fact was written between the read and the write: judge again under the
                    // cluster's lock, so the answer is exact — a racing twin's replay,
                    // `designation-conflict`, or an acceptance. `BEGIN` and the lock are two
                    // statements: a caller cancelled while it waits for the lock then leaves a
                    // transaction sqlx knows of (its drop queues the `ROLLBACK`, and the PostgreSQL
                    // pool closes such a connection).
                    let mut transaction = begin_write(&mut pooled).await?;
                    lock_cluster(&mut transaction, cluster_id).await?;
                    let read = designation_facts(&mut transaction, cluster_id, service_id, mutation_id).await?;
                    let write = match decide_designation(cluster_id, service_id, mutation_id, &read, judge)? {
                        DesignationDecision::Answer(commit) => {
                            transaction.rollback().await?;
                            return Ok(commit);
                        }
                        DesignationDecision::Write(write) => write,
                    };
                    let current_generation = read.facts.current.as_ref().map(|current| current.generation);
                    // The guarded move of the head (a second guard besides the lock) and, only if it
                    // moved, the generation with its mutation record and the sealed secret.
                    if !write_designation(&mut transaction, cluster_id, read.version, current_generation, &write).await? {
                        let current = head_designation(&mut transaction, cluster_id).await?;
                        transaction.rollback().await?;
                        return Ok(DesignationCommit::Refused(DesignationRefusal::DesignationConflict(
                            current.map(|designation| designation.reference()),
                        )));
                    }
                    transaction.commit().await?;
                    Ok(accepted_designation(read.facts, write))
                }

                async fn get_secret(&self, secret_id: &Id, secret_version_id: &Id) -> Result<Option<SealedSecret>, StoreError> {
                    let row = sqlx::query(
                        "SELECT nonce, ciphertext, value_hash FROM secret_versions WHERE secret_id = $1 AND secret_version_id = $2",
                    )
                    .bind(secret_id.as_str())
                    .bind(secret_version_id.as_str())
                    .fetch_optional(&mut *self.pool.acquire().await?)
                    .await?;
                    row.map(|row| {
                        Ok(SealedSecret {
                            secret_id: secret_id.clone(),
                            secret_version_id: secret_version_id.clone(),
                            nonce: row.try_get("nonce")?,
                            ciphertext: row.try_get("ciphertext")?,
                            value_hash: hash_from_sql(row.try_get("value_hash")?, "secret value hash")?,
                        })
                    })
                    .transpose()
                }
            }
        }
        #[allow(unused_imports)]
        use shared::{cluster_from_row, head_designation, node_from_row};
    };
}
