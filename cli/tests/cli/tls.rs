//! TLS to PostgreSQL: `sslmode` in the URL, against a throwaway cluster
//! that accepts only TLS connections, with a certificate signed by a CA
//! made for the test.

use std::path::Path;
use std::process::Command;

use std::str::FromStr;

use leasehold_testkit::PgCluster;
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection};

use super::*;

/// Runs `openssl` with `args` in `dir`, failing the test with its stderr.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the openssl command runs (install openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA (`NAME.crt`, `NAME.key`) in `dir`.
fn make_ca(dir: &Path, name: &str) {
    let (key, crt) = (format!("{name}.key"), format!("{name}.crt"));
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN=leasehold test {name}"),
            "-keyout",
            &key,
            "-out",
            &crt,
        ],
    );
}

/// Gives `path` to the owner of `dir` (the server's user when the tests
/// run as root), readable by it alone, as PostgreSQL wants of its key.
fn hand_over(path: &Path, dir: &Path) {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let meta = std::fs::metadata(dir).unwrap();
    std::os::unix::fs::chown(path, Some(meta.uid()), Some(meta.gid())).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// A cluster that accepts only TLS connections on 127.0.0.1 (`hostssl` in
/// pg_hba.conf), its certificate for `127.0.0.1` and `localhost` signed by
/// `dir/ca.crt`. Returns its URL without `sslmode`.
async fn tls_only_cluster(dir: &Path) -> (PgCluster, String) {
    let cluster = PgCluster::start().expect("a throwaway cluster");
    let options = cluster.options();
    let url = format!(
        "postgres://{}@{}:{}/{}",
        options.get_username(),
        options.get_host(),
        options.get_port(),
        options.get_database().unwrap_or("postgres")
    );
    let admin = sqlx::PgPool::connect_with(options)
        .await
        .expect("connect to the cluster");
    let data: String = sqlx::query_scalar("SHOW data_directory")
        .fetch_one(&admin)
        .await
        .unwrap();
    let data = Path::new(&data);

    make_ca(dir, "ca");
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName = IP:127.0.0.1, DNS:localhost\nbasicConstraints = CA:FALSE\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "server.ext",
            "-out",
            "server.crt",
        ],
    );
    for file in ["server.crt", "server.key"] {
        std::fs::copy(dir.join(file), data.join(file)).unwrap();
        hand_over(&data.join(file), data);
    }
    // Only TLS connections from 127.0.0.1 (and the server's own socket).
    std::fs::write(
        data.join("pg_hba.conf"),
        "local all all trust\nhostssl all all 127.0.0.1/32 trust\n",
    )
    .unwrap();
    hand_over(&data.join("pg_hba.conf"), data);
    for statement in ["ALTER SYSTEM SET ssl = on", "SELECT pg_reload_conf()"] {
        sqlx::query(statement).execute(&admin).await.unwrap();
    }
    admin.close().await;
    // The reload is asynchronous: wait until TLS is on.
    let require = format!("{url}?sslmode=require");
    let options = PgConnectOptions::from_str(&require).unwrap();
    leasehold_testkit::wait_for_async(Duration::from_secs(20), Duration::from_millis(100), || async {
        let conn = options.connect().await.ok()?;
        let _ = conn.close().await;
        Some(())
    })
    .await
    .expect("the server accepts TLS connections within 20s of the reload");
    (cluster, url)
}

/// `sslmode=require` and `verify-full` with the right CA connect (over
/// TLS: the server refuses anything else); `verify-full` with another CA
/// fails, naming TLS and `sslrootcert`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sslmode_require_and_verify_full_connect_over_tls() {
    let dir = std::env::temp_dir().join(format!("leasehold-cli-tls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (_cluster, url) = tls_only_cluster(&dir).await;
    make_ca(&dir, "other-ca");
    let ca = dir.join("ca.crt").display().to_string();
    let other = dir.join("other-ca.crt").display().to_string();

    let out = leasehold(Some(&format!("{url}?sslmode=require")), &["migrate"]).await;
    assert_exit(&out, 0);
    assert!(
        stdout(&out).contains("migrated the leasehold schema"),
        "{}",
        stdout(&out)
    );

    let verified = format!("{url}?sslmode=verify-full&sslrootcert={ca}");
    let out = leasehold(Some(&verified), &["status"]).await;
    assert_exit(&out, 0);
    assert!(stdout(&out).contains("0 leases"), "{}", stdout(&out));
    // The host name is checked against the certificate: localhost is in it.
    let by_name = verified.replace("@127.0.0.1:", "@localhost:");
    let out = leasehold(Some(&by_name), &["status"]).await;
    assert_exit(&out, 0);

    let out = leasehold(
        Some(&format!("{url}?sslmode=verify-full&sslrootcert={other}")),
        &["status"],
    )
    .await;
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("cannot connect to PostgreSQL at postgres@127.0.0.1:"),
        "{err}"
    );
    assert!(err.contains("TLS failed") && err.contains("sslrootcert=PATH"), "{err}");

    // Without TLS the server refuses the connection: the successes above
    // were over TLS.
    let out = leasehold(Some(&format!("{url}?sslmode=disable")), &["status"]).await;
    assert_exit(&out, 1);
    assert!(stderr(&out).contains("no encryption"), "{}", stderr(&out));
    let _ = std::fs::remove_dir_all(&dir);
}
