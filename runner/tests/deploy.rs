//! The Kubernetes manifests of `deploy/k8s` parsed into the Kubernetes API types (`k8s-openapi`),
//! and checked against the runner's own flags: the container args parse as `RunnerArgs`, the
//! container port is the `--listen` port, the probes hit `/livez` and `/readyz`, the grace period
//! outlasts preStop plus `--drain-timeout`, and the Service, HPA, PDB and Secret point at it.

use std::path::{Path, PathBuf};

use clap::Parser;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::de::DeserializeOwned;
use serde::Serialize;

#[derive(Parser)]
struct Flags {
    #[command(flatten)]
    runner: execbox_runner::RunnerArgs,
}

#[derive(Default)]
struct Manifests {
    deployments: Vec<Deployment>,
    services: Vec<Service>,
    hpas: Vec<HorizontalPodAutoscaler>,
    pdbs: Vec<PodDisruptionBudget>,
    secrets: Vec<Secret>,
    config_maps: Vec<ConfigMap>,
}

fn k8s_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/k8s")
}

/// Parses `doc` as `T` and checks that nothing was dropped on the way (an unknown or misspelt
/// field would be): the typed value, written back, equals the document.
fn typed<T: DeserializeOwned + Serialize>(doc: &serde_json::Value, origin: &str) -> T {
    let value: T = serde_json::from_value(doc.clone())
        .unwrap_or_else(|e| panic!("{origin}: not a valid {}: {e}", std::any::type_name::<T>()));
    let back = serde_json::to_value(&value).unwrap();
    let original = doc.clone();
    assert_eq!(
        back,
        original,
        "{origin}: fields lost or changed when parsed as {}",
        std::any::type_name::<T>()
    );
    value
}

fn load() -> Manifests {
    let mut manifests = Manifests::default();
    let mut files: Vec<PathBuf> = std::fs::read_dir(k8s_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text)
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for (i, doc) in docs.into_iter().enumerate() {
            if doc.is_null() {
                continue;
            }
            let origin = format!("{} document {i}", file.display());
            match doc["kind"].as_str() {
                Some("Deployment") => manifests.deployments.push(typed(&doc, &origin)),
                Some("Service") => manifests.services.push(typed(&doc, &origin)),
                Some("HorizontalPodAutoscaler") => manifests.hpas.push(typed(&doc, &origin)),
                Some("PodDisruptionBudget") => manifests.pdbs.push(typed(&doc, &origin)),
                Some("Secret") => manifests.secrets.push(typed(&doc, &origin)),
                Some("ConfigMap") => manifests.config_maps.push(typed(&doc, &origin)),
                other => panic!("{origin}: unexpected kind {other:?}"),
            }
        }
    }
    manifests
}

fn runner(deployment: &Deployment) -> &Container {
    let pod = deployment
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    assert_eq!(pod.containers.len(), 1);
    &pod.containers[0]
}

fn flags(container: &Container) -> execbox_runner::RunnerArgs {
    let args = container.args.clone().unwrap_or_default();
    Flags::try_parse_from(std::iter::once("execbox-runner".to_owned()).chain(args))
        .unwrap_or_else(|e| panic!("the container args are not runner flags: {e}"))
        .runner
}

#[test]
fn the_deployment_agrees_with_the_runner_flags() {
    let m = load();
    assert_eq!(m.deployments.len(), 1);
    let deployment = &m.deployments[0];
    let container = runner(deployment);
    let flags = flags(container);
    let listen = flags.listen.as_deref().expect("--listen");
    let port: i32 = listen.rsplit(':').next().unwrap().parse().unwrap();
    let ports = container.ports.as_ref().unwrap();
    let ws = ports
        .iter()
        .find(|p| p.container_port == port)
        .expect("the --listen port is a container port");
    let port_name = ws.name.clone().unwrap();
    let probe_port = |probe: &k8s_openapi::api::core::v1::Probe, path: &str| {
        let get = probe.http_get.as_ref().expect("an httpGet probe");
        assert_eq!(get.path.as_deref(), Some(path));
        match &get.port {
            IntOrString::Int(p) => assert_eq!(*p, port),
            IntOrString::String(name) => assert_eq!(*name, port_name),
        }
    };
    probe_port(container.liveness_probe.as_ref().unwrap(), "/livez");
    probe_port(container.readiness_probe.as_ref().unwrap(), "/readyz");

    // The grace period covers preStop, then the drain, with room for the cancels and the exit.
    let pod = deployment
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    let grace = pod.termination_grace_period_seconds.unwrap();
    let pre_stop = container
        .lifecycle
        .as_ref()
        .and_then(|l| l.pre_stop.as_ref())
        .and_then(|h| h.sleep.as_ref())
        .expect("a preStop sleep")
        .seconds;
    let drain_ms = i64::try_from(flags.drain_timeout.as_millis()).unwrap();
    assert!(
        grace * 1000 > pre_stop * 1000 + drain_ms + 5_000,
        "terminationGracePeriodSeconds {grace} must exceed preStop {pre_stop} s + --drain-timeout ({drain_ms} ms) + 5 s"
    );

    // The token comes from the Secret, and the address is not loopback.
    let env = container.env.as_ref().unwrap();
    let token = env.iter().find(|e| e.name == "EXECBOX_TOKEN").unwrap();
    let secret_ref = token
        .value_from
        .as_ref()
        .and_then(|v| v.secret_key_ref.as_ref())
        .expect("EXECBOX_TOKEN from a Secret");
    assert!(token.value.is_none());
    let secret = m
        .secrets
        .iter()
        .find(|s| s.metadata.name.as_deref() == Some(secret_ref.name.as_str()))
        .expect("the Secret of the token");
    assert!(secret
        .string_data
        .as_ref()
        .is_some_and(|d| d.contains_key(&secret_ref.key)));
    assert!(!flags.insecure_no_auth && !flags.insecure_no_sandbox);

    // Requests and limits, and a restrictive security context.
    let resources = container.resources.as_ref().unwrap();
    for key in ["cpu", "memory"] {
        assert!(resources.requests.as_ref().unwrap().contains_key(key));
        assert!(resources.limits.as_ref().unwrap().contains_key(key));
    }
    let sc = container.security_context.as_ref().unwrap();
    assert_eq!(sc.run_as_non_root, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(
        sc.capabilities.as_ref().unwrap().drop.as_deref(),
        Some(&["ALL".to_owned()][..])
    );
    assert_eq!(sc.seccomp_profile.as_ref().unwrap().type_, "RuntimeDefault");
    let pod_sc = pod.security_context.as_ref().unwrap();
    assert_eq!(pod_sc.run_as_non_root, Some(true));
    assert!(pod_sc.run_as_user.is_some_and(|u| u > 0));
}

#[test]
fn the_service_hpa_and_pdb_select_the_runner_pods() {
    let m = load();
    let deployment = &m.deployments[0];
    let name = deployment.metadata.name.clone().unwrap();
    let spec = deployment.spec.as_ref().unwrap();
    let labels = spec
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .clone()
        .unwrap();
    let matches = |selector: &std::collections::BTreeMap<String, String>| {
        selector.iter().all(|(k, v)| labels.get(k) == Some(v))
    };
    let container = runner(deployment);
    let flags = flags(container);

    assert_eq!(m.services.len(), 1);
    let service = m.services[0].spec.as_ref().unwrap();
    assert!(matches(service.selector.as_ref().unwrap()));
    for port in service.ports.as_ref().unwrap() {
        let target = port.target_port.as_ref().unwrap();
        assert!(container
            .ports
            .as_ref()
            .unwrap()
            .iter()
            .any(|p| match target {
                IntOrString::Int(n) => p.container_port == *n,
                IntOrString::String(s) => p.name.as_deref() == Some(s.as_str()),
            }));
    }

    assert_eq!(m.pdbs.len(), 1);
    let pdb = m.pdbs[0].spec.as_ref().unwrap();
    assert!(matches(
        pdb.selector
            .as_ref()
            .unwrap()
            .match_labels
            .as_ref()
            .unwrap()
    ));

    assert_eq!(m.hpas.len(), 1);
    let hpa = m.hpas[0].spec.as_ref().unwrap();
    assert_eq!(hpa.scale_target_ref.kind, "Deployment");
    assert_eq!(hpa.scale_target_ref.name, name);
    let metric = hpa.metrics.as_ref().unwrap()[0]
        .pods
        .as_ref()
        .expect("a pods metric");
    assert_eq!(metric.metric.name, "execbox_sessions_active");
    let target = metric
        .target
        .average_value
        .as_ref()
        .expect("an averageValue")
        .0
        .clone();
    let target: usize = target.parse().unwrap();
    assert!(
        target > 0 && target <= flags.max_sessions,
        "the HPA target {target} must be within --max-sessions {}",
        flags.max_sessions
    );

    // prometheus-adapter serves the metric the HPA names.
    let rules = m
        .config_maps
        .iter()
        .find_map(|c| c.data.as_ref()?.get("config.yaml").cloned())
        .expect("the prometheus-adapter rules");
    let rules: serde_json::Value = serde_saphyr::from_str(&rules).unwrap();
    let served: Vec<&str> = rules["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["name"]["as"].as_str())
        .collect();
    assert!(served.contains(&"execbox_sessions_active"), "{served:?}");
}

/// The runner's per-session memory besides the guest's heap: the process (about 6 MiB idle)
/// with room for a message or two in flight.
const SESSION_OVERHEAD_BYTES: u64 = 8 << 20;
/// The supervisor and the two warm runner processes.
const SUPERVISOR_BYTES: u64 = 32 << 20;

/// The ceiling flags every shipped runner sets explicitly (review finding m6).
const CEILING_FLAGS: [&str; 4] = [
    "--max-memory-limit-bytes",
    "--max-timeout-ms",
    "--max-log-lines",
    "--max-log-chars",
];

/// A Kubernetes memory quantity (`768Mi`, `1Gi`, `512M`, plain bytes) in bytes.
fn quantity_bytes(quantity: &str) -> u64 {
    let units: [(&str, u64); 6] = [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("K", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
    ];
    for (suffix, scale) in units {
        if let Some(n) = quantity.strip_suffix(suffix) {
            return n.parse::<u64>().unwrap() * scale;
        }
    }
    quantity.parse().unwrap()
}

/// The Dockerfile's `CMD`, exec form (continuation lines joined).
fn dockerfile_cmd() -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/Dockerfile");
    let text = std::fs::read_to_string(path).unwrap().replace("\\\n", " ");
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("CMD "))
        .expect("a CMD");
    serde_json::from_str(line).expect("CMD in exec form")
}

/// Checks that `args` set every ceiling, and that `--max-sessions` sessions at them fit
/// `memory_limit` bytes.
fn check_ceilings(origin: &str, args: &[String], memory_limit: u64) {
    let flags = Flags::try_parse_from(
        std::iter::once("execbox-runner".to_owned()).chain(args.iter().cloned()),
    )
    .unwrap_or_else(|e| panic!("{origin}: not runner flags: {e}"))
    .runner;
    for flag in CEILING_FLAGS {
        assert!(
            args.iter().any(|a| a == flag),
            "{origin}: {flag} must be set explicitly"
        );
    }
    let per_session = flags.max_memory_limit_bytes
        + SESSION_OVERHEAD_BYTES
        // Kept log characters live in the runner's heap, up to 3 bytes each in UTF-8.
        + 3 * flags.max_log_chars;
    let needed = flags.max_sessions as u64 * per_session + SUPERVISOR_BYTES;
    assert!(
        needed <= memory_limit,
        "{origin}: --max-sessions {} at --max-memory-limit-bytes {} and --max-log-chars {} need \
         about {needed} bytes, over the memory limit of {memory_limit}",
        flags.max_sessions,
        flags.max_memory_limit_bytes,
        flags.max_log_chars
    );
    assert!(
        flags.max_timeout_ms <= 3_600_000,
        "{origin}: --max-timeout-ms over an hour"
    );
}

/// Review finding m6: a client's `memoryLimitBytes` of 1 TiB was accepted by the shipped pod
/// (768 MiB for 8 sessions). The Deployment and the Dockerfile now set every ceiling, sized
/// so that `--max-sessions` sessions at them fit the memory limit.
#[test]
fn the_manifests_set_the_option_ceilings_and_their_sessions_fit_the_memory_limit() {
    let m = load();
    let container = runner(&m.deployments[0]);
    let limits = container
        .resources
        .as_ref()
        .unwrap()
        .limits
        .as_ref()
        .unwrap();
    let memory = quantity_bytes(&limits["memory"].0);
    let args = container.args.clone().unwrap_or_default();
    check_ceilings("deploy/k8s/deployment.yaml", &args, memory);
    // The container image runs the same limits; `docker run --memory` is given the pod's.
    check_ceilings("deploy/Dockerfile", &dockerfile_cmd(), memory);
}
