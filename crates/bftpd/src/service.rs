//! Running as a system service: systemd's readiness protocol (`Type=notify`) and the checks
//! of `bftpd check-config`.

use anyhow::Context;
use sd_notify::NotifyState;

use crate::config::Config;

/// Tells the service manager that the API socket is bound and the scheduler runs, so that
/// `systemctl start` returns only then. Without `NOTIFY_SOCKET` (a start by hand) it does
/// nothing.
pub fn notify_ready() {
    notify(NotifyState::Ready);
}

/// Tells the service manager that shutdown has begun (and may take the grace period).
pub fn notify_stopping() {
    notify(NotifyState::Stopping);
}

/// Tells the service manager that the start waits (for the job store's database): `status`
/// for `systemctl status`, and that the start may take `more` longer than its timeout, so that
/// systemd does not kill a daemon that waits on purpose. Not ready yet: READY=1 comes later.
pub fn notify_waiting(status: &str, more: std::time::Duration) {
    let usec = u32::try_from(more.as_micros()).unwrap_or(u32::MAX);
    let states = [
        NotifyState::Status(status),
        NotifyState::ExtendTimeoutUsec(usec),
    ];
    if let Err(e) = sd_notify::notify(false, &states) {
        tracing::warn!(error = %e, "cannot send STATUS to the service manager");
    }
}

/// Replaces the status line `systemctl status` shows (after a wait, so that it does not go
/// on saying that bftpd waits).
pub fn notify_status(status: &str) {
    notify(NotifyState::Status(status));
}

fn notify(state: NotifyState<'_>) {
    // Kept in the environment: STOPPING=1 goes to the same socket later.
    if let Err(e) = sd_notify::notify(false, std::slice::from_ref(&state)) {
        tracing::warn!(error = %e, "cannot send {state} to the service manager");
    }
}

/// What [`crate::run`] would refuse at start, short of what needs the state directory, the
/// socket's directory or the network. [`Config::load`] has already checked the syntax, the
/// socket mode, `[retry]`, `[retry_bounds]`, `[ftp]`, `[scheduler]` and `[store]`; this adds
/// the groups (they must exist), the mail transport, built as the daemon builds it (which
/// reads `password_file`), and `[webhooks] ca_files` (each read as the sender reads it).
pub fn check(config: &Config) -> anyhow::Result<()> {
    crate::api::identity::AdminPolicy::new(config.admin_group.as_deref())?;
    if let Some(name) = &config.socket_group {
        nix::unistd::Group::from_name(name)
            .with_context(|| format!("cannot look up socket_group {name:?}"))?
            .with_context(|| format!("socket_group {name:?} does not exist"))?;
    }
    if config.mail.enabled {
        bftp_mail::Mailer::new(&config.mail).context("[mail]")?;
    }
    config.webhooks.check_files()?;
    if config.store.kind == crate::config::StoreKind::Postgres {
        check_postgres(config)?;
    }
    Ok(())
}

/// A shared store: the database must answer, and its schema must be one this program can
/// use (older ones are migrated at start; a newer one is refused).
fn check_postgres(config: &Config) -> anyhow::Result<()> {
    let opts = crate::config::pg_options(config)?;
    let found = bftp_store::PgStore::schema_version_at(&opts)
        .with_context(|| format!("[store]: cannot read the schema of {}", opts.url))?;
    let supported = bftp_store::PG_SCHEMA_VERSION;
    if found > supported {
        anyhow::bail!(
            "[store]: the database's schema is version {found}, newer than this bftpd \
             supports ({supported}); run a newer bftpd"
        );
    }
    if found < supported {
        eprintln!(
            "bftpd: note: the database's schema is version {found}; bftpd migrates it to \
             {supported} at start"
        );
    }
    Ok(())
}
