//! Cluster ingress registration: the request an ingress sends to `registerClusterIngress`, the
//! protocol negotiation that precedes every other judgement, the named refusals, and the relay's
//! route table change hint (seed `data/clusteringress.ts`, `04-registration.md`).
//!
//! Everything here is plain data: the validators judge a parsed [`Value`] (a `1.5` is simply a
//! value that is not an integer, named by its field's violation). Each validator names at most one
//! violation per top-level field, and a value that is not an object with exactly the allowed keys
//! is the single violation `<path> must use its exact schema` (`01-contract-basics.md`).
//!
//! **No message, refusal or `Debug` output here quotes the bearer or any other input value.**

use super::kind::{RecordKind, Rejected};
use super::primitives::NodeId;
use super::reader::{
    Invalid, Parsed, Record, compare_bytes, counter, generation, node_id, parsed, require, strictly_ascending, string,
};
use serde::ser::SerializeStruct;
use serde::{Serialize, Serializer};
use serde_json::Value;
use std::borrow::Cow;
use std::fmt;
use subtle::ConstantTimeEq;

// ---------------------------------------------------------------------------------------------
// Environment
// ---------------------------------------------------------------------------------------------

/// The shape of `clusterIngressEnvironmentNames`: the environment variable names of the cluster
/// ingress workload, spelled once for Cloudly (which writes them) and the ingress (which reads them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClusterIngressEnvironmentNames {
    /// `clusterIngressEnvironmentNames.bearer`: the registration bearer, delivered as a secret.
    pub bearer: &'static str,
    /// `clusterIngressEnvironmentNames.relayOrigin`: the exact `IClusterRelay.origin`.
    pub relay_origin: &'static str,
    /// `clusterIngressEnvironmentNames.nodeId`: the node the assignment runs on.
    pub node_id: &'static str,
}

impl ClusterIngressEnvironmentNames {
    /// `Object.values(clusterIngressEnvironmentNames)`: the three names in the seed's order
    /// (bearer, relay origin, node id).
    pub const fn all(&self) -> [&'static str; 3] {
        [self.bearer, self.relay_origin, self.node_id]
    }
}

/// `clusterIngressEnvironmentNames`.
pub const CLUSTER_INGRESS_ENVIRONMENT_NAMES: ClusterIngressEnvironmentNames = ClusterIngressEnvironmentNames {
    bearer: "SERVEZONE_CLUSTER_INGRESS_BEARER",
    relay_origin: "SERVEZONE_CLUSTER_RELAY_ORIGIN",
    node_id: "SERVEZONE_CLUSTER_NODE_ID",
};

// ---------------------------------------------------------------------------------------------
// Protocol negotiation
// ---------------------------------------------------------------------------------------------

/// The protocol name of `registerClusterIngress` (`IProtocolOffer['name']` of this method).
pub const CLUSTER_INGRESS_PROTOCOL_NAME: &str = "serve.zone/cluster-ingress";

/// `IProtocolRefusal['code']`.
pub const PROTOCOL_REFUSED_CODE: &str = "protocol-refused";

/// The `error.text` of a protocol refusal (`IProtocolRefusal` travels as `error.data`).
pub const PROTOCOL_REFUSED_TEXT: &str = "protocol refused";

/// `IProtocolOffer`: `{ name, minimum: Generation, maximum: Generation }` with `minimum ≤ maximum`,
/// the inclusive range of protocol versions one side speaks (upstream `protocol` module; the shape
/// is this project's, `04-registration.md`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct ProtocolOffer {
    /// The protocol's name, for this method `serve.zone/cluster-ingress`.
    pub name: Cow<'static, str>,
    /// The lowest version spoken (≥ 1).
    pub minimum: u64,
    /// The highest version spoken (≥ `minimum`).
    pub maximum: u64,
}

/// The controller's own offer for `registerClusterIngress`:
/// `{ name: "serve.zone/cluster-ingress", minimum: 1, maximum: 1 }`.
pub const CLUSTER_INGRESS_PROTOCOL: ProtocolOffer =
    ProtocolOffer { name: Cow::Borrowed(CLUSTER_INGRESS_PROTOCOL_NAME), minimum: 1, maximum: 1 };

impl ProtocolOffer {
    /// Reads an `IProtocolOffer` of any protocol name: exact keys `name`, `minimum`, `maximum`, a
    /// non-empty name, two `Generation`s and `minimum ≤ maximum`.
    pub fn read(value: &Value) -> Parsed<Self> {
        let record = Record::exact(value, &["name", "minimum", "maximum"])?;
        let name = record.read("name", string)?;
        require(!name.is_empty())?;
        let minimum = record.read("minimum", generation)?;
        let maximum = record.read("maximum", generation)?;
        require(minimum <= maximum)?;
        Ok(ProtocolOffer { name: Cow::Owned(name.to_owned()), minimum, maximum })
    }

    /// The highest version both offers speak, or `None` when they name different protocols or
    /// their ranges are disjoint.
    pub fn highest_shared_version(&self, other: &ProtocolOffer) -> Option<u64> {
        let low = self.minimum.max(other.minimum);
        let high = self.maximum.min(other.maximum);
        (self.name == other.name && low <= high).then_some(high)
    }

    /// The negotiated version of this (peer's) offer against the controller's own offer
    /// [`CLUSTER_INGRESS_PROTOCOL`]: the highest shared version, or `None`.
    pub fn negotiated_version(&self) -> Option<u64> {
        CLUSTER_INGRESS_PROTOCOL.highest_shared_version(self)
    }
}

/// `IProtocolRefusal`: `{ code: "protocol-refused", offer }`, where `offer` is the refusing side's
/// own offer. It travels as `error.data` with `error.text` = [`PROTOCOL_REFUSED_TEXT`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProtocolRefusal {
    /// The refusing side's own offer.
    pub offer: ProtocolOffer,
}

impl ProtocolRefusal {
    /// The controller's protocol refusal: its own offer [`CLUSTER_INGRESS_PROTOCOL`].
    pub fn controller() -> Self {
        ProtocolRefusal { offer: CLUSTER_INGRESS_PROTOCOL }
    }

    /// `IProtocolRefusal['code']`, always `protocol-refused`.
    pub fn code(&self) -> &'static str {
        PROTOCOL_REFUSED_CODE
    }

    /// The `error.text` that carries this refusal: `protocol refused`.
    pub fn error_text(&self) -> &'static str {
        PROTOCOL_REFUSED_TEXT
    }

    /// The refusal as wire JSON (`error.data`).
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("a protocol refusal serializes to JSON")
    }
}

impl Serialize for ProtocolRefusal {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut state = serializer.serialize_struct("ProtocolRefusal", 2)?;
        state.serialize_field("code", PROTOCOL_REFUSED_CODE)?;
        state.serialize_field("offer", &self.offer)?;
        state.end()
    }
}

/// `protocol.readProtocolOffer` for `registerClusterIngress`, step 1 of the judgement order: reads
/// `request.protocol` before the shape check and before the bearer.
///
/// Answers the peer's offer when it shares a version with [`CLUSTER_INGRESS_PROTOCOL`] (see
/// [`ProtocolOffer::negotiated_version`]), else the controller's [`ProtocolRefusal`]: when
/// `request` is not an object, its `protocol` member is missing or unreadable, names another
/// protocol, or shares no version with the controller's offer.
pub fn read_protocol_offer(request: &Value) -> Result<ProtocolOffer, ProtocolRefusal> {
    let offer = request
        .as_object()
        .and_then(|members| members.get("protocol"))
        .and_then(|protocol| ProtocolOffer::read(protocol).ok())
        .ok_or_else(ProtocolRefusal::controller)?;
    match offer.negotiated_version() {
        Some(_) => Ok(offer),
        None => Err(ProtocolRefusal::controller()),
    }
}

/// `protocol.readProtocolRefusal`: the protocol refusal inside an error payload, or `None` when
/// the value is not exactly `{ code: "protocol-refused", offer: IProtocolOffer }`.
pub fn read_protocol_refusal(value: &Value) -> Option<ProtocolRefusal> {
    let read = || -> Parsed<ProtocolRefusal> {
        let record = Record::exact(value, &["code", "offer"])?;
        require(record.get("code")?.as_str() == Some(PROTOCOL_REFUSED_CODE))?;
        Ok(ProtocolRefusal { offer: record.read("offer", ProtocolOffer::read)? })
    };
    read().ok()
}

// ---------------------------------------------------------------------------------------------
// Registration
// ---------------------------------------------------------------------------------------------

/// The default path of [`validate_cluster_ingress_registration`].
pub const CLUSTER_INGRESS_REGISTRATION_PATH: &str = "cluster ingress registration";

/// The shortest bearer a registration may carry (characters).
pub const MINIMUM_BEARER_LENGTH: usize = 16;

/// The longest bearer a registration may carry (characters).
pub const MAXIMUM_BEARER_LENGTH: usize = 512;

/// The longest `version` a registration may carry (characters).
pub const MAXIMUM_VERSION_LENGTH: usize = 64;

/// The most capability tokens a registration may carry.
pub const MAXIMUM_CAPABILITIES: usize = 32;

/// The longest capability token (characters).
pub const MAXIMUM_CAPABILITY_LENGTH: usize = 64;

/// `IClusterIngressRegistration['bearer']`: the ingress credential, held so that `Debug` never
/// prints it. It has no `Display` and no `Serialize`; [`RedactedBearer::expose`] is the one way
/// to read it, and equality is compared in constant time.
#[derive(Clone)]
pub struct RedactedBearer(String);

impl RedactedBearer {
    /// The bearer, when it is 16 to 512 characters, each in U+0021…U+007E.
    pub fn parse(text: &str) -> Option<Self> {
        is_bearer(text).then(|| RedactedBearer(text.to_owned()))
    }

    /// The bearer text. Callers hash it; they never log, echo or store it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for RedactedBearer {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("RedactedBearer(<redacted>)")
    }
}

impl PartialEq for RedactedBearer {
    fn eq(&self, other: &Self) -> bool {
        self.0.as_bytes().ct_eq(other.0.as_bytes()).into()
    }
}

impl Eq for RedactedBearer {}

/// `IClusterIngressRegistration`: `{ bearer, version, nodeId, capabilities?, protocol }`, the
/// request of `registerClusterIngress` (ingress → relay → controller).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterIngressRegistration {
    /// The ingress credential (redacted in `Debug`).
    pub bearer: RedactedBearer,
    /// The ingress build's semantic version (at most 64 characters).
    pub version: String,
    /// The node the ingress runs on.
    pub node_id: NodeId,
    /// Sorted, unique capability tokens; `None` when the member is absent.
    pub capabilities: Option<Vec<String>>,
    /// The ingress's protocol offer.
    pub protocol: ProtocolOffer,
}

/// True when `text` is a registration bearer: 16 to 512 characters, each U+0021…U+007E.
pub fn is_bearer(text: &str) -> bool {
    (MINIMUM_BEARER_LENGTH..=MAXIMUM_BEARER_LENGTH).contains(&text.len())
        && text.bytes().all(|byte| (0x21..=0x7e).contains(&byte))
}

/// True when `text` is a registration version: at most 64 characters of
/// `^[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.+-]+)?$` (matched by hand; the crate has no regex).
pub fn is_registration_version(text: &str) -> bool {
    fn digits(bytes: &[u8]) -> usize {
        bytes.iter().take_while(|byte| byte.is_ascii_digit()).count()
    }
    if text.len() > MAXIMUM_VERSION_LENGTH {
        return false;
    }
    let mut rest = text.as_bytes();
    for part in 0..3 {
        let count = digits(rest);
        if count == 0 {
            return false;
        }
        rest = &rest[count..];
        if part < 2 {
            match rest.split_first() {
                Some((b'.', after)) => rest = after,
                _ => return false,
            }
        }
    }
    match rest.split_first() {
        None => true,
        Some((b'-' | b'+', suffix)) => {
            !suffix.is_empty()
                && suffix.iter().all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'+' | b'-'))
        }
        Some(_) => false,
    }
}

/// True when `text` is a capability token: `^[a-z0-9][a-z0-9-]{0,63}$`.
pub fn is_capability(text: &str) -> bool {
    let bytes = text.as_bytes();
    let lower_or_digit = |byte: &u8| byte.is_ascii_lowercase() || byte.is_ascii_digit();
    !bytes.is_empty()
        && bytes.len() <= MAXIMUM_CAPABILITY_LENGTH
        && lower_or_digit(&bytes[0])
        && bytes.iter().all(|byte| lower_or_digit(byte) || *byte == b'-')
}

fn read_bearer(value: &Value) -> Parsed<RedactedBearer> {
    parsed(value, RedactedBearer::parse)
}

fn read_version(value: &Value) -> Parsed<String> {
    let text = string(value)?;
    require(is_registration_version(text))?;
    Ok(text.to_owned())
}

fn read_capabilities(value: &Value) -> Parsed<Vec<String>> {
    let items = value.as_array().ok_or(Invalid)?;
    require(items.len() <= MAXIMUM_CAPABILITIES)?;
    let tokens = items
        .iter()
        .map(|item| string(item).and_then(|text| if is_capability(text) { Ok(text.to_owned()) } else { Err(Invalid) }))
        .collect::<Parsed<Vec<String>>>()?;
    strictly_ascending(&tokens, |left, right| compare_bytes(left, right))?;
    Ok(tokens)
}

fn read_cluster_ingress_offer(value: &Value) -> Parsed<ProtocolOffer> {
    let offer = ProtocolOffer::read(value)?;
    require(offer.name == CLUSTER_INGRESS_PROTOCOL_NAME)?;
    Ok(offer)
}

/// Keeps `result`'s value, or records `message` as the field's one violation.
fn judge<T>(violations: &mut Vec<String>, result: Parsed<T>, message: impl FnOnce() -> String) -> Option<T> {
    match result {
        Ok(value) => Some(value),
        Err(Invalid) => {
            violations.push(message());
            None
        }
    }
}

fn judge_registration(value: &Value, path: &str) -> Result<ClusterIngressRegistration, Vec<String>> {
    let Ok(record) = Record::with_optional(value, &["bearer", "version", "nodeId", "protocol"], &["capabilities"])
    else {
        return Err(vec![format!("{path} must use its exact schema")]);
    };
    let mut violations = Vec::new();
    let bearer = judge(&mut violations, record.read("bearer", read_bearer), || {
        format!(
            "{path} bearer must be {MINIMUM_BEARER_LENGTH} to {MAXIMUM_BEARER_LENGTH} printable ASCII characters without space"
        )
    });
    let version = judge(&mut violations, record.read("version", read_version), || {
        format!("{path} version must be a semantic version of at most {MAXIMUM_VERSION_LENGTH} characters")
    });
    let node =
        judge(&mut violations, record.read("nodeId", node_id), || format!("{path} nodeId must be a cluster node id"));
    let capabilities = judge(&mut violations, record.read_optional("capabilities", read_capabilities), || {
        format!("{path} capabilities must be a sorted unique list of at most {MAXIMUM_CAPABILITIES} capability tokens")
    });
    let protocol = judge(&mut violations, record.read("protocol", read_cluster_ingress_offer), || {
        format!(
            "{path} protocol must be a {CLUSTER_INGRESS_PROTOCOL_NAME} protocol offer with minimum not above maximum"
        )
    });
    match (bearer, version, node, capabilities, protocol) {
        (Some(bearer), Some(version), Some(node_id), Some(capabilities), Some(protocol)) if violations.is_empty() => {
            Ok(ClusterIngressRegistration { bearer, version, node_id, capabilities, protocol })
        }
        _ => Err(violations),
    }
}

/// `validateClusterIngressRegistration(value)`: names every violation under the default path
/// `cluster ingress registration` (empty = valid).
pub fn validate_cluster_ingress_registration(value: &Value) -> Vec<String> {
    validate_cluster_ingress_registration_at(value, CLUSTER_INGRESS_REGISTRATION_PATH)
}

/// `validateClusterIngressRegistration(value, path)`: names every violation under `path`, at most
/// one per top-level field, or only `<path> must use its exact schema`.
pub fn validate_cluster_ingress_registration_at(value: &Value, path: &str) -> Vec<String> {
    judge_registration(value, path).err().unwrap_or_default()
}

/// Reads a registration that passes [`validate_cluster_ingress_registration`], or answers its
/// violations (the same list the validator names).
pub fn parse_cluster_ingress_registration(value: &Value) -> Result<ClusterIngressRegistration, Vec<String>> {
    judge_registration(value, CLUSTER_INGRESS_REGISTRATION_PATH)
}

// ---------------------------------------------------------------------------------------------
// Refusals
// ---------------------------------------------------------------------------------------------

/// The shape of `clusterIngressRegistrationContract`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClusterIngressRegistrationContract {
    /// `clusterIngressRegistrationContract.refusalCode`.
    pub refusal_code: &'static str,
    /// `clusterIngressRegistrationContract.minimumRetryAfterMs`.
    pub minimum_retry_after_ms: u64,
    /// `clusterIngressRegistrationContract.maximumRetryAfterMs`.
    pub maximum_retry_after_ms: u64,
}

/// `clusterIngressRegistrationContract`.
pub const CLUSTER_INGRESS_REGISTRATION_CONTRACT: ClusterIngressRegistrationContract =
    ClusterIngressRegistrationContract {
        refusal_code: "cluster-ingress-registration-refused",
        minimum_retry_after_ms: 1_000,
        maximum_retry_after_ms: 300_000,
    };

/// `TClusterIngressRegistrationRefusalReason`, declared in the order the controller judges them
/// (`clusterIngressRegistrationRefusalReasons`). A protocol mismatch is not among them: it is the
/// [`ProtocolRefusal`] of step 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RefusalReason {
    /// `not-ready`: the controller cannot judge registrations yet.
    NotReady,
    /// `registration-invalid`: the body fails `validateClusterIngressRegistration`.
    RegistrationInvalid,
    /// `relay-not-connected`: the forwarding relay is not its cluster's elected connection.
    RelayNotConnected,
    /// `ingress-not-designated`: the cluster holds no current ingress designation.
    IngressNotDesignated,
    /// `node-mismatch`: the node is not one the designation lets the ingress run on.
    NodeMismatch,
    /// `assignment-not-running`: no ready assignment of the ingress service runs on the node under
    /// its current session, or it does not carry the designation's current credential.
    AssignmentNotRunning,
    /// `bearer-refused`: the bearer is not the designation's current credential.
    BearerRefused,
    /// `conflict`: the designation, assignment or session changed while the registration was judged.
    Conflict,
}

impl RefusalReason {
    /// `clusterIngressRegistrationRefusalReasons`: every reason, in judgement order.
    pub const ALL: [RefusalReason; 8] = [
        RefusalReason::NotReady,
        RefusalReason::RegistrationInvalid,
        RefusalReason::RelayNotConnected,
        RefusalReason::IngressNotDesignated,
        RefusalReason::NodeMismatch,
        RefusalReason::AssignmentNotRunning,
        RefusalReason::BearerRefused,
        RefusalReason::Conflict,
    ];

    /// The wire spelling (`TClusterIngressRegistrationRefusalReason`).
    pub const fn as_str(self) -> &'static str {
        match self {
            RefusalReason::NotReady => "not-ready",
            RefusalReason::RegistrationInvalid => "registration-invalid",
            RefusalReason::RelayNotConnected => "relay-not-connected",
            RefusalReason::IngressNotDesignated => "ingress-not-designated",
            RefusalReason::NodeMismatch => "node-mismatch",
            RefusalReason::AssignmentNotRunning => "assignment-not-running",
            RefusalReason::BearerRefused => "bearer-refused",
            RefusalReason::Conflict => "conflict",
        }
    }

    /// The reason spelled `text`, if any (`clusterIngressRegistrationRefusalReasons.includes`).
    pub fn parse(text: &str) -> Option<Self> {
        RefusalReason::ALL.into_iter().find(|reason| reason.as_str() == text)
    }

    /// The default `retryAfterMs` of this reason (`04-registration.md`, judgement order table).
    pub const fn default_retry_after_ms(self) -> u64 {
        match self {
            RefusalReason::NotReady => 5_000,
            RefusalReason::RegistrationInvalid => 300_000,
            RefusalReason::RelayNotConnected => 2_000,
            RefusalReason::IngressNotDesignated => 60_000,
            RefusalReason::NodeMismatch => 60_000,
            RefusalReason::AssignmentNotRunning => 5_000,
            RefusalReason::BearerRefused => 30_000,
            RefusalReason::Conflict => 1_000,
        }
    }
}

impl fmt::Display for RefusalReason {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// True when `retry_after_ms` lies within `clusterIngressRegistrationContract`'s range
/// (the seed's `isRetryAfterMs`).
pub const fn is_retry_after_ms(retry_after_ms: u64) -> bool {
    retry_after_ms >= CLUSTER_INGRESS_REGISTRATION_CONTRACT.minimum_retry_after_ms
        && retry_after_ms <= CLUSTER_INGRESS_REGISTRATION_CONTRACT.maximum_retry_after_ms
}

/// `IClusterIngressRegistrationRefusal`: `{ code: "cluster-ingress-registration-refused", reason,
/// retryAfterMs }`, carried as `error.data` with `error.text` = [`Self::error_text`]. Built only
/// with `retryAfterMs` in 1 000…300 000; it never quotes the bearer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClusterIngressRegistrationRefusal {
    reason: RefusalReason,
    retry_after_ms: u64,
}

impl ClusterIngressRegistrationRefusal {
    /// A refusal with this `retryAfterMs`, refused when it lies outside 1 000…300 000.
    pub fn new(reason: RefusalReason, retry_after_ms: u64) -> Result<Self, Rejected> {
        if is_retry_after_ms(retry_after_ms) {
            Ok(ClusterIngressRegistrationRefusal { reason, retry_after_ms })
        } else {
            Err(Rejected::of(RecordKind::ClusterIngressRegistrationRefusal))
        }
    }

    /// A refusal with `retry_after_ms` clamped into 1 000…300 000 (for configured values).
    pub fn clamped(reason: RefusalReason, retry_after_ms: u64) -> Self {
        let retry_after_ms = retry_after_ms.clamp(
            CLUSTER_INGRESS_REGISTRATION_CONTRACT.minimum_retry_after_ms,
            CLUSTER_INGRESS_REGISTRATION_CONTRACT.maximum_retry_after_ms,
        );
        ClusterIngressRegistrationRefusal { reason, retry_after_ms }
    }

    /// A refusal with the reason's default `retryAfterMs`.
    pub fn with_default_retry(reason: RefusalReason) -> Self {
        ClusterIngressRegistrationRefusal { reason, retry_after_ms: reason.default_retry_after_ms() }
    }

    /// `code`: always `cluster-ingress-registration-refused`.
    pub fn code(&self) -> &'static str {
        CLUSTER_INGRESS_REGISTRATION_CONTRACT.refusal_code
    }

    /// `reason`.
    pub fn reason(&self) -> RefusalReason {
        self.reason
    }

    /// `retryAfterMs`, within 1 000…300 000.
    pub fn retry_after_ms(&self) -> u64 {
        self.retry_after_ms
    }

    /// The `error.text` of this refusal: `cluster ingress registration refused: <reason>`.
    pub fn error_text(&self) -> String {
        format!("cluster ingress registration refused: {}", self.reason.as_str())
    }

    /// The refusal as wire JSON (`error.data`): exactly `{ code, reason, retryAfterMs }`.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("a registration refusal serializes to JSON")
    }
}

impl Serialize for ClusterIngressRegistrationRefusal {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut state = serializer.serialize_struct("ClusterIngressRegistrationRefusal", 3)?;
        state.serialize_field("code", self.code())?;
        state.serialize_field("reason", &self.reason)?;
        state.serialize_field("retryAfterMs", &self.retry_after_ms)?;
        state.end()
    }
}

/// The default path of [`validate_cluster_ingress_registration_refusal`].
pub const CLUSTER_INGRESS_REGISTRATION_REFUSAL_PATH: &str = "cluster ingress registration refusal";

fn read_refusal_code(value: &Value) -> Parsed<()> {
    require(value.as_str() == Some(CLUSTER_INGRESS_REGISTRATION_CONTRACT.refusal_code))
}

fn read_refusal_reason(value: &Value) -> Parsed<RefusalReason> {
    parsed(value, RefusalReason::parse)
}

fn read_retry_after_ms(value: &Value) -> Parsed<u64> {
    let retry_after_ms = counter(value)?;
    require(is_retry_after_ms(retry_after_ms))?;
    Ok(retry_after_ms)
}

fn judge_refusal(value: &Value, path: &str) -> Result<ClusterIngressRegistrationRefusal, Vec<String>> {
    let Ok(record) = Record::exact(value, &["code", "reason", "retryAfterMs"]) else {
        return Err(vec![format!("{path} must use its exact schema")]);
    };
    let contract = CLUSTER_INGRESS_REGISTRATION_CONTRACT;
    let mut violations = Vec::new();
    let code = judge(&mut violations, record.read("code", read_refusal_code), || {
        format!("{path} code must be {}", contract.refusal_code)
    });
    let reason = judge(&mut violations, record.read("reason", read_refusal_reason), || {
        format!("{path} reason must be a cluster ingress registration refusal reason")
    });
    let retry_after_ms = judge(&mut violations, record.read("retryAfterMs", read_retry_after_ms), || {
        format!(
            "{path} retryAfterMs must be an integer from {} to {}",
            contract.minimum_retry_after_ms, contract.maximum_retry_after_ms
        )
    });
    match (code, reason, retry_after_ms) {
        (Some(()), Some(reason), Some(retry_after_ms)) => {
            Ok(ClusterIngressRegistrationRefusal { reason, retry_after_ms })
        }
        _ => Err(violations),
    }
}

/// `validateClusterIngressRegistrationRefusal(value, path)`: names every violation with the seed's
/// exact texts (default path [`CLUSTER_INGRESS_REGISTRATION_REFUSAL_PATH`]), in the order code,
/// reason, retryAfterMs, or only `<path> must use its exact schema`.
pub fn validate_cluster_ingress_registration_refusal(value: &Value, path: &str) -> Vec<String> {
    judge_refusal(value, path).err().unwrap_or_default()
}

/// `readClusterIngressRegistrationRefusal(errorData)`: the refusal inside an error payload, or
/// `None` when the value is not exactly a valid one.
pub fn read_cluster_ingress_registration_refusal(value: &Value) -> Option<ClusterIngressRegistrationRefusal> {
    judge_refusal(value, CLUSTER_INGRESS_REGISTRATION_REFUSAL_PATH).ok()
}

// ---------------------------------------------------------------------------------------------
// Route table change
// ---------------------------------------------------------------------------------------------

/// The default path of [`validate_cluster_ingress_route_table_change`].
pub const CLUSTER_INGRESS_ROUTE_TABLE_CHANGE_PATH: &str = "cluster ingress route table change";

/// `IClusterIngressRouteTableChange`: `{ revision }`, the relay's hint that it holds a newer route
/// table (the body of `pushClusterIngressRouteTableChanged`). It carries nothing secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct ClusterIngressRouteTableChange {
    /// A `Counter`: the revision of the table the relay holds.
    pub revision: u64,
}

fn judge_route_table_change(value: &Value, path: &str) -> Result<ClusterIngressRouteTableChange, Vec<String>> {
    let Ok(record) = Record::exact(value, &["revision"]) else {
        return Err(vec![format!("{path} must use its exact schema")]);
    };
    match record.read("revision", counter) {
        Ok(revision) => Ok(ClusterIngressRouteTableChange { revision }),
        Err(Invalid) => Err(vec![format!("{path} revision must be a non-negative safe integer")]),
    }
}

/// `validateClusterIngressRouteTableChange(value, path)`: `[]`, `["<path> must use its exact
/// schema"]` or `["<path> revision must be a non-negative safe integer"]` (default path
/// [`CLUSTER_INGRESS_ROUTE_TABLE_CHANGE_PATH`]).
pub fn validate_cluster_ingress_route_table_change(value: &Value, path: &str) -> Vec<String> {
    judge_route_table_change(value, path).err().unwrap_or_default()
}

/// Reads a route table change hint that passes `validateClusterIngressRouteTableChange`, or `None`.
pub fn read_cluster_ingress_route_table_change(value: &Value) -> Option<ClusterIngressRouteTableChange> {
    judge_route_table_change(value, CLUSTER_INGRESS_ROUTE_TABLE_CHANGE_PATH).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_follow_the_pattern() {
        for good in ["0.0.0", "1.4.2", "2.0.0-rc.1+build.5", "10.20.30+x", "1.2.3--", "1.2.3-+."] {
            assert!(is_registration_version(good), "{good}");
        }
        for bad in ["", "v1", "1", "1.2", "1.2.", "1.2.3-", "1.2.3+", "1.2.3.4", "1.2.3 ", "1.2.3-a b", "a.b.c", ".1.2"]
        {
            assert!(!is_registration_version(bad), "{bad}");
        }
        let long = format!("1.2.3-{}", "a".repeat(58));
        assert_eq!(long.len(), 64);
        assert!(is_registration_version(&long));
        assert!(!is_registration_version(&format!("{long}a")));
    }

    #[test]
    fn bearers_and_capabilities_follow_their_rules() {
        assert!(is_bearer(&"!".repeat(16)) && is_bearer(&"~".repeat(512)));
        assert!(!is_bearer(&"a".repeat(15)) && !is_bearer(&"a".repeat(513)));
        assert!(!is_bearer("aaaaaaaa aaaaaaaa") && !is_bearer("aaaaaaaaaaaaaaaé"));
        assert!(is_capability("h") && is_capability("0-a") && is_capability(&"a".repeat(64)));
        assert!(!is_capability("") && !is_capability("-a") && !is_capability("A") && !is_capability(&"a".repeat(65)));
    }
}
