//! The Gateway API objects this controller reads, as far as it reads them.
//!
//! Written by hand rather than generated: the published `gateway-api`
//! crate (0.22) is Gateway API v1.5.1 on k8s-openapi 0.28 (not v1.7 on the
//! 0.29 that kube 5 uses), and kopium's output for the v1.7 CRDs is about
//! 9,000 lines of types, nearly all unread here, with schemars derives
//! that pull kube's `derive` feature in. These structs name only the
//! fields the controller uses; serde skips the rest, so a newer API
//! version's added fields do not break them. Statuses are written as JSON
//! (render.rs), not through these types: nothing the controller does not
//! set is ever sent back.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

pub const GROUP: &str = "gateway.networking.k8s.io";

macro_rules! resource {
    ($ty:ident, $kind:literal, $plural:literal, $version:literal, $scope:ty) => {
        impl kube::Resource for $ty {
            type DynamicType = ();
            type Scope = $scope;
            fn kind(_: &()) -> Cow<'_, str> {
                $kind.into()
            }
            fn group(_: &()) -> Cow<'_, str> {
                GROUP.into()
            }
            fn version(_: &()) -> Cow<'_, str> {
                $version.into()
            }
            fn plural(_: &()) -> Cow<'_, str> {
                $plural.into()
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct GatewayClass {
    pub metadata: ObjectMeta,
    pub spec: GatewayClassSpec,
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub status: serde_json::Value,
}
resource!(
    GatewayClass,
    "GatewayClass",
    "gatewayclasses",
    "v1",
    k8s_openapi::ClusterResourceScope
);

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayClassSpec {
    pub controller_name: String,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct Gateway {
    pub metadata: ObjectMeta,
    pub spec: GatewaySpec,
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub status: serde_json::Value,
}
resource!(
    Gateway,
    "Gateway",
    "gateways",
    "v1",
    k8s_openapi::NamespaceResourceScope
);

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewaySpec {
    pub gateway_class_name: String,
    #[serde(default)]
    pub listeners: Vec<Listener>,
    /// Addresses asked for: an IPAddress is where this Gateway's
    /// vservers listen (each Gateway apart from the others).
    #[serde(default)]
    pub addresses: Vec<GatewayAddress>,
    /// `infrastructure.parametersRef`: no parameters kind is supported, so
    /// a Gateway naming one is not accepted (render.rs).
    pub infrastructure: Option<GatewayInfrastructure>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayInfrastructure {
    pub parameters_ref: Option<ParametersRef>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct ParametersRef {
    #[serde(default)]
    pub group: String,
    pub kind: String,
    pub name: String,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct GatewayAddress {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub value: String,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Listener {
    pub name: String,
    pub hostname: Option<String>,
    pub port: i32,
    pub protocol: String,
    pub tls: Option<ListenerTls>,
    pub allowed_routes: Option<AllowedRoutes>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListenerTls {
    pub mode: Option<String>,
    #[serde(default)]
    pub certificate_refs: Vec<ObjectRef>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AllowedRoutes {
    pub namespaces: Option<RouteNamespaces>,
    pub kinds: Option<Vec<GroupKind>>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteNamespaces {
    pub from: Option<String>,
    pub selector: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct GroupKind {
    pub group: Option<String>,
    pub kind: String,
}

/// A reference to another object (a Secret, a Service, a parent): every
/// field the several reference types of the API have.
#[derive(Clone, Debug, Deserialize, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    pub group: Option<String>,
    pub kind: Option<String>,
    pub namespace: Option<String>,
    pub name: String,
    pub section_name: Option<String>,
    pub port: Option<i32>,
    pub weight: Option<i32>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct HttpRoute {
    pub metadata: ObjectMeta,
    pub spec: HttpRouteSpec,
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub status: serde_json::Value,
}
resource!(
    HttpRoute,
    "HTTPRoute",
    "httproutes",
    "v1",
    k8s_openapi::NamespaceResourceScope
);

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteSpec {
    #[serde(default)]
    pub parent_refs: Vec<ObjectRef>,
    #[serde(default)]
    pub hostnames: Vec<String>,
    #[serde(default)]
    pub rules: Vec<HttpRouteRule>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteRule {
    /// Absent: one match, `PathPrefix /` (the API's default).
    pub matches: Option<Vec<HttpRouteMatch>>,
    #[serde(default)]
    pub filters: Vec<HttpRouteFilter>,
    #[serde(default)]
    pub backend_refs: Vec<HttpBackendRef>,
}

#[derive(Clone, Debug, Deserialize, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteMatch {
    pub path: Option<PathMatch>,
    #[serde(default)]
    pub headers: Vec<ValueMatch>,
    #[serde(default)]
    pub query_params: Vec<ValueMatch>,
    pub method: Option<String>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct PathMatch {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub value: Option<String>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct ValueMatch {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub name: String,
    pub value: String,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteFilter {
    #[serde(rename = "type")]
    pub kind: String,
    pub request_header_modifier: Option<HeaderModifier>,
    pub response_header_modifier: Option<HeaderModifier>,
    pub request_redirect: Option<RequestRedirect>,
    pub url_rewrite: Option<serde_json::Value>,
    pub request_mirror: Option<serde_json::Value>,
}

#[derive(Clone, Debug, Deserialize, Serialize, Default)]
pub struct HeaderModifier {
    #[serde(default)]
    pub set: Vec<NameValue>,
    #[serde(default)]
    pub add: Vec<NameValue>,
    #[serde(default)]
    pub remove: Vec<String>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct NameValue {
    pub name: String,
    pub value: String,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestRedirect {
    pub scheme: Option<String>,
    pub hostname: Option<String>,
    pub path: Option<serde_json::Value>,
    pub port: Option<i32>,
    pub status_code: Option<u16>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpBackendRef {
    #[serde(flatten)]
    pub target: ObjectRef,
    #[serde(default)]
    pub filters: Vec<HttpRouteFilter>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct ReferenceGrant {
    pub metadata: ObjectMeta,
    pub spec: ReferenceGrantSpec,
}
resource!(
    ReferenceGrant,
    "ReferenceGrant",
    "referencegrants",
    "v1",
    k8s_openapi::NamespaceResourceScope
);

#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct ReferenceGrantSpec {
    #[serde(default)]
    pub from: Vec<GrantFrom>,
    #[serde(default)]
    pub to: Vec<GrantTo>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct GrantFrom {
    pub group: String,
    pub kind: String,
    pub namespace: String,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct GrantTo {
    pub group: String,
    pub kind: String,
    pub name: Option<String>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct GrpcRoute {
    pub metadata: ObjectMeta,
    pub spec: GrpcRouteSpec,
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub status: serde_json::Value,
}
resource!(
    GrpcRoute,
    "GRPCRoute",
    "grpcroutes",
    "v1",
    k8s_openapi::NamespaceResourceScope
);

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GrpcRouteSpec {
    #[serde(default)]
    pub parent_refs: Vec<ObjectRef>,
    #[serde(default)]
    pub hostnames: Vec<String>,
    #[serde(default)]
    pub rules: Vec<GrpcRouteRule>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GrpcRouteRule {
    /// Absent or empty: every gRPC request.
    #[serde(default)]
    pub matches: Vec<GrpcRouteMatch>,
    #[serde(default)]
    pub filters: Vec<HttpRouteFilter>,
    #[serde(default)]
    pub backend_refs: Vec<HttpBackendRef>,
}

#[derive(Clone, Debug, Deserialize, Serialize, Default)]
pub struct GrpcRouteMatch {
    pub method: Option<GrpcMethodMatch>,
    #[serde(default)]
    pub headers: Vec<ValueMatch>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct GrpcMethodMatch {
    /// `Exact` (the default, core) or `RegularExpression`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub service: Option<String>,
    pub method: Option<String>,
}

/// TLSRoute, TCPRoute and UDPRoute (all `v1` in the v1.7 standard
/// channel) share one shape: parents, hostnames (TLSRoute's only) and
/// rules that are lists of backends.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct L4RouteSpec {
    #[serde(default)]
    pub parent_refs: Vec<ObjectRef>,
    #[serde(default)]
    pub hostnames: Vec<String>,
    #[serde(default)]
    pub rules: Vec<L4RouteRule>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct L4RouteRule {
    #[serde(default)]
    pub backend_refs: Vec<ObjectRef>,
}

macro_rules! l4_route {
    ($ty:ident, $kind:literal, $plural:literal) => {
        #[derive(Clone, Debug, Deserialize, Serialize)]
        pub struct $ty {
            pub metadata: ObjectMeta,
            pub spec: L4RouteSpec,
            #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
            pub status: serde_json::Value,
        }
        resource!(
            $ty,
            $kind,
            $plural,
            "v1",
            k8s_openapi::NamespaceResourceScope
        );
    };
}
l4_route!(TlsRoute, "TLSRoute", "tlsroutes");
l4_route!(TcpRoute, "TCPRoute", "tcproutes");
l4_route!(UdpRoute, "UDPRoute", "udproutes");

/// BackendTLSPolicy (v1): how the Gateway speaks TLS to a Service's pods.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct BackendTlsPolicy {
    pub metadata: ObjectMeta,
    pub spec: BackendTlsPolicySpec,
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub status: serde_json::Value,
}
resource!(
    BackendTlsPolicy,
    "BackendTLSPolicy",
    "backendtlspolicies",
    "v1",
    k8s_openapi::NamespaceResourceScope
);

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendTlsPolicySpec {
    #[serde(default)]
    pub target_refs: Vec<ObjectRef>,
    pub validation: BackendTlsValidation,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendTlsValidation {
    #[serde(default)]
    pub ca_certificate_refs: Vec<ObjectRef>,
    #[serde(rename = "wellKnownCACertificates")]
    pub well_known_ca_certificates: Option<String>,
    #[serde(default)]
    pub hostname: String,
    #[serde(default)]
    pub subject_alt_names: Vec<serde_json::Value>,
}
