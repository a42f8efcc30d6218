//! The checked settings the controller runs with ([`Settings`]), and why a command line's
//! values were refused ([`SettingsError`]).

use std::time::Duration;

use fleetwire_types::TransportSecurity;

use crate::controller::config::arguments::{ControllerArgs, MetricsAuth};

/// The checked settings the controller runs with.
#[derive(Debug, Clone)]
pub struct Settings {
    pub stale_after: Duration,
    pub forget_after: Duration,
    pub disk_cordon_below_gb: u64,
    pub disk_uncordon_above_gb: u64,
    pub disk_overcommit_ratio: f64,
    pub request_timeout: Duration,
    pub agent_timeout: Duration,
    pub sweep_interval: Duration,
    pub self_heal_interval: Duration,
    pub probe_interval: Duration,
    pub flush_interval: Duration,
    pub cert_validity: Duration,
    /// How long the controller's own certificates last (`--own-cert-validity`).
    pub own_cert_validity: Duration,
    /// `--default-spawn-port`: where a node that declared no spawn port is called.
    pub default_spawn_port: fleetwire_types::HostPort,
    /// `--plain-http`: PPN's plain, unauthenticated HTTP instead of mutual TLS.
    pub plain_http: bool,
    pub metrics_auth: MetricsAuth,
    /// `--lease-ttl`: the leader lease's length on PostgreSQL (docs/controller.md).
    pub lease_ttl: Duration,
    /// `--advertise-url`, checked; `None`: derived from the host's name by the server.
    pub advertise_url: Option<reqwest::Url>,
}

/// Why a command line's values cannot run a controller; the message names the flag.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SettingsError {
    #[error("--disk-uncordon-above ({above}) must be higher than --disk-cordon-below ({below})")]
    DiskThresholds { below: u64, above: u64 },
    #[error("--disk-overcommit-ratio must be a positive number, not {ratio}")]
    OvercommitRatio { ratio: f64 },
    /// Past 600 ms the write-behind queue's budget could not keep a change within 1 s of
    /// reaching the store (the flag's help).
    #[error("--flush-interval must be above 0 and at most 600ms")]
    FlushInterval,
    #[error("{flag} must be above 0")]
    Zero { flag: &'static str },
    #[error("--forget-after must be longer than --stale-after")]
    ForgetBeforeStale,
    #[error("--cert-validity must be above 0 and at most 397 days")]
    CertValidity,
    #[error("--own-cert-validity must be at least 3s and at most 397 days")]
    OwnCertValidity,
    #[error("--default-spawn-port must be a port from 1 to 65535")]
    SpawnPort,
    /// Renewed every fifth of it, a lease under a second would renew faster than a slow
    /// database answers (docs/controller.md, "Several controllers").
    #[error("--lease-ttl must be at least 1s and at most 10m, not {ttl:?}")]
    LeaseTtl { ttl: Duration },
    #[error("--advertise-url {url}: {problem}")]
    AdvertiseUrl { url: String, problem: &'static str },
}

/// A standby redirects to `leader_url` + the request's path and query, so the URL is an origin
/// (and a path prefix at most) of the scheme this controller serves.
fn check_advertise_url(url: &reqwest::Url, plain_http: bool) -> Result<(), SettingsError> {
    // Never the password, should the URL carry one.
    let mut shown = url.clone();
    let _ = shown.set_password(None);
    let bad = |problem| SettingsError::AdvertiseUrl {
        url: shown.to_string(),
        problem,
    };
    let wanted = if plain_http { "http" } else { "https" };
    if url.scheme() != wanted {
        return Err(bad(if plain_http {
            "with --plain-http the controller serves http://"
        } else {
            "the controller serves https:// (http:// only with --plain-http)"
        }));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad("it names no host"));
    }
    if url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() {
        return Err(bad(
            "it may not have a query, a fragment or credentials: requests' own are appended",
        ));
    }
    Ok(())
}

impl Settings {
    pub fn from_args(args: &ControllerArgs) -> Result<Settings, SettingsError> {
        if args.disk_uncordon_above <= args.disk_cordon_below {
            return Err(SettingsError::DiskThresholds {
                below: args.disk_cordon_below,
                above: args.disk_uncordon_above,
            });
        }
        if !(args.disk_overcommit_ratio.is_finite() && args.disk_overcommit_ratio > 0.0) {
            return Err(SettingsError::OvercommitRatio {
                ratio: args.disk_overcommit_ratio,
            });
        }
        if args.flush_interval.is_zero() || args.flush_interval > Duration::from_millis(600) {
            return Err(SettingsError::FlushInterval);
        }
        for (name, value) in [
            ("--stale-after", args.stale_after),
            ("--sweep-interval", args.sweep_interval),
            ("--self-heal-interval", args.self_heal_interval),
            ("--probe-interval", args.probe_interval),
            ("--request-timeout", args.request_timeout),
            ("--agent-timeout", args.agent_timeout),
        ] {
            if value.is_zero() {
                return Err(SettingsError::Zero { flag: name });
            }
        }
        if args.forget_after <= args.stale_after {
            return Err(SettingsError::ForgetBeforeStale);
        }
        let max_validity = Duration::from_secs(397 * 24 * 3600);
        if args.cert_validity.is_zero() || args.cert_validity > max_validity {
            return Err(SettingsError::CertValidity);
        }
        // Renewed at two thirds: below a few seconds it would be renewed continually.
        if args.own_cert_validity < Duration::from_secs(3) || args.own_cert_validity > max_validity
        {
            return Err(SettingsError::OwnCertValidity);
        }
        if args.lease_ttl < Duration::from_secs(1) || args.lease_ttl > Duration::from_secs(600) {
            return Err(SettingsError::LeaseTtl {
                ttl: args.lease_ttl,
            });
        }
        if let Some(url) = &args.advertise_url {
            check_advertise_url(url, args.plain_http)?;
        }
        Ok(Settings {
            lease_ttl: args.lease_ttl,
            advertise_url: args.advertise_url.clone(),
            default_spawn_port: fleetwire_types::HostPort(
                std::num::NonZeroU16::new(args.default_spawn_port)
                    .ok_or(SettingsError::SpawnPort)?,
            ),
            stale_after: args.stale_after,
            forget_after: args.forget_after,
            disk_cordon_below_gb: args.disk_cordon_below,
            disk_uncordon_above_gb: args.disk_uncordon_above,
            disk_overcommit_ratio: args.disk_overcommit_ratio,
            request_timeout: args.request_timeout,
            agent_timeout: args.agent_timeout,
            sweep_interval: args.sweep_interval,
            self_heal_interval: args.self_heal_interval,
            probe_interval: args.probe_interval,
            flush_interval: args.flush_interval,
            cert_validity: args.cert_validity,
            own_cert_validity: args.own_cert_validity,
            plain_http: args.plain_http,
            metrics_auth: args.metrics_auth,
        })
    }

    /// How the controller's port is served, as `/readyz` and `/metrics` say.
    pub fn transport(&self) -> TransportSecurity {
        if self.plain_http {
            TransportSecurity::PlainHttp
        } else {
            TransportSecurity::Mtls
        }
    }

    /// The defaults, in `--plain-http` mode: unit tests call the rules directly, with no TLS
    /// connection to name the caller (the trust checks have tests of their own).
    #[cfg(test)]
    pub fn for_tests() -> Settings {
        Settings {
            plain_http: true,
            ..Settings::from_args(&ControllerArgs::defaults()).expect("defaults are valid")
        }
    }
}
