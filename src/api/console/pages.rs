//! The console's HTML, rendered on the server with `maud` (every value escaped) from what the
//! read methods answered: each page's data is the wire JSON of the method table's answers, so a
//! page shows exactly what the API shows a reader, and nothing else. No page renders a bearer,
//! token or key; a designation's credential is left out.
//!
//! Pure functions of their data and the time `now_ms`: the unit tests below render them from
//! fixed answers.

use crate::domain::assignments::AssignmentReport;
use maud::{DOCTYPE, Markup, html};
use serde_json::Value;
use std::time::{Duration, UNIX_EPOCH};

/// The cookie-holding operator, as the page header names them.
pub struct Operator<'a> {
    /// The identity's display name.
    pub name: &'a str,
    /// Its role (`admin`, `operator`, `viewer`).
    pub role: &'a str,
}

/// A whole page: the header with the operator and sign-out, and `main`. When `live` names the
/// page (its path under `/console`), the script follows its changes and replaces `main`.
pub fn layout(title: &str, operator: Option<&Operator<'_>>, live: Option<&str>, main: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Cloudly console" }
                link rel="icon" href="/console/assets/favicon.svg" type="image/svg+xml";
                link rel="stylesheet" href="/console/assets/console.css";
                script src="/console/assets/console.js" defer {}
            }
            body {
                header {
                    a.brand href="/console" { "Cloudly console" }
                    @if let Some(operator) = operator {
                        span.operator { (operator.name) " · " (operator.role) }
                        span #live-state.live-state { @if live.is_some() { "live" } }
                        form.sign-out method="post" action="/console/sign-out" {
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                @match live {
                    Some(path) => main data-live=(path) { (main) },
                    None => main { (main) },
                }
            }
        }
    }
}

/// The sign-in form: paste the identity (the JSON file `cloudly serve` wrote, or its token alone)
/// or pick the identity file. `message` says why the operator is here; `next` is the page (its
/// path under `/console`) to go on to.
pub fn sign_in(message: Option<&str>, next: Option<&str>) -> Markup {
    html! {
        h1 { "Sign in" }
        @if let Some(message) = message { p.notice role="alert" { (message) } }
        form.sign-in method="post" action="/console/sign-in" {
            label for="identity-file" { "Pick the identity file (for example " code { "admin-identity.json" } ")" }
            input #identity-file type="file" accept=".json,application/json";
            label for="identity" { "…or paste the identity or its token" }
            textarea #identity name="identity" rows="8" autocomplete="off" spellcheck="false" required {}
            @if let Some(next) = next { input type="hidden" name="next" value=(next); }
            button type="submit" { "Sign in" }
        }
        p.hint { "The identity stays on the controller for as long as it is valid; the browser holds only a session cookie." }
    }
}

/// A page that tells what went wrong and offers the way on.
pub fn problem(heading: &str, detail: &str) -> Markup {
    html! {
        h1 { (heading) }
        p.notice role="alert" { (detail) }
        p { a href="/console" { "Back to the clusters" } }
    }
}

fn text<'a>(value: &'a Value, key: &str) -> &'a str {
    value[key].as_str().unwrap_or("")
}

fn number(value: &Value) -> String {
    value.as_u64().map_or_else(|| "—".to_owned(), |number| number.to_string())
}

/// The first 12 characters of a digest, enough to tell generations apart.
fn short(digest: &str) -> &str {
    digest.get(..12).unwrap_or(digest)
}

/// A moment as RFC 3339 (seconds, UTC).
pub fn moment(at_ms: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(at_ms)).to_string()
}

/// How long ago `at_ms` was at `now_ms`: `12s`, `5m`, `3h`, `2d`.
pub fn age(now_ms: u64, at_ms: u64) -> String {
    let seconds = now_ms.saturating_sub(at_ms) / 1000;
    match seconds {
        0..60 => format!("{seconds}s"),
        60..3_600 => format!("{}m", seconds / 60),
        3_600..86_400 => format!("{}h", seconds / 3_600),
        _ => format!("{}d", seconds / 86_400),
    }
}

fn when(now_ms: u64, at: &Value) -> Markup {
    match at.as_u64() {
        Some(at) => html! { time datetime=(moment(at)) title=(moment(at)) { (age(now_ms, at)) " ago" } },
        None => html! { "—" },
    }
}

/// What a status reason means for the operator, in a sentence (README, "Service runtime status").
pub fn reason_explained(reason: &str) -> &'static str {
    match reason {
        "node-network-pending" => "A node of its placement has no network lease yet.",
        "conflict" => "A volume claim is uncertain, being purged or unreadable: see the volumes page.",
        "failure-backoff" => "Its assignments failed; the controller waits before trying again.",
        "storage-import-pending" => "A volume's node has not answered ready (an import or first initialization).",
        "bindings-pending" => "It is the designated ingress of a cluster without a relay origin.",
        "no-eligible-node" => "A placement node does not exist.",
        "ports-too-many" => "It declares more than 64 ports.",
        "port-protocol-unsupported" => "A port uses a protocol other than tcp or udp.",
        "environment-too-large" => "Its environment is over 256 entries or 256 KiB.",
        "network-workload-pool-missing" => "The cluster has an address plan without a pool for its organization.",
        "network-workload-pool-exhausted" => "Its organization's pool cannot hold one /30 per replica.",
        "volume-driver-unsupported" => "A volume's driver is not local.",
        "volume-options-unsupported" => "A volume sets driver or mount options.",
        "volume-shared-unsupported" => "A volume is shared: several replicas, or another service declared it first.",
        "volume-placement-unsupported" => "A service with volumes is placed on more than one node.",
        _ => "",
    }
}

fn state_badge(state: &str) -> Markup {
    html! { span class={ "state state-" (state) } { (state) } }
}

/// The clusters page: every cluster the reader may see.
pub fn clusters(clusters: &[Value]) -> Markup {
    html! {
        h1 { "Clusters" }
        @if clusters.is_empty() {
            p { "No cluster yet. Create one with " code { "cloudly cluster put" } "." }
        } @else {
            table {
                thead { tr { th { "Cluster" } th { "Organization" } th { "Runtime" } th { "Relay origin" } th { "Revision" } } }
                tbody {
                    @for cluster in clusters {
                        tr {
                            td { a href={ "/console/clusters/" (text(cluster, "id")) } { (text(cluster, "id")) } }
                            td { (text(cluster, "organizationId")) }
                            td { (text(&cluster["runtime"], "phase")) " " (number(&cluster["runtime"]["generation"])) }
                            td { (cluster["relayOrigin"].as_str().unwrap_or("—")) }
                            td { (number(&cluster["revision"])) }
                        }
                    }
                }
            }
        }
    }
}

/// What the cluster page shows, as the read methods answered it.
pub struct ClusterView {
    /// `getCluster`'s `cluster`.
    pub cluster: Value,
    /// `listServiceRuntimeStatuses`' `statuses`.
    pub statuses: Vec<Value>,
    /// `listClusterNodes`' `nodes`.
    pub nodes: Vec<Value>,
    /// `listClusterIngressDesignations`' `designations`: the chain, oldest first.
    pub designations: Vec<Value>,
    /// `listClusterRelays`' answer: `relays` and `truncated`.
    pub relays: Value,
    /// `listClusterIngressRegistrations`' `registrations`, newest first.
    pub registrations: Vec<Value>,
    /// `getClusterIngressRoutes`' `table`, `null` before the first route.
    pub routes: Value,
    /// Now, ms since the epoch.
    pub now_ms: u64,
}

fn session_text(session: &Value) -> String {
    if session.is_null() {
        "none".to_owned()
    } else {
        format!("{} (generation {})", text(session, "id"), number(&session["generation"]))
    }
}

/// The cluster page: services with their state, reason and age; nodes; the ingress designation
/// and its chain; relays and registrations; routes with their backends.
pub fn cluster(view: &ClusterView) -> Markup {
    let cluster_id = text(&view.cluster, "id");
    let base = format!("/console/clusters/{cluster_id}");
    let current = view.designations.last();
    html! {
        h1 { "Cluster " (cluster_id) }
        p.facts {
            "Organization " (text(&view.cluster, "organizationId"))
            " · runtime " (text(&view.cluster["runtime"], "phase")) " generation " (number(&view.cluster["runtime"]["generation"]))
            " · relay origin " (view.cluster["relayOrigin"].as_str().unwrap_or("none"))
            " · revision " (number(&view.cluster["revision"]))
            " · " a href={ (base) "/volumes" } { "Volumes" }
        }
        section #services {
            h2 { "Services" }
            @if view.statuses.is_empty() { p { "No service." } } @else {
                table {
                    thead { tr { th { "Service" } th { "State" } th { "Reason" } th { "Spec revision" } th { "Since" } } }
                    tbody {
                        @for status in &view.statuses {
                            @let reason = status["reason"].as_str();
                            tr data-service=(text(status, "id")) {
                                td { a href={ (base) "/services/" (text(status, "id")) } { (text(status, "id")) } }
                                td { (state_badge(text(status, "state"))) }
                                td {
                                    @if let Some(reason) = reason {
                                        code { (reason) }
                                        @let explained = reason_explained(reason);
                                        @if !explained.is_empty() { " " span.explain { (explained) } }
                                    } @else { "—" }
                                }
                                td { (number(&status["specRevision"])) }
                                td { (when(view.now_ms, &status["changedAt"])) }
                            }
                        }
                    }
                }
            }
        }
        section #nodes {
            h2 { "Nodes" }
            @if view.nodes.is_empty() { p { "No node." } } @else {
                table {
                    thead { tr { th { "Node" } th { "Connection" } th { "Session" } th { "Host addresses" } } }
                    tbody {
                        @for node in &view.nodes {
                            @let connected = node["connected"].as_bool() == Some(true);
                            @let (class, connection) = if connected { ("state state-converged", "connected") } else { ("state state-waiting", "not connected here") };
                            tr data-node=(text(node, "id")) {
                                td { a href={ (base) "/nodes/" (text(node, "id")) } { (text(node, "id")) } }
                                td { span class=(class) { (connection) } }
                                td { (session_text(&node["session"])) }
                                td { (addresses(&node["hostAddresses"])) }
                            }
                        }
                    }
                }
            }
        }
        section #designation {
            h2 { "Ingress designation" }
            @match current {
                None => p { "No designation: the cluster has no designated ingress service." },
                Some(current) => {
                    p #designation-current {
                        "Generation " strong.generation { (number(&current["generation"])) }
                        ": ingress service " a href={ (base) "/services/" (text(current, "ingressServiceId")) } { (text(current, "ingressServiceId")) }
                        " at spec revision " (number(&current["preparedSpecRevision"]))
                        ", by " (text(current, "actorId")) ", " (when(view.now_ms, &current["acceptedAt"]))
                        "."
                    }
                    h3 { "Chain" }
                    table {
                        thead { tr { th { "Generation" } th { "Ingress service" } th { "Digest" } th { "Previous" } th { "Accepted" } } }
                        tbody {
                            @for designation in view.designations.iter().rev() {
                                tr {
                                    td { (number(&designation["generation"])) }
                                    td { (text(designation, "ingressServiceId")) }
                                    td { code { (short(text(designation, "digest"))) } }
                                    td { @if designation["previous"].is_null() { "—" } @else { "generation " (number(&designation["previous"]["generation"])) " " code { (short(text(&designation["previous"], "digest"))) } } }
                                    td { (when(view.now_ms, &designation["acceptedAt"])) }
                                }
                            }
                        }
                    }
                }
            }
        }
        (relays(&view.relays, view.now_ms))
        section #registrations {
            h2 { "Ingress registrations" }
            @if view.registrations.is_empty() { p { "No ingress registered through a relay yet." } } @else {
                table {
                    thead { tr { th { "Node" } th { "Relay" } th { "Connection epoch" } th { "Designation" } th { "Version" } th { "Registered" } } }
                    tbody {
                        @for registration in &view.registrations {
                            tr {
                                td { (text(registration, "nodeId")) }
                                td { (text(&registration["relayConnection"], "relayId")) }
                                td { (number(&registration["relayConnection"]["epoch"])) }
                                td { "generation " (number(&registration["designation"]["generation"])) }
                                td { (text(registration, "version")) }
                                td { (when(view.now_ms, &registration["registeredAt"])) }
                            }
                        }
                    }
                }
            }
        }
        section #routes {
            h2 { "Ingress routes" }
            @match view.routes["routes"].as_array() {
                Some(routes) if !routes.is_empty() => {
                    p { "Route table revision " (number(&view.routes["revision"])) "." }
                    table {
                        thead { tr { th { "Hostname" } th { "Service" } th { "Port" } th { "Backends" } } }
                        tbody {
                            @for route in routes {
                                tr {
                                    td { (text(route, "hostname")) }
                                    td { a href={ (base) "/services/" (text(route, "serviceId")) } { (text(route, "serviceId")) } }
                                    td { (text(route, "protocol")) "/" (number(&route["port"])) }
                                    td {
                                        @let backends = route["backends"].as_array().map(Vec::as_slice).unwrap_or_default();
                                        @if backends.is_empty() { "none yet" }
                                        @for backend in backends {
                                            div { code { (text(backend, "address")) ":" (number(&backend["port"])) } " (lease " (text(backend, "leaseId")) ")" }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
                _ => p { "No route." },
            }
        }
    }
}

/// What the store keeps of a relay's credential, in words: its generation, issued or rotated.
fn credential_state(credential: &Value) -> String {
    match credential["generation"].as_u64() {
        Some(1) => "issued (generation 1)".to_owned(),
        Some(generation) => format!("rotated (generation {generation})"),
        None => "—".to_owned(),
    }
}

/// The cluster's relays (`listClusterRelays`): a row per connection, newest first, and a row for
/// a relay that has none. Only ids, epochs, times, the election and the credential's generation:
/// the answer holds no bearer or token.
fn relays(listed: &Value, now_ms: u64) -> Markup {
    let empty = Vec::new();
    let relays = listed["relays"].as_array().unwrap_or(&empty);
    html! {
        section #relays {
            h2 { "Relays" }
            @if relays.is_empty() { p { "No relay credential issued. Issue one with " code { "cloudly relay credential" } "." } } @else {
                table {
                    thead { tr { th { "Relay" } th { "Connection epoch" } th { "Last heartbeat" } th { "Elected" } th { "Credential" } } }
                    tbody {
                        @for relay in relays {
                            @let connections = relay["connections"].as_array().unwrap_or(&empty);
                            @if connections.is_empty() {
                                tr data-relay=(text(relay, "relayId")) {
                                    td { (text(relay, "relayId")) }
                                    td colspan="3" { "not connected" }
                                    td { (credential_state(&relay["credential"])) }
                                }
                            }
                            @for connection in connections {
                                @let elected = connection["elected"].as_bool() == Some(true);
                                tr data-relay=(text(relay, "relayId")) {
                                    td { (text(relay, "relayId")) }
                                    td { (number(&connection["epoch"])) }
                                    td { (when(now_ms, &connection["lastSeenAt"])) }
                                    td { @if elected { span.state.state-converged { "yes" } } @else { "no" } }
                                    td { (credential_state(&relay["credential"])) }
                                }
                            }
                        }
                    }
                }
                @if listed["truncated"].as_bool() == Some(true) {
                    p.notice { "The cluster has more relays or connections than listed: the first relays by id and the newest connections are shown." }
                }
            }
        }
    }
}

fn addresses(list: &Value) -> String {
    let addresses: Vec<&str> =
        list.as_array().map(|list| list.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    if addresses.is_empty() { "—".to_owned() } else { addresses.join(", ") }
}

fn assignments_table(reports: &[AssignmentReport], base: &str, now_ms: u64) -> Markup {
    html! {
        table.assignments {
            thead { tr { th { "Assignment" } th { "Service" } th { "Generation" } th { "Spec revision" } th { "Node reported" } th { "Running" } } }
            tbody {
                @for report in reports {
                    tr {
                        td { (report.assignment_id) }
                        td { a href={ (base) "/services/" (report.service_id) } { (report.service_id) } }
                        td { (report.generation) }
                        td { (report.spec_revision) }
                        td {
                            @match (&report.state, report.reported_at) {
                                (Some(state), Some(at)) => { (state_badge(state)) " " (age(now_ms, at)) " ago" },
                                _ => "nothing yet",
                            }
                        }
                        td { @if report.running { "yes" } @else { "no" } }
                    }
                }
            }
        }
    }
}

/// What the service page shows.
pub struct ServiceView {
    /// The cluster.
    pub cluster_id: String,
    /// `getServiceRuntimeSpec`'s `spec`.
    pub spec: Value,
    /// `getServiceRuntimeStatus`' `status`.
    pub status: Value,
    /// The service's assignments on each node of the cluster, by node id.
    pub assignments: Vec<(String, Vec<AssignmentReport>)>,
    /// `listRuntimeLocalStorageClaims`' claims of this service.
    pub claims: Vec<Value>,
    /// Now, ms since the epoch.
    pub now_ms: u64,
}

/// The service page: its status (only the current verdict is kept), its assignments per node,
/// its claims with the node's last answer, and its spec.
pub fn service(view: &ServiceView) -> Markup {
    let base = format!("/console/clusters/{}", view.cluster_id);
    let service_id = text(&view.spec, "serviceId");
    let listed = |key: &str, item: &dyn Fn(&Value) -> String| -> String {
        let items: Vec<String> =
            view.spec[key].as_array().map(|list| list.iter().map(item).collect()).unwrap_or_default();
        if items.is_empty() { "none".to_owned() } else { items.join(", ") }
    };
    let ports = listed("ports", &|port| format!("{}/{}", text(port, "protocol"), number(&port["port"])));
    let volumes = listed("volumes", &|volume| format!("{} at {}", text(volume, "id"), text(volume, "mountPath")));
    let placement: Vec<&str> = view.spec["placement"]["nodeIds"]
        .as_array()
        .map(|nodes| nodes.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let reason = view.status["reason"].as_str();
    html! {
        h1 { "Service " (service_id) }
        p.facts { "Cluster " a href=(base) { (view.cluster_id) } " · spec revision " (number(&view.spec["revision"])) }
        section #status {
            h2 { "Status" }
            p {
                (state_badge(text(&view.status, "state")))
                @if let Some(reason) = reason { " " code { (reason) } " " span.explain { (reason_explained(reason)) } }
                " for spec revision " (number(&view.status["specRevision"])) ", since " (when(view.now_ms, &view.status["changedAt"])) "."
            }
            p.hint { "The controller keeps the current verdict only; it changes when the verdict changes." }
        }
        section #assignments {
            h2 { "Assignments per node" }
            @if view.assignments.iter().all(|(_, reports)| reports.is_empty()) { p { "No assignment." } }
            @for (node, reports) in &view.assignments {
                @if !reports.is_empty() {
                    h3 { "Node " a href={ (base) "/nodes/" (node) } { (node) } }
                    (assignments_table(reports, &base, view.now_ms))
                }
            }
        }
        section #claims {
            h2 { "Volume claims" }
            @if view.claims.is_empty() { p { "No claim." } } @else { (claims_table(&view.cluster_id, &view.claims, view.now_ms)) }
        }
        section #spec {
            h2 { "Spec" }
            table.spec-facts {
                tbody {
                    tr { th { "Image" } td { code { (text(&view.spec, "image")) } } }
                    tr { th { "Replicas" } td { (number(&view.spec["replicas"])) } }
                    tr { th { "Placement" } td {
                        @for (index, node) in placement.iter().enumerate() {
                            @if index > 0 { ", " }
                            a href={ (base) "/nodes/" (node) } { (node) }
                        }
                    } }
                    tr { th { "Ports" } td { (ports) } }
                    tr { th { "Volumes" } td { (volumes) } }
                }
            }
            details {
                summary { "The whole spec, as the API answers it" }
                pre.spec { (serde_json::to_string_pretty(&view.spec).unwrap_or_default()) }
            }
        }
    }
}

/// What the node page shows.
pub struct NodeView {
    /// The cluster.
    pub cluster_id: String,
    /// `getClusterNode`'s `node`.
    pub node: Value,
    /// The node's current assignments with their reported states.
    pub assignments: Vec<AssignmentReport>,
    /// `getRuntimeNetworkProjectionForNode`'s `projection.payload`, `null` before one was issued.
    pub projection: Value,
    /// `getRuntimeNetworkProjectionForNode`'s `applied`.
    pub applied: Value,
    /// Now, ms since the epoch.
    pub now_ms: u64,
}

/// A lease as the projection's endpoints carry it, by id.
fn lease<'a>(endpoints: &'a [Value], id: &str) -> Option<&'a Value> {
    endpoints.iter().map(|endpoint| &endpoint["lease"]).find(|lease| text(lease, "id") == id)
}

fn lease_label(endpoints: &[Value], id: &str) -> String {
    match lease(endpoints, id) {
        Some(lease) => {
            format!("{} · {} on {}", text(&lease["ipv4"], "address"), text(lease, "serviceId"), text(lease, "nodeId"))
        }
        None => id.to_owned(),
    }
}

/// The grants graph: the ingress leases (sources) on the left, the target leases on the right,
/// one arrow per pair of leases labelled with the protocols and ports granted between them.
/// Plain SVG, styled by the stylesheet.
pub fn grants_graph(endpoints: &[Value], grants: &[Value]) -> Markup {
    let mut edges: std::collections::BTreeMap<(&str, &str), Vec<String>> = std::collections::BTreeMap::new();
    for grant in grants {
        let pair = (text(&grant["source"], "id"), text(&grant["destination"], "id"));
        edges.entry(pair).or_default().push(format!("{}/{}", text(grant, "protocol"), number(&grant["port"])));
    }
    let mut sources: Vec<&str> = edges.keys().map(|(source, _)| *source).collect();
    let mut targets: Vec<&str> = edges.keys().map(|(_, target)| *target).collect();
    sources.sort_unstable();
    sources.dedup();
    targets.sort_unstable();
    targets.dedup();
    const ROW: usize = 56;
    const WIDTH: usize = 760;
    const BOX_WIDTH: usize = 250;
    const BOX_HEIGHT: usize = 40;
    let rows = sources.len().max(targets.len()).max(1);
    let height = rows * ROW + 30;
    let y_of = |index: usize| 30 + index * ROW;
    let position = |list: &[&str], id: &str| list.iter().position(|entry| *entry == id).unwrap_or(0);
    let (left, right) = (10 + BOX_WIDTH, WIDTH - BOX_WIDTH - 10);
    html! {
        svg.grants viewBox={ "0 0 " (WIDTH) " " (height) } width=(WIDTH) height=(height) role="img" aria-label="Workload ingress grants: ingress leases to target leases" {
            defs {
                marker #grant-arrow viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto" {
                    path d="M 0 0 L 10 5 L 0 10 z" {}
                }
            }
            text.column x="10" y="16" { "Ingress leases" }
            text.column x=(right) y="16" { "Target leases" }
            @for ((source, target), ports) in &edges {
                @let from = y_of(position(&sources, source)) + BOX_HEIGHT / 2;
                @let to = y_of(position(&targets, target)) + BOX_HEIGHT / 2;
                // The label sits two thirds of the way, nearer its target, so arrows that cross in
                // the middle keep their labels apart.
                @let label_y = (from + 2 * to) / 3;
                g.grant {
                    line x1=(left) y1=(from) x2=(right) y2=(to) marker-end="url(#grant-arrow)" {}
                    text.port x=((left + 2 * right) / 3) y=(label_y - 5) text-anchor="middle" { (ports.join(", ")) }
                }
            }
            @for (index, id) in sources.iter().enumerate() {
                g.lease.source {
                    rect x="10" y=(y_of(index)) width=(BOX_WIDTH) height=(BOX_HEIGHT) rx="6" {}
                    text x="20" y=(y_of(index) + 25) { (lease_label(endpoints, id)) }
                }
            }
            @for (index, id) in targets.iter().enumerate() {
                g.lease.target {
                    rect x=(right) y=(y_of(index)) width=(BOX_WIDTH) height=(BOX_HEIGHT) rx="6" {}
                    text x=(right + 10) y=(y_of(index) + 25) { (lease_label(endpoints, id)) }
                }
            }
        }
    }
}

/// The node page: its assignments and its current projection (endpoints, the grants graph,
/// pending withdrawals, host platform endpoints, the generation it reported applied).
pub fn node(view: &NodeView) -> Markup {
    let base = format!("/console/clusters/{}", view.cluster_id);
    let node_id = text(&view.node, "id");
    let connected = view.node["connected"].as_bool() == Some(true);
    let projection = &view.projection;
    let empty = Vec::new();
    let endpoints = projection["endpoints"].as_array().unwrap_or(&empty);
    let grants = projection["workloadIngress"]["grants"].as_array().unwrap_or(&empty);
    let withdrawals = projection["workloadIngress"]["withdrawals"].as_array().unwrap_or(&empty);
    let host_ids: Vec<&str> = projection["hostPlatformEndpointIds"]
        .as_array()
        .map(|ids| ids.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let platform = projection["protectedAuthority"]["platformEndpoints"].as_array().unwrap_or(&empty);
    html! {
        h1 { "Node " (node_id) }
        p.facts {
            "Cluster " a href=(base) { (view.cluster_id) }
            " · " @if connected { "connected" } @else { "not connected to this controller" }
            " · session " (session_text(&view.node["session"]))
            " · namespace " (text(&view.node, "runtimeNamespace"))
            " · host addresses " (addresses(&view.node["hostAddresses"]))
        }
        section #assignments {
            h2 { "Assignments" }
            @if view.assignments.is_empty() { p { "No assignment." } } @else { (assignments_table(&view.assignments, &base, view.now_ms)) }
        }
        section #projection {
            h2 { "Network projection" }
            @if projection.is_null() { p { "No projection issued yet." } } @else {
                p #projection-generations {
                    "Issued generation " strong { (number(&projection["generation"])) }
                    " · the node reported applied: "
                    @if view.applied.is_null() { "nothing yet" } @else { strong.applied { "generation " (number(&view.applied["generation"])) } }
                }
                h3 { "What this node may reach: workload ingress grants" }
                @if grants.is_empty() { p #no-grants { "No grant: nothing reaches through the ingress on this node." } } @else {
                    (grants_graph(endpoints, grants))
                    table #grants {
                        thead { tr { th { "From (ingress lease)" } th { "To (target lease)" } th { "Port" } th { "Authorized by designation" } } }
                        tbody {
                            @for grant in grants {
                                tr {
                                    td { (lease_label(endpoints, text(&grant["source"], "id"))) }
                                    td { (lease_label(endpoints, text(&grant["destination"], "id"))) }
                                    td { (text(grant, "protocol")) "/" (number(&grant["port"])) }
                                    td { "generation " (number(&grant["authorization"]["generation"])) }
                                }
                            }
                        }
                    }
                }
                h3 { "Withdrawals pending" }
                @if withdrawals.is_empty() { p { "None." } } @else {
                    table {
                        thead { tr { th { "From" } th { "To" } th { "Port" } } }
                        tbody {
                            @for withdrawal in withdrawals {
                                tr {
                                    td { (lease_label(endpoints, text(&withdrawal["source"], "id"))) }
                                    td { (lease_label(endpoints, text(&withdrawal["destination"]["lease"], "id"))) }
                                    td { (text(&withdrawal["destination"], "protocol")) "/" (number(&withdrawal["destination"]["port"])) }
                                }
                            }
                        }
                    }
                }
                h3 { "Endpoints" }
                @if endpoints.is_empty() { p { "None." } } @else {
                    table {
                        thead { tr { th { "Lease" } th { "Service" } th { "Node" } th { "Address" } th { "Link subnet" } } }
                        tbody {
                            @for endpoint in endpoints {
                                @let lease = &endpoint["lease"];
                                tr {
                                    td { (text(lease, "id")) " (generation " (number(&lease["generation"])) ")" }
                                    td { (text(lease, "serviceId")) }
                                    td { (text(lease, "nodeId")) }
                                    td { (text(&lease["ipv4"], "address")) }
                                    td { (text(&lease["ipv4"], "linkSubnet")) }
                                }
                            }
                        }
                    }
                }
                h3 { "Host platform endpoints" }
                @if host_ids.is_empty() { p { "None on this node's host addresses." } } @else {
                    table {
                        thead { tr { th { "Endpoint" } th { "Address" } th { "Port" } } }
                        tbody {
                            @for endpoint in platform.iter().filter(|endpoint| host_ids.contains(&text(endpoint, "id"))) {
                                tr { td { (text(endpoint, "id")) } td { (text(endpoint, "address")) } td { (text(endpoint, "protocol")) "/" (number(&endpoint["port"])) } }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The node's state of a claim (`ready`, `uncertain`, …), or `""` before any answer.
fn claim_state(claim: &Value) -> &str {
    claim["node"]["state"].as_str().unwrap_or("")
}

/// The command that resolves an `uncertain` claim.
pub fn resolve_command(cluster_id: &str, claim: &Value) -> String {
    format!(
        "cloudly volume resolve --cluster {cluster_id} --id {} --generation {} --decision rebind",
        text(&claim["claim"], "id"),
        number(&claim["claim"]["generation"])
    )
}

fn claims_table(cluster_id: &str, claims: &[Value], now_ms: u64) -> Markup {
    let mut ordered: Vec<&Value> = claims.iter().collect();
    ordered.sort_by_key(|claim| claim_state(claim) != "uncertain");
    html! {
        table.claims {
            thead { tr { th { "Claim" } th { "Service" } th { "Volume" } th { "Node" } th { "Lifecycle" } th { "Node's last answer" } th { "Faults" } } }
            tbody {
                @for claim in ordered {
                    @let record = &claim["claim"];
                    @let uncertain = claim_state(claim) == "uncertain";
                    tr class=[uncertain.then_some("uncertain")] {
                        td { (text(record, "id")) " (generation " (number(&record["generation"])) ")" }
                        td { a href={ "/console/clusters/" (cluster_id) "/services/" (text(record, "serviceId")) } { (text(record, "serviceId")) } }
                        td { (text(record, "volumeId")) }
                        td { a href={ "/console/clusters/" (cluster_id) "/nodes/" (text(record, "nodeId")) } { (text(record, "nodeId")) } }
                        td { (text(record, "lifecycle")) }
                        td {
                            @if claim["node"].is_null() { "no answer yet" } @else {
                                (state_badge(claim_state(claim))) " for generation " (number(&claim["node"]["generation"])) ", " (when(now_ms, &claim["node"]["answeredAt"]))
                            }
                            @if uncertain {
                                div.resolve {
                                    "Resolve (admin): " code.command { (resolve_command(cluster_id, claim)) }
                                    " or " code { "--decision purge" } "."
                                }
                            }
                        }
                        td { (number(&claim["faults"]["count"])) }
                    }
                }
            }
        }
    }
}

/// The volumes page: every claim of the cluster, `uncertain` first, with the command that
/// resolves each uncertain one.
pub fn volumes(cluster_id: &str, claims: &[Value], now_ms: u64) -> Markup {
    let uncertain = claims.iter().filter(|claim| claim_state(claim) == "uncertain").count();
    html! {
        h1 { "Volumes of " a href={ "/console/clusters/" (cluster_id) } { (cluster_id) } }
        @if uncertain > 0 { p.notice { (uncertain) " uncertain claim(s): the controller neither mounts nor purges them until an operator decides." } }
        @if claims.is_empty() { p { "No claim." } } @else { (claims_table(cluster_id, claims, now_ms)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: u64 = 1_767_225_600_000;

    fn view() -> ClusterView {
        ClusterView {
            cluster: json!({ "id": "c1", "organizationId": "org", "runtime": { "phase": "pallet", "generation": 3 }, "relayOrigin": null, "revision": 2 }),
            statuses: vec![
                json!({ "id": "web", "specRevision": 1, "state": "waiting", "reason": "conflict", "changedAt": NOW - 120_000 }),
                json!({ "id": "<script>", "specRevision": 1, "state": "converged", "reason": null, "changedAt": NOW }),
            ],
            nodes: vec![
                json!({ "id": "node-1", "hostAddresses": ["192.0.2.17"], "session": { "id": "s1", "generation": 2 }, "connected": true }),
            ],
            designations: vec![
                json!({ "id": "d", "generation": 1, "previous": null, "ingressServiceId": "edge", "preparedSpecRevision": 1, "actorId": "bootstrap-admin", "acceptedAt": NOW, "digest": "a".repeat(64), "credential": { "bearerDigest": "never-shown" } }),
            ],
            relays: json!({ "relays": [
                { "relayId": "relay-1", "credential": { "generation": 2 }, "connections": [
                    { "id": "conn-2", "epoch": 2, "lastSeenAt": NOW - 5_000, "elected": true },
                    { "id": "conn-1", "epoch": 1, "lastSeenAt": NOW - 600_000, "elected": false },
                ] },
                { "relayId": "relay-2", "credential": { "generation": 1 }, "connections": [] },
            ], "truncated": false }),
            registrations: vec![],
            routes: json!({ "revision": 4, "routes": [{ "hostname": "app.example.com", "serviceId": "web", "protocol": "tcp", "port": 443, "backends": [{ "leaseId": "l1", "address": "10.64.0.1", "port": 443 }] }] }),
            now_ms: NOW,
        }
    }

    #[test]
    fn the_cluster_page_tells_why_a_service_waits_and_escapes_every_value() {
        let html = cluster(&view()).into_string();
        assert!(html.contains("conflict") && html.contains("A volume claim is uncertain"), "{html}");
        assert!(html.contains("2m ago"));
        assert!(html.contains("&lt;script&gt;") && !html.contains("<script>"));
        assert!(html.contains("10.64.0.1:443") && html.contains("app.example.com"));
        assert!(html.contains("node-1") && html.contains("connected"));
        assert!(!html.contains("never-shown"), "the designation's credential is not shown");
    }

    #[test]
    fn the_cluster_page_lists_each_relay_connection_with_its_election() {
        let html = cluster(&view()).into_string();
        let relays = &html
            [html.find(r#"<section id="relays">"#).unwrap()..html.find(r#"<section id="registrations">"#).unwrap()];
        assert_eq!(relays.matches(r#"data-relay="relay-1""#).count(), 2, "a row per connection:\n{relays}");
        assert!(relays.contains("5s ago") && relays.contains("10m ago"), "{relays}");
        assert!(relays.contains("rotated (generation 2)") && relays.contains("issued (generation 1)"));
        assert_eq!(relays.matches(">yes<").count(), 1, "only the newest connection is elected");
        assert!(relays.contains("not connected"), "relay-2 has a credential and no connection");
    }

    #[test]
    fn the_volumes_page_lists_uncertain_claims_first_with_their_resolve_command() {
        let claim = |id: &str, state: &str| {
            json!({
                "claim": { "id": id, "generation": 3, "serviceId": "db", "volumeId": "data", "nodeId": "node-1", "lifecycle": "bound" },
                "node": { "generation": 3, "status": "ok", "state": state, "answeredAt": NOW },
                "faults": { "count": 0, "last": null }, "resolution": null,
            })
        };
        let html = volumes("c1", &[claim("lsc-a", "ready"), claim("lsc-b", "uncertain")], NOW).into_string();
        let command = "cloudly volume resolve --cluster c1 --id lsc-b --generation 3 --decision rebind";
        assert!(html.contains(command), "{html}");
        assert!(html.find("lsc-b").unwrap() < html.find("lsc-a").unwrap(), "uncertain first");
        assert!(!html.contains("--id lsc-a"), "a ready claim has no resolve command");
    }

    #[test]
    fn the_grants_graph_draws_one_arrow_per_pair_of_labelled_leases_with_its_ports() {
        let lease = |id: &str, service: &str, address: &str| json!({ "lease": { "id": id, "serviceId": service, "nodeId": "node-1", "ipv4": { "address": address } } });
        let endpoints = vec![lease("l-edge", "edge", "10.64.0.1"), lease("l-web", "web", "10.64.0.5")];
        let grant = |port: u64| json!({ "source": { "id": "l-edge" }, "destination": { "id": "l-web" }, "protocol": "tcp", "port": port, "authorization": { "generation": 1 } });
        let svg = grants_graph(&endpoints, &[grant(443), grant(80)]).into_string();
        assert_eq!(svg.matches("<line").count(), 1, "one arrow per pair of leases");
        assert_eq!(svg.matches("<rect").count(), 2, "each lease is drawn once");
        assert!(svg.contains("tcp/443, tcp/80"), "{svg}");
        assert!(svg.contains("10.64.0.1 · edge on node-1") && svg.contains("10.64.0.5 · web on node-1"));
    }

    #[test]
    fn the_service_page_shows_its_spec_assignments_and_claims_plainly() {
        let report = AssignmentReport {
            assignment_id: crate::contract::Id::parse("asg-1").unwrap(),
            generation: 2,
            service_id: crate::contract::Id::parse("db").unwrap(),
            spec_revision: 3,
            state: Some("failed".to_owned()),
            reported_at: Some(NOW - 60_000),
            running: false,
        };
        let view = ServiceView {
            cluster_id: "c1".to_owned(),
            spec: json!({ "serviceId": "db", "revision": 3, "image": "postgres:17", "replicas": 1,
                          "placement": { "nodeIds": ["node-1"] }, "ports": [{ "protocol": "tcp", "port": 5432 }],
                          "volumes": [{ "id": "data", "mountPath": "/var/lib/db" }] }),
            status: json!({ "id": "db", "specRevision": 3, "state": "waiting", "reason": "failure-backoff", "changedAt": NOW }),
            assignments: vec![("node-1".to_owned(), vec![report])],
            claims: vec![],
            now_ms: NOW,
        };
        let html = service(&view).into_string();
        assert!(html.contains("Service db") && html.contains("postgres:17") && html.contains("tcp/5432"), "{html}");
        assert!(html.contains("data at /var/lib/db") && html.contains("failure-backoff"));
        assert!(html.contains("asg-1") && html.contains("failed") && html.contains("1m ago"));
        assert!(html.contains(r#"href="/console/clusters/c1/nodes/node-1""#));
    }

    #[test]
    fn ages_and_moments_read_plainly() {
        assert_eq!(age(NOW, NOW - 5_000), "5s");
        assert_eq!(age(NOW, NOW - 3_600_000), "1h");
        assert_eq!(age(NOW, NOW + 1), "0s");
        assert_eq!(moment(NOW), "2026-01-01T00:00:00Z");
    }

    #[test]
    fn the_layout_loads_only_its_own_assets_and_marks_live_pages() {
        let html =
            layout("Clusters", Some(&Operator { name: "Ada", role: "viewer" }), Some("/clusters/c1"), html! { "x" })
                .into_string();
        assert!(html.contains(r#"data-live="/clusters/c1""#));
        assert!(html.contains(r#"<script src="/console/assets/console.js" defer></script>"#));
        assert!(!html.contains("<script>"), "no inline script");
        assert!(!html.contains("style="), "no inline style");
    }
}
