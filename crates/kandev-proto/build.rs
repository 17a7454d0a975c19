//! Compiles `proto/kandev/v1/*.proto` with protox (pure Rust), so no system
//! `protoc` is needed, and keeps the descriptor set for gRPC reflection.

use std::{env, path::PathBuf};

use prost::Message;

const FILES: &[&str] = &[
    "kandev/v1/tasks.proto",
    "kandev/v1/agents.proto",
    "kandev/v1/orchestrator.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    println!("cargo:rerun-if-changed={}", root.display());

    let fds = protox::compile(FILES, [&root])?;
    let out = PathBuf::from(env::var("OUT_DIR")?);
    std::fs::write(out.join("kandev_descriptor.bin"), fds.encode_to_vec())?;

    tonic_prost_build::configure()
        .client_mod_attribute(".", r#"#[cfg(feature = "client")]"#)
        .server_mod_attribute(".", r#"#[cfg(feature = "server")]"#)
        .compile_fds(fds)?;
    Ok(())
}
