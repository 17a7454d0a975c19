//! schemathesis, as a non-admin user, against the OpenAPI document of the
//! whole stack (`scripts/api-fuzz`): every operation gets generated valid
//! and invalid requests, and no answer may be a 5xx, fall outside its
//! schema or carry an undocumented status code.

use std::path::Path;

use kandev_e2e::{ADMIN, ADMIN_PASSWORD, Options, Stack};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_as_a_non_admin_finds_no_5xx_and_no_schema_violation() {
    let stack = Stack::start("api_fuzz", Options::default()).await;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/api-fuzz");
    let out = tokio::process::Command::new("bash")
        .arg(script)
        .arg("--no-color")
        .env("KANDEV_URL", format!("http://{}", stack.gateway()))
        .env("KANDEV_ADMIN_USERNAME", ADMIN)
        .env("KANDEV_ADMIN_PASSWORD", ADMIN_PASSWORD)
        // Bounded: a few seconds per operation on two cores.
        .env("KANDEV_FUZZ_EXAMPLES", "20")
        .output()
        .await
        .expect("bash runs scripts/api-fuzz");
    let report = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "schemathesis found problems:\n{report}"
    );
    assert!(report.contains("Tested: "), "{report}");
    stack.stop().await;
}
