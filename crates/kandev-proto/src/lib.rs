//! gRPC contracts shared by every Kandev service.
//!
//! The code is generated at build time from `proto/kandev/v1/*.proto` by
//! protox, a protobuf compiler written in Rust, so a fresh machine needs no
//! `protoc`. Client stubs sit behind the `client` feature, server traits
//! behind `server`.
//!
//! # Layout
//! - [`v1`]: messages, enums, `*_client` and `*_server` modules.
//! - [`FILE_DESCRIPTOR_SET`]: the encoded descriptors, for gRPC reflection.
//! - [`time`]: protobuf timestamps to and from `chrono`.

#![allow(clippy::all, missing_docs)]

/// Version 1 of the Kandev API (`package kandev.v1`).
pub mod v1 {
    tonic::include_proto!("kandev.v1");
}

/// Encoded `FileDescriptorSet` of every Kandev proto file, for reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/kandev_descriptor.bin"));

/// Conversions between protobuf timestamps and `chrono`.
pub mod time {
    use chrono::{DateTime, Utc};
    pub use prost_types::Timestamp;

    /// A protobuf timestamp for the given time.
    pub fn from_chrono(t: DateTime<Utc>) -> Timestamp {
        Timestamp {
            seconds: t.timestamp(),
            nanos: t.timestamp_subsec_nanos() as i32,
        }
    }

    /// The `chrono` time of a protobuf timestamp; `None` when out of range.
    pub fn to_chrono(ts: &Timestamp) -> Option<DateTime<Utc>> {
        DateTime::from_timestamp(ts.seconds, u32::try_from(ts.nanos).ok()?)
    }
}
