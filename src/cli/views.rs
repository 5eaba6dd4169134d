//! The tables of `-o table`: for each answer, where its rows are and which columns show them.
//! One [`View`] a table, as data: a new table is a new entry, not new code. Times are shown in
//! RFC 3339 (UTC), lists joined by commas, an absent value as `-`.

use super::output::{aligned, cell, time_cell};
use serde_json::Value;

/// A table over an answer.
pub struct View {
    /// A JSON pointer into the answer: a list (a row each), one record (one row) or `null` (no
    /// rows).
    pub rows: &'static str,
    /// The columns.
    pub columns: &'static [Column],
}

/// One column: its header and how a row shows in it.
pub struct Column {
    /// The header.
    pub header: &'static str,
    /// The cell.
    pub cell: Cell,
}

/// How a row's cell is made.
pub enum Cell {
    /// The value at a JSON pointer of the row, as [`cell`].
    Text(&'static str),
    /// A time in milliseconds at a JSON pointer of the row, as RFC 3339.
    Time(&'static str),
    /// Made by a function of the row.
    Made(fn(&Value) -> String),
}

const fn text(header: &'static str, pointer: &'static str) -> Column {
    Column { header, cell: Cell::Text(pointer) }
}

const fn time(header: &'static str, pointer: &'static str) -> Column {
    Column { header, cell: Cell::Time(pointer) }
}

const fn made(header: &'static str, make: fn(&Value) -> String) -> Column {
    Column { header, cell: Cell::Made(make) }
}

impl View {
    /// The answer as aligned columns, a header line first.
    pub fn render(&self, answer: &Value) -> String {
        let rows: Vec<&Value> = match answer.pointer(self.rows) {
            Some(Value::Array(items)) => items.iter().collect(),
            Some(Value::Null) | None => Vec::new(),
            Some(record) => vec![record],
        };
        let cells: Vec<Vec<String>> = rows
            .iter()
            .map(|row| {
                self.columns
                    .iter()
                    .map(|column| match column.cell {
                        Cell::Text(pointer) => cell(row.pointer(pointer).unwrap_or(&Value::Null)),
                        Cell::Time(pointer) => time_cell(row.pointer(pointer).unwrap_or(&Value::Null)),
                        Cell::Made(make) => make(row),
                    })
                    .collect()
            })
            .collect();
        let header: Vec<&str> = self.columns.iter().map(|column| column.header).collect();
        aligned(&header, &cells)
    }
}

const ORGANIZATION: &[Column] = &[text("ID", "/id"), text("NAME", "/name")];
/// `org get`.
pub static ORGANIZATION_VIEW: View = View { rows: "/organization", columns: ORGANIZATION };

const CLUSTER: &[Column] = &[
    text("ID", "/id"),
    text("ORGANIZATION", "/organizationId"),
    text("PHASE", "/runtime/phase"),
    text("GENERATION", "/runtime/generation"),
    text("RELAY ORIGIN", "/relayOrigin"),
    text("REVISION", "/revision"),
];
/// `cluster list`.
pub static CLUSTERS_VIEW: View = View { rows: "/clusters", columns: CLUSTER };
/// `cluster get`.
pub static CLUSTER_VIEW: View = View { rows: "/cluster", columns: CLUSTER };

const NODE: &[Column] = &[
    text("ID", "/id"),
    text("HOST ADDRESSES", "/hostAddresses"),
    text("SESSION", "/session/generation"),
    text("CONNECTED", "/connected"),
];
/// `node list`.
pub static NODES_VIEW: View = View { rows: "/nodes", columns: NODE };
/// `node get`.
pub static NODE_VIEW: View = View { rows: "/node", columns: NODE };

/// `service get`.
pub static SPEC_VIEW: View = View {
    rows: "/spec",
    columns: &[
        text("SERVICE", "/serviceId"),
        text("REVISION", "/revision"),
        text("IMAGE", "/image"),
        text("REPLICAS", "/replicas"),
        text("NODES", "/placement/nodeIds"),
        made("PORTS", |spec| {
            joined(spec, "/ports", |port| format!("{}/{}", cell(&port["port"]), cell(&port["protocol"])))
        }),
        made("VOLUMES", |spec| joined(spec, "/volumes", |volume| cell(&volume["id"]))),
    ],
};

const STATUS: &[Column] = &[
    text("SERVICE", "/id"),
    text("REVISION", "/specRevision"),
    text("STATE", "/state"),
    text("REASON", "/reason"),
    time("CHANGED AT", "/changedAt"),
];
/// `service status`.
pub static STATUSES_VIEW: View = View { rows: "/statuses", columns: STATUS };
/// `service status --id`.
pub static STATUS_VIEW: View = View { rows: "/status", columns: STATUS };

const DESIGNATION: &[Column] = &[
    text("GENERATION", "/generation"),
    text("SERVICE", "/ingressServiceId"),
    text("SPEC REVISION", "/preparedSpecRevision"),
    text("RUNTIME", "/runtime/generation"),
    text("ACTOR", "/actorId"),
    time("ACCEPTED AT", "/acceptedAt"),
];
/// `ingress get`.
pub static DESIGNATION_VIEW: View = View { rows: "/designation", columns: DESIGNATION };
/// `ingress list`.
pub static DESIGNATIONS_VIEW: View = View { rows: "/designations", columns: DESIGNATION };

/// `ingress registrations`.
pub static REGISTRATIONS_VIEW: View = View {
    rows: "/registrations",
    columns: &[
        text("SEQUENCE", "/sequence"),
        text("NODE", "/nodeId"),
        text("VERSION", "/version"),
        text("RELAY", "/relayConnection/relayId"),
        text("EPOCH", "/relayConnection/epoch"),
        text("DESIGNATION", "/designation/generation"),
        time("REGISTERED AT", "/registeredAt"),
    ],
};

/// `relay list`: a row per relay, its newest connection's columns (`-` without one).
pub static RELAYS_VIEW: View = View {
    rows: "/relays",
    columns: &[
        text("RELAY", "/relayId"),
        text("CREDENTIAL GENERATION", "/credential/generation"),
        made("CONNECTIONS", |relay| count(relay, "/connections")),
        text("EPOCH", "/connections/0/epoch"),
        time("LAST SEEN AT", "/connections/0/lastSeenAt"),
        made("ELECTED", |relay| {
            let elected = relay["connections"].as_array().is_some_and(|connections| {
                connections.iter().any(|connection| connection["elected"] == Value::Bool(true))
            });
            if elected { "yes" } else { "no" }.to_owned()
        }),
    ],
};

/// `route list`.
pub static ROUTES_VIEW: View = View {
    rows: "/table/routes",
    columns: &[
        text("HOSTNAME", "/hostname"),
        text("SERVICE", "/serviceId"),
        text("PROTOCOL", "/protocol"),
        text("PORT", "/port"),
        made("BACKENDS", |route| {
            joined(route, "/backends", |backend| format!("{}:{}", cell(&backend["address"]), cell(&backend["port"])))
        }),
    ],
};

/// `network plan get`.
pub static PLAN_VIEW: View = View {
    rows: "/plan",
    columns: &[
        text("CLUSTER", "/clusterId"),
        text("REVISION", "/revision"),
        text("PREFIXES", "/prefixes"),
        made("POOLS", |plan| joined(plan, "/pools", |pool| format!("{}={}", cell(&pool["id"]), cell(&pool["prefix"])))),
        made("HUBS", |plan| joined(plan, "/hubs", |hub| cell(&hub["id"]))),
        made("PLATFORM ENDPOINTS", |plan| joined(plan, "/platformEndpoints", |endpoint| cell(&endpoint["id"]))),
    ],
};

/// `network projection`.
pub static PROJECTION_VIEW: View = View {
    rows: "",
    columns: &[
        text("NODE", "/projection/nodeId"),
        text("GENERATION", "/projection/generation"),
        made("ENDPOINTS", |answer| count(answer, "/projection/endpoints")),
        made("RETIRED LEASES", |answer| count(answer, "/projection/retiredLeases")),
        text("APPLIED", "/applied/generation"),
        text("KEY", "/keyId"),
    ],
};

/// `volume list`: the node's state with the generation it is about when that is not the head's.
pub static CLAIMS_VIEW: View = View {
    rows: "/claims",
    columns: &[
        text("CLAIM", "/claim/id"),
        text("SERVICE", "/claim/serviceId"),
        text("VOLUME", "/claim/volumeId"),
        text("NODE", "/claim/nodeId"),
        text("GENERATION", "/claim/generation"),
        text("LIFECYCLE", "/claim/lifecycle"),
        made("NODE STATE", |listing| {
            let (claim, node) = (&listing["claim"], &listing["node"]);
            match (&node["state"], &node["generation"]) {
                (Value::Null, _) => "pending".to_owned(),
                (state, generation) if generation == &claim["generation"] => cell(state),
                (state, generation) => format!("{} (generation {generation})", cell(state)),
            }
        }),
        text("FAULTS", "/faults/count"),
        time("ANSWERED AT", "/node/answeredAt"),
    ],
};

/// `apply`: what each record became.
pub static APPLIED_VIEW: View = View {
    rows: "/applied",
    columns: &[
        made("RECORD", |entry| {
            ["organization", "cluster", "node", "service"]
                .iter()
                .rev()
                .find(|kind| entry.get(**kind).is_some())
                .map_or_else(|| "-".to_owned(), |kind| format!("{kind}/{}", cell(&entry[*kind])))
        }),
        text("CLUSTER", "/cluster"),
        text("RESULT", "/result"),
        text("BEARER", "/bearer"),
    ],
};

/// `version`.
pub static VERSION_VIEW: View = View {
    rows: "/components",
    columns: &[
        text("COMPONENT", "/component"),
        text("VERSION", "/version"),
        text("PROFILE", "/profile"),
        text("CONTROLLER ID", "/controllerId"),
    ],
};

/// The items of the list at `pointer` of `value`, each shown by `show`, joined by commas (`-`
/// when there are none).
fn joined(value: &Value, pointer: &str, show: fn(&Value) -> String) -> String {
    match value.pointer(pointer).and_then(Value::as_array) {
        Some(items) if !items.is_empty() => items.iter().map(show).collect::<Vec<_>>().join(","),
        _ => "-".to_owned(),
    }
}

/// How many items the list at `pointer` of `value` has (`-` when it is absent).
fn count(value: &Value, pointer: &str) -> String {
    value.pointer(pointer).and_then(Value::as_array).map_or_else(|| "-".to_owned(), |items| items.len().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::methods::name;
    use serde_json::json;

    #[test]
    fn a_view_shows_a_list_a_record_or_nothing() {
        let answer = json!({ "statuses": [
            { "id": "web", "specRevision": 1, "state": "converged", "reason": null, "changedAt": 1_767_225_600_000_u64 },
        ] });
        assert_eq!(
            STATUSES_VIEW.render(&answer),
            "SERVICE  REVISION  STATE      REASON  CHANGED AT\nweb      1         converged  -       2026-01-01T00:00:00.000Z"
        );
        assert_eq!(ROUTES_VIEW.render(&json!({ "table": null })), "HOSTNAME  SERVICE  PROTOCOL  PORT  BACKENDS");
        let relays = json!({ "relays": [
            { "relayId": "relay-1", "credential": { "generation": 2 }, "connections": [
                { "id": "conn-2", "epoch": 3, "lastSeenAt": 1_767_225_600_000_u64, "elected": true },
                { "id": "conn-1", "epoch": 1, "lastSeenAt": 1_767_225_500_000_u64, "elected": false },
            ] },
            { "relayId": "relay-2", "credential": { "generation": 1 }, "connections": [] },
        ], "truncated": false });
        assert_eq!(
            RELAYS_VIEW.render(&relays),
            "RELAY    CREDENTIAL GENERATION  CONNECTIONS  EPOCH  LAST SEEN AT              ELECTED\n\
             relay-1  2                      2            3      2026-01-01T00:00:00.000Z  yes\n\
             relay-2  1                      0            -      -                         no"
        );
        let organization = json!({ "organization": { "id": "org", "name": "Example Org" } });
        assert_eq!(ORGANIZATION_VIEW.render(&organization), "ID   NAME\norg  Example Org");
        let applied = json!({ "applied": [{ "cluster": "c1", "node": "node-1", "result": "created", "bearer": "b" }] });
        assert_eq!(APPLIED_VIEW.render(&applied).lines().nth(1), Some("node/node-1  c1       created  b"));
    }

    /// Each view over a method's answer, with that method. `network projection`, `apply` and
    /// `version` show answers the CLI composes, so they have no method's answer to meet.
    const VIEWS_OF_METHODS: &[(&View, &str)] = &[
        (&ORGANIZATION_VIEW, name::GET_ORGANIZATION),
        (&CLUSTERS_VIEW, name::LIST_CLUSTERS),
        (&CLUSTER_VIEW, name::GET_CLUSTER),
        (&NODES_VIEW, name::LIST_CLUSTER_NODES),
        (&NODE_VIEW, name::GET_CLUSTER_NODE),
        (&SPEC_VIEW, name::GET_SERVICE_RUNTIME_SPEC),
        (&STATUSES_VIEW, name::LIST_SERVICE_RUNTIME_STATUSES),
        (&STATUS_VIEW, name::GET_SERVICE_RUNTIME_STATUS),
        (&DESIGNATION_VIEW, name::GET_CLUSTER_INGRESS_DESIGNATION),
        (&DESIGNATIONS_VIEW, name::LIST_CLUSTER_INGRESS_DESIGNATIONS),
        (&REGISTRATIONS_VIEW, name::LIST_CLUSTER_INGRESS_REGISTRATIONS),
        (&RELAYS_VIEW, name::LIST_CLUSTER_RELAYS),
        (&ROUTES_VIEW, name::GET_CLUSTER_INGRESS_ROUTES),
        (&PLAN_VIEW, name::GET_RUNTIME_NETWORK_ADDRESS_PLAN),
        (&CLAIMS_VIEW, name::LIST_RUNTIME_LOCAL_STORAGE_CLAIMS),
    ];

    /// Whether `pointer`'s members (a number: an item) are described under `schema` of the
    /// OpenAPI document `document`, through `$ref`, `items` and any branch of `allOf`, `oneOf`
    /// and `anyOf`.
    fn described(document: &Value, schema: &Value, pointer: &str) -> bool {
        let Some(members) = pointer.strip_prefix('/') else { return pointer.is_empty() };
        let (member, rest) = members.find('/').map_or((members, ""), |at| (&members[..at], &members[at..]));
        let mut schema = schema;
        while let Some(reference) = schema["$ref"].as_str() {
            schema = document.pointer(reference.trim_start_matches('#')).unwrap_or(&Value::Null);
        }
        let here = if member.parse::<usize>().is_ok() { &schema["items"] } else { &schema["properties"][member] };
        (!here.is_null() && described(document, here, rest))
            || ["allOf", "oneOf", "anyOf"]
                .iter()
                .filter_map(|key| schema[*key].as_array())
                .flatten()
                .any(|branch| described(document, branch, pointer))
    }

    /// Every member a view shows (its rows and each text or time column) is one the method's
    /// answer has in `openapi/openapi.yaml`, the wire description `tests/openapi.rs` holds the
    /// api's answers to: a member renamed there, or misspelled here, fails.
    #[test]
    fn every_column_a_view_shows_is_a_member_of_its_methods_answer() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/openapi.yaml");
        let document: Value = serde_json::from_str(&std::fs::read_to_string(path).expect("the OpenAPI document"))
            .expect("the OpenAPI document is JSON");
        for (view, method) in VIEWS_OF_METHODS {
            let answer = &document["components"]["schemas"][format!("{method}Response")];
            assert!(!answer.is_null(), "{method} has an answer schema");
            for column in view.columns {
                let pointer = match column.cell {
                    Cell::Text(pointer) | Cell::Time(pointer) => pointer,
                    Cell::Made(_) => continue,
                };
                // A row is the record at `rows` or, when that is a list, each of its items.
                let (record, item) = (format!("{}{pointer}", view.rows), format!("{}/0{pointer}", view.rows));
                assert!(
                    described(&document, answer, &record) || described(&document, answer, &item),
                    "{method}: the {} column's {pointer} under {}",
                    column.header,
                    view.rows
                );
            }
        }
        assert!(!described(&document, &document["components"]["schemas"]["getClusterResponse"], "/cluster/phase"));
    }
}
