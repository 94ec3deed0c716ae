//! A multi-tenant service: tenants sign up and leave over HTTP, on any
//! replica, and every replica runs the tenants' jobs — with no table of the
//! service's own and no sync loop. Each tenant is a key of the job kind
//! `invoice`, stored once (`Keys::add`); each replica registers
//! the kind (`RuntimeBuilder::register_kind`).
//!
//! ```sh
//! cargo run --example tenants            # a throwaway PostgreSQL
//! DATABASE_URL=postgres://... cargo run --example tenants
//! ```
//!
//! Two replicas serve on loopback ports. The example signs two tenants up
//! through replica A, changes one's plan through replica B, lets them run,
//! removes one through B (it stops on both at once), stops replica A (B
//! goes on running the other tenant), and stops by itself.

use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{post, put};
use leasehold::{FenceGuard, JobError, JobKind, JobSettings, NewKey, Runtime, Schedule};
use serde::{Deserialize, Serialize};

#[path = "support/http.rs"]
mod http;
use http::request;

/// A tenant's arguments, stored as JSON with its key.
#[derive(Debug, Serialize, Deserialize)]
struct Tenant {
    id: u32,
    plan: String,
}

/// The kind: how to run one tenant's invoicing.
struct Invoice;

impl JobKind for Invoice {
    type Args = Tenant;

    fn name(&self) -> &str {
        "invoice"
    }

    fn settings(&self) -> JobSettings {
        JobSettings::new(Schedule::Manual).lease(Duration::from_secs(10))
    }

    async fn run(&self, tenant: Tenant, guard: FenceGuard) -> Result<(), JobError> {
        println!(
            "  {} invoiced tenant {} on plan {:?} (arguments v{}, fence {})",
            guard.holder(),
            tenant.id,
            tenant.plan,
            guard.args_version().unwrap_or_default(),
            guard.fence()
        );
        Ok(())
    }
}

#[derive(Deserialize)]
struct Plan {
    plan: String,
}

/// The tenant's key and arguments: every second, for the demo.
fn key(id: u32, plan: String) -> leasehold::Result<NewKey> {
    NewKey::new(
        "invoice",
        &format!("invoice:{id}"),
        &Tenant { id, plan },
        "every 1s".parse()?,
    )
}

/// Sign-up: the tenant's key, once, for the whole fleet.
async fn sign_up(State(rt): State<Runtime>, Path(id): Path<u32>, Query(p): Query<Plan>) -> (StatusCode, String) {
    match key(id, p.plan) {
        Ok(key) => match rt.store().keys().add(&[key]).await {
            Ok(1) => (StatusCode::CREATED, format!("tenant {id} added\n")),
            Ok(_) => (StatusCode::CONFLICT, format!("tenant {id} exists\n")),
            Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")),
        },
        Err(e) => (StatusCode::BAD_REQUEST, format!("{e}\n")),
    }
}

/// A new plan: the tenant's next run, on whichever replica, uses it.
async fn change(State(rt): State<Runtime>, Path(id): Path<u32>, Query(p): Query<Plan>) -> (StatusCode, String) {
    match key(id, p.plan) {
        Ok(key) => match rt.store().keys().update(&key).await {
            Ok(Some(v)) => (StatusCode::OK, format!("tenant {id} at version {v}\n")),
            Ok(None) => (StatusCode::NOT_FOUND, format!("no tenant {id}\n")),
            Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")),
        },
        Err(e) => (StatusCode::BAD_REQUEST, format!("{e}\n")),
    }
}

/// The tenant left: every replica stops its job.
async fn leave(State(rt): State<Runtime>, Path(id): Path<u32>) -> (StatusCode, String) {
    match rt.store().keys().remove("invoice", &format!("invoice:{id}")).await {
        Ok(true) => (StatusCode::OK, format!("tenant {id} removed\n")),
        Ok(false) => (StatusCode::NOT_FOUND, format!("no tenant {id}\n")),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")),
    }
}

/// One replica: a runtime registering the kind, and its HTTP API.
async fn replica(
    pool: &leasehold::sqlx::PgPool,
    name: &str,
) -> Result<(Runtime, std::net::SocketAddr), Box<dyn std::error::Error>> {
    let runtime = Runtime::builder(pool.clone())
        .holder(name)
        .register_kind(Invoice)
        .start()
        .await?;
    let app = Router::new()
        .route("/tenants/{id}", post(sign_up).delete(leave))
        .route("/tenants/{id}/plan", put(change))
        .with_state(runtime.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    println!("replica {name} serves on http://{addr}");
    Ok((runtime, addr))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let db = leasehold_testkit::test_db().await;
    let (a, a_addr) = replica(&db.pool, "replica-a").await?;
    let (b, b_addr) = replica(&db.pool, "replica-b").await?;

    for (addr, method, path) in [
        (a_addr, "POST", "/tenants/1?plan=basic"),
        (a_addr, "POST", "/tenants/2?plan=pro"),
        (b_addr, "PUT", "/tenants/1/plan?plan=team"),
    ] {
        println!("{method} {path} -> {}", request(addr, method, path).await?);
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    println!(
        "DELETE /tenants/2 -> {}",
        request(b_addr, "DELETE", "/tenants/2").await?
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    println!("replica-a shuts down: replica-b goes on with tenant 1");
    a.shutdown().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    b.shutdown().await;
    Ok(())
}
